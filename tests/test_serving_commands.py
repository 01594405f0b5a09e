"""Serving commands: forced acceptance is never evidence, an EAGLE-3 draft run as EAGLE is
flagged, llama.cpp's lines and vLLM's per-request answers read, fork fields are skipped.

Fixtures: tests/fixtures/serving/ (README.md names the engine source file of each format).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from conftest import JSONHandler, LoopbackServer, SAMPLES

ROOT = Path(__file__).resolve().parents[1]
F = ROOT / "tests" / "fixtures" / "serving"
RECORDED = json.loads((ROOT / "tests" / "fixtures" / "probe_vllm_0.32.json").read_text())
TARGET = SAMPLES / "engine_llama" / "target"
DRAFT = SAMPLES / "engine_llama" / "draft"  # an EAGLE-3 draft (fc takes 3 x hidden)

SGL_FORCED = F / "sglang_0.5.23_simulated.log"
SGL_EAGLE = F / "sglang_0.5.23_eagle_flag.log"
SGL_PLAIN = F / "sglang_0.5.23_not_simulated.log"
VLLM_FORCED = F / "vllm_0.34.0_synthetic.log"
VLLM_EAGLE = F / "vllm_0.34.0_eagle_method.log"
FORK = F / "vllm_fork_extra_fields.log"
LLAMA = F / "llamacpp_server.log"
INFO_FORCED = F / "vllm_0.34.0_server_info_synthetic.json"
ANSWERS = F / "vllm_0.34.0_answers.jsonl"


def _json(res):
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _one_line(res) -> str:
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1, res.stdout
    return lines[0]


# -- forced acceptance: one line, no figure ------------------------------------------------------------
@pytest.mark.parametrize("log, setting, line", [
    (SGL_FORCED, "SGLANG_SIMULATE_ACC_LEN=3.0", 2),
    (VLLM_FORCED, "rejection_sample_method=synthetic", 2),
])
def test_logs_of_a_forced_server_give_one_line_and_no_figure(cli, tmp_path, log, setting, line):
    text = _one_line(cli("logs", log, "--plot", tmp_path / "a.png"))
    assert setting in text and f"line {line}" in text and "no conclusion" in text
    assert "accept length" not in text.split("forced acceptance")[0] and "mean" not in text
    assert not (tmp_path / "a.png").exists() and "no plot written" in text
    out = _json(cli("logs", log, "--json"))
    assert out["forced_acceptance"]["setting"] == setting and out["forced_acceptance"]["line"] == line
    assert out["forced_acceptance"]["where"] == str(log)
    for key in ("mean_accept_length", "pooled_accept_length", "last_accept_length", "mean_accept_rate", "conversion"):
        assert out[key] is None, key
    assert out["rows"] == [] and out["parsed"] >= 2  # read, counted, not concluded from
    assert out["mean_throughput"] > 0  # what a forced run does measure: the system's speed


def test_the_same_lines_without_the_setting_are_read_as_usual(cli, tmp_path):
    """Control: the forced log's lines with its setting line dropped conclude as any log does."""
    plain = tmp_path / "plain.log"
    plain.write_text("".join(x for x in SGL_FORCED.read_text().splitlines(keepends=True) if "SIMULATE" not in x))
    out = _json(cli("logs", plain, "--json"))
    assert out["forced_acceptance"] is None and out["mean_accept_length"] == pytest.approx(3.0)
    assert len(out["rows"]) == 3 and out["conversion"]["per_token_rate"] is not None


def test_a_setting_at_its_default_or_named_in_an_engine_error_is_not_forced(cli, tmp_path):
    out = _json(cli("logs", SGL_PLAIN, "--json"))  # SGLANG_SIMULATE_ACC_LEN=-1: off
    assert out["forced_acceptance"] is None and out["mean_accept_length"] == pytest.approx(2.39)
    err = tmp_path / "err.log"
    err.write_text("ValueError: synthetic_acceptance_rates / synthetic_acceptance_length are only valid with "
                   "rejection_sample_method='synthetic'.\n" + FORK.read_text())
    assert _json(cli("logs", err, "--json"))["forced_acceptance"] is None


