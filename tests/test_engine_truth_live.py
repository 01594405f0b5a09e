"""The engine-truth table, run again in the real engine (make test-engine).

Every case of scripts/engine_truth.py (the bundled engine pair's draft and each broken copy) is
started in vLLM's CPU build 0.32.0 and, where it starts, serves the 16 bundled prompts. Checked:
what vLLM does now is what data_samples/engine_truth/vllm-0.32.0.json recorded (the same outcome,
the same root error, the accept length within 0.05), and the doctor's predicted outcome holds for it.
"""
from __future__ import annotations

import json

import pytest

from conftest import SAMPLES, script_module

pytestmark = pytest.mark.engine

TABLE = json.loads((SAMPLES / "engine_truth" / "vllm-0.32.0.json").read_text())
RECORDED = {r["case"]: r for r in TABLE["rows"]}


@pytest.fixture(scope="module")
def live(vllm_cpu, tmp_path_factory):
    et = script_module("engine_truth")
    work = tmp_path_factory.mktemp("truth")
    folders = et.make(work / "drafts")
    ids = vllm_cpu.prompt_token_ids(et.TARGET, et.PROMPTS, et.N_PROMPTS)
    return et, folders, ids, work, et.doctor_predictions(folders)


def _root(error: str | None) -> str:
    """The exception type and the words before any detail that names this machine's paths or ports."""
    return (error or "").split(":", 1)[0]


@pytest.mark.parametrize("case", list(RECORDED))
def test_vllm_does_what_the_table_and_the_doctor_say(live, case):
    et, folders, ids, work, predicted = live
    row = {"case": case} | et.run_case(folders[case], ids, work / f"{case}.log", target=et.pair_of(case) / "target",
                                       method=et.LAUNCH.get(case, "eagle3"))
    want = RECORDED[case]
    assert row["outcome"] == want["outcome"], (row.get("error"), want.get("error"))
    if row["outcome"] == "serves":
        assert row["accept_length"] == pytest.approx(want["accept_length"], abs=0.05)
    else:
        assert _root(row["error"]) == _root(want["error"]), (row["error"], want["error"])
    ok, why = et.agrees(predicted[case], row, et.healthy_accept(TABLE["rows"], case))
    assert ok, why
