"""Serving numbers are bounded, JSON never holds NaN or Infinity, work sizes are proportionate (issue 40).

Each case is one the trial found: a log's `accept len: 9.50` on a 3-step chain (at most 4 tokens per
verify step) and `-3.00` averaged into 3.25; a `meta_info` with 10 completion tokens over 100 verify
steps read as accept length 0.1; `avg_spec_accept_length: -2.5` reported; `throughput --baseline-tps
inf` printing nan and `--json` writing `Infinity`; `simulate --draft-tokens 100000000` running for
minutes. Real files and a real http.server; the figures asserted are computed from the lines written.
"""
from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from helpers.core import jsontext
from helpers.core.errors import BadInputError
from helpers.serving import bounds
from helpers.serving.logs import read_log
from helpers.serving.metrics import read_metrics
from helpers.serving.records import openai_reply, sglang_reply

ROOT = Path(__file__).resolve().parents[1]
ARGS = ("[2026-01-05 09:00:00] server_args=ServerArgs(model_path='m', speculative_algorithm='EAGLE3', "
        "speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)")


def decode(second: int, accept: str) -> str:
    return (f"[2026-01-05 10:00:{second:02d} TP0] Decode batch, #running-req: 3, #token: 2154, token usage: 0.02, "
            f"accept len: {accept}, accept rate: 0.12, cuda graph: True, gen throughput (token/s): 46.85, "
            "#queue-req: 2")


