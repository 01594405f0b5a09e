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

Nothing waits forever: the rendezvous, the arrival of every rank and every collective end after
`--dist-timeout` seconds (`$D2T_LAB_DIST_TIMEOUT`, default `DEFAULT_DIST_TIMEOUT`) with one line
naming the rank(s) that did not arrive: each rank writes its arrival, and before each collective
how many it has reached, into the rendezvous store, so the ones that are missing or behind can be
named. `MASTER_PORT=0` (`torchrun --master-port 0` without `--standalone`: every process would look
for its peers on port 0) is refused at once in one line.
"""
from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from datetime import timedelta

import torch

from helpers.core.errors import BadInputError

DIST_TIMEOUT_ENV = "D2T_LAB_DIST_TIMEOUT"
DEFAULT_DIST_TIMEOUT = 300.0  # seconds a rank waits for the others (rendezvous, any collective)


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


def dist_timeout(seconds: float | None = None) -> float:
    """`--dist-timeout` (which sets $D2T_LAB_DIST_TIMEOUT), else the default; positive seconds."""
    if seconds is None:
        raw = os.environ.get(DIST_TIMEOUT_ENV, "")
        try:
            seconds = float(raw) if raw else DEFAULT_DIST_TIMEOUT
        except ValueError:
            raise BadInputError(None, f"${DIST_TIMEOUT_ENV} must be a number of seconds, got {raw!r}") from None
    if not seconds > 0:
        raise BadInputError(None, f"--dist-timeout must be a positive number of seconds, got {seconds:g}")
    return float(seconds)


def _fail(line: str) -> None:
    """One line on stderr and out, now: the peers are gone or late, nothing left to finish."""
    print(f"error: {line}", file=sys.stderr, flush=True)
    os._exit(1)


class _quiet_stderr:
    """fd 2 to /dev/null for a while: c10d's C++ side logs every failed connect try (with a stack
    dump) before Python sees the error; the one line this module prints says it all."""

    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)

    def __exit__(self, *exc):
        os.dup2(self.saved, 2)
        os.close(self.saved)
        return False


def _missing(store, keys: dict[int, str]) -> list[int]:
    out = []
    for r, key in keys.items():
        try:
            if not store.check([key]):
                out.append(r)
        except Exception:  # noqa: BLE001 - the store itself is gone: nobody can be named
            return list(keys)
    return out


def _ranks_text(ranks: list[int], world: int) -> str:
    names = ", ".join(str(r) for r in ranks)
    return f"rank{'s' if len(ranks) > 1 else ''} {names} of {world}"


def from_env(device=None, timeout: float | None = None) -> Ranks:
    """This process's `Ranks` under torchrun (joining the process group), else a single process.

    `timeout`: seconds to wait for the other ranks, here and in every collective (default
    `dist_timeout()`). A rank that does not arrive in time is named in one line, and the process
    ends with exit code 1."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return SINGLE
    import torch.distributed as dist

    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    if os.environ.get("MASTER_PORT", "").strip() == "0":
        if rank != 0:  # rank 0 says why, once; wait for it first (torchrun stops every rank when one exits)
            import time

            time.sleep(30)
            os._exit(2)
        raise BadInputError(None, "MASTER_PORT=0: the ranks cannot find each other on port 0 (torchrun --master-port 0 "
                            "without --standalone); use torchrun --standalone, or a free fixed --master-port")
    secs = dist_timeout(timeout)
    limit = timedelta(seconds=secs)
    on_gpu = torch.cuda.is_available() and (device is None or str(device).startswith("cuda"))
    if not dist.is_initialized():
        if on_gpu:
            torch.cuda.set_device(local)
        where = f"{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ.get('MASTER_PORT', '?')}"
        try:
            with _quiet_stderr():
                store, _, _ = next(dist.rendezvous("env://", rank, world, timeout=limit))
        except (RuntimeError, ValueError, TimeoutError, dist.DistError) as e:
            text = str(e)
            if rank == 0:
                others = [r for r in range(1, world)]
                _fail(f"{_ranks_text(others, world)} did not arrive within {secs:g} s (--dist-timeout) at {where} "
                      f"({(text.splitlines() or [''])[0][:80]})")
            _fail(f"rank 0 of {world} (the rendezvous at {where}) did not answer within {secs:g} s (--dist-timeout)")
        store.set(f"d2t/arrived/{rank}", str(os.getpid()))
        keys = {r: f"d2t/arrived/{r}" for r in range(world)}
        try:
            with _quiet_stderr():
                store.wait(list(keys.values()), limit)
        except (RuntimeError, dist.DistError):
            late = _missing(store, keys)
            _fail(f"{_ranks_text(late, world)} did not arrive within {secs:g} s (--dist-timeout)")
        dist.init_process_group(backend="nccl" if on_gpu else "gloo", store=store, rank=rank, world_size=world,
                                timeout=limit)
    ranks = Ranks(rank, world, local)
    global _TIMEOUT
    _TIMEOUT = secs
    store = _store()
    if store is not None:
        store.set(f"d2t/pid/{rank}", str(os.getpid()))
    signal.signal(signal.SIGTERM, _on_term(ranks))
    import atexit

    atexit.register(_leave)  # an exit on an error leaves the group too (no barrier: a peer may be elsewhere)
    return ranks


_TIMEOUT = DEFAULT_DIST_TIMEOUT
_REACHED = [0]  # collectives this rank has entered


def _enter(ranks: Ranks) -> int:
    """Mark this rank as at its next collective (its count in the store); returns the count."""
    _REACHED[0] += 1
    store = _store()
    if store is not None:
        try:
            store.set(f"d2t/at/{ranks.rank}", str(_REACHED[0]))
        except Exception:  # noqa: BLE001 - a store that is gone shows in the collective itself
            pass
    return _REACHED[0]


def _behind(ranks: Ranks, n: int) -> list[int]:
    """The ranks that have not reached collective `n` (by their counts in the store)."""
    store, late = _store(), []
    if store is None:
        return late
    for r in range(ranks.world):
        if r == ranks.rank:
            continue
        try:
            key = f"d2t/at/{r}"
            at = int(store.get(key).decode()) if store.check([key]) else 0
        except Exception:  # noqa: BLE001
            continue
        if at < n:
            late.append(r)
    return late


def _collective_failed(ranks: Ranks, n: int, e: Exception) -> None:
    first = (str(e).splitlines() or [""])[0]
    if "timeout" in first.lower() or "timed out" in first.lower():
        late = _behind(ranks, n)
        who = _ranks_text(late, ranks.world) if late else "another rank"
        _fail(f"{who} did not arrive within {_TIMEOUT:g} s (--dist-timeout) at a collective; re-run the same "
              "command to resume (finished work is kept)")
    print(_name_the_stopped_rank(ranks, first[:80]), file=sys.stderr, flush=True)
    os._exit(1)


def sum_counts(values: list[int] | torch.Tensor, ranks: Ranks) -> torch.Tensor:
    """Element-wise sum over all ranks of an integer vector (unchanged in a single process)."""
    t = torch.as_tensor(values, dtype=torch.int64).clone()
    if not ranks.distributed:
        return t
    import torch.distributed as dist

    dev = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(ranks.group) == "nccl" else "cpu"
    t = t.to(dev)
    n = _enter(ranks)
    try:
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=ranks.group)
    except (RuntimeError, dist.DistBackendError) as e:
        _collective_failed(ranks, n, e)
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
    n = _enter(ranks)
    try:
        dist.gather_object(obj, out, dst=0, group=ranks.group)
    except (RuntimeError, dist.DistBackendError) as e:
        _collective_failed(ranks, n, e)
    return out
