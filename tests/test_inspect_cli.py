"""`python -m helpers inspect`: the first thing a user runs."""
from __future__ import annotations

import json


def test_inspect_json_on_kimi_sample(cli, samples_dir):
    r = cli("inspect", samples_dir / "kimi_k25_mapping", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["verdict"] == "offset"
    assert (out["draft_vocab_size"], out["target_vocab_size"]) == (32_000, 163_840)
    assert out["zero_entries"] == 124 and out["leading_zero_run"] == 124
    assert out["distinct_values"] == 20_954
    assert out["offset_reading"]["distinct_targets"] == 32_000 and out["offset_reading"]["matches_t2d"] is True
    assert out["offset_reading"]["in_range"] is True
    assert out["absolute_reading"]["distinct_targets"] == 20_954 and out["absolute_reading"]["matches_t2d"] is False
    assert [p.split("/")[-1] for p in out["sources"]] == ["d2t.pt", "t2d.pt"]


def test_inspect_json_on_misencoded_copy(cli, samples_dir):
    r = cli("inspect", samples_dir / "kimi_k25_mapping_absolute", "--json")
    assert r.returncode == 0
    out = json.loads(r.stdout)
    assert out["verdict"] == "absolute"
    assert out["absolute_reading"]["matches_t2d"] is True and out["offset_reading"]["in_range"] is False


def test_inspect_report_is_readable(cli, samples_dir):
    r = cli("inspect", samples_dir / "kimi_k25_mapping")
    assert r.returncode == 0
    assert "verdict: OFFSET" in r.stdout and "20,954" in r.stdout and "32,000" in r.stdout


def test_inspect_bad_input_exits_2_with_one_line(cli, tmp_path):
    r = cli("inspect", tmp_path / "nope")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no such file" in r.stderr and "Traceback" not in r.stderr


def test_help_explains(cli):
    r = cli("inspect", "--help")
    assert r.returncode == 0 and "offset" in r.stdout and "absolute" in r.stdout and "d2t-32000.npy" in r.stdout
