"""`make check-newest` (scripts/check_newest.py): what it installs is what pyproject.toml allows.

The real run (a fresh venv, a download of every dependency, test-fast in it) is the check itself,
run before a submission; here only its reading of the bounds and its refusal of a venv path that
would land inside the checkout (nothing is created or removed then)."""
from __future__ import annotations

import tomllib
from pathlib import Path

from conftest import script_module

ROOT = Path(__file__).resolve().parents[1]


def test_every_bound_of_pyproject_is_installed_with_the_torch_spec():
    mod = script_module("check_newest")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = mod.requirements(ROOT / "pyproject.toml", "torch==2.13.0")
    assert set(project["dependencies"]) | set(project["optional-dependencies"]["dev"]) <= set(reqs)
    assert reqs[-1] == "torch==2.13.0" and "torch>=2.2" in reqs  # both: pip takes the newest that both allow
    assert not any("==" in r for r in reqs[:-1]), reqs  # no pins of its own


def test_a_venv_inside_the_checkout_is_refused(capsys):
    mod = script_module("check_newest")
    assert mod.main(["--venv", str(ROOT / "newest-venv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --venv ") and "outside the checkout" in err[0]
    assert not (ROOT / "newest-venv").exists()
