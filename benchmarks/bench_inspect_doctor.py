"""`inspect` and `doctor` on a Kimi-shaped ~4.3 GB draft checkpoint, against a full read.

Writes the checkpoint of `kimi_checkpoint.py` to a temporary folder, once as safetensors and
once as pytorch_model.bin, and runs each operation in its own Python process:
  full read        every tensor materialised in memory (safetensors: get_tensor + clone, one
                   tensor at a time; .bin: torch.load(weights_only=True) without mmap)
  inspect          helpers.doctor.inspection.inspect_path (reads only d2t/t2d)
  doctor           helpers.doctor.diagnose.diagnose, NaN/Inf scan included (reads every weight once,
                   in 32 MB row chunks)
  doctor --no-weights   the same without the scan
Time is measured inside the child around the operation (imports excluded); extra peak memory is
the child's peak resident set (VmHWM, its own address space only) minus that of a child that
only does the imports. The page
cache is warmed before timing, so the figures compare reading from memory, not from disk.
Targets: inspect >= 100x faster than a full read with < 100 MB extra peak memory.
Each child operation runs REPEATS times (fastest time, largest peak are kept). The wall time of
the whole `python -m helpers inspect/doctor` command, start-up included, is printed as well.
Prints one table and the ratios; removes the temporary folder at the end.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.kimi_checkpoint import write_kimi_checkpoint

OPS = ("baseline", "full read", "inspect", "doctor", "doctor --no-weights")
REPEATS = 3  # each child op is run this many times: fastest time, largest peak (the machine is shared)

CHILD = r"""
import json, sys, time
op, path = sys.argv[1], sys.argv[2]
import torch, safetensors.torch
from helpers.doctor.inspection import inspect_path
from helpers.doctor.diagnose import diagnose
from pathlib import Path
t = time.perf_counter()
if op == "full read":
    folder = Path(path)
    if (folder / "model.safetensors").exists():
        # safetensors maps the file without reading it; clone() makes each tensor own its memory,
        # as loading into a model does. One mapping per tensor, released after its copy.
        from safetensors import safe_open
        sd = {}
        with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
            keys = list(f.keys())
        for k in keys:
            with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
                sd[k] = f.get_tensor(k).clone()
    else:
        sd = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True, mmap=False)
    n = sum(v.numel() for v in sd.values())
elif op == "inspect":
    n = inspect_path(path)["draft_vocab_size"]
elif op == "doctor":
    n = len(diagnose(path))
elif op == "doctor --no-weights":
    n = len(diagnose(path, check_weights=False))
else:
    n = 0
seconds = time.perf_counter() - t
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))  # kB, this process only
print(json.dumps({"seconds": seconds, "n": n, "hwm_kb": hwm}))
"""


def run_child(op: str, path: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, op, str(path)], capture_output=True, text=True,
                       env=dict(os.environ, TQDM_DISABLE="1"))
    if r.returncode != 0:
        raise SystemExit(f"{op} on {path} failed with exit code {r.returncode}: {r.stderr.strip()[-500:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # VmHWM of the child's own address space: ru_maxrss of a child would also count the pages it
    # shared with this (large) parent before exec.
    out["maxrss_mb"] = out["hwm_kb"] / 1024
    return out


def warm(folder: Path) -> None:
    for f in folder.iterdir():
        with open(f, "rb") as fh:
            while fh.read(64 << 20):
                pass


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="d2t_bench_doctor_"))
    rows, cli_rows = [], []
    try:
        for fmt in ("safetensors", "bin"):
            t = time.perf_counter()
            folder = write_kimi_checkpoint(tmp / fmt, fmt)
            size = sum(f.stat().st_size for f in folder.iterdir())
            print(f"wrote {fmt}: {size / 1e9:.2f} GB in {time.perf_counter() - t:.0f} s", flush=True)
            warm(folder)
            res = {}
            for op in OPS:
                runs = [run_child(op, folder) for _ in range(REPEATS)]
                res[op] = {"seconds": min(r["seconds"] for r in runs), "n": runs[0]["n"],
                           "maxrss_mb": max(r["maxrss_mb"] for r in runs)}
            for op, args in (("inspect CLI, wall", ["inspect", "--json"]), ("doctor CLI, wall", ["doctor", "--json"])):
                t = time.perf_counter()
                subprocess.run([sys.executable, "-m", "helpers", args[0], str(folder), *args[1:]], capture_output=True,
                               env=dict(os.environ, TQDM_DISABLE="1"))
                cli_rows.append((fmt, op, time.perf_counter() - t))
            base = res["baseline"]["maxrss_mb"]
            for op in OPS[1:]:
                rows.append((fmt, op, res[op]["seconds"], res[op]["maxrss_mb"] - base))
            print(f"  doctor findings: {res['doctor']['n']}; full read elements: {res['full read']['n']:,}", flush=True)
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{'format':<12}{'operation':<22}{'seconds':>10}{'extra peak MB':>15}")
    for fmt, op, s, mb in rows:
        print(f"{fmt:<12}{op:<22}{s:>10.3f}{mb:>15.0f}")
    for fmt, op, s in cli_rows:
        print(f"{fmt:<12}{op:<22}{s:>10.3f}{'':>15}  (whole command: Python start-up + imports + work)")
    print()
    for fmt in ("safetensors", "bin"):
        r = {op: (s, mb) for f, op, s, mb in rows if f == fmt}
        full_s, full_mb = r["full read"]
        for op in ("inspect", "doctor", "doctor --no-weights"):
            s, mb = r[op]
            print(f"{fmt:<12}{op:<22}{full_s / s:>8.0f}x faster than a full read, "
                  f"{mb:.0f} MB extra peak vs {full_mb:.0f} MB"
                  + (f"  [target >= 100x and < 100 MB: {'met' if full_s / s >= 100 and mb < 100 else 'NOT met'}]"
                     if op == "inspect" else ""))


if __name__ == "__main__":
    main()