@pytest.mark.parametrize("command, setting", [
    ("SGLANG_SIMULATE_ACC_LEN=2.5 python -m sglang.launch_server --model-path m", "SGLANG_SIMULATE_ACC_LEN=2.5"),
    ("TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS=2 trtllm-serve m --config spec.yaml",
     "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS=2"),
    ("python3 -m atom.entrypoints.openai_server --method eagle3 --spec-decode-acceptance-length 3.51",
     "--spec-decode-acceptance-length 3.51"),
    ("""vllm serve m --speculative-config '{"method": "eagle3", "model": "d", "num_speculative_tokens": 3, """
     """"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5}'""", "rejection_sample_method=synthetic"),
])
def test_metrics_page_with_a_forcing_launch_command(cli, command, setting):
    page = SAMPLES / "metrics" / "vllm_metrics.txt"
    text = _one_line(cli("metrics", page, "--launch-command", command))
    assert setting in text and "(--launch-command)" in text and "no conclusion" in text
    out = _json(cli("metrics", page, "--launch-command", command, "--json"))
    assert out["forced_acceptance"]["setting"] == setting and out["forced_acceptance"]["line"] is None
    assert out["accept_length"] is None and out["per_token_rate"] is None and out["reading"]["rows"] == []
    # control: the same page without the command gives its figure
    plain = _json(cli("metrics", page, "--json"))
    assert plain["forced_acceptance"] is None and plain["accept_length"] == pytest.approx(2.66)


def test_metrics_of_a_forced_log_and_of_vllm_server_info(cli, tmp_path):
    text = _one_line(cli("metrics", VLLM_FORCED))
    assert "rejection_sample_method=synthetic" in text and "line 2" in text
    out = _json(cli("metrics", INFO_FORCED, "--json"))
    assert out["kind"] == "vllm-server-info" and out["forced_acceptance"]["setting"] == "rejection_sample_method=synthetic"
    assert out["accept_length"] is None
    standard = json.loads(INFO_FORCED.read_text())
    standard["vllm_config"]["speculative_config"]["rejection_sample_method"] = "standard"
    (tmp_path / "info.json").write_text(json.dumps(standard))
    res = cli("metrics", tmp_path / "info.json")
    assert res.returncode == 2 and "states the server's settings, no acceptance figure" in res.stderr


def test_report_refuses_a_forced_log_before_any_notebook(cli, tmp_path):
    res = cli("report", DRAFT, "-o", tmp_path / "out", "--log", SGL_FORCED)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "SGLANG_SIMULATE_ACC_LEN=3.0" in lines[0] and "drop this --log" in lines[0]
    assert not (tmp_path / "out").exists()


def test_the_evidence_ladder_takes_no_figure_from_a_forced_log():
    from helpers.serving.measured import serving_figure
    from helpers.ui.settings import RunSettings

    assert serving_figure([SGL_FORCED], RunSettings()) is None
    fig = serving_figure([SGL_PLAIN], RunSettings())
    assert fig is not None and fig.value == pytest.approx(2.39)


# -- the wrong algorithm ----------------------------------------------------------------------------
@pytest.mark.parametrize("log, value, engine", [(SGL_EAGLE, "EAGLE", "sglang"), (VLLM_EAGLE, "eagle", "vllm")])
def test_an_eagle3_draft_run_as_eagle_is_flagged_from_the_log(cli, log, value, engine):
    out = _json(cli("logs", log, "--json"))
    (f,) = out["findings"]
    assert f["code"] == "eagle3-as-eagle" and f["severity"] == "error"
    assert f["algorithm"] == {"value": value, "engine": engine, "where": str(log), "line": 2}
    assert "EAGLE3" in f["eagle3"]["evidence"] and "eagle3" in f["fix"]
    text = cli("logs", log).stdout
    assert "finding: eagle3-as-eagle (error)" in text and f"'{value}'" in text


