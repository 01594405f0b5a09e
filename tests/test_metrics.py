"""Serving-metrics readers against real servers, and every source's conversion to one scale.

vLLM's counters are served by prometheus_client's own HTTP exposition and incremented by the test
between two scrapes; SGLang's /get_server_info by a real http.server. The readers must give back
the numbers the test put in, to the last digit. The 3-position examples are worked by hand in the
comments.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, start_http_server

from helpers.acceptance.sources import (
    compare_online_offline,
    conditional_from_unconditional,
    log_conversion,
    normalise,
    rate_for,
    sglang_rate_definition,
    unconditional_from_histogram,
)
from helpers.core.errors import BadInputError
from helpers.serving.metrics import (
    difference,
    fetch,
    parse_prometheus,
    parse_records,
    parse_text,
    read_metrics,
)
from helpers.acceptance.tree import tree_expected
from conftest import SAMPLES


SGLANG_LOG = SAMPLES / "logs" / "sglang.log"


def vllm_registry():
    """vLLM's four counters under their real names (engine label as vLLM sets it)."""
    reg = CollectorRegistry()
    c = {name: Counter(f"vllm:spec_decode_{name}", name, ["engine"], registry=reg)
         for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
    pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "per pos", ["engine", "position"], registry=reg)
    return reg, c, pos


def bump(c, pos, drafts, per_pos, k=3, engine="0"):
    c["num_drafts"].labels(engine).inc(drafts)
    c["num_draft_tokens"].labels(engine).inc(drafts * k)
    c["num_accepted_tokens"].labels(engine).inc(sum(per_pos))
    for j, n in enumerate(per_pos):
        pos.labels(engine, str(j)).inc(n)


@pytest.fixture
def vllm_server():
    reg, c, pos = vllm_registry()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=reg)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", c, pos
    finally:
        server.shutdown()
        server.server_close()


def test_vllm_counters_from_a_live_exposition_are_recovered_exactly(vllm_server):
    url, c, pos = vllm_server
    bump(c, pos, 1000, [700, 450, 250])
    first = parse_text(fetch(url), url)  # a bare host:port reads /metrics
    row = first.rows[0]
    assert (row["drafts"], row["draft_tokens"], row["accepted"], row["accepted_per_pos"]) == (1000, 3000, 1400, [700, 450, 250])
    bump(c, pos, 400, [300, 200, 123])
    second = parse_text(fetch(url + "/metrics"), url)
    d = difference(first, second, 1.0).rows[0]
    assert (d["drafts"], d["draft_tokens"], d["accepted"], d["accepted_per_pos"]) == (400, 1200, 623, [300, 200, 123])
    a = normalise(difference(first, second, 1.0))
    # 1 + 623/400 = 2.5575; unconditional 300/400, 200/400, 123/400; conditional 0.75, 200/300, 123/200
    assert a.accept_length == pytest.approx(2.5575, abs=1e-12)
    assert a.per_position_unconditional == pytest.approx([0.75, 0.5, 0.3075], abs=1e-12)
    assert a.per_position_conditional == pytest.approx([0.75, 2 / 3, 0.615], abs=1e-12)
    assert a.source_rate == pytest.approx(623 / 1200)
    assert a.drafting == "chain, 3 tokens"


class _Scrapes:
    """A collector that counts how often the server was scraped and runs `after_first` during the
    first scrape, once the counters registered before it have been read (the registry collects in
    registration order): a change between two scrapes that no machine load can move."""

    def __init__(self, after_first=None):
        self.n, self.after_first = 0, after_first

    def collect(self):
        self.n += 1
        if self.n == 1 and self.after_first is not None:
            self.after_first()
        return []


def test_metrics_command_interval_differences_two_scrapes(cli):
    reg, c, pos = vllm_registry()
    reg.register(_Scrapes(after_first=lambda: bump(c, pos, 200, [150, 90, 40])))  # between the two scrapes
    server, _ = start_http_server(0, addr="127.0.0.1", registry=reg)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    bump(c, pos, 5000, [4000, 3000, 2000])  # before the first scrape: must not count
    try:
        r = cli("metrics", url, "--interval", "1.0", "--json")
    finally:
        server.shutdown()
        server.server_close()
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    row = obj["reading"]["rows"][0]
    assert (row["drafts"], row["accepted"], row["accepted_per_pos"]) == (200, 280, [150, 90, 40])
    assert obj["accept_length"] == pytest.approx(1 + 280 / 200)
    assert obj["reading"]["interval_s"] >= 1.0


