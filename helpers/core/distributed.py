"""Running the kit's commands under `torchrun`: which rank this is, its shard, summed counts.

`from_env()` reads the variables `torchrun` sets (RANK, WORLD_SIZE, LOCAL_RANK) and joins the
process group: `nccl` when the run is on GPUs, `gloo` on CPU. Without them it returns a single
process (`Ranks()`), so every function here is a no-op in a plain run or a notebook. A notebook
may also pass its own `Ranks(rank, world, group)` built around a group it created.

Work is split deterministically: item `i` (a sample file, a batch of prompts, a prompt) belongs
to rank `i % world`. Results are merged by summing raw counts with `all_reduce` (never by
averaging averages), and only rank 0 prints or writes summaries.

When a rank dies (killed, out of memory), the others are stopped by torchrun or fail in their
next collective; each rank registers its pid in torchrun's store at start, so a surviving rank
can name the one that stopped in one line (same machine) before exiting.
"""
from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Ranks:
    """This process's place in a run: rank, world size, and the process group (None: default)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    group: object = None

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def takes(self, index: int) -> bool:
        """Whether item `index` of a deterministic sequence is this rank's."""
        return index % self.world == self.rank

    def device(self, device):
        """The device this rank runs on: with several ranks on GPUs, cuda:LOCAL_RANK."""
        if self.distributed and device is not None and str(device) == "cuda":
            return f"cuda:{self.local_rank}"
        if self.distributed and device is None and torch.cuda.is_available():
            return f"cuda:{self.local_rank}"
        return device


SINGLE = Ranks()


def _store():
    import torch.distributed as dist

    try:
        return dist.distributed_c10d._get_default_store()
    except (RuntimeError, AttributeError, ValueError):
        return None


def _name_the_stopped_rank(ranks: Ranks, why: str) -> str:
    """One line naming the rank(s) whose process is gone (pids registered at start)."""
    store, gone = _store(), []
    if store is not None:
        for r in range(ranks.world):
            if r == ranks.rank:
                continue
            try:
                pid = int(store.get(f"d2t/pid/{r}").decode())
                os.kill(pid, 0)
            except ProcessLookupError:
                gone.append(f"rank {r} (pid {pid})")
            except (RuntimeError, ValueError, PermissionError, OSError):
                continue
    who = ", ".join(gone) if gone else "another rank"
    return (f"error: {who} of {ranks.world} stopped ({why}); re-run the same command to resume "
            "(finished work is kept)")


def _on_term(ranks: Ranks):
    def handler(signum, frame):
        print(_name_the_stopped_rank(ranks, "the run was stopped"), file=sys.stderr, flush=True)
        os._exit(1)
    return handler


def from_env(device=None) -> Ranks:
    """This process's `Ranks` under torchrun (joining the process group), else a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return SINGLE
    import torch.distributed as dist

    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    on_gpu = torch.cuda.is_available() and (device is None or str(device).startswith("cuda"))
    if not dist.is_initialized():
        if on_gpu:
            torch.cuda.set_device(local)
        dist.init_process_group(backend="nccl" if on_gpu else "gloo")
    ranks = Ranks(rank, world, local)
    store = _store()
    if store is not None:
        store.set(f"d2t/pid/{rank}", str(os.getpid()))
    signal.signal(signal.SIGTERM, _on_term(ranks))
    import atexit

    atexit.register(_leave)  # an exit on an error leaves the group too (no barrier: a peer may be elsewhere)
    return ranks


def sum_counts(values: list[int] | torch.Tensor, ranks: Ranks) -> torch.Tensor:
    """Element-wise sum over all ranks of an integer vector (unchanged in a single process)."""
    t = torch.as_tensor(values, dtype=torch.int64).clone()
    if not ranks.distributed:
        return t
    import torch.distributed as dist

    dev = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(ranks.group) == "nccl" else "cpu"
    t = t.to(dev)
    try:
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=ranks.group)
    except (RuntimeError, dist.DistBackendError) as e:
        print(_name_the_stopped_rank(ranks, str(e).splitlines()[0][:80]), file=sys.stderr, flush=True)
        os._exit(1)
    return t.cpu()


def barrier(ranks: Ranks) -> None:
    if ranks.distributed:
        sum_counts([0], ranks)  # an all_reduce doubles as a barrier, and fails the same way


def _leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def finish(ranks: Ranks) -> None:
    """Leave the process group at the end of a run, together: a barrier first, so that no rank
    closes its connections while a peer is still receiving the last collective's data from it
    (gloo aborts the receiving process when that happens)."""
    if ranks.distributed:
        import torch.distributed as dist

        if dist.is_initialized():
            try:
                dist.barrier(group=ranks.group)
            except (RuntimeError, dist.DistBackendError):
                pass  # a peer is gone already: nothing left to wait for
            _leave()


def torchrun_hint(total_samples: int, done_samples: int, seconds: float, devices: int | None = None,
                  worth: float = 60.0) -> str | None:
    """When a run over `total_samples` would be worth spreading with torchrun: the time it would
    take here (measured `seconds` for `done_samples`) against N processes, or None when it is short.

    `devices`: how many processes could run (GPUs present, else CPU cores / 2)."""
    if done_samples <= 0 or seconds <= 0 or total_samples <= done_samples:
        return None
    per = seconds / done_samples
    whole = per * total_samples
    if whole < worth:
        return None
    n = devices or (torch.cuda.device_count() if torch.cuda.is_available() else max(1, (os.cpu_count() or 2) // 2))
    if n < 2:
        return (f"all {total_samples:,} samples would take about {whole / 60:.1f} min here "
                f"({per * 1000:.0f} ms each); a machine with more devices could split them with torchrun")
    return (f"all {total_samples:,} samples would take about {whole / 60:.1f} min here ({per * 1000:.0f} ms each); "
            f"with torchrun --nproc-per-node {n} about {whole / n / 60:.1f} min")


def gather_to_main(obj, ranks: Ranks) -> list | None:
    """Every rank's `obj` (picklable), in rank order, on rank 0; None on the others (a single
    process gets `[obj]`). For results that are more than counts: per-prompt outputs, runs to merge."""
    if not ranks.distributed:
        return [obj]
    import torch.distributed as dist

    out = [None] * ranks.world if ranks.main else None
    try:
        dist.gather_object(obj, out, dst=0, group=ranks.group)
    except (RuntimeError, dist.DistBackendError) as e:
        print(_name_the_stopped_rank(ranks, str(e).splitlines()[0][:80]), file=sys.stderr, flush=True)
        os._exit(1)
    return out