def test_no_finding_with_the_eagle3_algorithm(cli):
    for log in (SGL_PLAIN, FORK):
        out = _json(cli("logs", log, "--json"))
        assert out["findings"] == [] and out["speculative_algorithm"]["algorithm"]["value"].lower() == "eagle3"
        assert out["speculative_algorithm"]["eagle3"] is not None  # the draft is EAGLE-3 and run as EAGLE-3


def test_with_the_checkpoint_the_doctors_own_finding_is_given(cli, tmp_path):
    from helpers.doctor.diagnose import diagnose

    doctor = [f for f in diagnose(DRAFT, check_weights=False, algorithm="eagle") if f.code == "eagle3-as-eagle"]
    assert len(doctor) == 1
    # a log naming no EAGLE-3 draft at all: only the checkpoint can tell
    log = tmp_path / "eagle.log"
    log.write_text(SGL_EAGLE.read_text().replace("jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B", "/models/draft"))
    assert _json(cli("logs", log, "--json"))["findings"] == []
    out = _json(cli("logs", log, "--checkpoint", DRAFT, "--json"))
    (f,) = out["findings"]
    assert (f["code"], f["message"], f["fix"]) == ("eagle3-as-eagle", doctor[0].message, doctor[0].fix)
    assert f["algorithm"]["line"] == 2
    text = cli("logs", log, "--checkpoint", DRAFT).stdout
    assert doctor[0].message in text and "[algorithm 'EAGLE' at " in text


def test_the_report_prints_the_finding_before_the_notebooks():
    from helpers.ui.report import serving_inputs

    lines = serving_inputs([str(SGL_EAGLE), str(SGL_PLAIN)], None, str(DRAFT))
    assert lines[0] == f"{SGL_EAGLE}:" and "eagle3-as-eagle (error)" in lines[1] and len(lines) == 2


# -- llama.cpp, forks, per-request answers -------------------------------------------------------------
def test_llamacpp_lines_in_each_form(cli):
    out = _json(cli("logs", LLAMA, "--json"))
    rows = out["rows"]
    assert out["engines"] == ["llamacpp"] and out["garbled"] == 0 and len(rows) == 4
    assert [r["format"] for r in rows] == ["llamacpp", "llamacpp-mean-len", "llamacpp-old", "llamacpp-old"]
    first, second = rows[0], rows[1]
    assert (first["accepted"], first["drafted"], first["accept_length"]) == (167, 259, 2.92)
    assert first["accept_rate"] == pytest.approx(167 / 259, abs=1e-5)
    assert first["drafts"] == 87 and first["per_position"] == [0.805, 0.632, 0.483]  # 1 + 167/87 = 2.92
    assert second["drafts"] == 80 and second["per_position"] == [0.7, 0.5, 0.3]  # from the trace line after it
    assert rows[2]["accept_length"] is None and rows[2]["drafts"] is None
    assert out["pooled_accept_length"] == pytest.approx(1 + (167 + 120) / (87 + 80))
    assert out["unrecognised"] == 5  # the statistics line is cumulative: not a row
    metrics = _json(cli("metrics", LLAMA, "--json"))
    assert [r["drafts"] for r in metrics["reading"]["rows"]] == [87, 80, None, None]
    # metrics pools the same counters as logs: 1 + accepted / verify steps over the lines that have them
    assert metrics["accept_length"] == pytest.approx(out["pooled_accept_length"])


def test_a_garbled_llamacpp_line_is_counted_not_guessed(tmp_path, cli):
    bad = tmp_path / "bad.log"
    bad.write_text(LLAMA.read_text().replace("0.64479 (  167", "0.74479 (  167"))
    out = _json(cli("logs", bad, "--json"))
    assert out["garbled"] == 1 and "not accepted / generated" in out["garbled_lines"][0]["reason"]
    assert len(out["rows"]) == 3


