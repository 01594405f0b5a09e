"""`d2t-lab probe URL`: real HTTP servers on 127.0.0.1 answering as vLLM 0.32 (replaying recorded
answers and /metrics), as SGLang (/generate with meta_info, /get_server_info), as a server that does
not speculate, one that never answers, one that is not OpenAI-compatible, and a closed port.

The vLLM answers and /metrics section are real (tests/fixtures/probe_vllm_0.32.json, see its
"about"): the 16 bundled prompts on the bundled engine pair; the answers' per-request figures and
the server's /metrics page after them count the same drafts and accepted tokens (202 and 294 in
this recording).
"""
from __future__ import annotations

import copy
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import JSONHandler, LoopbackServer, SAMPLES

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "probe_vllm_0.32.json").read_text())
TARGET = SAMPLES / "engine_llama" / "target"
DRAFT = SAMPLES / "engine_llama" / "draft"


def _recorded() -> dict:
    """The counters of the recorded /metrics page, read line by line (not with the kit's parser)."""
    names = {"vllm:spec_decode_num_drafts_total": "drafts", "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens_total": "accepted"}
    out = {"per_pos": {}}
    for line in FIXTURE["metrics"]:
        name, value = line.split("{", 1)[0], line.rsplit(" ", 1)[-1]
        if name in names:
            out[names[name]] = int(float(value))
        elif name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
            out["per_pos"][int(line.split('position="', 1)[1].split('"', 1)[0])] = int(float(value))
    out["per_pos"] = [out["per_pos"][j] for j in sorted(out["per_pos"])]
    return out


RECORDED = _recorded()  # this recording: 202 drafts, 606 draft tokens, 294 accepted, per position 126 / 96 / 72


def _spec(resp):
    return resp["metrics"]["speculative_decoding"]


def _page(c: dict, spec: bool = True) -> str:
    """The recorded /metrics section with the counters set to `c` (the real page's lines and labels)."""
    out = []
    for line in FIXTURE["metrics"]:
        if not spec and "spec_decode" in line:
            continue
        if not line.startswith("#") and "_total{" in line and "spec_decode" in line:
            name = line.split("{", 1)[0]
            if name.endswith("per_pos_total"):
                value = c["per_pos"][int(line.split('position="', 1)[1].split('"', 1)[0])]
            else:
                value = c[{"vllm:spec_decode_num_drafts_total": "drafts", "vllm:spec_decode_num_draft_tokens_total":
                           "draft_tokens", "vllm:spec_decode_num_accepted_tokens_total": "accepted"}[name]]
            line = line.rsplit(" ", 1)[0] + f" {float(value)}"
        out.append(line)
    return "\n".join(out) + "\n"


