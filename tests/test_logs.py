"""Serving-log reader: SGLang (current and older) and vLLM lines, garbled and unrelated lines, CLI."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from helpers.core.errors import BadInputError
from helpers.serving.log_lines import Garbled, parse_line
from helpers.serving.logs import parse_lines, read_log
from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]

LOGS = SAMPLES / "logs"

SGL = ("[2026-01-05 10:00:04 TP0] Decode batch, #running-req: 3, #token: 2154, token usage: 0.02, accept len: 1.93, "
       "accept rate: 0.12, cuda graph: True, gen throughput (token/s): 46.85, #queue-req: 2")
SGL_OLD = ("[2025-06-02 14:30:03] Decode batch. #running-req: 1, #token: 474, token usage: 0.00, accept len: 1.07, "
           "gen throughput (token/s): 26.75, #queue-req: 0, ")
VLLM = ("(APIServer pid=4121) INFO 01-05 11:00:10 [loggers.py:123] SpecDecoding metrics: Mean acceptance length: 2.67, "
        "Accepted throughput: 96.30 tokens/s, Drafted throughput: 172.50 tokens/s, Accepted: 963 tokens, Drafted: "
        "1725 tokens, Per-position acceptance rate: 0.779, 0.539, 0.357, Avg Draft acceptance rate: 55.8%")
VLLM_STATS = ("(APIServer pid=4121) INFO 01-05 11:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 18.7 "
              "tokens/s, Avg generation throughput: 153.8 tokens/s, Running: 2 reqs, Waiting: 1 reqs, GPU KV cache "
              "usage: 0.4%, Prefix cache hit rate: 12.5%")


def test_sglang_current_line_every_field():
    r = parse_line(SGL)
    assert r["engine"] == "sglang" and r["format"] == "sglang"
    assert r["time"] == pd.Timestamp("2026-01-05 10:00:04")
    assert (r["running_req"], r["tokens"], r["token_usage"]) == (3, 2154, 0.02)
    assert (r["accept_length"], r["accept_rate"], r["throughput"], r["queue_req"]) == (1.93, 0.12, 46.85, 2)
    assert r["cuda_graph"] is True


def test_sglang_old_line():
    r = parse_line(SGL_OLD)
    assert r["format"] == "sglang-old" and "accept_rate" not in r
    assert (r["accept_length"], r["throughput"], r["tokens"], r["queue_req"]) == (1.07, 26.75, 474, 0)
    assert r["time"] == pd.Timestamp("2025-06-02 14:30:03")


def test_sglang_variants():
    # forward counter, hybrid pool fields, cpu graph, an MFU suffix after #queue-req
    line = ("[2026-02-01 08:00:00 DP0 TP0] Decode batch [1234], #running-req: 8, #full token: 9000, full token usage: "
            "0.20, #swa token: 100, swa token usage: 0.01, accept len: 3.41, accept rate: 0.85, cpu graph: False, "
            "gen throughput (token/s): 812.50, #queue-req: 0, est. decode TFLOPS/s (per GPU): 12.00")
    r = parse_line(line)
    assert (r["running_req"], r["tokens"], r["token_usage"], r["accept_length"]) == (8, 9000, 0.20, 3.41)
    assert r["cuda_graph"] is False and r["throughput"] == 812.5


def test_vllm_line_every_field():
    r = parse_line(VLLM, year=2026)
    assert r["engine"] == "vllm" and r["format"] == "vllm"
    assert r["time"] == pd.Timestamp("2026-01-05 11:00:10")
    assert r["accept_length"] == 2.67 and r["accept_rate"] == pytest.approx(0.558)
    assert (r["accepted_tps"], r["drafted_tps"], r["accepted"], r["drafted"]) == (96.3, 172.5, 963, 1725)
    assert r["per_position"] == [0.779, 0.539, 0.357]


def test_vllm_stats_line_feeds_the_next_row():
    t = parse_lines([VLLM_STATS, VLLM], year=2026)
    assert t.parsed == 1 and t.context == 1 and t.unrecognised == 0
    row = t.table.iloc[0]
    assert (row["throughput"], row["running_req"], row["queue_req"]) == (153.8, 2, 1)
    assert row["line"] == 2


def test_vllm_older_form_without_accept_length():
    line = "INFO 03-04 05:06:07 metrics.py:101] SpecDecoding metrics: Draft acceptance rate: 61.5%, Accepted: 80 tokens, Drafted: 130 tokens"
    r = parse_line(line, year=2025)
    assert r["format"] == "vllm-old" and r["accept_rate"] == pytest.approx(0.615)
    assert "accept_length" not in r and (r["accepted"], r["drafted"]) == (80, 130)
    assert r["time"] == pd.Timestamp("2025-03-04 05:06:07")


@pytest.mark.parametrize("bad", [
    SGL.replace("accept len: 1.93", "accept len: 1.9.3"),
    SGL.replace("accept len: 1.93", "accept len: 1O.93"),
    SGL.replace("accept len: 1.93", "accept len: "),
    SGL.replace("accept len: 1.93", "accept len: 1."),
    SGL.replace("#running-req: 3", "#running-req: 3.5"),
    SGL.replace("cuda graph: True", "cuda graph: Tru"),
    SGL.replace("2026-01-05", "2026-13-05"),
    VLLM.replace("Mean acceptance length: 2.67", "Mean acceptance length: nan"),
    VLLM.replace("55.8%", "5x.8%"),
    VLLM.replace("0.539", "0.5-39"),
    VLLM[: VLLM.index("Mean acceptance length: 2.67") + len("Mean acceptance length: 2.6")],  # cut in its accept length
    SGL[: SGL.index("accept len: 1.93") + len("accept len: 1.9")],  # cut in its accept length
    VLLM.replace("0.779, 0.539, 0.357", "0.779, 0.539"),  # the rates cannot belong to the mean
])
def test_garbled_numbers_raise_and_are_never_guessed(bad):
    with pytest.raises(Garbled):
        parse_line(bad, year=2026)
    t = parse_lines([SGL, bad, VLLM], year=2026)
    assert t.garbled == 1 and t.parsed == 2
    assert t.garbled_lines[0][0] == 2 and 2 not in t.table["line"].tolist()


def test_unrelated_lines_are_counted():
    lines = [
        "[2026-01-05 10:00:02 TP0] Prefill batch, #new-seq: 1, #new-token: 812, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, ",
        'INFO:     127.0.0.1:53110 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "",
        SGL,
    ]
    t = parse_lines(lines)
    assert (t.total, t.parsed, t.unrecognised, t.garbled) == (4, 1, 3, 0)


def test_vllm_year_rolls_over():
    a = VLLM.replace("01-05 11:00:10", "12-31 23:59:50")
    b = VLLM.replace("01-05 11:00:10", "01-01 00:00:10")
    t = parse_lines([a, b], year=2025)
    assert t.table["time"].tolist() == [pd.Timestamp("2025-12-31 23:59:50"), pd.Timestamp("2026-01-01 00:00:10")]
    assert t.table["seconds"].tolist() == [0.0, 20.0]


# -- the bundled sample logs -------------------------------------------------------------------
def _recognised(path):
    return sum(1 for ln in path.read_text().splitlines() if "Decode batch" in ln or "SpecDecoding metrics" in ln)


@pytest.mark.parametrize("name,fmt,garbled", [("sglang.log", "sglang", 2), ("sglang_old.log", "sglang-old", 2),
                                              ("vllm.log", "vllm", 2)])
def test_sample_logs_parse_with_every_field(name, fmt, garbled):
    path = LOGS / name
    log = read_log(path, year=2026)
    t = log.table
    assert log.total == len(path.read_text().splitlines()) and 200 <= log.total <= 1000
    assert log.garbled == garbled
    assert log.parsed + log.garbled == _recognised(path)
    assert set(t["format"]) == {fmt}
    assert t["time"].notna().all() and t["time"].is_monotonic_increasing and t["seconds"].iloc[0] == 0
    want = ["accept_length", "throughput", "running_req", "queue_req"]
    if fmt.startswith("sglang"):
        want += ["tokens", "token_usage"] + (["accept_rate", "cuda_graph"] if fmt == "sglang" else [])
    else:
        want += ["accept_rate", "accepted", "drafted", "accepted_tps", "drafted_tps", "per_position"]
    whole = t[t["cut"] != True]  # noqa: E712 (a line cut short keeps only what ends before the cut)
    assert len(whole) >= len(t) - 1
    for col in want:
        assert whole[col].notna().all(), col
    assert (t["accept_length"] >= 1.0).all()
    if fmt == "vllm":
        # vLLM's mean acceptance length is 1 + accepted / drafts, drafts = drafted / k
        k = t["per_position"].map(len)
        assert (abs(t["accept_length"] - (1 + t["accepted"] / (t["drafted"] / k))) < 0.006).all()
        assert (abs(1 + t["per_position"].map(sum) - t["accept_length"]) < 0.01).all()


def test_sample_logs_tell_the_investigation():
    # sglang.log: the bundled tiny draft served with d2t read as absolute ids (scripts/make_logs.py):
    # every verify step accepts only the target's token; throughput at the investigation's step cost
    sgl = read_log(LOGS / "sglang.log").summary()
    assert sgl["mean_accept_length"] == pytest.approx(1.0, abs=0.01)
    assert sgl["mean_throughput"] == pytest.approx(90 / (1.9 * 90 / 46.7), rel=0.05)
    assert read_log(LOGS / "sglang_old.log").summary()["mean_accept_length"] < 1.15


@pytest.mark.slow  # the script runs the engine-free loop for sglang.log
def test_make_logs_is_deterministic(tmp_path):
    p = subprocess.run([sys.executable, "-m", "scripts.make_logs", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    for name in ("sglang.log", "sglang_old.log", "vllm.log"):
        assert (tmp_path / name).read_bytes() == (LOGS / name).read_bytes(), name


def test_read_log_bad_input(tmp_path):
    with pytest.raises(BadInputError, match="no such log file"):
        read_log(tmp_path / "missing.log")
    f = tmp_path / "other.log"
    f.write_text("hello\nworld\n")
    with pytest.raises(BadInputError, match="other.log"):
        read_log(f)


# -- CLI -----------------------------------------------------------------------------------------
def test_cli_logs_json_and_plot(tmp_path, cli):
    out = tmp_path / "accept.png"
    p = cli("logs", str(LOGS / "sglang.log"), "--json", "--plot", str(out))
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["parsed"] == len(d["rows"]) and d["garbled"] == 2 and d["cut"] == 1
    assert d["rows"][0]["accept_length"] is not None and d["rows"][0]["time"].startswith("2026-01-05")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_logs_report_and_bad_file(tmp_path, cli):
    p = cli("logs", str(LOGS / "vllm.log"))
    assert p.returncode == 0 and "garbled 2" in p.stdout and "accept length: mean 2.6" in p.stdout
    f = tmp_path / "x.log"
    f.write_text("nothing here\n")
    p = cli("logs", str(f))
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "x.log" in p.stderr


def test_pooled_measurement_weights_every_row_of_every_log_alike():
    from helpers.serving.logs import parse_lines, pooled_measurement

    def line(al, tps):
        return (f"[2026-01-05 10:00:00 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.00, "
                f"accept len: {al}, accept rate: 0.10, cuda graph: True, gen throughput (token/s): {tps}, #queue-req: 0")

    a = parse_lines([line(1.5, 40.0), line(2.5, 60.0)])
    b = parse_lines([line(2.0, 50.0)])
    assert pooled_measurement([a, b]) == (2.0, 50.0, 3)
    assert pooled_measurement([]) == (None, None, 0)
