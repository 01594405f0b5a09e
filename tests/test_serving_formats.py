"""Serving-log and metrics formats by engine version, each parsed to the number its line states.

Every line here is written for this test in the shape the engines print (vLLM
`vllm/v1/spec_decode/metrics.py` 0.8.5-0.10.1 and 0.10.2 on; SGLang's `server_args=` line in its
ServerArgs and dict forms); the counts are chosen so each line is self-consistent.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest

from helpers.acceptance.sources import normalise
from helpers.core.errors import BadInputError
from helpers.serving.log_lines import Garbled, parse_line
from helpers.serving.logs import parse_lines, read_log
from helpers.serving.metrics import read_metrics
from helpers.serving.startup import drafting_from_line


def vllm_new(mean="2.16", accepted=580, drafted=1500, per="0.640, 0.360, 0.160", rate="38.7", prefix=""):
    return (f"{prefix}INFO 07-08 09:10:11 [loggers.py:127] SpecDecoding metrics: Mean acceptance length: {mean}, "
            f"Accepted throughput: 58.00 tokens/s, Drafted throughput: 150.00 tokens/s, Accepted: {accepted} tokens, "
            f"Drafted: {drafted} tokens, Per-position acceptance rate: {per}, Avg Draft acceptance rate: {rate}%")


# 500 drafts of 3 tokens; accepted per position 320, 180, 80 (580 in all)
VLLM_09 = ("INFO 07-08 09:10:21 [metrics.py:94] SpecDecoding metrics: Draft acceptance rate: 38.7%, Mean acceptance "
           "length: 2.16, Accepted: 580 tokens, Drafted: 1500 tokens, Per-position acceptance rate: 0.640, 0.360, 0.160")


def _log(tmp_path, lines, name="serve.log"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def test_vllm_0_9_form_reads_every_number(tmp_path):
    r = parse_line(VLLM_09, year=2025)
    assert r["format"] == "vllm-0.9" and not r.get("cut")
    assert (r["accept_length"], r["accepted"], r["drafted"], r["drafts"]) == (2.16, 580, 1500, 500)
    assert r["accept_rate"] == pytest.approx(0.387) and r["per_position"] == [0.64, 0.36, 0.16]
    assert r["time"] == pd.Timestamp("2025-07-08 09:10:21")
    a = normalise(read_metrics(str(_log(tmp_path, [VLLM_09, VLLM_09])), year=2025))
    assert a.accept_length == pytest.approx(2.16) and a.per_position_unconditional == pytest.approx([0.64, 0.36, 0.16])
    assert a.drafting == "chain, 3 tokens"


def test_vllm_0_8_5_mean_without_the_bonus_token_gets_it():
    line = VLLM_09.replace("Mean acceptance length: 2.16", "Mean acceptance length: 1.16")
    r = parse_line(line, year=2025)
    assert r["accept_length"] == pytest.approx(2.16) and r["mean_without_bonus"] and r["drafts"] == 500


def test_variable_length_drafter_counts_drafts_from_its_own_mean(tmp_path):
    # suffix decoding: 24 positions, 100 drafts of varying length (1110 tokens); 78 accepted
    per = [0.40, 0.18, 0.08, 0.05, 0.03, 0.02, 0.01, 0.01] + [0.0] * 16
    line = vllm_new(mean="1.78", accepted=78, drafted=1110, per=", ".join(f"{x:.3f}" for x in per), rate="7.0")
    r = parse_line(line, year=2026)
    assert r["variable"] and r["drafts"] == pytest.approx(100.0)
    a = normalise(read_metrics(str(_log(tmp_path, [line])), year=2026))
    assert a.accept_length == pytest.approx(1.78)  # not 1 + 78 / (1110 / 24) = 2.69
    # two lines pooled by their drafts: 100 and 50 drafts (30 accepted at mean 1.60)
    other = vllm_new(mean="1.60", accepted=30, drafted=700, per=", ".join(["0.300", "0.200", "0.100"] + ["0.000"] * 21),
                     rate="4.3")
    b = normalise(read_metrics(str(_log(tmp_path, [line, other], "two.log")), year=2026))
    assert b.accept_length == pytest.approx(1 + (78 + 30) / (100 + 50))
    assert any("varies per step" in n for n in b.notes)


def test_fixed_length_lines_keep_drafted_over_positions():
    r = parse_line(vllm_new(), year=2026)
    assert r["drafts"] == 500 and not r.get("variable")


def test_nan_interval_without_drafts_is_an_empty_row(tmp_path):
    empty = vllm_new(mean="nan", accepted=0, drafted=0, per="nan, nan, nan", rate="nan")
    r = parse_line(empty, year=2026)
    assert r["drafts"] == 0 and "accept_length" not in r and "accept_rate" not in r and "per_position" not in r
    t = parse_lines([empty, vllm_new()], year=2026)
    assert (t.parsed, t.garbled) == (2, 0) and t.summary()["empty_intervals"] == 1
    assert t.summary()["mean_accept_length"] == pytest.approx(2.16)
    a = normalise(read_metrics(str(_log(tmp_path, [empty, vllm_new()])), year=2026))
    assert a.accept_length == pytest.approx(2.16) and any("without drafts" in n for n in a.notes)
    with pytest.raises(Garbled):  # nan where drafts were counted is not an empty interval
        parse_line(vllm_new(mean="nan"), year=2026)


def test_lines_cut_after_the_accept_length_keep_it():
    v = vllm_new()
    cut = v[: v.index("Drafted throughput") + len("Drafted throughput: 15")]
    r = parse_line(cut, year=2026)
    assert r["cut"] and r["accept_length"] == 2.16 and "drafted_tps" not in r and "drafts" not in r
    s = ("[2026-01-05 10:00:04 TP0] Decode batch, #running-req: 3, #token: 2154, token usage: 0.02, accept len: 1.93, "
         "accept rate: 0.12, cuda graph: True, gen throughput (token/s): 46.85, #queue-req: 2")
    for end in ("accept rate: 0.1", "cuda gr", "gen throughput (token/s): 4"):
        r = parse_line(s[: s.index(end) + len(end)])
        assert r["cut"] and r["accept_length"] == 1.93 and "queue_req" not in r, end
    assert parse_line(s[: s.index("accept rate: 0.1") + len("accept rate: 0.1")]).get("accept_rate") is None
    with pytest.raises(Garbled, match="truncated"):
        parse_line(s[: s.index("accept len: 1.9") + len("accept len: 1.9")])
    t = parse_lines([cut, v], year=2026)
    assert t.summary()["cut"] == 1 and t.parsed == 2


def test_container_prefixes_keep_the_timestamp(tmp_path):
    r = parse_line(vllm_new(prefix="vllm-1  | "), year=2026)
    assert r["time"] == pd.Timestamp("2026-07-08 09:10:11") and r["accept_length"] == 2.16
    r = parse_line("sglang-server-1  | [2026-01-05 10:00:04 TP0] Decode batch, #running-req: 1, #token: 9, token "
                   "usage: 0.00, accept len: 3.10, accept rate: 0.78, cuda graph: True, gen throughput (token/s): "
                   "90.00, #queue-req: 0")
    assert r["time"] == pd.Timestamp("2026-01-05 10:00:04") and r["accept_length"] == 3.1


def test_year_of_a_vllm_log(tmp_path, cli):
    p = _log(tmp_path, [vllm_new()])
    assert read_log(p, year=2024).summary()["first_time"].startswith("2024-07-08")
    d = json.loads(cli("logs", p, "--year", "2024", "--json").stdout)
    assert d["first_time"].startswith("2024-07-08") and d["rows"][0]["time"].startswith("2024-07-08")
    assert cli("metrics", p, "--year", "2024").returncode == 0


def test_sglang_dict_form_start_up_line(tmp_path, cli):
    line = ("[2026-04-01 08:00:00] server_args={'model_path': '/m', 'tp_size': 1, 'speculative_algorithm': 'EAGLE3', "
            "'speculative_draft_model_path': '/d', 'speculative_num_steps': 1, 'speculative_eagle_topk': 1, "
            "'speculative_num_draft_tokens': 2, 'speculative_token_map': None}")
    assert drafting_from_line(line) == {"steps": 1, "topk": 1, "draft_tokens": 2, "source": "server_args"}
    decode = ("[2026-04-01 08:00:10 TP0] Decode batch, #running-req: 1, #token: 50, token usage: 0.00, accept len: "
              "1.60, accept rate: 0.80, cuda graph: True, gen throughput (token/s): 70.00, #queue-req: 0")
    p = _log(tmp_path, [line, decode])
    m = json.loads(cli("metrics", p, "--json").stdout)
    assert m["drafting"] == "chain, 1 tokens" and m["per_token_rate"] == pytest.approx(0.6)
    assert m["reading"]["settings"] == {"steps": 1, "topk": 1, "draft_tokens": 2}


def test_a_dump_without_the_accepted_counter_says_so(tmp_path, cli):
    text = ("# TYPE vllm:spec_decode_num_drafts counter\n"
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 120.0\n'
            "# TYPE vllm:spec_decode_num_draft_tokens counter\n"
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 360.0\n')
    p = tmp_path / "metrics.txt"
    p.write_text(text)
    r = cli("metrics", p)
    assert r.returncode == 0, r.stderr
    assert "no accepted-tokens counter" in r.stdout and "although 120 drafts were counted" in r.stdout
    assert "no drafts counted" not in r.stdout
    p.write_text(text.replace("120.0", "0.0") + 'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 0.0\n')
    assert "no drafts counted (the drafts counter is 0)" in cli("metrics", p).stdout
    # the per-request form of the same dump
    q = tmp_path / "requests.jsonl"
    q.write_text(json.dumps({"request_id": "a", "num_drafts": 30, "num_draft_tokens": 90}) + "\n"
                 + json.dumps({"request_id": "b", "num_drafts": 20, "num_draft_tokens": 60}) + "\n")
    r = cli("metrics", q)
    assert r.returncode == 0 and "although 50 drafts were counted" in r.stdout, r.stdout + r.stderr


def test_cut_lines_alone_still_give_an_accept_length(tmp_path):
    v = vllm_new()
    cut = v[: v.index("Accepted throughput")]
    a = normalise(read_metrics(str(_log(tmp_path, [cut, cut])), year=2026))
    assert a.accept_length == pytest.approx(2.16) and any("cut short" in n for n in a.notes)


def test_nothing_readable_is_one_line(tmp_path):
    p = _log(tmp_path, ["INFO 07-08 09:10:11 [loggers.py:127] SpecDecoding metrics: Mean acceptance len"])
    with pytest.raises(BadInputError, match="garbled"):
        read_log(p)
