"""The llama.cpp engine-truth table, a handful of its rows run again in real llama.cpp b11434 (make test-engine).

Each case below goes through llama.cpp's own converter and llama-server again (scripts/engine_truth.py
run_llamacpp: one refusal at conversion, one at start-up, a served copy at about 1, a served copy as
trained, a GGUF-level rewrite). Checked: what llama.cpp does now is what data_samples/engine_truth/
llamacpp-b11434.json recorded (the outcome, the stage, the root error up to its first colon, the accept
length within 0.05 and the target's own tokens), and the doctor's predicted outcome holds for it. Skips
without .venv-llamacpp (`make engine-env`) unless D2T_REQUIRE_ENGINE=1.
"""
from __future__ import annotations

import json

import pytest

from conftest import SAMPLES, script_module

pytestmark = pytest.mark.engine

TABLE = json.loads((SAMPLES / "engine_truth" / "llamacpp-b11434.json").read_text())
RECORDED = {r["case"]: r for r in TABLE["rows"]}
CASES = ["healthy", "d2t-absolute", "d2t-missing", "d2t-zeros", "fc-norm-flag-no-keys", "aux-ids-top-four",
         "kimi-healthy", "gguf-d2t-offsets"]


@pytest.fixture(scope="module")
def live(llamacpp, tmp_path_factory):
    et = script_module("engine_truth")
    work = tmp_path_factory.mktemp("truth-llamacpp")
    rows = {r["case"]: r for r in et.run_llamacpp(work / "table.json", CASES, work)}
    folders = et.make_llamacpp(work / "doctor", [c for c in CASES if not c.startswith("gguf-")])
    return et, rows, et.doctor_predictions(folders, et.LLAMACPP_SPEC)


def _root(error: str | None) -> str:
    return (error or "").split(":", 1)[0]


@pytest.mark.parametrize("case", CASES)
def test_llamacpp_does_what_the_table_and_the_doctor_say(live, case):
    et, rows, predicted = live
    row, want = rows[case], RECORDED[case]
    assert (row["outcome"], row["stage"]) == (want["outcome"], want["stage"]), (row.get("error"), want.get("error"))
    if row["outcome"] == "serves":
        assert row["accept_length"] == pytest.approx(want["accept_length"], abs=0.05)
        assert row["matches_target"] and row["output_digest"] == want["output_digest"]
    else:
        assert _root(row["error"]) == _root(want["error"]), (row["error"], want["error"])
    if case in predicted:
        ok, why = et.agrees(predicted[case], row, et.healthy_accept(TABLE["rows"], case))
        assert ok, why
