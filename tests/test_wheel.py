"""A non-editable install runs `report`: the notebooks ship inside the package.

The wheel is built from this checkout and installed (without its dependencies) into a fresh
virtual environment that borrows the test environment's site-packages through a path file, so
the only `helpers` it can import is the installed one. `report` then runs from a folder outside
the checkout.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory, root):
    tmp = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(root), "--no-deps", "-q", "-w", str(tmp / "dist")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    wheel = next((tmp / "dist").glob("d2t_lab-*.whl"))
    env = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return python, tmp


def test_the_wheel_holds_the_notebooks(installed):
    python, tmp = installed
    r = subprocess.run([python, "-c", "import helpers, helpers.ui.report as r; print(helpers.__file__); print(r.NOTEBOOK_DIR)"],
                       capture_output=True, text=True, cwd=tmp)
    pkg, notebooks = r.stdout.split()
    assert str(tmp / "venv") in pkg, "imported a helpers that is not the installed one"
    assert str(tmp / "venv") in notebooks
    assert sorted(p.name for p in Path(notebooks).glob("*.ipynb")) == sorted(
        p.name for p in (Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_report_runs_from_a_non_editable_install(installed, samples_dir):
    python, tmp = installed
    mapping = shutil.copytree(samples_dir / "kimi_k25_mapping", tmp / "mapping")
    # the borrowed dependencies' data files (nbconvert's templates) live under this environment's prefix
    env = dict(os.environ, JUPYTER_PATH=str(Path(sys.prefix) / "share" / "jupyter"))
    r = subprocess.run([python, "-m", "helpers", "report", str(mapping), "-o", str(tmp / "out")],
                       capture_output=True, text=True, cwd=tmp, timeout=900, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    # one line of progress per notebook, and no kernel chatter
    assert sum(line.startswith("[") for line in r.stdout.splitlines()) == 5
    assert "KeyboardInterrupt" not in r.stdout + r.stderr and "IPKernelApp" not in r.stdout + r.stderr
    out = tmp / "out"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["numbers"]["inspect"]["verdict"] == "offset"
    assert all(nb["ok"] for nb in summary["notebooks"]), summary["notebooks"]
    assert "accuracy" not in summary["numbers"] and "replay" not in summary["numbers"]
    for nb in summary["notebooks"]:
        assert (out / "html" / f"{nb['name']}.html").exists() and (out / "notebooks" / f"{nb['name']}.ipynb").exists()
    # a mapping-only folder: what was not given is said, and engines would not read a d2t kept
    # only beside the weights
    md = (out / "summary.md").read_text()
    assert "**OFFSET**" in md
    assert "not given: pass --samples DIR" in md and "not given: pass --log FILE" in md
    assert "No prediction: no samples were given" in md
    assert "doctor errors d2t-missing" in md
    console = tmp / "venv" / "bin" / "d2t-lab"
    assert subprocess.run([console, "--version"], capture_output=True, text=True).stdout.startswith("d2t-lab")