def test_fork_fields_are_skipped_and_the_known_ones_read(cli, tmp_path):
    out = _json(cli("logs", FORK, "--json"))
    assert out["garbled"] == 0 and out["parsed"] == 3 and out["cut"] == 0
    assert [r["drafts"] for r in out["rows"]] == [378, 200, 200]
    assert out["pooled_accept_length"] == pytest.approx(1 + (612 + 300 + 200) / (378 + 200 + 200))
    # the same counts without the fork's fields read the same
    plain = tmp_path / "plain.log"
    text = FORK.read_text()
    for extra in (", Draft steps: 378", ", Verify latency: 1.20 ms, Draft model: eagle3-llama", "Method: eagle3, "):
        assert extra in text
        text = text.replace(extra, "")
    plain.write_text(text)
    assert _json(cli("logs", plain, "--json"))["pooled_accept_length"] == out["pooled_accept_length"]


def test_sglang_0_5_23_fields_beside_the_known_ones(cli):
    out = _json(cli("logs", SGL_PLAIN, "--json"))
    assert out["garbled"] == 0 and [r["queue_req"] for r in out["rows"]] == [0, 0]
    assert [r["cuda_graph"] for r in out["rows"]] == [True, False]  # `musa graph: False` read as the graph flag


def test_vllm_answers_with_per_request_metrics(cli, tmp_path):
    lines = [json.loads(x) for x in ANSWERS.read_text().splitlines()]
    spec = [x["metrics"]["speculative_decoding"] for x in lines]
    out = _json(cli("metrics", ANSWERS, "--json"))
    assert out["kind"] == "vllm-requests" and out["reading"]["garbled"] == 0
    assert out["accept_length"] == pytest.approx(1 + sum(s["num_accepted_draft_tokens"] for s in spec)
                                                 / sum(s["num_spec_steps"] for s in spec))
    steps = sum(s["num_spec_steps"] for s in spec)
    reached = [sum(x >= j + 1 for s in spec for x in s["per_step_accepted"]) / steps for j in range(3)]
    assert out["per_position_unconditional"] == pytest.approx(reached)
    # the recorded vLLM 0.32 answers give the recorded server's counters (202 steps, 294 accepted)
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDED["responses"]))
    assert _json(cli("metrics", tmp_path / "a.jsonl", "--json"))["accept_length"] == pytest.approx(1 + 294 / 202)
    # a histogram that does not count num_spec_steps is garbled, the rest read
    bad = copy.deepcopy(lines)
    bad[0]["metrics"]["speculative_decoding"]["num_spec_steps"] += 1
    (tmp_path / "bad.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bad))
    out = _json(cli("metrics", tmp_path / "bad.jsonl", "--json"))
    assert out["reading"]["garbled"] == 1 and out["reading"]["parsed"] == 2


# -- probe ----------------------------------------------------------------------------------------------
class Server(LoopbackServer):
    """127.0.0.1:0 answering as vLLM in dev mode (/server_info, text and JSON) or as SGLang (/get_server_info,
    /generate with meta_info built from the recorded vLLM answers). Counts the POSTs it got."""

    def __init__(self, mode: str, info: dict | None = None):
        self.mode, self.info, self.posts = mode, info, 0
        by_ids = {tuple(i): r for i, r in zip(RECORDED["ids"], RECORDED["responses"])}
        srv = self

        class Handler(JSONHandler):
            def do_GET(self):  # noqa: N802
                vllm = srv.mode == "vllm"
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": "target", "owned_by": "vllm" if vllm else "sglang"}]})
                elif self.path == "/metrics":
                    self._send(200, "\n".join(RECORDED["metrics"]) + "\n" if vllm else
                               "sglang:spec_accept_length{model_name=\"target\"} 1.0\n", "text/plain")
                elif vllm and self.path == "/server_info":  # text form: str(vllm_config)
                    self._send(200, {"vllm_config": "model='target', speculative_config=SpeculativeConfig(method='eagle3', "
                                     "model='d', num_spec_tokens=3), tokenizer='target'", "vllm_env": {}, "system_env": {}})
                elif vllm and self.path == "/server_info?config_format=json":
                    self._send(200, srv.info)
                elif not vllm and self.path == "/get_server_info":
                    self._send(200, srv.info)
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self):  # noqa: N802
                srv.posts += 1
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if srv.mode == "sglang" and self.path == "/generate":
                    r = by_ids[tuple(body["input_ids"])]
                    s, c = r["metrics"]["speculative_decoding"], r["choices"][0]
                    self._send(200, {"text": c["text"], "output_ids": c["token_ids"], "meta_info": {
                        "completion_tokens": len(c["token_ids"]), "spec_verify_ct": s["num_spec_steps"],
                        "spec_num_correct_drafts": s["num_accepted_draft_tokens"],
                        "spec_correct_drafts_histogram": s["acceptance_histogram"], "finish_reason": {"type": "length"}}})
                else:
                    self._send(500, {"error": {"message": "no request expected"}})

        self.serve(Handler)


