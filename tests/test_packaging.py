"""The project's set-up files agree with each other."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


CONDA_NAMES = {"torch": "pytorch"}


def _name(spec: str) -> str:
    return re.split(r"[<>=!~ \[]", spec.strip(), maxsplit=1)[0].lower()


def test_environment_yml_matches_pyproject_runtime_dependencies():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    py = {CONDA_NAMES.get(_name(d), _name(d)) for d in deps}
    conda = set()
    in_deps = False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        if line.startswith("dependencies:"):
            in_deps = True
            continue
        if in_deps and line.strip().startswith("- "):
            conda.add(_name(line.strip()[2:]))
    conda -= {"python", "pip"}
    assert py == conda, f"only in pyproject: {py - conda}; only in environment.yml: {conda - py}"


def test_ci_runs_make_test_and_readme_shows_quick_start():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme


def test_every_subpackage_ships_in_the_wheel():
    """pyproject lists the packages by hand (the notebooks are mapped in as helpers._notebooks)."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "helpers").rglob("__init__.py")}
    assert found | {"helpers._notebooks"} == listed


def test_mapping_doctest_runs():
    import doctest

    import helpers.io.mapping

    result = doctest.testmod(helpers.io.mapping)
    assert result.attempted > 0 and result.failed == 0
