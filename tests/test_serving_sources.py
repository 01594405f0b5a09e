"""Reliability, fourth round: every serving source through the same bounds and identity checks, the
sources cross-checked, each server start its own run, each bound following the algorithm.

Every server here is a real HTTP server on 127.0.0.1 (`http.server`) serving crafted /v1/models,
/metrics pages and answers (the vLLM answers are the recorded vLLM 0.32 ones of
tests/fixtures/probe_vllm_0.32.json, altered where a case needs it). The pages a server gives are
chosen by how many times /metrics was scraped or how many requests were answered, never by the
clock, so a busy machine gives the same result.
"""
from __future__ import annotations

import copy
import json
import threading
from pathlib import Path

import pytest

from conftest import JSONHandler, LoopbackServer, SAMPLES

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "probe_vllm_0.32.json").read_text())
TARGET = SAMPLES / "engine_llama" / "target"


def _page(drafts, draft_tokens, accepted, per_pos, model="target", prefix="vllm") -> str:
    lab = f'engine="0",model_name="{model}"'
    lines = [f"# TYPE {prefix}:spec_decode_num_drafts_total counter",
             f"{prefix}:spec_decode_num_drafts_total{{{lab}}} {float(drafts)}",
             f"{prefix}:spec_decode_num_draft_tokens_total{{{lab}}} {float(draft_tokens)}",
             f"{prefix}:spec_decode_num_accepted_tokens_total{{{lab}}} {float(accepted)}"]
    lines += [f'{prefix}:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{j}"}} {float(p)}'
              for j, p in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


BASE = (1000, 3000, 1400, [600, 450, 350])


def _moved(n: int, base=BASE) -> tuple:
    """The counters after the first n recorded answers."""
    d, t, a, pos = base[0], base[1], base[2], list(base[3])
    for r in FIXTURE["responses"][:n]:
        s = r["metrics"]["speculative_decoding"]
        h = s["acceptance_histogram"]
        d, t, a = d + s["num_spec_steps"], t + s["num_draft_tokens"], a + s["num_accepted_draft_tokens"]
        pos = [p + sum(h[j + 1:]) for j, p in enumerate(pos)]
    return d, t, a, pos


class Fake(LoopbackServer):
    """A server: /v1/models lists `models` ({id, root?, owned_by}); /metrics is `page(served, scrapes)`
    (None: 404); POST /v1/completions and /v1/chat/completions answer `answer(n, body)` for the n-th
    request (default: the recorded answer n); `sglang`: /generate with meta_info and /get_server_info."""

    def __init__(self, page=None, answer=None, models=None, sglang=False):
        self.page, self.answer, self.sglang = page, answer, sglang
        self.models = models or [{"id": "target", "object": "model", "owned_by": "sglang" if sglang else "vllm"}]
        self.served, self.scrapes, self.lock = 0, 0, threading.Lock()
        fake = self

        class Handler(JSONHandler):
            def do_GET(self):  # noqa: N802
                with fake.lock:
                    if self.path == "/v1/models":
                        return self._send(200, {"object": "list", "data": fake.models})
                    if self.path == "/metrics" and fake.page is not None:
                        text = fake.page(fake.served, fake.scrapes)
                        fake.scrapes += 1
                        if text is not None:
                            return self._send(200, text, "text/plain")
                    if self.path == "/get_server_info" and fake.sglang:
                        return self._send(200, {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                                                "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4})
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    n = fake.served
                    fake.served += 1
                    if fake.sglang and self.path == "/generate":
                        return self._send(200, fake.sglang_answer(n))
                    if self.path in ("/v1/completions", "/v1/chat/completions"):
                        resp = copy.deepcopy(FIXTURE["responses"][n % 16])
                        if fake.answer is not None:
                            resp = fake.answer(n, resp)
                        if self.path.endswith("chat/completions"):
                            resp["choices"][0]["message"] = {"role": "assistant", "content": resp["choices"][0].pop("text")}
                        return self._send(200, resp)
                    self._send(404, {"detail": "Not Found"})

        self.serve(Handler)

    def sglang_answer(self, n):
        r = FIXTURE["responses"][n % 16]
        s, c = r["metrics"]["speculative_decoding"], r["choices"][0]
        return {"text": c["text"], "output_ids": c["token_ids"], "meta_info": {
            "completion_tokens": 32, "spec_verify_ct": s["num_spec_steps"],
            "spec_num_correct_drafts": s["num_accepted_draft_tokens"], "spec_num_proposed_drafts": s["num_draft_tokens"],
            "spec_correct_drafts_histogram": s["acceptance_histogram"], "finish_reason": {"type": "length"}}}


def _one_line(res, *words):
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in res.stderr, res.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def _json(res):
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    return json.loads(res.stdout)


def _counters_only(spec):
    """An answer without per-request figures (the counters decide)."""
    def answer(n, resp):
        resp["metrics"] = None
        return resp
    return answer


# -- 1. probe: each source through the bounds, the sources cross-checked -------------------------------------
def test_probe_refuses_more_verify_steps_than_tokens_generated(cli):
    def answer(n, resp):
        s = resp["metrics"]["speculative_decoding"]
        s.update(acceptance_histogram=[40, 0, 0, 0], num_spec_steps=40, num_accepted_draft_tokens=0, num_draft_tokens=120)
        return resp
    with Fake(lambda served, k: _page(*_moved(0)), answer) as f:
        _one_line(cli("probe", f.url, "--max-prompts", "2"), f.url, "40 verify steps for 32 tokens generated")


def test_probe_refuses_a_count_that_disagrees_with_its_own_histogram(cli):
    def answer(n, resp):
        resp["metrics"]["speculative_decoding"]["num_accepted_draft_tokens"] += 5  # the histogram says 5 fewer
        return resp
    with Fake(lambda served, k: _page(*_moved(served)), answer) as f:
        line = _one_line(cli("probe", f.url, "--max-prompts", "2"), f.url, "histogram")
    assert "disagree" in line


def test_probe_refuses_counters_that_metrics_refuses(cli, tmp_path):
    """accepted > draft tokens over the run: `metrics FILE` refuses such a page; so does probe."""
    bad = (1005, 3010, 9100, [605, 455, 355])  # over the run: 5 drafts, 10 draft tokens, 7,700 accepted
    with Fake(lambda served, k: _page(*(BASE if served == 0 else bad)), _counters_only(None)) as f:
        line = _one_line(cli("probe", f.url, "--max-prompts", "2"), f.url, "out of bounds")
    assert "more than the 10 drafted tokens" in line and "1,819" not in line
    page = tmp_path / "bad.txt"
    page.write_text(_page(5, 10, 7700, [5, 5, 5]))
    _one_line(cli("metrics", str(page)), "more than the 10 drafted tokens")


def test_probe_reads_only_the_probed_models_series(cli):
    """Two models on one page: the other model's counters move too (its own traffic); only the
    probed model's are differenced, and the other is named."""
    def page(served, k):
        other = (50 + 7 * served, 150 + 21 * served, 10, [10, 0, 0])  # another model's, moving
        return _page(*_moved(served)) + _page(*other, model="other-model")
    with Fake(page) as f:
        out = _json(cli("probe", f.url, "--max-prompts", "3", "--json"))
    d, _, a, _ = _moved(3)
    assert out["counters"]["drafts"] == d - BASE[0] and out["counters"]["accepted"] == a - BASE[2]
    assert out["agreement"]["agree"] is True
    assert any("other-model" in n for n in out["notes"])


def test_probe_counters_that_vanish_mid_run_are_named_not_a_traceback(cli):
    with Fake(lambda served, k: _page(*BASE) if served == 0 else "# nothing\n", _counters_only(None)) as f:
        _one_line(cli("probe", f.url, "--max-prompts", "2"), f.url, "lost its spec_decode counters")
    with Fake(lambda served, k: _page(*_moved(served)) if served == 0 else "# nothing\n") as f:  # per-request decides
        out = _json(cli("probe", f.url, "--max-prompts", "2", "--json"))
    assert out["source"] == "per-request" and any("lost its spec_decode counters" in n for n in out["notes"])


@pytest.mark.parametrize("field", ["accepted", "drafts"])
def test_probe_counters_that_go_negative_mid_run_are_named_not_a_traceback(cli, field):
    def page(served, k):
        c = list(_moved(served))
        if served:
            c[{"drafts": 0, "accepted": 2}[field]] = -3
        return _page(*c)
    with Fake(page, _counters_only(None)) as f:
        _one_line(cli("probe", f.url, "--max-prompts", "2"), f.url)
    with Fake(page) as f:  # with per-request figures: those decide, the counters are named
        out = _json(cli("probe", f.url, "--max-prompts", "2", "--json"))
    assert out["source"] == "per-request" and out["accept_length"] > 1
    assert out["notes"]


def test_sglang_gauges_that_go_negative_or_vanish_mid_run(cli):
    def page(served, k):
        if served == 0:
            return '# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name="target"} 2.6\n'
        return 'sglang:spec_accept_length{model_name="target"} -1.0\n' if served == 1 else None
    with Fake(page, sglang=True) as f:
        out = _json(cli("probe", f.url, "--target", str(TARGET), "--max-prompts", "2", "--json"))
    steps = sum(r["metrics"]["speculative_decoding"]["num_spec_steps"] for r in FIXTURE["responses"][:2])
    assert out["engine"] == "sglang" and out["accept_length"] == pytest.approx(64 / steps)


def test_a_target_that_is_not_the_served_model_is_named_not_a_lossy_verify(cli):
    models = [{"id": "target", "object": "model", "owned_by": "vllm", "root": "/models/Qwen3-8B"}]
    def answer(n, resp):  # another model's tokens
        c0 = resp["choices"][0]
        c0["token_ids"] = [(t + 1000) % 4096 for t in c0["token_ids"]]
        return resp
    with Fake(lambda served, k: _page(*_moved(served)), answer, models=models) as f:
        out = _json(cli("probe", f.url, "--target", str(TARGET), "--max-prompts", "2", "--json"))
    assert not any(x.startswith("lossy verify") for x in out["findings"])
    assert any(x.startswith("target mismatch") and "/models/Qwen3-8B" in x for x in out["findings"])
    assert out["target_check"]["verdict"] == "target mismatch"


def test_the_served_models_root_naming_the_target_is_no_mismatch(cli):
    models = [{"id": "served-name", "object": "model", "owned_by": "vllm", "root": str(TARGET)}]
    with Fake(lambda served, k: _page(*_moved(served)), models=models) as f:
        out = _json(cli("probe", f.url, "--target", str(TARGET), "--max-prompts", "1", "--json"))
    assert out["served_mismatch"] is None and not any("mismatch" in x for x in out["findings"])


# -- 2. restarts: counters that go down, logs with several starts; bounds by the algorithm ------------------
def test_probe_counters_that_go_down_are_a_restart(cli):
    with Fake(lambda served, k: _page(*(BASE if served == 0 else (5, 15, 7, [4, 2, 1]))), _counters_only(None)) as f:
        _one_line(cli("probe", f.url, "--max-prompts", "2"), f.url, "restart")
    with Fake(lambda served, k: _page(*(BASE if served == 0 else (5, 15, 7, [4, 2, 1])))) as f:
        out = _json(cli("probe", f.url, "--max-prompts", "2", "--json"))
    assert out["source"] == "per-request" and any("restart" in n for n in out["notes"])


def test_metrics_interval_across_a_restart_is_one_line(cli):
    with Fake(lambda served, k: _page(*(BASE if k == 0 else (5, 15, 7, [4, 2, 1])))) as f:
        _one_line(cli("metrics", f.url + "/metrics", "--interval", "0.01"), "went down", "restart")


def test_metrics_page_with_two_models_says_so(cli, tmp_path):
    page = tmp_path / "two.txt"
    page.write_text(_page(*BASE) + _page(10, 30, 5, [3, 1, 1], model="other"))
    out = _json(cli("metrics", str(page), "--json"))
    assert any("2 models" in n for n in out["reading"]["notes"])


def test_an_impossible_per_position_count_is_flagged(cli, tmp_path):
    page = tmp_path / "rising.txt"
    page.write_text(_page(1000, 3000, 1400, [400, 600, 400]))
    _one_line(cli("metrics", str(page)), "impossible", "position")


VLLM_ARGS = ("(APIServer pid=1) INFO 01-05 11:00:00 [utils.py:326] non-default args: {{'model': 'm', "
             "'speculative_config': {{'method': 'eagle3', 'num_speculative_tokens': {k}}}}}")
VLLM_LINE = ("(APIServer pid=1) INFO 01-05 11:00:{s:02d} [loggers.py:123] SpecDecoding metrics: Mean acceptance length: "
             "{mean:.2f}, Accepted throughput: 10.00 tokens/s, Drafted throughput: 20.00 tokens/s, Accepted: {acc} tokens, "
             "Drafted: {dr} tokens, Per-position acceptance rate: {rates}, Avg Draft acceptance rate: 50.0%")


def _vllm_line(s, k, drafts, per_pos):
    acc = sum(per_pos)
    return VLLM_LINE.format(s=s, mean=1 + acc / drafts, acc=acc, dr=drafts * k,
                            rates=", ".join(f"{p / drafts:.3f}" for p in per_pos))


def test_a_log_with_two_server_starts_is_two_runs(cli, tmp_path):
    log = tmp_path / "two.log"
    log.write_text("\n".join([VLLM_ARGS.format(k=3), _vllm_line(10, 3, 100, [80, 60, 40]),
                              VLLM_ARGS.format(k=5), _vllm_line(20, 5, 100, [95, 90, 85, 80, 70]),
                              _vllm_line(30, 5, 100, [95, 90, 85, 80, 70])]) + "\n")
    out = _json(cli("logs", str(log), "--json"))
    runs = out["runs"]
    assert [r["start_line"] for r in runs] == [1, 3] and [r["drafting"]["steps"] for r in runs] == [3, 5]
    assert runs[0]["pooled_accept_length"] == pytest.approx(2.8) and runs[1]["pooled_accept_length"] == pytest.approx(5.2)
    assert out["invalid"] == 0 and out["parsed"] == 3  # 5.2 is within the second start's chain of 5
    assert out["pooled_accept_length"] is None  # two drafting settings: no figure pools across them
    text = cli("logs", str(log))
    assert text.returncode == 0 and "2 server starts" in text.stdout and "5.2000" in text.stdout
    _one_line(cli("metrics", str(log)), "server starts")


DSPARK_ARGS = ("[2026-05-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', speculative_algorithm='DSPARK', "
               "speculative_draft_model_path='x/Qwen3-8B-DSpark', speculative_num_steps=1, speculative_eagle_topk=1, "
               "speculative_num_draft_tokens=6, decode_log_interval=40)")
DECODE = ("[2026-05-01 10:00:{s:02d}] Decode batch, #running-req: 1, #token: 500, token usage: 0.00, accept len: {a:.2f}, "
          "accept rate: {r:.2f}, cuda graph: True, gen throughput (token/s): 90.00, #queue-req: 0")


def test_a_dspark_log_is_bounded_by_its_block(cli, tmp_path):
    log = tmp_path / "dspark.log"
    log.write_text("\n".join([DSPARK_ARGS, DECODE.format(s=1, a=3.08, r=0.51), DECODE.format(s=2, a=5.90, r=0.98),
                              DECODE.format(s=3, a=6.40, r=1.0)]) + "\n")
    out = _json(cli("logs", str(log), "--json"))
    assert out["parsed"] == 2 and out["invalid"] == 1 and out["invalid_rows"][0]["line"] == 4
    assert "above 6" in out["invalid_rows"][0]["why"]
    assert out["drafting"]["block"] is True and out["drafting"]["draft_tokens"] == 6
    m = _json(cli("metrics", str(log), "--json"))
    assert m["accept_length"] == pytest.approx((3.08 + 5.90) / 2)


def test_a_log_line_whose_per_position_rates_rise_is_flagged_impossible(cli, tmp_path):
    log = tmp_path / "rising.log"
    log.write_text("\n".join([VLLM_ARGS.format(k=3), _vllm_line(10, 3, 100, [80, 60, 40]),
                              _vllm_line(20, 3, 100, [50, 70, 30])]) + "\n")
    out = _json(cli("logs", str(log), "--json"))
    assert out["parsed"] == 1 and out["invalid"] == 1
    assert out["invalid_rows"][0]["line"] == 3 and "impossible" in out["invalid_rows"][0]["why"]


def test_restarts_with_the_same_drafting_pool_and_say_so(cli, tmp_path):
    log = tmp_path / "same.log"
    log.write_text("\n".join([VLLM_ARGS.format(k=3), _vllm_line(10, 3, 100, [80, 60, 40]),
                              VLLM_ARGS.format(k=3), _vllm_line(20, 3, 100, [90, 70, 50])]) + "\n")
    out = _json(cli("logs", str(log), "--json"))
    assert len(out["runs"]) == 2 and out["pooled_accept_length"] == pytest.approx(1 + 390 / 200)
    m = _json(cli("metrics", str(log), "--json"))
    assert m["accept_length"] == pytest.approx(1 + 390 / 200) and any("2 server starts" in n for n in m["reading"]["notes"])


def test_the_pooled_conditional_rate_above_one_is_flagged():
    from helpers.acceptance.sources import normalise
    from helpers.serving.metrics import MetricsTable

    t = MetricsTable("x", "vllm-requests", [{"drafts": 10, "accepted": 9, "accepted_per_pos": [3, 6]},
                                            {"drafts": 10, "accepted": 0, "accepted_per_pos": [0, 0]}])
    acc = normalise(t)
    assert any(n.startswith("IMPOSSIBLE") for n in acc.notes) and "IMPOSSIBLE" in acc.report()


@pytest.mark.parametrize("second", ["# nothing\nvllm:num_requests_running 0.0\n",
                                    _page(1100, 3300, -3, [700, 500, 400])])
def test_metrics_interval_when_counters_vanish_or_go_negative(cli, second):
    with Fake(lambda served, k: _page(*BASE) if k == 0 else second) as f:
        res = cli("metrics", f.url + "/metrics", "--interval", "0.01")
    assert "Traceback" not in res.stderr
    if res.returncode == 2:
        _one_line(res)
    else:
        assert res.returncode == 0 and "accept length (bonus token counted): -" in res.stdout
        assert "-3.0" in res.stdout  # the counter that did not read is named


def test_the_ladders_serving_figure_is_the_last_starts_run_never_pooled_across_drafting(tmp_path):
    """The report and notebook 04 read a log through `serving_figure` / `stated_shape`: with two starts of
    different drafting the figure and its shape are the last start's (the server as it ran last)."""
    from helpers.serving.measured import serving_figure, stated_shape

    log = tmp_path / "two.log"
    log.write_text("\n".join([VLLM_ARGS.format(k=3), _vllm_line(10, 3, 100, [80, 60, 40]),
                              VLLM_ARGS.format(k=5), _vllm_line(20, 5, 100, [95, 90, 85, 80, 70]),
                              _vllm_line(30, 5, 100, [95, 90, 85, 80, 70])]) + "\n")
    fig = serving_figure([log])
    assert fig.value == pytest.approx(5.2) and "last server start" in fig.source
    assert stated_shape([log]) == fig.shape and fig.shape[0] == 5
    same = tmp_path / "same.log"  # two starts, the same drafting: every row counts
    same.write_text("\n".join([VLLM_ARGS.format(k=3), _vllm_line(10, 3, 100, [80, 60, 40]),
                               VLLM_ARGS.format(k=3), _vllm_line(20, 3, 100, [90, 80, 70])]) + "\n")
    both = serving_figure([same])
    assert both.value == pytest.approx((2.8 + 3.4) / 2) and "last server start" not in both.source
