"""scripts/ and benchmarks/ are packages run as `python -m scripts.NAME` / `python -m benchmarks.NAME` from the
repository root: none of their files changes `sys.path`, scripts/README.md lists every script, and the library
(helpers/) never names a path or module under scripts/ (it runs and imports no script)."""
from __future__ import annotations

import ast
import re

from conftest import ROOT

FOLDERS = ("scripts", "benchmarks")


def _py(*folders: str):
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py") if "__pycache__" not in p.parts)


def _touches_sys_path(tree: ast.AST) -> list[int]:
    """Lines that use `sys.path` (insert, append, slice assignment, reassignment, ...) or import `site` to add
    a directory (`site.addsitedir`)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
                and node.value.id == "sys":
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "addsitedir":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name == "path" for a in node.names):
            lines.append(node.lineno)
    return lines


def test_no_sys_path_manipulation_in_scripts_or_benchmarks():
    found = [f"{p.relative_to(ROOT)}:{n}" for p in _py(*FOLDERS) for n in _touches_sys_path(ast.parse(p.read_text()))]
    assert not found, "sys.path used (run the file with -m from the repository root instead):\n" + "\n".join(found)


def test_the_scan_sees_a_sys_path_insert():
    assert _touches_sys_path(ast.parse("import sys\nsys.path.insert(0, 'x')\n")) == [2]
    assert _touches_sys_path(ast.parse("import sys\nsys.path[:0] = ['x']\n")) == [2]
    assert _touches_sys_path(ast.parse("from sys import path\n")) == [1]


def test_scripts_and_benchmarks_are_packages():
    for folder in (ROOT / "scripts", ROOT / "scripts" / "producer_fixtures", ROOT / "benchmarks"):
        assert (folder / "__init__.py").is_file(), folder


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            ids.add(id(node.body[0].value))
    return ids


_SCRIPT_PATH = re.compile(r"^(?:scripts|benchmarks)$|^(?:\.?/)?(?:scripts|benchmarks)[/.]|-m\s+(?:scripts|benchmarks)\.")


def scripts_named(source: str) -> list[str]:
    """String constants in code (docstrings aside) that name the scripts or benchmarks folder as a path or module:
    `"scripts"` (a path part), `"scripts/x.py"`, `"scripts.x"`, `"-m scripts.x"`; and imports of them."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                and _SCRIPT_PATH.search(node.value.strip()):
            found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FOLDERS:
            found.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] in FOLDERS for a in node.names):
            found.append(f"{node.lineno}: import {', '.join(a.name for a in node.names)}")
    return found


def test_the_library_names_no_script():
    found = [f"{p.relative_to(ROOT)}:{x}" for p in _py("helpers") for x in scripts_named(p.read_text())]
    assert not found, "the library names a script (it must not run or import one):\n" + "\n".join(found)


def test_the_scan_sees_a_script_path():
    assert scripts_named('root / "scripts" / "record_engine_runs.py"\n')
    assert scripts_named('x = "scripts/record_engine_runs.py"\n')
    assert scripts_named('cmd = ["python", "-m", "scripts.record_engine_runs"]\n')
    assert scripts_named("from scripts import vllm_cpu\n")
    assert not scripts_named('"""Made by scripts/make_samples.py."""\n')  # a docstring may cite one
    assert not scripts_named('msg = "fixed as scripts/vllm_sampling_patch/sitecustomize.py does"\n')  # so may a message


def test_the_readme_lists_every_script():
    readme = (ROOT / "scripts" / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([\w/]+\.py)` \|", readme, re.M))
    present = {p.relative_to(ROOT / "scripts").as_posix() for p in _py("scripts") if p.name != "__init__.py"}
    assert present - listed == set(), f"scripts missing from scripts/README.md: {sorted(present - listed)}"
    assert listed - present == set(), f"scripts/README.md lists scripts that do not exist: {sorted(listed - present)}"
