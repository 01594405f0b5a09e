"""The commands under `torchrun --nproc-per-node 2` (gloo on CPU): the same results as one process."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
ENV = os.environ | {"PYTHONPATH": os.fspath(ROOT), "OMP_NUM_THREADS": "1"}


def _run(*args, ranks: int = 2, timeout: float = 600) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node RANKS --standalone -m helpers ARGS` (the one-process side runs `main` in
    this process: the `cli` fixture). A run in which a rank was killed by a signal (torchrun's "exitcode: -N":
    once in a clean-clone suite, rank 0 aborted with SIGABRT at the suite's start and never again in 10 runs
    alone, under load or beside the other torchrun test) is run once more, with a warning that keeps what
    the first run said; a command that fails twice, or fails with an exit status of its own, fails the test."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--standalone",
           "-m", "helpers", *map(str, args)]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if r.returncode != 0 and re.search(r"exitcode\s*: -\d+", r.stderr):
        import warnings

        warnings.warn(f"torchrun: a rank was killed by a signal, run again; first run: {_why(r)}", stacklevel=2)
        r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return r


def _why(r: subprocess.CompletedProcess) -> str:
    """A failed torchrun's own lines that say why (the ranks' errors, not only the agent's summary at the end)."""
    said = [line for line in r.stderr.splitlines()
            if re.search(r"error|Error|terminate|exitcode|Traceback|abort", line)][:40]
    return "\n".join(said) or r.stderr[-2000:]


