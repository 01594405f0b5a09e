"""Do the tests hold on the newest releases the dependency bounds allow? (`make check-newest`)

Builds a throwaway virtual environment (default /tmp/d2t-lab-newest, made anew each run), installs
into it, with no pins and no cache of this checkout's own venv, the newest releases that
pyproject.toml's `dependencies` and `dev` extra allow (PyTorch as `--torch-spec`, default
$TORCH_SPEC, the Makefile's mechanism: CI's `torch==2.13.0` CPU build, or the newest pip allows),
prints the versions installed (and where they differ from .venv's), then runs `make test-fast`'s
selection of the tests in it against this checkout. The exit code is pytest's (or 2 when the
environment could not be built). Run it before each submission: a dependency that moved under
its bound shows up here first, not in a user's fresh clone.

The package itself is not installed (no build folders appear in the checkout): pytest runs from
the checkout's root, which puts `helpers` on the path, as `make test-fast` does.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAST = ["-q", "-n", "auto", "--dist", "loadgroup", "-m", "not slow and not browser and not engine"]


def requirements(pyproject: Path, torch_spec: str | None) -> list[str]:
    """The project's dependencies and its `dev` extra, as pip requirements (the torch spec added)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = list(project["dependencies"]) + list(project.get("optional-dependencies", {}).get("dev", []))
    if torch_spec:
        reqs.append(torch_spec)  # with the project's own torch bound: pip takes the newest both allow
    return reqs


def installed(python: Path) -> dict[str, str]:
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True)
    if out.returncode != 0:
        return {}
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(out.stdout)}


def _name(req: str) -> str:
    for sep in "<>=!~[; ":
        req = req.split(sep, 1)[0]
    return req.strip().lower().replace("_", "-")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path, default=Path("/tmp/d2t-lab-newest"), help="throwaway venv (removed first)")
    ap.add_argument("--torch-spec", default=os.environ.get("TORCH_SPEC") or "torch>=2.2",
                    help="the PyTorch requirement ($TORCH_SPEC; CI: torch==2.13.0)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter the venv is made from")
    ap.add_argument("--keep", action="store_true", help="keep the venv afterwards (default: removed)")
    ap.add_argument("pytest_args", nargs="*", help="instead of test-fast's selection (e.g. tests/test_remote.py)")
    args = ap.parse_args(argv)
    venv = args.venv.resolve()
    if venv == ROOT or ROOT in venv.parents or venv in (Path("/"), Path.home()):
        print(f"error: --venv {venv}: must be a throwaway folder outside the checkout", file=sys.stderr)
        return 2
    reqs = requirements(ROOT / "pyproject.toml", args.torch_spec)
    t0 = time.monotonic()
    shutil.rmtree(venv, ignore_errors=True)
    py = venv / "bin" / "python"
    steps = [[args.python, "-m", "venv", str(venv)],
             [str(py), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
             [str(py), "-m", "pip", "install", "--quiet", "--upgrade", *reqs]]
    for cmd in steps:
        print("+", shlex.join(cmd), flush=True)
        if subprocess.run(cmd).returncode != 0:
            print(f"error: {' '.join(cmd[:4])}: failed; the newest releases could not be installed", file=sys.stderr)
            return 2
    config = subprocess.run([str(py), "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    caps = [ln for ln in config.splitlines() if "constraint" in ln]  # a machine's pip may cap releases
    if os.environ.get("PIP_CONSTRAINT"):
        caps.append(f"PIP_CONSTRAINT={os.environ['PIP_CONSTRAINT']}")
    new, old = installed(py), installed(ROOT / ".venv" / "bin" / "python")
    print(f"\nnewest releases the bounds allow ({time.monotonic() - t0:.0f} s to install):")
    for name in sorted({_name(r) for r in reqs}):
        got = new.get(name, "not installed")
        was = old.get(name)
        moved = f"   (.venv: {was})" if was and was != got else ""
        print(f"  {name:<20} {got}{moved}")
    for cap in caps:
        print(f"  note: pip's configuration caps some releases on this machine: {cap}")
    cmd = [str(py), "-m", "pytest", *(args.pytest_args or FAST)]
    print("\n+", shlex.join(cmd), flush=True)
    t1 = time.monotonic()
    rc = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1")).returncode
    print(f"\ncheck-newest: pytest exit {rc} in {time.monotonic() - t1:.0f} s "
          f"({'the tests hold' if rc == 0 else 'FAILED on the newest releases'})")
    if not args.keep:
        shutil.rmtree(venv, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
