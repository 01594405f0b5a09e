"""Verification in the engine-free loop: one verify step's walk over the drafted nodes (greedy: the
target's argmax; sampled: each engine's acceptance rule, `helpers.engines.acceptance_rules`), the exact
per-position expectation of an argmax-drafted chain, and the target's end-of-sequence ids. Used by
the one-prompt loop (`helpers.speculate.loop`) and the batched one (`helpers.speculate.batched`)
alike, so both take the same decisions.
"""
from __future__ import annotations

import torch

from helpers.acceptance.sampling import accept_step, token_acceptance
from helpers.engines.acceptance_rules import RULES, AcceptanceRule
from helpers.model.drafter import Drafter, Proposal
from helpers.model.target import Target


# -- verification ---------------------------------------------------------------------------------
def accept_rule(p: torch.Tensor, q: torch.Tensor, token: int, generator,
                rule: AcceptanceRule | None = None) -> tuple[bool, torch.Tensor]:
    """One drafted token under `rule` (default the textbook rejection rule): (accepted, p for what
    comes next: p when accepted, the residual when rejected). The one place `verify` decides."""
    return accept_step(rule or RULES["textbook"], p, q, token, generator)


def _target_q(prop: Proposal, node: int, drafter: Drafter, vocab: int, device) -> torch.Tensor:
    """The distribution node `node` was drawn from, over target ids (mass outside the vocab dropped)."""
    q = torch.zeros(vocab, device=device)
    if node in prop.q:
        dq = prop.q[node].to(device)
        tid = drafter.target_ids(torch.arange(dq.numel(), device=drafter.device)).to(device)
        ok = tid >= 0
        q.index_add_(0, tid[ok], dq[ok])
    elif prop.tokens[node] >= 0:
        q[prop.tokens[node]] = 1.0  # a top-k child: a point mass
    return q


def verify(prop: Proposal, logits: torch.Tensor, temperature: float, drafter: Drafter, generator,
           rule: AcceptanceRule | None = None):
    """Walk the tree: (accepted node path without the root, next token, 'correction'|'bonus').
    `rule`: the acceptance rule at temperature > 0 (default textbook); a node the draft sampled is
    weighed against its recorded q, any other against a point mass on its token."""
    if temperature <= 0:
        return greedy_walk(prop, logits.argmax(-1).tolist())
    children = prop.children()
    path, cur = [], 0
    while True:
        p = torch.softmax(logits[cur].float() / temperature, dim=-1)
        for c in children[cur]:
            ok, p = accept_rule(p, _target_q(prop, c, drafter, p.numel(), p.device), prop.tokens[c], generator, rule)
            if ok:
                path.append(c)
                cur = c
                break
        else:
            tok = int(torch.multinomial(p, 1, generator=generator))
            return path, tok, "correction" if children[cur] else "bonus"


def greedy_walk(prop: Proposal, best: list[int]):
    """`verify` at temperature 0 given the target's argmax after each node (`best[i]`): from the
    root, the child whose token is the argmax, until none is."""
    children = prop.children()
    path, cur = [], 0
    while True:
        nxt = next((c for c in children[cur] if prop.tokens[c] == best[cur]), None)
        if nxt is None:
            return path, best[cur], "correction" if children[cur] else "bonus"
        path.append(nxt)
        cur = nxt


def chain_expectation(prop: Proposal, logits: torch.Tensor, temperature: float, rule: AcceptanceRule) -> list[float]:
    """Exact P(drafted position j accepted) for an argmax-drafted chain given this step's context:
    prod over depths i <= j of the rule's acceptance of token i under the target's p at its parent
    (`helpers.engines.acceptance_rules.token_acceptance`; p(t) for vLLM's default, SGLang, llama.cpp)."""
    probs = torch.softmax(logits[: prop.size - 1].float() / temperature, dim=-1)
    out, run = [], 1.0
    for i in range(1, prop.size):
        run *= token_acceptance(rule, probs[i - 1], token=prop.tokens[i])
        out.append(run)
    return out


def _eos_ids(target: Target) -> set[int]:
    out = set()
    for src in (getattr(target.model, "generation_config", None), target.tokenizer):
        e = getattr(src, "eos_token_id", None)
        out |= set(e if isinstance(e, (list, tuple)) else [e])
    return {int(e) for e in out if e is not None}
