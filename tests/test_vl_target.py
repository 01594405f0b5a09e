"""Vision-language targets (SpecForge#310): a Qwen2.5-VL / Qwen3-VL wrapper (transformers' own
classes, config with `text_config`, the language model inside) made by scripts/make_vl_target.py
from the bundled tiny target's language weights, run text-only by capture, doctor --target and
speculate. The kit's capture hooks are checked against transformers' own `output_hidden_states`."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import SAMPLES, run_cli, script_module
from helpers.io.samples import load_sample, sample_files
from helpers.model.target import HiddenStateCapture, load_target

DRAFT, TARGET = SAMPLES / "tiny_draft_sglang", SAMPLES / "tiny_target"
VAL_PROMPTS = SAMPLES / "prompts" / "val.jsonl"


@pytest.fixture(scope="module")
def vl(tmp_path_factory, one_thread):
    out = tmp_path_factory.mktemp("vl")
    make = script_module("make_vl_target").make
    return {f: make(out / f, f) for f in ("qwen2_5_vl", "qwen3_vl")}


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_capture_hooks_equal_transformers_hidden_states(vl, family):
    t = load_target(vl[family], device="cpu", dtype="float32")
    assert type(t.model).__name__.endswith("ForConditionalGeneration")
    assert t.num_layers == 8 and t.hidden_size == 64 and t.vocab_size == 4096
    ids = torch.randint(3, 4000, (1, 24), generator=torch.Generator().manual_seed(1))
    layers = t.aux_layers("sglang", [1, 3, 4])
    assert layers == [2, 4, 5]  # SGLang adds 1 for VL wrappers too (qwen2_5_vl.py / qwen3_vl.py)
    with torch.no_grad(), HiddenStateCapture(t, layers) as cap:
        out = t.model(input_ids=ids, output_hidden_states=True)
        aux, last = cap.aux(), cap.last()
    hs = out.hidden_states  # [embeddings, after layer 0, ...]: hs[i] is the input of layer i
    assert torch.equal(aux, torch.cat([hs[i] for i in layers], dim=-1))
    normed = t.decoder.norm(hs[-1]) if not torch.allclose(hs[-1], last) else hs[-1]
    assert torch.allclose(last, normed, atol=1e-6)


def test_the_qwen25_vl_wrapper_computes_the_tiny_target(vl):
    ids = torch.randint(3, 4000, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        a = load_target(vl["qwen2_5_vl"], device="cpu", dtype="float32", tokenizer=False).model(ids).logits
        b = load_target(TARGET, device="cpu", dtype="float32", tokenizer=False).model(ids).logits
    assert (a - b).abs().max() < 1e-4


def test_capture_on_a_vl_target_gives_the_samples_states(vl, tmp_path):
    r = run_cli("capture", vl["qwen2_5_vl"], "--prompts", VAL_PROMPTS, "-o", tmp_path / "cap", "--draft", DRAFT,
                "--regenerate", "--max-new-tokens", "24", "--max-prompts", "2", "--json")
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)["manifest"]
    assert m["captured_layers"] == [2, 4, 5] and m["target"]["model_type"] == "qwen2_5_vl"
    stored = sample_files(SAMPLES / "tiny_hidden_states" / "val")[:2]
    for mine, theirs in zip(sample_files(tmp_path / "cap"), stored):
        a, b = load_sample(mine), load_sample(theirs)
        assert torch.equal(a.input_ids, b.input_ids)
        assert (a.aux_hidden_state.float() - b.aux_hidden_state.float()).abs().max() < 0.05


def test_doctor_with_a_vl_target(vl):
    r = run_cli("doctor", DRAFT, "--target", vl["qwen2_5_vl"], "--no-weights", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(r.stdout)
    assert not [f for f in d["findings"] if f["severity"] == "error"]
    aux = [f["message"] for f in d["findings"] if f["code"] == "aux-layers"]
    assert any("[2, 4, 5]" in m and "of 8" in m for m in aux), aux


def test_speculate_with_a_vl_target_is_the_tiny_targets_run(vl):
    runs = {}
    for name, target in (("vl", vl["qwen2_5_vl"]), ("text", TARGET)):
        r = run_cli("speculate", DRAFT, "--target", target, "--prompts", VAL_PROMPTS, "--max-prompts", "2",
                    "--max-new-tokens", "16", "--readings", "offset", "--json")
        assert r.returncode == 0, r.stderr
        runs[name] = json.loads(r.stdout)["readings"]["offset"]
    assert runs["vl"]["mean_accept_length"] == runs["text"]["mean_accept_length"] > 1.5
    assert [p["output_ids"] for p in runs["vl"]["prompts"]] == [p["output_ids"] for p in runs["text"]["prompts"]]


def test_speculate_with_a_qwen3_vl_target_runs(vl):
    r = run_cli("speculate", DRAFT, "--target", vl["qwen3_vl"], "--prompts", VAL_PROMPTS, "--max-prompts", "1",
                "--max-new-tokens", "8", "--readings", "offset", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["readings"]["offset"]["verify_steps"] >= 1


def test_a_qwen2_vl_target_is_refused_where_the_engine_table_says(vl, tmp_path):
    """Qwen2-VL's wrapper has no EAGLE-3 capture in SGLang 0.5.23 nor vLLM 0.34.0 (rule vl.refuses): the doctor
    predicts a refusal at start-up for those releases; Qwen2.5-VL is served as a text target is."""
    cfg = json.loads((vl["qwen2_5_vl"] / "config.json").read_text())
    cfg["model_type"] = "qwen2_vl"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for engine in ("sglang==0.5.23", "vllm==0.34.0"):
        r = run_cli("doctor", str(DRAFT), "--engine", engine, "--target-config", str(tmp_path / "config.json"), "--json")
        out = json.loads(r.stdout)
        found = [f for f in out["findings"] if f["code"] == "vl-target-unsupported"]
        assert r.returncode == 1 and found, (engine, r.stderr)
        assert next(iter(out["predicted_outcome"].values()))["result"] == "refuses"
    ok = run_cli("doctor", str(DRAFT), "--engine", "vllm==0.34.0", "--target-config", str(vl["qwen2_5_vl"] / "config.json"),
                 "--json")
    assert "vl-target-unsupported" not in {f["code"] for f in json.loads(ok.stdout)["findings"]}
