"""Execute every notebook headless, top to bottom, in a fresh kernel (papermill).

Notebooks run on their default parameters (the bundled samples). A notebook that declares an
`output_dir` parameter gets a temporary folder, so tests never write into the repository.
"""
from __future__ import annotations

import json

import pytest

from conftest import NOTEBOOKS, execute_notebook

ALL = sorted(p for p in NOTEBOOKS.glob("*.ipynb"))


def test_there_are_notebooks():
    assert ALL, "no notebooks found"


@pytest.mark.parametrize("nb", ALL, ids=[p.stem for p in ALL])
def test_notebook_is_stored_clean(nb):
    data = json.loads(nb.read_text())
    cells = data["cells"]
    assert any("parameters" in c.get("metadata", {}).get("tags", []) for c in cells), "no parameters cell"
    assert not any(c.get("outputs") for c in cells if c["cell_type"] == "code"), "stored with outputs"
    src = "".join("".join(c["source"]) for c in cells)
    assert "sys.path" not in src and "%pip" not in src and "!pip" not in src


@pytest.mark.slow
@pytest.mark.parametrize("nb", ALL, ids=[p.stem for p in ALL])
def test_notebook_executes(nb, tmp_path):
    import papermill as pm

    declared = pm.inspect_notebook(str(nb))
    params = {"output_dir": str(tmp_path / "out")} if "output_dir" in declared else {}
    executed = execute_notebook(nb, tmp_path, params)
    errors = [
        o for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"
    ]
    assert not errors


def test_bad_parameter_shows_one_line_not_a_traceback(tmp_path):
    """A wrong path in a parameters cell fails the run with one readable line."""
    import papermill as pm

    nb = NOTEBOOKS / "01_mapping_inspection.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as e:
        execute_notebook(nb, tmp_path, {"mapping_path": str(tmp_path / "no_such_ckpt")})
    assert e.value.ename == "BadInputError"
    assert "no_such_ckpt: no such file or folder" in e.value.evalue
    executed = json.loads((tmp_path / nb.name).read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert len(errors) == 1 and len(errors[0]["traceback"]) == 1