def _files(folder: Path) -> dict[str, bytes]:
    return {os.fspath(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_evaluate_two_ranks_equals_one_process(cli):  # one process: `main` in this one
    args = ["evaluate", SAMPLES / "tiny_draft_sglang", "--samples", SAMPLES / "tiny_hidden_states", "--steps", "2",
            "--device", "cpu", "--json"]
    one, two = cli(*args), _run(*args, ranks=2)
    assert one.returncode == 0 and two.returncode == 0, _why(two)
    a, b = json.loads(one.stdout), json.loads(two.stdout)  # only rank 0 printed: one JSON object
    assert a == b
    assert a["splits"]["train"]["samples_scored"] == 320 and a["splits"]["val"]["samples_scored"] == 64


def test_capture_two_ranks_writes_the_same_bytes(tmp_path, cli):
    args = ["capture", SAMPLES / "tiny_target", "--prompts", SAMPLES / "prompts.jsonl", "--regenerate",
            "--max-new-tokens", "6", "--batch-size", "3", "--device", "cpu", "--json"]
    one = cli(*args, "-o", tmp_path / "one")
    two = _run(*args, "-o", tmp_path / "two", ranks=2)
    assert one.returncode == 0 and two.returncode == 0, _why(two)
    assert json.loads(one.stdout)["written"] == json.loads(two.stdout)["written"] == 32
    a, b = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert len(a) == 33 and a == b  # 32 samples + capture.json, byte for byte


def _rank_pid(parent: int, rank: int) -> int | None:
    """The pid of the worker with RANK=`rank` among the processes under `parent`."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
            stat = (d / "stat").read_text().split()
        except OSError:
            continue
        if int(stat[3]) == parent and f"RANK={rank}".encode() in env and b"LOCAL_RANK" in b"".join(env):
            return int(d.name)
    return None


def test_a_killed_rank_is_named_and_the_rerun_resumes(tmp_path):
    out = tmp_path / "o"
    args = ["capture", SAMPLES / "tiny_target", "--prompts", SAMPLES / "prompts.jsonl", "--regenerate",
            "--max-new-tokens", "24", "--batch-size", "1", "--device", "cpu", "-o", out]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
           "-m", "helpers", *map(str, args)]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    deadline = time.time() + 180
    while time.time() < deadline and len(list(out.rglob("data_*.ckpt"))) < 4:
        time.sleep(0.05)
    victim = _rank_pid(proc.pid, 1)
    assert victim is not None, "rank 1's process not found"
    os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    ours = [line for line in err.splitlines() if line.startswith("error: ")]
    assert ours and f"rank 1 (pid {victim}) of 2 stopped" in ours[0], err[-3000:]
    done = len(list(out.rglob("data_*.ckpt")))
    assert 0 < done < 32
    again = _run(*args, "--json", ranks=2)
    assert again.returncode == 0, _why(again)
    res = json.loads(again.stdout)
    assert res["skipped"] == done and res["written"] == 32 - done
    assert len(list(out.rglob("data_*.ckpt"))) == 32 and not list(out.rglob("*.tmp"))


def test_torchrun_hint_from_measured_time():
    from helpers.core.distributed import torchrun_hint

    assert torchrun_hint(100, 10, 1.0) is None  # 10 s in all: not worth it
    text = torchrun_hint(100_000, 100, 20.0, devices=8)  # 0.2 s a sample: 5.6 h, 42 min on 8
    assert "333.3 min here" in text and "--nproc-per-node 8 about 41.7 min" in text
    assert "more devices" in torchrun_hint(100_000, 100, 20.0, devices=1)


def _without_times(d):
    """The JSON without wall-clock fields (seconds, overhead fractions) and without `batched_forwards` (the
    forwards each process's batches ran: two ranks batch their halves apart): what must be equal."""
    if isinstance(d, dict):
        return {k: _without_times(v) for k, v in d.items()
                if "second" not in k and "overhead" not in k and k != "batched_forwards"}
    if isinstance(d, list):
        return [_without_times(v) for v in d]
    if isinstance(d, float):  # exact expectations summed over prompts in another order (or other batch
        return float(f"{d:.12g}")  # shapes) differ in the last bits: 12 significant digits must agree
    return d


@pytest.mark.parametrize("extra", [[], ["--temperature", "0.8", "--seed", "3"]])
def test_speculate_two_ranks_equals_one_process(extra, cli):
    args = ["speculate", SAMPLES / "tiny_draft_sglang", "--draft-tokens", "3", "--max-new-tokens", "12",
            "--max-prompts", "6", "--reading", "all", "--device", "cpu", "--json", *extra]
    one, two = cli(*args), _run(*args, ranks=2)
    assert one.returncode == 0 and two.returncode == 0, _why(two)
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    assert _without_times(a) == _without_times(b)
    assert a["readings"]["offset"]["verify_steps"] > 0 and len(a["readings"]["offset"]["prompts"]) == 6


# -- nothing waits forever: a rank that never starts, a port that cannot work ---------------------------
def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_that_never_starts_is_named_within_the_timeout(rank):
    """One process of a world of 2 (the other never starts): it ends after --dist-timeout with one
    line naming the rank that did not arrive (rank 0 hosts the rendezvous; rank 1 waits for it)."""
    env = ENV | {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(_free_port())}
    args = ["evaluate", SAMPLES / "tiny_draft_sglang", "--samples", SAMPLES / "tiny_hidden_states", "--device", "cpu",
            "--dist-timeout", "4"]
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "helpers", *map(str, args)], env=env, capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    took = time.monotonic() - t0
    assert r.returncode == 1, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr[-3000:]
    missing = 1 - rank
    assert f"rank {missing} of 2" in lines[0] and "within 4 s (--dist-timeout)" in lines[0], lines[0]
    assert took < 4 + 60, took  # the timeout, and an interpreter start on a loaded machine
    assert not r.stdout


def test_master_port_zero_without_standalone_is_refused_in_one_line():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "0",
           "-m", "helpers", "evaluate", str(SAMPLES / "tiny_draft_sglang"), "--samples",
           str(SAMPLES / "tiny_hidden_states"), "--device", "cpu"]
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert r.returncode != 0 and time.monotonic() - t0 < 120
    ours = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(ours) == 1 and "MASTER_PORT=0" in ours[0] and "--standalone" in ours[0], r.stderr[-3000:]