class _ServerInfo(BaseHTTPRequestHandler):
    body = {}

    def do_GET(self):  # noqa: N802
        if self.path != "/get_server_info":
            self.send_error(404)
            return
        data = json.dumps(self.body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@pytest.fixture
def sglang_server():
    _ServerInfo.body = {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
                        "internal_states": [{"avg_spec_accept_length": 2.8312}, {"avg_spec_accept_length": 2.6104}]}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ServerInfo)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/get_server_info"
    finally:
        server.shutdown()
        server.server_close()


def test_sglang_server_info_per_dp_rank(sglang_server):
    t = read_metrics(sglang_server)
    assert [r["accept_length"] for r in t.rows] == [2.8312, 2.6104]
    assert t.settings == {"steps": 3, "topk": 1, "draft_tokens": 4}
    a = normalise(t)
    assert a.accept_length == pytest.approx((2.8312 + 2.6104) / 2)
    assert a.drafting == "chain, 3 tokens"
    # chain of 3 at rate r: 1 + r + r^2 + r^3 = 2.7208
    r = a.per_token_rate
    assert 1 + r + r * r + r ** 3 == pytest.approx(2.7208, abs=1e-8)


def test_sglang_gauges_and_the_rate_definition():
    reg = CollectorRegistry()
    Gauge("sglang:spec_accept_length", "l", ["model_name"], registry=reg).labels("m").set(2.5)
    Gauge("sglang:spec_accept_rate", "r", ["model_name"], registry=reg).labels("m").set(0.625)
    t = parse_prometheus(generate_latest(reg).decode())
    t.settings = {"steps": 3, "topk": 1, "draft_tokens": 4}
    a = normalise(t)
    assert a.accept_length == 2.5 and a.source_rate == 0.625
    assert any("accept length / num_draft_tokens" in n for n in a.notes)  # 2.5 / 4 = 0.625
    assert sglang_rate_definition(2.5, 0.5, 4) == "(length-1)/(N-1)"  # 1.5 / 3
    assert sglang_rate_definition(2.5, 0.9, 4) is None


def test_a_logs_accept_rate_definition_is_told_for_the_engines_the_table_says():
    """`logs`' conversion names which accept-rate definition a line fits only for an engine whose table
    rule says its logs print two (SGLang); a vLLM log's rate is its own, one definition."""
    summary = {"drafting": {"steps": 3, "topk": 1, "draft_tokens": 4}, "mean_accept_length": 2.5,
               "mean_accept_rate": 0.5}
    assert log_conversion({**summary, "engines": ["sglang"]})["accept_rate_definition"] == "(length-1)/(N-1)"
    assert log_conversion({**summary, "engines": ["vllm"]})["accept_rate_definition"] is None
    assert log_conversion({**summary, "engines": ["not-an-engine"]})["accept_rate_definition"] is None


def test_sglang_meta_info_histogram_three_positions(tmp_path):
    # request 1: 10 verifies, histogram [2, 3, 1, 4] (0, 1, 2, 3 drafts accepted): 0*2+1*3+2*1+3*4 = 17
    # accepted, 27 tokens; request 2: 10 verifies, [4, 2, 2, 2]: 12 accepted, 22 tokens.
    # pooled [6, 5, 3, 6] over 20: reach position 0 = 14/20, 1 = 9/20, 2 = 6/20; length 49/20 = 2.45
    lines = [json.dumps({"text": "a", "meta_info": {"id": "r1", "completion_tokens": 27, "spec_verify_ct": 10,
                                                   "spec_accept_length": 2.7, "spec_num_correct_drafts": 17,
                                                   "spec_num_proposed_drafts": 30,
                                                   "spec_correct_drafts_histogram": [2, 3, 1, 4]}}),
             json.dumps({"meta_info": {"id": "r2", "completion_tokens": 22, "spec_verify_ct": 10,
                                       "spec_accept_length": 2.2, "spec_accept_token_num": 12,
                                       "spec_draft_token_num": 30, "spec_accept_histogram": [4, 2, 2, 2]}}),
             '{"meta_info": {"spec_verify_ct": "ten"}}', '{"meta_info": {"id": "cut", "spec_ve']
    p = tmp_path / "responses.jsonl"
    p.write_text("\n".join(lines) + "\n")
    t = read_metrics(p)
    assert t.kind == "sglang-requests" and t.garbled == 2 and len(t.rows) == 2
    a = normalise(t)
    assert a.accept_length == pytest.approx(2.45)
    assert a.per_position_unconditional == pytest.approx([0.7, 0.45, 0.3])
    assert a.per_position_conditional == pytest.approx([0.7, 0.45 / 0.7, 0.3 / 0.45])
    assert a.source_rate == pytest.approx(29 / 60)
    assert unconditional_from_histogram([0, 0, 5]) == [1.0, 1.0]


