"""The bundled real vLLM runs (data_samples/engine_runs/vllm-0.32.0, scripts/record_engine_runs.py)
read by the kit: its log reader, its metrics reader and the per-request answers give the engine's
own accept length, one number three ways; the refused and crashed runs carry the engine's errors
that the doctor predicts."""
from __future__ import annotations

import json

import pytest

from conftest import SAMPLES

RUNS = SAMPLES / "engine_runs" / "vllm-0.32.0"


def _info(run: str) -> dict:
    return json.loads((RUNS / run / "run.json").read_text())


@pytest.mark.parametrize("run", ["healthy", "d2t-missing", "prefix-model", "d2t-absolute"])
def test_each_run_is_labelled_real_with_its_command(run):
    info = _info(run)
    assert info["real"] is True and info["engine"] == "vllm" and info["release"] == "0.32.0"
    assert "python -m vllm.entrypoints.openai.api_server" in info["command"]
    assert "vLLM" in (RUNS / run / "server.log").read_text() and "version 0.32.0" in (RUNS / run / "server.log").read_text()
    assert "/work/" not in (RUNS / run / "server.log").read_text()  # no path of the machine that made it


@pytest.mark.parametrize("run, expect", [("healthy", 2.4), ("d2t-missing", 1.0)])
def test_log_metrics_and_answers_give_one_accept_length(run, expect, cli):
    answers = [json.loads(line) for line in (RUNS / run / "responses.jsonl").read_text().splitlines()]
    spec = [a["metrics"]["speculative_decoding"] for a in answers]
    per_request = 1 + sum(s["num_accepted_draft_tokens"] for s in spec) / sum(s["num_spec_steps"] for s in spec)
    log = json.loads(cli("logs", str(RUNS / run / "server.log"), "--json").stdout)
    metrics = json.loads(cli("metrics", str(RUNS / run / "metrics.txt"), "--json").stdout)
    assert log["drafting"]["steps"] == 3 and log["parsed"] >= 1
    assert log["pooled_accept_length"] == pytest.approx(per_request, abs=1e-9)
    assert metrics["accept_length"] == pytest.approx(per_request, abs=1e-9)
    assert per_request == pytest.approx(_info(run)["accept_length"], abs=1e-4)
    assert per_request == pytest.approx(expect, abs=0.1)


def test_the_unserved_runs_hold_the_errors_the_doctor_predicts(tmp_path):
    from conftest import script_module
    from helpers.doctor.diagnose import diagnose

    et = script_module("engine_truth")
    copies = et.make(tmp_path, ["prefix-model", "d2t-absolute"])
    for run, result in (("prefix-model", "refuses"), ("d2t-absolute", "crashes")):
        info = _info(run)
        assert info["started"] is (result == "crashes") and info["error"]
        pred = diagnose(copies[run], "vllm==0.32.0", et.TARGET / "config.json").predicted_outcome()["vllm"]
        assert pred["result"] == result and pred["says"] in info["error"]
        assert pred["says"] in (RUNS / run / "server.log").read_text()


def test_notebook_08s_table_of_the_real_runs():
    from helpers.ui.checkpoint_debug import engine_runs_table

    t = engine_runs_table(RUNS).set_index("run")
    assert list(t.index) == ["d2t-absolute", "d2t-missing", "healthy", "prefix-model"]
    assert t.loc["healthy", "log (pooled)"] == pytest.approx(t.loc["healthy", "/metrics"], abs=1e-9)
    assert t.loc["healthy", "answers"] == pytest.approx(t.loc["healthy", "/metrics"], abs=1e-9) and t.loc["healthy", "answers"] > 2
    assert t.loc["d2t-missing", "answers"] == pytest.approx(1.0, abs=0.01)
    assert not t.loc["prefix-model", "started"] and "IndexError" in t.loc["d2t-absolute", "engine's error"]