class Engine(LoopbackServer):
    """A server on 127.0.0.1:0 answering like vLLM 0.32 (or SGLang) from the recorded answers.

    mode: replay (per-request metrics, counters moving with them), counters (no per-request metrics;
    the counters move to base + the recorded page over 16 requests), forced (every histogram at 0),
    traffic (counters also move by other requests), nospec (no spec_decode counters at all), static
    (counters that never move, no per-request metrics), sglang (/generate, meta_info, server info)."""

    def __init__(self, mode: str = "replay", base: dict | None = None):
        self.mode = mode
        self.base = copy.deepcopy(base or {"drafts": 1000, "draft_tokens": 3000, "accepted": 1400, "per_pos": [600, 450, 350]})
        self.counters = copy.deepcopy(self.base)
        self.by_ids = {tuple(i): r for i, r in zip(FIXTURE["ids"], FIXTURE["responses"])}
        self.served = 0
        self.lock = threading.Lock()
        engine = self

        class Handler(JSONHandler):
            def do_GET(self):  # noqa: N802
                sglang = engine.mode == "sglang"
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": "target", "object": "model",
                                                                  "owned_by": "sglang" if sglang else "vllm"}]})
                elif self.path == "/metrics":
                    if sglang:
                        self._send(200, '# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name='
                                   '"target"} 2.6\n', "text/plain")
                    else:
                        with engine.lock:
                            self._send(200, _page(engine.counters, spec=engine.mode != "nospec"), "text/plain")
                elif self.path == "/get_server_info" and sglang:
                    self._send(200, {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                                     "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
                                     "internal_states": [{"avg_spec_accept_length": 2.6}], "version": "0.5.10"})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if engine.mode == "sglang" and self.path == "/generate":
                    self._send(200, engine.sglang(body))
                elif engine.mode != "sglang" and self.path in ("/v1/completions", "/v1/chat/completions"):
                    self._send(200, engine.vllm(body, self.path))
                else:
                    self._send(404, {"detail": "Not Found"})

        self.serve(Handler)

    def vllm(self, body, path):
        with self.lock:
            if path == "/v1/completions":
                resp = copy.deepcopy(self.by_ids[tuple(body["prompt"])])
                assert body["temperature"] == 0 and body["return_token_ids"] is True and body["max_tokens"] == 32
            else:  # chat: the recorded answers in order
                resp = copy.deepcopy(FIXTURE["responses"][self.served % 16])
                resp["choices"][0]["message"] = {"role": "assistant", "content": resp["choices"][0].pop("text")}
            self.served += 1
            s = _spec(resp)
            if self.mode == "forced":
                s.update(acceptance_histogram=[s["num_spec_steps"], 0, 0, 0], num_accepted_draft_tokens=0,
                         mean_acceptance_length=1.0, draft_acceptance_rate=0.0)
            c = self.counters
            if self.mode in ("replay", "forced", "traffic", "lossy"):
                h = s["acceptance_histogram"]
                c["drafts"] += s["num_spec_steps"]
                c["draft_tokens"] += s["num_draft_tokens"]
                c["accepted"] += s["num_accepted_draft_tokens"]
                c["per_pos"] = [p + sum(h[j + 1:]) for j, p in enumerate(c["per_pos"])]
                if self.mode == "traffic":  # someone else's request in between
                    c["drafts"] += 5
                    c["draft_tokens"] += 15
                    c["accepted"] += 4
                    c["per_pos"][0] += 4
            elif self.mode == "counters" and self.served == 16:
                self.counters = {k: (self.base[k] + RECORDED[k] if k != "per_pos" else
                                     [a + b for a, b in zip(self.base[k], RECORDED[k])]) for k in RECORDED}
            if self.mode == "lossy":  # a token the target would not choose, at position 10
                c0 = resp["choices"][0]
                c0["token_ids"][10] = (c0["token_ids"][10] + 1000) % 4096
            if self.mode in ("counters", "nospec", "static"):
                resp["metrics"] = None if self.mode != "nospec" else {"time_to_first_token_ms": None}
            return resp

    def sglang(self, body):
        resp = self.by_ids[tuple(body["input_ids"])]
        assert body["sampling_params"] == {"temperature": 0, "max_new_tokens": 32}
        s, c = _spec(resp), resp["choices"][0]
        n = len(c["token_ids"])
        return {"text": c["text"], "output_ids": c["token_ids"], "meta_info": {
            "id": resp["id"], "prompt_tokens": len(body["input_ids"]), "completion_tokens": n,
            "spec_verify_ct": s["num_spec_steps"], "spec_accept_length": n / s["num_spec_steps"],
            "spec_num_correct_drafts": s["num_accepted_draft_tokens"], "spec_num_proposed_drafts": s["num_draft_tokens"],
            "spec_correct_drafts_histogram": s["acceptance_histogram"], "finish_reason": {"type": "length", "length": n}}}


def _json(res):
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _one_line(res, url):
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and url in lines[0], res.stderr
    assert "Traceback" not in res.stderr
    return lines[0]


# -- the served accept length -------------------------------------------------------------------------
def test_counters_only_gives_the_recorded_pages_accept_length_and_says_prompts_are_the_default(cli):
    """No per-request figures: the counters differenced over the run are the recorded page's (the
    server's counters started elsewhere: the difference, not the page, is what counts)."""
    with Engine("counters") as e:
        res = cli("probe", e.url, "--json")
    with Engine("counters") as e:  # a fresh server: this one's counters moved once, with its 16th request
        text = cli("probe", e.url)
    out = _json(res)
    rec = RECORDED
    assert out["source"] == "metrics" and out["engine"] == "vllm" and out["model"] == "target"
    assert out["accept_length"] == pytest.approx(1 + rec["accepted"] / rec["drafts"]) == out["metrics_accept_length"]
    assert out["counters"] == {"drafts": rec["drafts"], "draft_tokens": rec["draft_tokens"], "accepted": rec["accepted"],
                               "accepted_per_pos": rec["per_pos"]}
    assert out["per_position"] == pytest.approx([p / rec["drafts"] for p in rec["per_pos"]])
    assert out["stderr"] is None and out["agreement"] is None
    assert out["drafting"]["shape"] == "chain, 3 tokens" and out["drafting"]["source"] == "the positions /metrics counts"
    assert out["endpoint"] == "/v1/chat/completions" and len(out["requests"]) == 16
    assert out["prompts_source"]["bundled_default"] is True
    assert out["prompts_source"]["path"].endswith("data_samples/prompts.jsonl")
    assert text.returncode == 0 and "the bundled default prompts" in text.stdout
    assert f"{1 + rec['accepted'] / rec['drafts']:.3f}" in text.stdout and "tokens are not checked" in text.stdout and "pass --target DIR" in text.stdout


