"""The Hugging Face target: which layers each engine captures, checks against a draft, prompts and templates."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import SAMPLES


TARGET = SAMPLES / "tiny_target"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def _random_target(folder: Path, *, vocab=4096, hidden=32, layers=6, seed=0, embed=None) -> Path:
    """A random-weight Llama saved as a Hugging Face folder, with the bundled tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(cfg)
    if embed is not None:
        with torch.no_grad():
            model.model.embed_tokens.weight.copy_(embed)
    model.save_pretrained(folder)
    for f in TOKENIZER_FILES:
        if (TARGET / f).exists():
            shutil.copy(TARGET / f, folder / f)
    return folder


@torch.no_grad()
def _layer_inputs(model, ids: torch.Tensor) -> list[torch.Tensor]:
    """By hand: the input of every decoder layer (embedding, then each layer applied in turn)."""
    dec = model.model
    h = dec.embed_tokens(ids)
    pos = torch.arange(ids.shape[1])[None]
    pe = dec.rotary_emb(h, pos)
    inputs = []
    for layer in dec.layers:
        inputs.append(h)
        out = layer(h, attention_mask=None, position_ids=pos, position_embeddings=pe)
        h = out[0] if isinstance(out, tuple) else out
    inputs.append(h)  # after the last layer, before the final norm
    return inputs


@pytest.mark.slow
@pytest.mark.parametrize("engine,shift", [("sglang", 1), ("vllm", 0)])
def test_each_engine_captures_its_own_layers(cli, tmp_path, engine, shift):
    """Configured ids 0,2,3: SGLang feeds the inputs of layers 1,3,4, vLLM those of 0,2,3."""
    from transformers import AutoModelForCausalLM

    from helpers.io.samples import iter_samples

    tgt = _random_target(tmp_path / "target")
    out = tmp_path / engine
    r = cli("capture", str(tgt), "--prompts", str(SAMPLES / "prompts.jsonl"), "--regenerate", "--max-new-tokens", "4",
            "--max-samples", "2", "--engine", engine, "--aux-layers", "0,2,3", "--device", "cpu", "-o", str(out))
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "capture.json").read_text())
    assert manifest["captured_layers"] == [i + shift for i in (0, 2, 3)]
    model = AutoModelForCausalLM.from_pretrained(tgt, dtype=torch.float32).eval()
    for s in iter_samples(out):
        hand = _layer_inputs(model, s.input_ids[None])
        want = torch.cat([hand[i + shift] for i in (0, 2, 3)], -1)[0].to(torch.bfloat16)
        assert torch.equal(s.aux_hidden_state, want)
        other = torch.cat([hand[i + 1 - shift] for i in (0, 2, 3)], -1)[0].to(torch.bfloat16)
        assert not torch.equal(s.aux_hidden_state, other)  # the shift is observable on this target
        normed = model.model.norm(hand[-1])[0].to(torch.bfloat16)
        assert torch.equal(s.hidden_state, normed)  # SpecForge's hidden_state: after the final norm


def test_default_layers_and_out_of_range_ids(tmp_path):
    from helpers.core.errors import BadInputError
    from helpers.model.target import load_target

    t = load_target(TARGET, device="cpu", dtype=torch.float32)
    assert t.num_layers == 8
    assert t.aux_layers("sglang", None) == t.aux_layers("vllm", None) == [2, 4, 5]
    assert t.aux_layers("sglang", [1, 3, 4]) == [2, 4, 5]
    assert t.aux_layers("vllm", [1, 3, 4]) == [1, 3, 4]
    with pytest.raises(BadInputError, match="has 8 layers"):
        t.aux_layers("sglang", [1, 3, 7])  # SGLang would capture the input of layer 8: there is none


def _mismatch(tmp_path, name, **kw) -> Path:
    return _random_target(tmp_path / name, **kw)


@pytest.mark.slow
def test_mismatched_targets_are_one_line(cli, tmp_path):
    from safetensors.torch import load_file

    embed = load_file(str(TARGET / "model.safetensors"))["model.embed_tokens.weight"].float()
    cases = {
        "vocab": (_mismatch(tmp_path, "vocab", vocab=4000, hidden=64), "vocab_size"),
        "hidden": (_mismatch(tmp_path, "hidden", hidden=32), "hidden_size"),
        "embedding": (_mismatch(tmp_path, "embedding", hidden=64), "embed_tokens"),
        "scaled": (_mismatch(tmp_path, "scaled", hidden=64, embed=embed * 8), "times 0.125"),
    }
    for name, (tgt, words) in cases.items():
        before = {p.name: p.read_bytes() for p in tgt.iterdir()}
        r = cli("capture", str(tgt), "--prompts", str(SAMPLES / "prompts.jsonl"), "--regenerate", "--draft",
                str(SAMPLES / "tiny_draft_sglang"), "--device", "cpu", "-o", str(tmp_path / f"out_{name}"))
        assert r.returncode == 2, (name, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and "tiny_draft_sglang" in lines[0], (name, r.stderr)
        assert not (tmp_path / f"out_{name}").exists()
        assert before == {p.name: p.read_bytes() for p in tgt.iterdir()}
    # the matching target passes the same check
    from helpers.model.target import draft_mismatches, load_target

    assert draft_mismatches(load_target(TARGET, device="cpu"), SAMPLES / "tiny_draft_sglang") == []


def test_not_a_target_is_one_line(cli, tmp_path):
    r = cli("capture", str(SAMPLES / "tiny_draft_sglang" / "model.safetensors"), "--prompts",
            str(SAMPLES / "prompts.jsonl"), "-o", str(tmp_path / "o"))
    assert r.returncode == 2 and "not a target folder" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("capture", str(tmp_path), "--prompts", str(SAMPLES / "prompts.jsonl"), "--regenerate", "-o", str(tmp_path / "o"))
    assert r.returncode == 2 and "no config.json" in r.stderr
