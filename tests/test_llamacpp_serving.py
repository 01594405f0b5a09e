"""llama.cpp as a serving source: its /metrics counters, its log lines and `probe` against llama-server.

Without the engine: a small HTTP server replays what a real llama-server b11434 answered
(data_samples/engine_runs/llamacpp-b11434/replay.json, recorded with its log and /metrics page by
scripts/record_llamacpp_serving.py), and `metrics`, `logs` and `probe` must give the server's own
counters exactly: accept length 1 + accepted / drafts (drafts = verify steps that carried a draft).
With the engine (`make test-engine`, marked `engine`): a real llama-server started here.
"""
from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

import pytest

from conftest import LoopbackServer, SAMPLES


REPLAY = json.loads((SAMPLES / "engine_runs" / "llamacpp-b11434" / "replay.json").read_text())
LOG, INFO_LOG = SAMPLES / "logs" / "llamacpp.log", SAMPLES / "logs" / "llamacpp_info.log"
METRICS = SAMPLES / "metrics" / "llamacpp_metrics.txt"
TARGET = SAMPLES / "engine_llama" / "target"
C = REPLAY["counters"]  # what the recording's /metrics said: drafts, draft tokens, accepted, per position
DRAFTS, ACCEPTED = C["num_drafts"], C["num_accepted_tokens"]
SERVED = 1 + ACCEPTED / DRAFTS


def _json(res):
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


