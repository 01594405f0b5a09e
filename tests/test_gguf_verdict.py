"""inspect, doctor and fix on a llama.cpp draft GGUF, run as a user would (`python -m helpers ... --json`).

In a GGUF, d2t holds absolute target ids (llama.cpp's converter writes d2t + arange(N), and llama.cpp
reads them as ids): that is healthy for llama.cpp, and offsets in a GGUF are the bug. The GGUFs are
written here from the bundled data_samples/engine_llama draft with the kit's writer.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from safetensors.torch import load_file

from helpers.io.gguf_files import copy_gguf, stored_d2t, write_draft_gguf
from conftest import SAMPLES


PAIR = SAMPLES / "engine_llama"


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf_verdict")
    tensors = load_file(str(PAIR / "draft" / "model.safetensors"))
    cfg = json.loads((PAIR / "draft" / "config.json").read_text())
    tcfg = json.loads((PAIR / "target" / "config.json").read_text())
    good = write_draft_gguf(d / "draft.gguf", tensors, cfg, tcfg, model_dir=PAIR / "draft")
    ids = stored_d2t(good)
    bad = copy_gguf(good, d / "offsets.gguf", {"d2t": ids - np.arange(ids.size)})
    return {"good": good, "offsets": bad, "dir": d, "hf_d2t": tensors["d2t"].numpy()}


def _json(r):
    assert "Traceback" not in r.stderr, r.stderr
    return json.loads(r.stdout)


def test_inspect_a_converter_gguf_is_healthy_for_llamacpp(ggufs, cli_subprocess):
    r = cli_subprocess("inspect", ggufs["good"], "--json")
    d = _json(r)
    assert r.returncode == 0
    assert d["verdict"] == "absolute" and d["format"] == "gguf" and d["stored_convention"] == "absolute"
    assert d["read_by"] == {"engines": ["llama.cpp"], "reads": "absolute"}
    assert d["engine_reading"]["healthy"] is True and "healthy for llama.cpp" in d["engine_reading"]["says"]
    assert d["key_layout"] == "midlayer" and d["draft_vocab_size"] == 800  # the existing fields are kept
    text = cli_subprocess("inspect", ggufs["good"]).stdout
    assert "llama.cpp reads its d2t as absolute target ids" in text and "healthy for llama.cpp" in text


def test_inspect_a_gguf_holding_offsets_names_the_bug(ggufs, cli_subprocess):
    d = _json(cli_subprocess("inspect", ggufs["offsets"], "--json"))
    assert d["verdict"] == "offset" and d["format"] == "gguf"
    assert d["engine_reading"]["healthy"] is False
    assert "offsets stored where llama.cpp reads absolute ids" in d["engine_reading"]["says"]
    assert "llama.cpp proposes wrong tokens" in d["engine_reading"]["says"]


def test_inspect_an_hf_checkpoint_gets_the_same_fields(cli_subprocess):
    d = _json(cli_subprocess("inspect", PAIR / "draft", "--json"))
    assert d["format"] == "hf" and d["stored_convention"] == "offset" and d["engine_reading"]["healthy"] is True
    assert "llama.cpp" not in d["read_by"]["engines"]


def test_doctor_a_converter_gguf_finds_no_error(ggufs, cli_subprocess):
    r = cli_subprocess("doctor", ggufs["good"], "--json")
    d = _json(r)
    assert r.returncode == 0 and d["ok"] and d["counts"]["error"] == 0
    codes = {f["code"] for f in d["findings"]}
    assert "d2t-absolute" not in codes and "gguf-d2t-offsets" not in codes
    assert "gguf-format" in codes  # sglang and vllm asked for (the default): checked as llama.cpp reads it
    assert list(d["predicted_outcome"]) == ["llamacpp"]
    d = _json(cli_subprocess("doctor", ggufs["good"], "--engine", "llamacpp", "--json"))
    assert "gguf-format" not in {f["code"] for f in d["findings"]} and d["ok"]


def test_doctor_a_gguf_holding_offsets_is_an_error_for_llamacpp(ggufs, cli_subprocess):
    r = cli_subprocess("doctor", ggufs["offsets"], "--engine", "llamacpp", "--json")
    d = _json(r)
    assert r.returncode == 1 and not d["ok"]
    f = next(f for f in d["findings"] if f["code"] == "gguf-d2t-offsets")
    assert f["severity"] == "error" and "llama.cpp reads absolute target ids" in f["message"]
    assert "d2t-lab fix" in f["fix"]
    served = d["predicted_outcome"]["llamacpp"]  # starts, and proposes the wrong tokens
    assert served["result"] == "serves" and served["accept"] == "about-1"


def test_fix_a_gguf_holding_offsets_writes_absolute_ids(ggufs, cli_subprocess):
    src = ggufs["offsets"]
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    dst = ggufs["dir"] / "fixed.gguf"
    r = cli_subprocess("fix", src, dst, "--json")
    d = _json(r)
    assert r.returncode == 0 and d["written"] and d["fixes"] == ["gguf-d2t-offsets"]
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before  # the source is never touched
    np.testing.assert_array_equal(stored_d2t(dst), ggufs["hf_d2t"] + np.arange(800))
    assert dst.read_bytes() == ggufs["good"].read_bytes()  # every other key and tensor copied as stored
    again = cli_subprocess("fix", ggufs["good"], ggufs["dir"] / "again.gguf")
    assert again.returncode == 2 and "nothing to fix for llamacpp" in again.stderr
    assert not (ggufs["dir"] / "again.gguf").exists()


def test_fix_an_hf_checkpoint_for_llamacpp_names_the_converter(ggufs, cli_subprocess):
    r = cli_subprocess("fix", PAIR / "draft", ggufs["dir"] / "out.gguf", "--engine", "llamacpp")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "convert_hf_to_gguf.py" in r.stderr and "--target-model-dir" in r.stderr
    assert not (ggufs["dir"] / "out.gguf").exists()


def test_diff_an_hf_checkpoint_and_its_gguf(ggufs, cli_subprocess):
    d = _json(cli_subprocess("diff", PAIR / "draft", ggufs["good"], "--json"))
    assert not d["moved"] and not d["added"] and not d["removed"]  # each read as stored: the same target ids
    assert (d["convention_a"], d["convention_b"]) == ("offset", "absolute")
    assert "d2t-lab fix" not in d["verdict"]  # both are right for the engines that read them
    d = _json(cli_subprocess("diff", PAIR / "draft", ggufs["offsets"], "--json"))
    assert "llama.cpp reads absolute ids" in d["verdict"] and "d2t-lab fix" in d["verdict"]
