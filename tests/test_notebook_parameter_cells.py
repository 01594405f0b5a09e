"""Every assignment in a notebook's `parameters` cell is one papermill can see: a line papermill cannot
parse (an `==` in its comment did it to notebook 07's `engine`) is silently not a parameter, so
`papermill -p NAME` and `report` could not set it."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import papermill as pm
import pytest

NB = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.mark.parametrize("path", sorted(NB.glob("[0-9]*.ipynb")), ids=lambda p: p.stem)
def test_every_parameter_line_is_seen_by_papermill(path):
    nb = nbformat.read(path, 4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assigned = {m.group(1) for m in re.finditer(r"^([A-Za-z_]\w*)\s*=", cell.source, re.M)}
    assert assigned, path.name
    missing = assigned - set(pm.inspect_notebook(str(path)))
    assert not missing, f"{path.name}: papermill cannot parse the line(s) of {sorted(missing)}"
