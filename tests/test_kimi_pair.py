"""The Kimi-shaped bundled pair (issue 28): a tiny DeepSeek-V3 (MLA + MoE) target and its MLA EAGLE-3.1 draft.

data_samples/kimi_target, kimi_draft_mla and kimi_hidden_states are made by
scripts/make_kimi_samples.py with the kit's own capture and the draft's own forward. Here:
`capture` reproduces the bundled hidden states (the token ids exactly, the states up to a CPU's
bf16 rounding); `evaluate` scores the offset reading
well above the absolute one; `speculate` outputs exactly what the target's own `generate`
outputs, for every reading, chain and tree, and the offset reading accepts more than twice as
many tokens per verify step as the absolute one.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import SAMPLES, same_up_to_rounding

from helpers.acceptance.drafting import Drafting

ROOT = Path(__file__).resolve().parents[1]
TARGET, DRAFT, STATES = SAMPLES / "kimi_target", SAMPLES / "kimi_draft_mla", SAMPLES / "kimi_hidden_states"
PROMPTS = SAMPLES / "prompts.jsonl"
CHAIN = {"drafting": Drafting(3)}
TREE = {"drafting": Drafting(3, 4, 8)}


def _cli(*args):
    # one thread, as scripts/make_kimi_samples.py captured: the MoE layers' float sums depend on the
    # thread count, and a last-bit difference can round a bf16 value the other way
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "helpers", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=1200, check=False, env=env)


def test_the_pair_is_kimi_shaped():
    from helpers.model.config import DraftConfig

    tcfg = json.loads((TARGET / "config.json").read_text())
    assert tcfg["architectures"] == ["DeepseekV3ForCausalLM"] and tcfg["kv_lora_rank"] and tcfg["n_routed_experts"] > 1
    assert (TARGET / "chat_template.jinja").is_file()
    dcfg = json.loads((DRAFT / "config.json").read_text())
    assert dcfg["model_type"] == "kimi_k2" and dcfg["architectures"] == ["Eagle3DeepseekV2ForCausalLM"]
    cfg = DraftConfig.from_dict(dcfg)
    assert cfg.attention == "mla" and cfg.fc_norm and cfg.feed_normed and cfg.draft_vocab_size < cfg.vocab_size
    size = sum(p.stat().st_size for d in (TARGET, DRAFT, STATES) for p in d.rglob("*") if p.is_file())
    assert size < 4 * 2**20, f"the Kimi pair takes {size / 2**20:.1f} MiB"


def test_evaluate_offset_well_above_absolute():
    from helpers.measure.evaluate import evaluate

    res = evaluate(DRAFT, STATES, device="cpu", steps=2, readings=["offset", "absolute"])
    off, ab = res.overall.readings["offset"].top1, res.overall.readings["absolute"].top1
    assert off > 0.4 and off > ab + 0.3, (off, ab)


@pytest.mark.slow
def test_capture_reproduces_the_bundled_hidden_states(tmp_path):
    from helpers.io.samples import iter_samples

    made = json.loads((STATES / "capture.json").read_text())
    out = tmp_path / "kimi"
    r = _cli("capture", TARGET, "--prompts", PROMPTS, "--regenerate", "--max-new-tokens", made["max_new_tokens"],
             "--aux-layers", ",".join(map(str, made["aux_layer_ids"])), "--engine", made["engine"], "--device", "cpu",
             "--dtype", "float32", "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    pairs = list(zip(iter_samples(STATES), iter_samples(out), strict=True))
    assert len(pairs) == made["records"] > 0
    for a, b in pairs:
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask), a.path
        assert a.aux_hidden_state.dtype == b.aux_hidden_state.dtype == torch.bfloat16, a.path
        same_up_to_rounding(a.aux_hidden_state, b.aux_hidden_state, a.path)
        same_up_to_rounding(a.hidden_state, b.hidden_state, a.path)


@pytest.fixture(scope="module")
def pair():
    from helpers.model.pair import load_pair

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_pair(TARGET, DRAFT, device="cpu", dtype="float32")
    torch.set_num_threads(before)


_GENERATED: dict[tuple[int, ...], list[int]] = {}  # greedy is deterministic: one generate per prompt


def _generate(target, ids: list[int], n: int) -> list[int]:
    from helpers.speculate.verify import _eos_ids

    if (key := (n, *ids)) in _GENERATED:
        return _GENERATED[key]
    x = torch.tensor([ids])
    with torch.inference_mode():
        g = target.model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                                  temperature=None, top_p=None, top_k=None, pad_token_id=0)[0, x.shape[1]:].tolist()
    eos = _eos_ids(target)
    _GENERATED[key] = g[: next((i + 1 for i, t in enumerate(g) if t in eos), len(g))]
    return _GENERATED[key]


@pytest.mark.slow
@pytest.mark.parametrize("shape", [CHAIN, TREE], ids=["chain3", "tree3x4x8"])
def test_speculate_equals_generate_and_offset_accepts_twice_absolute(pair, shape):
    from helpers.io.prompts import read_prompts
    from helpers.speculate.loop import speculate
    from helpers.speculate.result import SpecSettings

    target, draft = pair
    records = list(read_prompts(PROMPTS))[:8]
    means = {}
    for reading in ("offset", "absolute", "none"):
        run = speculate(target, draft, records, SpecSettings(reading=reading, max_new_tokens=24, **shape))
        for p in run.prompts:
            assert p.output_ids == _generate(target, p.prompt_ids, 24), f"{reading}: prompt {p.index} differs"
        means[reading] = run.mean
    assert means["offset"] > 2 * means["absolute"], means
