"""One draft forward (issue 26): the speculate drafter and the evaluate forward are the same code.

For every producer fixture (data_samples/producers/*/reference.pt, made by the producers' own
code), the chain `Drafter` proposes after every prefix of the fixture's inputs must equal the
argmax chain `Eagle3Draft.draft_steps` computes for that position, at every step; and drafter.py
must hold no attention, norm or MLP arithmetic of its own (it calls `Eagle3Draft.step`).
"""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
import torch

from helpers.io.mapping import to_target_ids
from helpers.model.draft import load_draft
from helpers.model.drafter import Drafter
from helpers.model.layer import context_allowed
from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]
PRODUCERS = SAMPLES / "producers"
# Model-Optimizer's draft is refused by name (not modelled: tests/test_producer_exports.py)
FIXTURES = sorted(p.name for p in PRODUCERS.iterdir() if (p / "reference.pt").exists()
                  and json.loads((p / "reference.json").read_text())["producer"] != "nvidia-modelopt")
STEPS = 3


def _load(name):
    import json

    meta = json.loads((PRODUCERS / name / "reference.json").read_text())
    embed = PRODUCERS / "target" if any("../target" in n for n in meta.get("notes", [])) else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_draft(PRODUCERS / name, device="cpu", dtype=torch.float32, embed_from=embed)


def test_every_fixture_is_found():
    assert len(FIXTURES) >= 18 and any(n.startswith("nemo_mla") for n in FIXTURES)


@pytest.mark.parametrize("name", FIXTURES)
def test_drafter_chain_equals_the_evaluate_argmax_chain(name):
    ref = torch.load(PRODUCERS / name / "reference.pt", weights_only=True)
    model = _load(name)
    aux, nxt = ref["aux_hidden"], ref["next_ids"]
    T = nxt.shape[1]
    reading = "offset" if model.d2t is not None else "none"
    with torch.no_grad():
        steps = model.draft_steps(aux, nxt, steps=STEPS, reading=reading)
    want = torch.stack([s[0].argmax(-1) for s in steps], dim=-1)  # [T, STEPS] draft ids
    drafter = Drafter(model, reading)
    got = []
    for t in range(T):  # prefix 0..t verified: the drafter's cache grows one position at a time
        drafter.extend(aux[:, t:t + 1], nxt[:, t:t + 1])
        prop = drafter.propose(int(nxt[0, t]), steps=STEPS, topk=1, draft_tokens=STEPS + 1)
        assert prop.depth == list(range(STEPS + 1))
        got.append(prop.draft_ids[1:])
    got = torch.tensor(got)
    equal = int((got == want).sum())
    assert equal == want.numel(), f"{name}: {equal}/{want.numel()} chain positions equal"
    # and the target ids the drafter proposes are the mapped chain
    assert torch.equal(drafter.target_ids(got[-1]), to_target_ids(want[-1], model.d2t, reading))


def test_drafter_tree_extends_the_chain():
    """With topk > 1 the tree's best path keeps the chain's first token (the beam search starts from it)."""
    model = _load("speculators_sliding_window")
    ref = torch.load(PRODUCERS / "speculators_sliding_window" / "reference.pt", weights_only=True)
    drafter = Drafter(model, "offset")
    drafter.extend(ref["aux_hidden"], ref["next_ids"])
    prop = drafter.propose(0, steps=3, topk=2, draft_tokens=6)
    assert prop.size == 6 and max(prop.depth) <= 3
    assert prop.draft_ids[1] == int(drafter.logits_last.argmax())


def test_context_allowed_is_the_window_rule():
    a = context_allowed(torch.tensor([0, 5, 9]), 10, 4)
    assert a[0].nonzero().flatten().tolist() == [0]
    assert a[1].nonzero().flatten().tolist() == [2, 3, 4, 5]
    assert a[2].nonzero().flatten().tolist() == [6, 7, 8, 9]
    assert context_allowed(torch.tensor([3]), 6, None)[0].tolist() == [True] * 4 + [False] * 2


ARITHMETIC = (r"softmax", r"rsqrt", r"matmul", r"\s@\s", r"\bsilu\b", r"scaled_dot_product_attention",
              r"rotate_half", r"_proj\b", r"_proj\(", r"layernorm", r"\.pow\(", r"\bexp\(", r"\.cos\(", r"\.sin\(",
              r"\.mlp\b", r"self_attn", r"hidden_norm", r"lm_head", r"_qkv", r"_rope")


def test_drafter_has_no_arithmetic_of_its_own():
    src = (ROOT / "helpers" / "model" / "drafter.py").read_text()
    code = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("#"))
    code = re.sub(r'"""[\s\S]*?"""', "", code)  # docstrings may name what the layer does
    found = [p for p in ARITHMETIC if re.search(p, code)]
    assert not found, f"drafter.py computes layer arithmetic itself: {found}"
    assert "model.step(" in code  # the one forward
