"""Notebook 08 with `live_engine = True` in the engine environment (make test-engine): it runs the
engine pair's healthy draft and its d2t-absolute copy in real vLLM and shows the engine's own lines,
its start-up, the healthy run's SpecDecoding metrics and the broken run's crash."""
from __future__ import annotations

import pytest

from conftest import NOTEBOOKS, check_executed

pytestmark = pytest.mark.engine


def test_notebook_08_runs_the_broken_and_healthy_drafts_in_real_vllm(vllm_cpu, run_notebook, tmp_path):
    nb = NOTEBOOKS / "08_debug_a_checkpoint.ipynb"
    executed = run_notebook(nb, tmp_path, {"live_engine": True, "solutions": True, "work_dir": str(tmp_path / "work")})
    check_executed(executed, None)
    text = "\n".join("".join(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                     for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "live runs, just now" in text  # not the recordings shipped in data_samples/engine_runs
    assert "Starting vLLM server" in text
    assert "SpecDecoding metrics:" in text  # the healthy draft's own metrics line
    assert "IndexError: index 4098 is out of bounds" in text  # the absolute d2t's crash, in vLLM's words
    assert "\x1b[" not in text
