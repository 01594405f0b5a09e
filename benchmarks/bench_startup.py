"""Start-up time of the light commands against `python -c "import numpy"`, measured in one run.

python -m benchmarks.bench_startup [--rounds 7]

Each command is a fresh interpreter (`python -m helpers ...`, as `d2t-lab` runs it), timed wall
clock. The commands and the numpy baseline are timed in interleaved rounds and each keeps its
best round, so a burst of load on a shared machine hits all of them alike. Target: each light
command at most 2x the numpy import. It also reports whether each command imported torch or
pandas (it should not: those are loaded only by commands that need them).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "data_samples" / "logs" / "sglang.log"
BASELINE = ["-c", "import numpy"]
COMMANDS = {
    "--help": ["-m", "helpers", "--help"],
    "throughput": ["-m", "helpers", "throughput", "--baseline-tps", "90", "--accept-length", "1.9", "--spec-tps", "46.7"],
    "simulate": ["-m", "helpers", "simulate", "--accept-rate", "0.7", "--draft-tokens", "5", "--trials", "1000"],
    "logs": ["-m", "helpers", "logs", str(LOG)],
}
TARGET = 2.0


def wall(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - t0


def heavy_imports(args: list[str]) -> list[str]:
    """Which of torch / pandas / matplotlib the command imported."""
    probe = ("import runpy, sys; sys.argv = {argv!r}; "
             "exec('try:\\n runpy.run_module(\"helpers\", run_name=\"__main__\")\\nexcept SystemExit: pass'); "
             "print(','.join(m for m in ('torch', 'pandas', 'matplotlib') if m in sys.modules), file=sys.stderr)")
    argv = ["helpers", *args[2:]]
    r = subprocess.run([sys.executable, "-c", probe.format(argv=argv)], cwd=ROOT, capture_output=True, text=True)
    return [m for m in r.stderr.strip().splitlines()[-1].split(",") if m] if r.stderr.strip() else []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    rounds = ap.parse_args().rounds
    best = {name: float("inf") for name in ["numpy", *COMMANDS]}
    for _ in range(rounds):
        best["numpy"] = min(best["numpy"], wall(BASELINE))
        for name, args in COMMANDS.items():
            best[name] = min(best[name], wall(args))
    base = best["numpy"]
    print(f"python -c 'import numpy': {1000 * base:.0f} ms (best of {rounds})")
    ok = True
    for name, args in COMMANDS.items():
        ratio = best[name] / base
        heavy = heavy_imports(args)
        ok &= ratio <= TARGET
        print(f"d2t-lab {name:<11} {1000 * best[name]:6.0f} ms = {ratio:4.2f}x numpy  "
              f"imports: {', '.join(heavy) or 'no torch/pandas/matplotlib'}")
    print(f"target: each at most {TARGET:.0f}x the numpy import: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