# -- a replay of the recorded llama-server -------------------------------------------------------------
class Replay(LoopbackServer):
    """GET /health, /props, /v1/models, /metrics and POST /completion as the recorded server answered
    them. /metrics: the page before the run until every recorded prompt has been answered (or, with
    `after_scrapes`, until that many scrapes), the page after it then. `api_key`: llama-server's check
    (every path but /health)."""

    def __init__(self, metrics_after: str | None = None, api_key: str | None = None, after_scrapes: int | None = None):
        self.answers = {json.dumps(c["prompt"]): c["answer"] for c in REPLAY["completions"]}
        self.after = metrics_after or REPLAY["metrics_after"]
        self.api_key, self.after_scrapes = api_key, after_scrapes
        self.answered, self.scrapes = set(), 0
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status, body, ctype="application/json; charset=utf-8"):
                raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _allowed(self):
                if replay.api_key is None or self.path == "/health":
                    return True
                if self.headers.get("Authorization", "") == f"Bearer {replay.api_key}":
                    return True
                self._send(401, {"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}})
                return False

            def do_GET(self):
                if not self._allowed():
                    return
                if self.path == "/health":
                    return self._send(200, {"status": "ok"})
                if self.path == "/props":
                    return self._send(200, REPLAY["props"])
                if self.path == "/v1/models":
                    return self._send(200, REPLAY["models"])
                if self.path == "/metrics":
                    replay.scrapes += 1
                    done = (replay.scrapes > replay.after_scrapes if replay.after_scrapes is not None
                            else len(replay.answered) == len(replay.answers))
                    return self._send(200, replay.after if done else REPLAY["metrics_before"],
                                      "text/plain; version=0.0.4")
                self._send(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})

            def do_POST(self):
                if not self._allowed():
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path != "/completion":
                    return self._send(404, {"error": {"code": 404, "message": "File Not Found"}})
                key = json.dumps(body.get("prompt"))
                if key not in replay.answers:
                    return self._send(400, {"error": {"code": 400, "message": "not a recorded prompt"}})
                replay.answered.add(key)
                self._send(200, replay.answers[key])

        self.serve(Handler)


# -- /metrics ------------------------------------------------------------------------------------------
def test_the_recorded_metrics_page_reads_as_the_servers_counters(cli):
    out = _json(cli("metrics", METRICS, "--json"))
    row = out["reading"]["rows"][0]
    assert out["kind"] == "llamacpp-prometheus" and out["reading"]["missing"] == []
    assert (row["drafts"], row["draft_tokens"], row["accepted"]) == (DRAFTS, C["num_draft_tokens"], ACCEPTED)
    assert row["accepted_per_pos"] == C["per_pos"]
    assert out["accept_length"] == SERVED  # 1 + accepted / drafts, llama.cpp's own
    assert out["per_position_unconditional"] == [p / DRAFTS for p in C["per_pos"]]
    assert out["source_rate"] == ACCEPTED / C["num_draft_tokens"]
    assert out["drafting"] == "chain, 3 tokens"  # the positions the counters report


def test_metrics_bounds_and_rounded_counters(tmp_path, cli):
    text = METRICS.read_text()
    bad = tmp_path / "bad.txt"  # more accepted than drafted: out of bounds, named, not counted
    bad.write_text(text.replace(f"num_accepted_tokens_total {ACCEPTED}", "num_accepted_tokens_total 9999"))
    res = cli("metrics", bad, "--json")
    assert res.returncode == 2 and "no figure within bounds" in res.stderr and "9999" in res.stderr
    big = tmp_path / "big.txt"  # llama.cpp prints its counters as C++ doubles: 6 significant digits
    big.write_text(text.replace(f"num_drafts_total {DRAFTS}", "num_drafts_total 1.23457e+06")
                   .replace(f"num_draft_tokens_total {C['num_draft_tokens']}", "num_draft_tokens_total 3.70371e+06")
                   .replace(f"num_accepted_tokens_total {ACCEPTED}", "num_accepted_tokens_total 2.4e+06"))
    out = _json(cli("metrics", big, "--json"))
    assert out["accept_length"] == 1 + 2.4e6 / 1.23457e6
    assert any("six significant digits" in n and "not exact" in n for n in out["notes"])


def test_metrics_url_interval_differences_llamacpps_counters(cli):
    # the first scrape is the fresh server's page: no per-position lines until a draft was verified
    assert "per_pos" not in REPLAY["metrics_before"]
    with Replay(after_scrapes=1) as server:
        out = _json(cli("metrics", server.url, "--interval", "0.1", "--json"))
    row = out["reading"]["rows"][0]
    assert out["kind"] == "llamacpp-prometheus" and row["label"] is not None
    assert (row["drafts"], row["accepted"], row["accepted_per_pos"]) == (DRAFTS, ACCEPTED, C["per_pos"])
    assert out["accept_length"] == SERVED and out["reading"]["interval_s"] > 0


# -- the log -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("log", [LOG, INFO_LOG], ids=["lv4", "info"])
def test_the_real_log_pools_to_the_same_runs_counters(log, cli):
    out = _json(cli("logs", log, "--json"))
    rows = out["rows"]
    assert out["engines"] == ["llamacpp"] and out["garbled"] == 0 and len(rows) == len(REPLAY["completions"])
    assert {r["format"] for r in rows} == {"llamacpp-mean-len"}
    assert out["verify_steps"]["exact"] == len(rows) and out["verify_steps"]["pooled_exact"]
    # `generated` is draft tokens, as the counters' num_draft_tokens
    assert sum(r["drafted"] for r in rows) == C["num_draft_tokens"] and sum(r["accepted"] for r in rows) == ACCEPTED
    assert sum(r["drafts"] for r in rows) == DRAFTS and all(float(r["drafts"]).is_integer() for r in rows)
    assert out["pooled_accept_length"] == SERVED
    m = _json(cli("metrics", log, "--json"))
    assert m["kind"] == "llamacpp-log" and m["accept_length"] == SERVED
    if log == LOG:  # -lv 4: `acc per pos` lines, pooled as the counters pool them
        assert all(r["per_position"] for r in rows) and out["context"] == len(rows)
        assert m["per_position_unconditional"] == [p / DRAFTS for p in C["per_pos"]]
    text = cli("logs", log).stdout
    assert f"pooled {SERVED:.4f}" in text and "exact for all 16 requests" in text


def test_steps_the_log_cannot_give_are_named_not_guessed(tmp_path, cli):
    head = "0.00.1 I slot print_timing: id  0 | task {t} | "
    log = tmp_path / "llamacpp.log"
    log.write_text("\n".join([
        head.format(t=1) + "draft acceptance = 0.71429 (   20 accepted /    28 generated), mean len =  3.00",
        head.format(t=1) + "     acc per pos = (0.800, 0.700, 0.500)",
        head.format(t=2) + "draft acceptance = 0.00000 (    0 accepted /    30 generated), mean len =  1.00",
        head.format(t=3) + "draft acceptance = 0.50000 ( 1000 accepted /  2000 generated), mean len =  2.50",
    ]) + "\n")
    out = _json(cli("logs", log, "--json"))
    r1, r2, r3 = out["rows"]
    assert (r1["drafts"], r1["steps_exact"]) == (10, True)
    assert r2["drafts"] is None and r2["steps_exact"] is False  # mean 1.00: any number of steps
    assert r3["steps_exact"] is False and r3["drafts"] == pytest.approx(1000 / 1.5)  # 666 and 667 both print 2.50
    v = out["verify_steps"]
    assert (v["exact"], v["inexact"], v["unknown"], v["pooled_exact"]) == (1, 1, 1, False)
    assert "NOT exactly llama-server's counters" in cli("logs", log).stdout
    notes = _json(cli("metrics", log, "--json"))["notes"]
    assert any("accepted no draft token" in n for n in notes) and any("not exact" in n for n in notes)


def test_acc_per_pos_narrows_the_steps_the_mean_allows(tmp_path, cli):
    # 1 + 1000 / s prints 2.50 for s = 666 and 667; the per-position rates name 666 (400, 340, 260 / 666)
    head = "0.00.1 I slot print_timing: id  0 | task 1 | "
    log = tmp_path / "llamacpp.log"
    line = head + "draft acceptance = 0.50000 ( 1000 accepted /  2000 generated), mean len =  2.50"
    log.write_text(line + "\n")
    assert _json(cli("logs", log, "--json"))["rows"][0]["steps_exact"] is False
    log.write_text(line + "\n" + head + "     acc per pos = (0.601, 0.511, 0.390)\n")
    row = _json(cli("logs", log, "--json"))["rows"][0]
    assert (row["drafts"], row["steps_exact"]) == (666, True)


# -- probe ---------------------------------------------------------------------------------------------
def test_probe_gives_the_servers_own_counters(cli):
    with Replay() as server:
        out = _json(cli("probe", server.url, "--target", TARGET, "--json"))
        assert len(server.answered) == len(REPLAY["completions"])  # the recorded prompts, token for token
    assert out["engine"] == "llamacpp" and out["endpoint"] == "/completion" and out["source"] == "metrics"
    assert out["accept_length"] == SERVED and out["metrics_accept_length"] == SERVED
    c = out["counters"]
    assert (c["drafts"], c["draft_tokens"], c["accepted"], c["accepted_per_pos"]) == (
        DRAFTS, C["num_draft_tokens"], ACCEPTED, C["per_pos"])
    agree = out["agreement"]
    assert agree["agree"] and agree["per_request"] == {"draft_tokens": C["num_draft_tokens"], "accepted": ACCEPTED}
    assert out["per_position"] == [p / DRAFTS for p in C["per_pos"]]
    assert out["drafting"]["shape"] == "chain, 3 tokens" and out["findings"] == []
    assert [q["drafted"] for q in out["requests"]] == [c["answer"]["timings"]["draft_n"] for c in REPLAY["completions"]]
    assert all(q["accept_length"] is None and q["output_ids"] for q in out["requests"])  # no steps per request
    assert out["target_check"]["verdict"] == "identical"


def test_probe_names_other_traffic_and_never_averages_it(cli):
    after = REPLAY["metrics_after"]
    for name, extra in (("num_drafts_total", 5), ("num_draft_tokens_total", 15), ("num_accepted_tokens_total", 9)):
        value = C[{"num_drafts_total": "num_drafts", "num_draft_tokens_total": "num_draft_tokens",
                   "num_accepted_tokens_total": "num_accepted_tokens"}[name]]
        after = after.replace(f"llamacpp:spec_decode_{name} {value}\n", f"llamacpp:spec_decode_{name} {value + extra}\n")
    with Replay(metrics_after=after) as server:
        out = _json(cli("probe", server.url, "--target", TARGET, "--max-prompts", "16", "--json"))
    assert out["accept_length"] == 1 + (ACCEPTED + 9) / (DRAFTS + 5)  # the counters', as the server counted
    assert out["agreement"]["agree"] is False and "other traffic" in out["agreement"]["why"]
    assert any("other traffic" in f for f in out["findings"])


def test_probe_sends_the_api_key(cli):
    with Replay(api_key="s3cret") as server:
        res = cli("probe", server.url, "--target", TARGET, "--max-prompts", "2")
        assert res.returncode == 2 and "--api-key" in res.stderr
        res = cli("probe", server.url, "--target", TARGET, "--api-key", "wrong")
        assert res.returncode == 2 and "refused the API key" in res.stderr
        out = _json(cli("probe", server.url, "--target", TARGET, "--api-key", "s3cret", "--json"))
    assert out["accept_length"] == SERVED


# -- the real engine (make test-engine) ----------------------------------------------------------------
@pytest.mark.engine
def test_probe_and_log_equal_a_real_llama_servers_counters(llamacpp, llamacpp_pair, tmp_path, cli):
    log = tmp_path / "llama-server.log"
    with llamacpp.Server(llamacpp_pair["target"], llamacpp_pair["draft"], n_max=3, verbosity=4,
                         log_path=log) as server:
        started = server.start()
        assert started.started, f"llama-server did not start: {started.error}\n" + "\n".join(started.log_tail)
        out = _json(cli("probe", server.url, "--target", llamacpp_pair["hf"] / "target", "--json"))
        counters = llamacpp.spec_counters(server)
    # a fresh server: its counters are the probe's run
    assert counters["num_drafts"] > 0
    served = 1 + counters["num_accepted_tokens"] / counters["num_drafts"]
    assert out["engine"] == "llamacpp" and out["accept_length"] == served
    assert out["agreement"]["agree"], out["agreement"]
    assert out["counters"]["accepted_per_pos"] == counters["per_pos"]
    logs = _json(cli("logs", log, "--json"))
    assert logs["verify_steps"]["pooled_exact"], logs["verify_steps"]
    assert logs["pooled_accept_length"] == served
