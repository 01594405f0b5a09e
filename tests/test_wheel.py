"""A non-editable install runs `report` (the notebooks ship inside the package), and `speculate`
and `evaluate` with their defaults (the samples do not ship: a default that needs them is one line
naming where it looked, and with $D2T_LAB_SAMPLES set both run).

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
    # no build isolation: the build backend (setuptools) comes from this environment, nothing is downloaded
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(root), "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp / "dist")],
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


def _installed_env(**extra) -> dict:
    """The environment of a user's shell: no PYTHONPATH (so only the installed helpers is found), no samples set."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "D2T_LAB_SAMPLES")}
    return {**env, **extra}


def test_speculate_defaults_from_the_wheel_say_where_they_looked(installed, samples_dir):
    python, tmp = installed
    where = tmp / "elsewhere"
    where.mkdir(exist_ok=True)
    draft = shutil.copytree(samples_dir / "tiny_draft_sglang", where / "draft", dirs_exist_ok=True)
    r = subprocess.run([python, "-c", "import helpers.core.paths as p; print(p.__file__); print(p.checkout_root())"],
                       capture_output=True, text=True, cwd=where, env=_installed_env())
    module, checkout = r.stdout.split()
    assert str(tmp / "venv") in module and checkout == "None", r.stdout + r.stderr
    console = tmp / "venv" / "bin" / "d2t-lab"
    r = subprocess.run([console, "speculate", str(draft), "--max-prompts", "1", "--max-new-tokens", "4"],
                       capture_output=True, text=True, cwd=where, env=_installed_env(), timeout=120)
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error: --target: needs the bundled samples (tiny_target)")
    assert str(where / "data_samples" / "tiny_target") in r.stderr and "D2T_LAB_SAMPLES" in r.stderr


def test_speculate_and_evaluate_run_from_the_wheel_on_samples_named_by_the_variable(installed, samples_dir):
    python, tmp = installed
    where = tmp / "elsewhere"
    where.mkdir(exist_ok=True)
    env = _installed_env(D2T_LAB_SAMPLES=str(samples_dir))
    console = tmp / "venv" / "bin" / "d2t-lab"
    # what the installed package resolves the samples to
    r = subprocess.run([python, "-c", "from helpers.core.paths import bundled_samples; print(bundled_samples())"],
                       capture_output=True, text=True, cwd=where, env=env)
    bundled = Path(r.stdout.strip())
    assert bundled == samples_dir, r.stdout + r.stderr
    # speculate: --target and --prompts left to their defaults
    r = subprocess.run([console, "speculate", str(bundled / "tiny_draft_sglang"), "--max-prompts", "1",
                        "--max-new-tokens", "4", "--readings", "offset,absolute", "--json"],
                       capture_output=True, text=True, cwd=where, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["target"] == str(bundled / "tiny_target") and out["prompts"] == str(bundled / "prompts.jsonl")
    offset, absolute = out["readings"]["offset"], out["readings"]["absolute"]
    assert len(offset["prompts"]) == 1 and 1 <= offset["generated_tokens"] <= 4
    # the trained draft under its engines' reading beats the misread table, which never gets a token accepted
    assert absolute["mean_accept_length"] == 1.0 and offset["mean_accept_length"] > absolute["mean_accept_length"]
    # evaluate has no default checkpoint or samples: it runs on the samples the installed package resolved
    r = subprocess.run([console, "evaluate", str(bundled / "tiny_draft_sglang"), "--samples",
                        str(bundled / "tiny_hidden_states"), "--max-samples", "1", "--json"],
                       capture_output=True, text=True, cwd=where, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    ev = json.loads(r.stdout)
    assert ev["samples_scored"] >= 1 and ev["tokens"] > 0
    assert ev["readings"]["offset"]["top1"] > ev["readings"]["absolute"]["top1"]