def test_vllm_per_request_counts_three_positions():
    # 50 drafts of 3: 40, 25, 10 reach positions 0..2 -> 75 accepted; length 1 + 75/50 = 2.5
    rows = [json.dumps({"request_id": "a", "num_drafts": 30, "num_draft_tokens": 90, "num_accepted_tokens": 45,
                        "num_accepted_tokens_per_pos": [24, 15, 6]}),
            json.dumps({"request_id": "b", "num_drafts": 20, "num_draft_tokens": 60, "num_accepted_tokens": 30,
                        "num_accepted_tokens_per_pos": [16, 10, 4]})]
    a = normalise(parse_records(rows))
    assert a.kind == "vllm-requests"
    assert a.accept_length == 2.5
    assert a.per_position_unconditional == pytest.approx([0.8, 0.5, 0.2])
    assert a.per_position_conditional == pytest.approx([0.8, 0.625, 0.4])


def test_specforge_acc_and_simulated_length_without_bonus():
    # acc 0.8, 0.6, 0.5: reach 0.8, 0.48, 0.24; simulated_acc_len = 1.52 (no bonus); accept length 2.52
    lines = ["step 100 train/acc_0: 0.5 train/acc_1: 0.4 train/acc_2: 0.3",
             '{"step": 200, "eval/acc_0": 0.8, "eval/acc_1": 0.6, "eval/acc_2": 0.5, "eval/simulated_acc_len": 1.52}',
             "step 300 train/acc_0: 0.9 train/acc_1: 0.x"]
    t = parse_records(lines)
    assert t.kind == "specforge" and t.garbled == 1
    a = normalise(t)
    assert a.accept_length == pytest.approx(2.52)
    assert a.per_position_unconditional == pytest.approx([0.8, 0.48, 0.24])
    assert a.per_position_conditional == pytest.approx([0.8, 0.6, 0.5])
    assert any("leaves the bonus token out" in n for n in a.notes)


def test_vllm_log_line_three_positions(tmp_path):
    # Drafted 300 over 3 positions = 100 drafts; Accepted 150 -> 2.5; per position 0.8, 0.5, 0.2
    p = tmp_path / "v.log"
    p.write_text("INFO 01-05 11:00:10 [loggers.py:123] SpecDecoding metrics: Mean acceptance length: 2.50, "
                 "Accepted throughput: 15.00 tokens/s, Drafted throughput: 30.00 tokens/s, Accepted: 150 tokens, "
                 "Drafted: 300 tokens, Per-position acceptance rate: 0.800, 0.500, 0.200, Avg Draft acceptance rate: 50.0%\n")
    a = normalise(read_metrics(p))
    assert a.accept_length == 2.5
    assert a.per_position_conditional == pytest.approx([0.8, 0.625, 0.4])


def test_sglang_sample_log_rate_reproduces_its_accept_length():
    t = read_metrics(SGLANG_LOG)
    a = normalise(t)
    assert t.settings == {"steps": 5, "topk": 4, "draft_tokens": 16}
    # the bundled log is the tiny draft served with d2t read as absolute ids (scripts/make_logs.py)
    assert 1.0 <= a.accept_length < 1.2
    assert abs(tree_expected(a.per_token_rate, 5, 4, 16) - a.accept_length) < 0.01
    assert t.garbled >= 1 and any("is not a number" in r for _, r in t.garbled_lines)  # the garbled line, counted


def test_rate_for_round_trips_chain_and_tree():
    from helpers.acceptance.drafting import Drafting

    r = rate_for(1.91, Drafting(5, 4, 16))
    assert r["expected_at_rate"] == pytest.approx(1.91, abs=1e-8)
    assert r["sglang_accept_rate"]["length/N"] == pytest.approx(1.91 / 16)
    c = rate_for(1.875, Drafting(3))  # 1 + a + a^2 + a^3 = 1.875 -> a = 0.5
    assert c["per_token_rate"] == pytest.approx(0.5, abs=1e-8)
    with pytest.raises(ValueError):
        rate_for(5.0, Drafting(3))


