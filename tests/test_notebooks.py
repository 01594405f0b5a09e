"""Execute every notebook headless, top to bottom, in a fresh kernel (papermill).

Notebooks run on their default parameters (the bundled samples). A notebook that declares an
`output_dir` parameter gets a temporary folder, so tests never write into the repository.
Notebooks 03, 04 and 07 run on fewer sample files, trials and prompts than their defaults (`SMALLER`:
the same code runs per file or prompt; the report tests run them on more), and the primer's default
run lives with its other checks in tests/test_primer.py.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import SAMPLES, check_executed

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


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


def _check_02(out, executed):
    """Notebook 02 saves each figure it shows, with the verdict and source of what it drew."""
    import hashlib

    from helpers.plots.provenance import read_figure_metadata

    verdicts = {p.stem: read_figure_metadata(p)["verdict"] for p in out.glob("readings_*.png")}
    assert verdicts == {"readings_mapping": "offset", "readings_misencoded": "absolute"}
    meta = read_figure_metadata(out / "readings_mapping.png")
    d2t = SAMPLES / "kimi_k25_mapping" / "d2t.pt"
    assert meta["source_sha256"] == hashlib.sha256(d2t.read_bytes()).hexdigest()


def _check_08(out, executed):
    """Notebook 08 on its defaults: no exercise reported right, no answer printed, the source left alone."""
    from helpers.teach import checkpoint_exercises as ex

    cells = [c for c in executed.cells if c.cell_type == "code"]
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) + str(o.get("data", {}).get("text/html", ""))
                     for c in cells for o in c.get("outputs", []))
    checks = [c for c in cells if "checkpoint_exercises.check(" in c.source]
    assert len(checks) == len(ex.EXERCISES)
    assert all("".join(o.get("text", "") for o in c.outputs).startswith("✗ not answered yet") for c in checks)
    assert "✓" not in text
    for answer in ex.solutions().values():
        if isinstance(answer, str):
            assert f"'{answer}'" not in text and f" {answer} " not in text
        else:
            assert re.search(rf"(?<![\d,.]){answer}(?![\d]|[.,]\d)", text) is None, answer
    assert "verdict after the fix: offset" in text
    # the real vLLM runs: each row named, the refusal and the crash with the engine's own words
    assert all(run in text for run in ("healthy", "d2t-missing", "prefix-model", "d2t-absolute"))
    assert "vllm 0.32.0" in text and "IndexError" in text and "There is no module or parameter named" in text


def _check_04(out, executed):
    """Notebook 04 on its defaults: no metrics were given, and it says so."""
    text = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "not given: no serving metrics" in text


CHECKS = {"02_d2t_offset_histograms": _check_02, "04_accept_length_simulation": _check_04,
          "08_debug_a_checkpoint": _check_08}
# parameters beyond the defaults, and why
# (each prompt, sample file or trial runs the same cells' code; the report tests run on more)
SMALLER = {"03_accuracy_with_and_without_mapping": {"max_samples": 16},
           "04_accept_length_simulation": {"max_samples": 16, "trials": 20_000},
           "07_speculative_decoding": {"max_prompts": 3}}
# notebooks whose default run is tested, with its own checks and check_executed, in another file
ELSEWHERE = {"00_offset_encoding_primer": "tests/test_primer.py"}
RUN = [p for p in ALL if p.stem not in ELSEWHERE]


@pytest.mark.slow
@pytest.mark.parametrize("nb", RUN, ids=[p.stem for p in RUN])
def test_notebook_executes(nb, tmp_path, run_notebook):
    """Runs top to bottom; every figure it shows is shown once inline and saved once."""
    import papermill as pm

    declared = pm.inspect_notebook(str(nb))
    out = tmp_path / "out"
    params = {"output_dir": str(out)} if "output_dir" in declared else {}
    if "work_dir" in declared:  # where a notebook writes the copies it makes (notebook 08)
        params["work_dir"] = str(tmp_path / "work")
    params.update(SMALLER.get(nb.stem, {}))
    executed = run_notebook(nb, tmp_path, params)
    check_executed(executed, out if "output_dir" in params else None)
    if nb.stem in CHECKS:
        CHECKS[nb.stem](out, executed)


def test_every_notebook_is_executed_somewhere(root):
    for stem, where in ELSEWHERE.items():
        assert f"{stem}.ipynb" in (root / where).read_text(), (stem, where)
    assert {p.stem for p in RUN} | set(ELSEWHERE) == {p.stem for p in ALL}


@pytest.mark.slow
def test_bad_parameter_shows_one_line_not_a_traceback(tmp_path, run_notebook):
    """A wrong path in a parameters cell fails the run with one readable line."""
    import papermill as pm

    nb = NOTEBOOKS / "01_mapping_inspection.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as e:
        run_notebook(nb, tmp_path, {"mapping_path": str(tmp_path / "no_such_ckpt")})
    assert e.value.ename == "BadInputError"
    assert "no_such_ckpt: no such file or folder" in e.value.evalue
    executed = json.loads((tmp_path / nb.name).read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert len(errors) == 1 and len(errors[0]["traceback"]) == 1