def test_per_request_pooled_equals_the_counters_differenced(cli, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text((SAMPLES / "prompts.jsonl").read_text())
    with Engine("replay") as e:
        out = _json(cli("probe", e.url, "--target", TARGET, "--prompts", prompts, "--json", "-o", tmp_path / "o.json"))
    steps = sum(_spec(r)["num_spec_steps"] for r in FIXTURE["responses"])
    acc = sum(_spec(r)["num_accepted_draft_tokens"] for r in FIXTURE["responses"])
    assert (steps, acc) == (RECORDED["drafts"], RECORDED["accepted"])  # the real server's answers and its page agree
    assert out["source"] == "per-request" and out["endpoint"] == "/v1/completions"
    assert out["accept_length"] == pytest.approx(1 + acc / steps)
    assert out["metrics_accept_length"] == pytest.approx(out["accept_length"], abs=1e-12)
    assert out["agreement"]["agree"] is True and "nothing else ran" in out["agreement"]["why"]
    assert out["prompts_source"]["bundled_default"] is False
    assert json.loads((tmp_path / "o.json").read_text()) == out
    # per request: the server's own figure; the standard error over requests is a ratio estimator
    for q, r in zip(out["requests"], FIXTURE["responses"]):
        assert q["accept_length"] == pytest.approx(_spec(r)["mean_acceptance_length"])
        assert q["output_ids"] == r["choices"][0]["token_ids"] and q["prompt_tokens"] == 26
    x = [_spec(r)["num_accepted_draft_tokens"] for r in FIXTURE["responses"]]
    s = [_spec(r)["num_spec_steps"] for r in FIXTURE["responses"]]
    R = sum(x) / sum(s)
    se = (16 / 15 * sum((a - R * b) ** 2 for a, b in zip(x, s))) ** 0.5 / sum(s)
    assert out["stderr"] == pytest.approx(se) and 0 < se < 0.1
    assert out["drafting"]["source"] == "num_spec_tokens in the answers"
    # the target check: the bf16 server's text against the kit's fp32 target: near ties at most
    tc = out["target_check"]
    assert tc["compared"] == 16 and tc["lossy"] == 0 and tc["identical"] >= 12


def test_a_served_token_the_target_would_not_choose_is_a_lossy_verify(cli):
    with Engine("lossy") as e:
        out = _json(cli("probe", e.url, "--target", TARGET, "--max-prompts", "2", "--json"))
    tc = out["target_check"]
    assert tc["verdict"] == "lossy" and tc["lossy"] == 2 and tc["identical"] == 0
    row = tc["per_prompt"][0]
    assert row["first_difference"] == 10 and row["near_tie"] is False and row["logit_gap"] > 0.5
    assert row["target_token"] == FIXTURE["responses"][0]["choices"][0]["token_ids"][10]
    assert any(f.startswith("lossy verify") for f in out["findings"])


def test_other_traffic_is_named(cli):
    with Engine("traffic") as e:
        out = _json(cli("probe", e.url, "--max-prompts", "3", "--json"))
    assert out["source"] == "per-request"
    assert out["agreement"]["agree"] is False and "other traffic" in out["agreement"]["why"]
    assert out["counters"]["drafts"] == sum(q["verify_steps"] for q in out["requests"]) + 15
    assert any("other traffic" in f for f in out["findings"])


def test_sglang_generate_meta_info_and_server_info(cli):
    with Engine("sglang") as e:
        out = _json(cli("probe", e.url, "--target", TARGET, "--max-prompts", "4", "--json"))
    resp = FIXTURE["responses"][:4]
    steps = sum(_spec(r)["num_spec_steps"] for r in resp)
    assert out["engine"] == "sglang" and out["endpoint"] == "/generate" and out["source"] == "per-request"
    assert out["accept_length"] == pytest.approx(4 * 32 / steps)  # SGLang: completion_tokens / spec_verify_ct
    assert [q["accept_length"] for q in out["requests"]] == pytest.approx([32 / _spec(r)["num_spec_steps"] for r in resp])
    assert out["drafting"] == {"shape": "chain, 3 tokens", "steps": 3, "topk": 1, "num_draft_tokens": 4,
                               "source": "/get_server_info", "vllm": {"num_speculative_tokens": 3},
                               "sglang": {"speculative_num_steps": 3, "speculative_eagle_topk": 1,
                                          "speculative_num_draft_tokens": 4}}
    assert out["metrics_accept_length"] is None and out["target_check"]["compared"] == 4


# -- what the conclusion says ---------------------------------------------------------------------------
def test_the_recorded_server_behaves_as_the_checkpoint(cli):
    with Engine("replay") as e:
        out = _json(cli("probe", e.url, "--target", TARGET, "--checkpoint", DRAFT, "--dtype", "bfloat16",
                        "--max-prompts", "4", "--json"))
    ef = out["engine_free"]
    assert out["conclusion"].startswith("the served draft behaves as the checkpoint does"), out["conclusion"]
    assert ef["settings"]["engine"] == "vllm" and ef["settings"]["drafting"] == "chain" and ef["settings"]["steps"] == 3
    assert ef["paired"]["prompts"] == 4 and abs(ef["paired"]["mean_difference"]) <= 0.05
    assert ef["agrees"] is True
    assert out["target_check"]["lossy"] == 0
    assert out["reproduce"]["correct"]["reproduces"] is True
    assert ef["settings"]["batch_size"] == 16  # speculate's default


def test_probe_batch_size_reaches_the_engine_free_loop(cli):
    """--batch-size 1: the loop one prompt at a time, the same greedy comparison as the default batch."""
    with Engine("replay") as e:
        base = ["probe", e.url, "--target", TARGET, "--checkpoint", DRAFT, "--dtype", "float32", "--max-prompts", "4",
                "--json"]
        one, batched = _json(cli(*base, "--batch-size", "1")), _json(cli(*base, "--batch-size", "3"))
    assert one["engine_free"]["settings"]["batch_size"] == 1 and batched["engine_free"]["settings"]["batch_size"] == 3
    for key in ("paired", "accept_length", "verify_steps", "agrees"):
        assert one["engine_free"].get(key) == batched["engine_free"].get(key), key
    assert one["reproduce"]["correct"] == batched["reproduce"]["correct"]
    res = cli("probe", e.url, "--batch-size", "0")
    assert res.returncode == 2 and "--batch-size must be at least 1" in res.stderr


@pytest.mark.slow  # 3 s; test-fast keeps the recorded server's conclusion
def test_a_server_accepting_nothing_does_not_behave_as_the_checkpoint(cli):
    with Engine("forced") as e:
        out = _json(cli("probe", e.url, "--target", TARGET, "--checkpoint", DRAFT, "--dtype", "bfloat16",
                        "--max-prompts", "4", "--json"))
    assert out["accept_length"] == 1.0 == out["metrics_accept_length"]
    assert out["engine_free"]["agrees"] is False and out["engine_free"]["paired"]["mean_difference"] < -1
    assert not out["conclusion"].startswith("the served draft behaves as the checkpoint does")
    assert out["conclusion"].startswith(("the served draft behaves like", "neither")), out["conclusion"]


# -- one line, exit 2 ------------------------------------------------------------------------------------
def test_a_server_that_is_down(cli):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    line = _one_line(cli("probe", url), url)
    assert "connection refused" in line


def test_a_url_that_is_not_openai_compatible(cli):
    class Nothing(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_error(404)

        def log_message(self, *a):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Nothing)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        line = _one_line(cli("probe", url), url)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert "not an OpenAI-compatible server" in line


@pytest.mark.parametrize("mode,why", [("nospec", "no spec_decode counters"), ("static", "did not move")])
def test_a_server_that_is_not_speculating(cli, mode, why):
    with Engine(mode) as e:
        line = _one_line(cli("probe", e.url, "--max-prompts", "2"), e.url)
    assert "is not speculating" in line and why in line


def test_timeout_is_honoured_by_a_server_that_never_answers(cli):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)  # connections complete in the backlog; nothing ever reads or answers
    url = f"http://127.0.0.1:{s.getsockname()[1]}"
    try:
        t0 = time.monotonic()
        res = cli("probe", url, "--timeout", "1")
        took = time.monotonic() - t0
    finally:
        s.close()
    line = _one_line(res, url)
    assert "did not answer within 1 s" in line and took < 30  # a hang never ends; a loaded machine is slow


def test_bad_flags_are_one_line(cli, tmp_path):
    res = cli("probe", "http://127.0.0.1:1", "--checkpoint", DRAFT)
    assert res.returncode == 2 and "--checkpoint needs --target" in res.stderr
    res = cli("probe", "ftp://host", "--max-prompts", "2")
    assert res.returncode == 2 and "is not a server URL" in res.stderr
    res = cli("probe", "http://127.0.0.1:1", "--max-new-tokens", "0")
    assert res.returncode == 2 and "--max-new-tokens must be at least 1" in res.stderr
