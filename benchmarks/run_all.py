"""Run every benchmark in this folder, one after the other, and print their reports.

    python -m benchmarks.run_all   # from the repository root (`make benchmarks`)
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
failed = []
for script in sorted(here.glob("bench_*.py")):
    print(f"\n=== {script.name}", flush=True)
    if subprocess.run([sys.executable, "-m", f"benchmarks.{script.stem}"], cwd=here.parent).returncode != 0:
        failed.append(script.name)
if failed:
    sys.exit(f"failed: {', '.join(failed)}")