SGL_INFO = {"speculative_algorithm": "EAGLE", "speculative_draft_model_path": "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B",
            "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
            "internal_states": [{"avg_spec_accept_length": 1.0}], "version": "0.5.23"}


def test_probe_of_a_vllm_server_reporting_synthetic_acceptance_sends_nothing(cli, tmp_path):
    info = json.loads(INFO_FORCED.read_text())
    with Server("vllm", info) as s:
        text = _one_line(cli("probe", s.url))
        out = _json(cli("probe", s.url, "--json", "-o", tmp_path / "p.json"))
        posts = s.posts
    assert posts == 0  # no request was sent
    assert "rejection_sample_method=synthetic" in text and f"{s.url}/server_info" in text and "no conclusion" in text
    assert out["engine"] == "vllm" and out["forced_acceptance"]["where"] == f"{s.url}/server_info"
    assert out["accept_length"] is None and out["conclusion"] is None and out["requests"] == []
    assert out["speculative_algorithm"]["algorithm"]["value"] == "eagle3"
    assert json.loads((tmp_path / "p.json").read_text()) == out
    # control: the standard sampler is not forced: the probe goes on to send its requests
    info["vllm_config"]["speculative_config"]["rejection_sample_method"] = "standard"
    with Server("vllm", info) as s:
        res = cli("probe", s.url, "--max-prompts", "1")
        assert s.posts == 1
    assert "forced acceptance" not in res.stdout + res.stderr


def test_probe_with_a_forcing_launch_command_or_log(cli):
    with Server("sglang", dict(SGL_INFO, speculative_algorithm="EAGLE3")) as s:
        text = _one_line(cli("probe", s.url, "--launch-command", "SGLANG_SIMULATE_ACC_LEN=3 python -m sglang.launch_server"))
        by_log = _json(cli("probe", s.url, "--log", SGL_FORCED, "--json"))
        assert s.posts == 0
    assert "SGLANG_SIMULATE_ACC_LEN=3 (--launch-command)" in text
    assert by_log["forced_acceptance"]["line"] == 2 and by_log["engine"] == "sglang"


def test_probe_flags_an_eagle3_draft_the_server_runs_as_eagle(cli):
    with Server("sglang", SGL_INFO) as s:
        out = _json(cli("probe", s.url, "--target", TARGET, "--max-prompts", "2", "--json"))
    (f,) = out["serving_findings"]
    assert f["code"] == "eagle3-as-eagle" and f["algorithm"]["where"].endswith("/get_server_info")
    assert any(x.startswith("eagle3-as-eagle: the server ran speculative algorithm 'EAGLE'") for x in out["findings"])
    assert out["accept_length"] is not None and out["forced_acceptance"] is None  # measured as usual
    with Server("sglang", dict(SGL_INFO, speculative_algorithm="EAGLE3")) as s:
        out = _json(cli("probe", s.url, "--target", TARGET, "--max-prompts", "2", "--json"))
    assert out["serving_findings"] == [] and not any("eagle3-as-eagle" in x for x in out["findings"])
