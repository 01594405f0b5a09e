"""docs/architecture.md names every source file once with its job: each `.py` under helpers/, scripts/ and
benchmarks/ (package `__init__.py` files aside) has a row, every row names a file that exists, and no row
leaves its job empty."""
from __future__ import annotations

import re

from conftest import ROOT

DOC = ROOT / "docs" / "architecture.md"
FOLDERS = ("helpers", "scripts", "benchmarks")
# a module-map row: | `package` (or (root)) | `path/file.py` | its job |
ROW = re.compile(r"^\|\s*(?:`\w+`|\(root\))\s*\|\s*`((?:helpers|scripts|benchmarks)/[\w/]+\.py)`\s*\|(.*)$")


def _rows() -> dict[str, list[str]]:
    """file -> the cells after it, for every module-map row of the page."""
    rows: dict[str, list[str]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            rows.setdefault(m.group(1), []).append(m.group(2))
    return rows


def _files() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def test_every_source_file_has_a_row():
    missing = sorted(_files() - set(_rows()))
    assert not missing, "files without a row in docs/architecture.md:\n" + "\n".join(missing)


def test_every_row_names_a_file_that_exists():
    gone = sorted(set(_rows()) - _files())
    assert not gone, "docs/architecture.md has rows for files that do not exist:\n" + "\n".join(gone)


def test_each_file_has_one_row_with_its_job():
    rows = _rows()
    twice = sorted(f for f, r in rows.items() if len(r) > 1)
    assert not twice, f"files with more than one row: {twice}"
    empty = sorted(f for f, (rest,) in rows.items() if not rest.split("|")[0].strip() or rest.count("|") != 1)
    assert not empty, f"rows whose job cell is empty or split: {empty}"