def test_garbled_and_partial_prometheus_text_is_counted_not_guessed():
    text = ("# TYPE vllm:spec_decode_num_drafts counter\n"
            'vllm:spec_decode_num_drafts_total{engine="0"} 100.0\n'
            'vllm:spec_decode_num_draft_tokens_total{engine="0"} 3x0.0\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 150.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 80.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 20.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",posi')
    t = parse_prometheus(text)
    assert t.garbled == 2 and len(t.garbled_lines) == 2
    assert "vllm:spec_decode_num_draft_tokens_total" in t.missing
    assert any("position(s) [1]" in m for m in t.missing)
    row = t.rows[0]
    assert row["draft_tokens"] is None and row["accepted_per_pos"] is None
    a = normalise(t)
    assert a.accept_length == 2.5 and a.per_position_unconditional is None


def test_counter_reset_between_scrapes_is_reported():
    reg, c, pos = vllm_registry()
    bump(c, pos, 100, [50, 20, 5])
    before = parse_prometheus(generate_latest(reg).decode())
    reg2, c2, pos2 = vllm_registry()
    bump(c2, pos2, 10, [5, 2, 1])
    d = difference(before, parse_prometheus(generate_latest(reg2).decode()), 5.0)
    # reported twice (missing and invalid_rows, the counter and both values named); the interval's row is
    # left out: after a restart no difference of the counters means anything, so none is averaged in
    assert any("went down" in m for m in d.missing)
    assert d.rows == []
    drafts = next(r for r in d.invalid_rows if r["field"] == "drafts")
    assert drafts["line"] == "interval" and "went down" in drafts["why"] and "100 -> 10" in drafts["why"]


def test_diagnosis_cases():
    assert "mapping (d2t) or the head" in compare_online_offline([0.01, 0.0, 0.0], [0.02, 0.01])
    assert "serving mismatch" in compare_online_offline([0.3, 0.1, 0.03], [0.8, 0.7, 0.6])
    assert "decays faster" in compare_online_offline([0.8, 0.3, 0.05], [0.8, 0.7, 0.6])
    assert "agrees" in compare_online_offline([0.8, 0.55, 0.35], measured=[0.8, 0.56, 0.36])
    assert conditional_from_unconditional([0.5, 0.0, 0.0]) == [0.5, 0.0, 0.0]


def test_cli_rate_for_metrics_file_and_bad_input(cli, tmp_path):
    r = cli("rate-for", "--accept-length", "1.91", "--draft-tokens", "16", "--topk", "4", "--steps", "5", "--json")
    assert r.returncode == 0 and abs(json.loads(r.stdout)["per_token_rate"] - 0.21) < 0.005
    out = tmp_path / "m.json"
    r = cli("metrics", SGLANG_LOG, "-o", out)
    assert r.returncode == 0 and "tree 5/4/16" in r.stdout and json.loads(out.read_text())["kind"] == "sglang-log"
    bad = tmp_path / "bad.txt"
    bad.write_text("nothing here\n")
    r = cli("metrics", bad)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    r = cli("metrics", SGLANG_LOG, "--interval", "1")
    assert r.returncode == 2 and "URL" in r.stderr
    r = cli("metrics", "http://127.0.0.1:9/metrics")
    assert r.returncode == 2 and "cannot fetch" in r.stderr
    with pytest.raises(BadInputError):
        read_metrics(tmp_path / "absent")


def test_reference_table_ships_with_sources_and_places_a_number():
    from helpers.acceptance.references import family_of, place, reference_values

    rows = reference_values()
    assert rows and all(r["source"].startswith("https://") and r["accept_length"] >= 1 for r in rows)
    assert family_of("moonshotai/Kimi-K2.5") == "kimi-k2"
    p = place(1.91, "kimi-k2", steps=3, topk=1, draft_tokens=4)
    assert p["rows"] and p["below"] == 0 and "published reference" in p["text"]
    assert place(1.91, "kimi-k2", steps=5, topk=4, draft_tokens=16)["rows"] == []