def strict(text: str):
    """json.loads that refuses NaN / Infinity / -Infinity, as every other JSON parser does."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def one_line(r, *words):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    return err


@pytest.fixture
def chain_log(tmp_path):
    """A 3-step chain (at most 4 tokens per verify step): lines 2..5 say 2.50, 9.50, -3.00, 1.00."""
    p = tmp_path / "serve.log"
    values = ["2.50", "9.50", "-3.00", "1.00"]
    p.write_text("\n".join([ARGS] + [decode(i, v) for i, v in enumerate(values)]) + "\n")
    return p, values


# -- accept length within [1, the drafting's maximum] ---------------------------------------------------


def test_log_accept_length_above_the_chain_and_below_one_are_named_never_averaged(chain_log, cli):
    path, values = chain_log
    log = read_log(path)
    kept = [float(v) for v in values if 1 <= float(v) <= 4]  # the chain emits 1..4 tokens a step
    assert [r["accept_length"] for r in log.rows] == kept
    assert log.summary()["mean_accept_length"] == pytest.approx(sum(kept) / len(kept))  # not 3.25 (all four)
    bad = {r["line"]: r for r in log.invalid_rows}
    assert sorted(bad) == [3, 4] and bad[3]["value"] == 9.5 and bad[4]["value"] == -3.0
    assert "above 4" in bad[3]["why"] and "below 1" in bad[4]["why"]
    text = log.report()
    assert "invalid line 3: accept length 9.5 is above 4" in text and "invalid line 4: accept length -3" in text
    # the same lines through `metrics`, the figure and the names printed; --json strict
    r = cli("metrics", path)
    assert r.returncode == 0, r.stderr
    assert f"accept length (bonus token counted): {sum(kept) / len(kept):.4f}" in r.stdout
    assert "invalid line 3: accept length 9.5 is above 4" in r.stdout and "invalid line 4" in r.stdout
    obj = strict(cli("metrics", path, "--json").stdout)
    assert obj["accept_length"] == pytest.approx(sum(kept) / len(kept))
    assert [row["line"] for row in obj["reading"]["invalid_rows"]] == [3, 4]


def test_log_without_drafting_keeps_the_lower_bound_and_plausibility_only(tmp_path):
    values = ["2.50", "9.50", "-3.00", "300.00"]  # no server_args: 9.5 may be a long chain; 300 no engine emits
    p = tmp_path / "serve.log"
    p.write_text("\n".join(decode(i, v) for i, v in enumerate(values)) + "\n")
    log = read_log(p)
    assert [r["accept_length"] for r in log.rows] == [2.5, 9.5]
    bad = {r["line"]: r["why"] for r in log.invalid_rows}
    assert sorted(bad) == [3, 4] and "below 1" in bad[3] and f"above {bounds.PLAUSIBLE}" in bad[4]


def test_a_log_with_every_line_out_of_bounds_is_one_line(tmp_path, cli):
    p = tmp_path / "serve.log"
    p.write_text("\n".join([ARGS, decode(0, "9.50"), decode(1, "-3.00")]) + "\n")
    one_line(cli("logs", p), str(p), "out of bounds", "line 2")


def test_vllm_rates_outside_zero_one_are_named(tmp_path):
    # line 2: per-position rates 0.8, 0.5, 1.2 (sum 2.5 = mean 3.5 - 1, so the line itself is consistent);
    # line 3 (the oldest V1 form): 155% of the drafts accepted, 1550 of 1000
    head = "(APIServer pid=4121) INFO 01-05 11:00:1{i} [loggers.py:123] SpecDecoding metrics: "
    new = head + ("Mean acceptance length: {m}, Accepted throughput: 96.30 tokens/s, Drafted throughput: 172.50 "
                  "tokens/s, Accepted: {a} tokens, Drafted: 900 tokens, Per-position acceptance rate: {r}, Avg Draft "
                  "acceptance rate: {p}%")
    old = head + "Draft acceptance rate: {p}%, Accepted: {a} tokens, Drafted: 1000 tokens"
    p = tmp_path / "vllm.log"
    p.write_text("\n".join([new.format(i=0, m="2.67", a=501, r="0.779, 0.539, 0.352", p="55.7"),
                            new.format(i=1, m="3.50", a=750, r="0.800, 0.500, 1.200", p="83.3"),
                            old.format(i=2, p="155.0", a=1550)]) + "\n")
    log = read_log(p, year=2026)
    assert [r["line"] for r in log.rows] == [1] and log.rows[0]["accept_length"] == 2.67
    bad = {r["line"]: r for r in log.invalid_rows}
    assert sorted(bad) == [2, 3]
    assert bad[2]["field"] == "per_position" and bad[2]["value"] == 1.2 and "not a rate in [0, 1]" in bad[2]["why"]
    assert bad[3]["field"] == "accept_rate" and bad[3]["value"] == pytest.approx(1.55)


# -- per-request records and server info ---------------------------------------------------------------


def test_meta_info_fewer_tokens_than_verify_steps_is_named(tmp_path, cli):
    p = tmp_path / "requests.jsonl"
    good = {"meta_info": {"completion_tokens": 250, "spec_verify_ct": 100}}
    p.write_text(json.dumps({"meta_info": {"completion_tokens": 10, "spec_verify_ct": 100}}) + "\n"
                 + json.dumps(good) + "\n")
    t = read_metrics(str(p))
    assert len(t.rows) == 1 and t.rows[0]["completion_tokens"] == 250
    (bad,) = t.invalid_rows
    assert bad["line"] == 1 and bad["field"] == "completion_tokens" and "0.1 tokens per verify step" in bad["why"]
    obj = strict(cli("metrics", p, "--json").stdout)
    assert obj["accept_length"] == pytest.approx(250 / 100)  # the invalid record is not pooled in
    only = tmp_path / "only.jsonl"
    only.write_text(json.dumps({"meta_info": {"completion_tokens": 10, "spec_verify_ct": 100}}) + "\n")
    one_line(cli("metrics", only), "completion_tokens 10 over spec_verify_ct 100", "below 1")


def test_sglang_answer_out_of_bounds_is_refused_by_probe():
    with pytest.raises(BadInputError, match=r"meta_info\.completion_tokens .*0\.1 tokens per verify step"):
        sglang_reply({"text": "x", "meta_info": {"completion_tokens": 10, "spec_verify_ct": 100}}, "http://h/generate")
    ok = sglang_reply({"text": "x", "meta_info": {"completion_tokens": 250, "spec_verify_ct": 100}},
                      "http://h/generate")
    assert ok.steps == 100
    # vLLM: num_spec_tokens 3 -> at most 4 a step; 1 + 900 / 100 = 10 is not
    spec = {"acceptance_histogram": [0, 0, 0, 100], "num_spec_steps": 100, "num_accepted_draft_tokens": 900,
            "num_spec_tokens": 3}
    answer = {"choices": [{"text": "x"}], "metrics": {"speculative_decoding": spec}}
    with pytest.raises(BadInputError, match=r"speculative_decoding\.accepted .*above 4"):
        openai_reply(answer, "http://h/v1/completions")


class _Sequence(BaseHTTPRequestHandler):
    """Serves `bodies[path]` one after another (the last one again once they run out)."""
    bodies: dict = {}
    served: dict = {}

    def do_GET(self):  # noqa: N802
        seq = self.bodies.get(self.path)
        if not seq:
            self.send_error(404)
            return
        i = self.served.get(self.path, 0)
        self.served[self.path] = i + 1
        data = seq[min(i, len(seq) - 1)].encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@pytest.fixture
def serve():
    servers = []

    def start(bodies: dict) -> str:
        handler = type("H", (_Sequence,), {"bodies": bodies, "served": {}})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_server_info_negative_accept_length_is_refused(serve, tmp_path, cli):
    info = json.dumps({"internal_states": [{"avg_spec_accept_length": -2.5}]})
    url = serve({"/get_server_info": [info]})
    one_line(cli("metrics", url + "/get_server_info"), "internal_states[0].avg_spec_accept_length", "-2.5",
             "below 1")
    # a second DP rank within bounds is read, the first named
    two = tmp_path / "info.json"
    two.write_text(json.dumps({"internal_states": [{"avg_spec_accept_length": -2.5},
                                                   {"avg_spec_accept_length": 2.25}]}))
    t = read_metrics(str(two))
    assert [r["accept_length"] for r in t.rows] == [2.25]
    assert t.invalid_rows[0]["line"] == "internal_states[0].avg_spec_accept_length"


def _vllm_text(drafts: int, accepted: list[int], k: int = 3) -> str:
    lines = []
    for name, v in (("num_drafts", drafts), ("num_draft_tokens", drafts * k), ("num_accepted_tokens", sum(accepted))):
        lines += [f"# TYPE vllm:spec_decode_{name} counter", f'vllm:spec_decode_{name}_total{{engine="0"}} {v}.0']
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{j}"}} {n}.0'
              for j, n in enumerate(accepted)]
    return "\n".join(lines) + "\n"


def test_counter_that_goes_down_between_scrapes_is_reported_not_averaged(serve, cli):
    # a restart between the scrapes: 1000 drafts then 10; no difference of these counters means anything
    url = serve({"/metrics": [_vllm_text(1000, [700, 450, 250]), _vllm_text(10, [5, 2, 1])]})
    one_line(cli("metrics", url, "--interval", "0.05"), "went down", "1000 -> 10")
    # counters that grow are differenced as before: 200 drafts, 150 + 90 + 40 = 280 accepted
    url = serve({"/metrics": [_vllm_text(1000, [700, 450, 250]), _vllm_text(1200, [850, 540, 290])]})
    obj = strict(cli("metrics", url, "--interval", "0.05", "--json").stdout)
    assert obj["accept_length"] == pytest.approx(1 + 280 / 200) and obj["reading"]["invalid_rows"] == []


def test_bounds_on_counts_and_rates():
    assert bounds.problems({"accepted": 5, "drafted": 4})[0][0] == "accepted"
    assert bounds.problems({"accept_rate": 1.5})[0][0] == "accept_rate"
    assert bounds.problems({"accept_rate": float("nan")})[0][0] == "accept_rate"
    assert bounds.problems({"accept_length": float("inf")})[0][0] == "accept_length"
    assert bounds.problems({"drafts": -1})[0][0] == "drafts"
    assert bounds.problems({"accept_length": 4.004}, 4) == []  # printed with two decimals: 0.005 slack
    assert bounds.maximum_for({"steps": 5, "topk": 4, "draft_tokens": 16}) == 6  # a tree of 5 steps: 6 at most
    assert bounds.maximum_for({"steps": 5, "topk": 4, "draft_tokens": 4}) == 4  # 3 drafted nodes: 4 at most


# -- JSON without NaN / Infinity --------------------------------------------------------------------------


def test_the_writer_turns_non_finite_into_null():
    np = pytest.importorskip("numpy")
    obj = {"a": float("nan"), "b": [float("inf"), -math.inf, 1.5], "c": np.float64("nan"), "d": (2, None)}
    assert strict(jsontext.dumps(obj)) == {"a": None, "b": [None, None, 1.5], "c": None, "d": [2, None]}


def test_every_command_writes_json_through_the_one_writer():
    # a command calling json.dumps itself could write NaN / Infinity again
    offenders = [p.name for p in sorted((ROOT / "helpers" / "commands").glob("*.py")) if "json.dumps(" in p.read_text()]
    assert offenders == []


@pytest.mark.parametrize("value", ["inf", "nan", "-90", "0"])
def test_throughput_refuses_a_baseline_that_is_not_a_finite_rate(cli, value):
    r = cli("throughput", "--baseline-tps", value, "--accept-length", "1.9", "--spec-tps", "46.7", "--json")
    one_line(r, "--baseline-tps")
    assert r.stdout == ""


def test_throughput_out_of_scale_is_one_line_and_good_json_is_strict(cli):
    one_line(cli("throughput", "--baseline-tps", "1e308", "--accept-length", "1.9", "--spec-tps", "1e-300"),
             "--baseline-tps", "not a finite number")
    one_line(cli("throughput", "--baseline-tps", "90", "--accept-length", "inf", "--spec-tps", "46.7"),
             "--accept-length")
    obj = strict(cli("throughput", "--baseline-tps", "90", "--accept-length", "1.9", "--spec-tps", "46.7",
                     "--json").stdout)
    assert obj["step_cost"] == pytest.approx(1.9 * 90 / 46.7)


def test_json_of_the_reading_commands_is_strict(cli, chain_log):
    path, _ = chain_log
    for args in (("logs", path, "--json"), ("metrics", path, "--json"),
                 ("simulate", "--accept-rate", "0.6", "--draft-tokens", "3", "--trials", "1000", "--json"),
                 ("rate-for", "--accept-length", "1.9", "--draft-tokens", "4", "--json")):
        r = cli(*args)
        assert r.returncode == 0, (args, r.stderr)
        strict(r.stdout)


# -- work sizes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("args,flag,bound", [
    (("--draft-tokens", "100000000"), "--draft-tokens", "256"),
    (("--draft-tokens", "3", "--trials", "1000000000"), "--trials", "100,000,000"),
    (("--steps", "300"), "--steps", "256"),
    (("--steps", "3", "--topk", "100", "--draft-tokens", "8"), "--topk", "64"),
    (("--draft-tokens", "3", "--trials", "1"), "--trials", "2"),
])
def test_simulate_refuses_work_past_what_is_meaningful_at_once(cli, args, flag, bound):
    t0 = time.monotonic()
    r = cli("simulate", "--accept-rate", "0.5", *args)
    assert time.monotonic() - t0 < 5
    one_line(r, flag, bound)


def test_simulate_help_states_the_bounds_and_the_largest_runs(cli):
    r = cli("simulate", "--help")
    assert "256" in r.stdout and "100,000,000" in r.stdout
    r = cli("simulate", "--accept-rate", "0.9", "--draft-tokens", "256", "--trials", "1000", "--json")
    obj = strict(r.stdout)
    assert obj["expected_accept_length"] == pytest.approx((1 - 0.9 ** 257) / (1 - 0.9))