def test_online_offline_figure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from helpers.plots.provenance import read_figure_metadata, save_figure
    from helpers.plots.serving import plot_online_offline

    online = [0.3, 0.1, 0.03]
    text = compare_online_offline(online, [0.8, 0.7, 0.6], measured=[0.78, 0.55, 0.33])
    ax = plot_online_offline(online, [0.8, 0.7, 0.6], measured=[0.78, 0.55, 0.33], diagnosis=text)
    assert len(ax.lines) == 3 and "serving mismatch" in ax.get_title(loc="left").replace("\n", " ")
    out = save_figure(ax.figure, tmp_path / "online_offline.png", source=str(SGLANG_LOG))
    import matplotlib.pyplot as plt

    plt.close(ax.figure)
    png = [p for p in out if str(p).endswith(".png")][0]
    assert read_figure_metadata(png)


def test_bundled_metrics_samples_convert_as_worked_by_hand():
    # vLLM: 4000 drafts, 6640 accepted -> 2.66; positions 3000, 2160, 1480 / 4000
    a = normalise(read_metrics(SAMPLES / "metrics" / "vllm_metrics.txt"))
    assert a.accept_length == pytest.approx(2.66) and a.per_position_unconditional == pytest.approx([0.75, 0.54, 0.37])
    # SGLang: 285 tokens / 150 verifies = 1.9; pooled histogram [60, 55, 25, 10] -> 90, 35, 10 of 150
    b = normalise(read_metrics(SAMPLES / "metrics" / "sglang_meta_info.jsonl"))
    assert b.accept_length == pytest.approx(1.9)
    assert b.per_position_unconditional == pytest.approx([0.6, 35 / 150, 10 / 150])
    assert b.accept_length == pytest.approx(1 + sum(b.per_position_unconditional))


@pytest.mark.slow
def test_notebook_04_reads_metrics_and_says_not_given_without(tmp_path, run_notebook, notebooks_dir):
    nb = notebooks_dir / "04_accept_length_simulation.ipynb"
    out = tmp_path / "out"
    metrics = SAMPLES / "metrics" / "vllm_metrics.txt"
    quick = {"max_samples": 8, "trials": 20_000}  # the sections under test read metrics, not samples
    executed = run_notebook(nb, tmp_path / "a", {"output_dir": str(out), "metrics": str(metrics),
                                                 "speculate_per_position": [0.74, 0.53, 0.36], **quick})
    text = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "accept length (bonus token counted): 2.6600" in text
    assert "Published reference values (from their publishers, not your data)" in text
    assert (out / "online_vs_offline.png").exists()
    numbers = json.loads((out / "numbers.json").read_text())
    assert numbers["serving_metrics"]["per_position_unconditional"] == pytest.approx([0.75, 0.54, 0.37])
    assert numbers["serving_metrics"]["diagnosis"]
    # (no metrics at all: "not given: no serving metrics" is checked on notebook 04's default run,
    # tests/test_notebooks.py)
    # metrics but no log: the conclusion measures with the metrics' accept length
    out_c = tmp_path / "out_c"
    run_notebook(nb, tmp_path / "c", {"output_dir": str(out_c), "metrics": str(metrics), "logs": [], **quick})
    conclusion = json.loads((out_c / "numbers.json").read_text())["conclusion"]
    assert "Measured 2.66" in conclusion, conclusion  # the metrics accept length, as no log was given


def test_report_refuses_a_metrics_source_that_does_not_read(cli, tmp_path, samples_dir):
    bad = tmp_path / "metrics.txt"
    bad.write_text('vllm:spec_decode_num_drafts_total{engine="0"} 1x0\n')
    r = cli("report", samples_dir / "kimi_k25_mapping", "-o", tmp_path / "out", "--metrics", bad)
    assert r.returncode == 2 and "no speculative-decoding figure reads" in r.stderr
    assert not (tmp_path / "out" / "notebooks").exists()


def test_summary_lists_metrics_as_an_input_and_labels_references():
    from helpers.ui.settings import RunSettings
    from helpers.ui.summary import _accept_section, _inputs_section

    s = RunSettings(checkpoint="ck", metrics="http://h:8000/metrics")
    summary = {"numbers": {"skipped": {k: "not given" for k in ("samples", "target_head", "target_config", "embed_from",
                                                                "logs", "baseline_tps", "spec_tps")}},
               "settings": {"drafting": "chain, 3 tokens"}}
    assert any("serving metrics | `http://h:8000/metrics`" in line for line in _inputs_section(s, summary))
    lines = _accept_section({"serving_metrics": {"kind": "vllm-prometheus", "accept_length": 2.66, "per_token_rate": 0.732,
                                                 "drafting": "chain, 3 tokens", "reference_placement": "Your 2.66 ..."}})
    assert any("published reference values (not your data)" in line for line in lines)
