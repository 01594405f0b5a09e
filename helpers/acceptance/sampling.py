"""The acceptance rules' arithmetic under sampling (temperature > 0): the target's and the draft's
distributions as each engine forms them, one verify step's accept-or-resample (`accept_step`), the
probability a drafted token is accepted (`token_acceptance`) and a chain's expected accept length in
closed form (`exact_chain_acceptance`). The rules themselves, which engine applies which and where
that was read, are data in `helpers.engines.acceptance_rules`.

`exact_chain_acceptance` gives the per-position expectation in closed form for fixed per-depth
distributions; for argmax-draft rules the product of p_i(t_i) along the drafted chain is exact for
a real model too (the chain is deterministic given the context).
"""
from __future__ import annotations

import torch

from helpers.engines.acceptance_rules import TRUNCATION_FIRST, AcceptanceRule


def target_probs(logits: torch.Tensor, temperature: float, *, top_k: int = 0, top_p: float = 1.0,
                 min_p: float = 0.0, engine: str = "plain") -> torch.Tensor:
    """The distribution the target samples from. Plain: softmax(logits / T). An engine of
    `TRUNCATION_FIRST` (llama.cpp) truncates first (top-k, top-p, min-p on the T = 1 distribution,
    then the temperature); the others apply top-k / top-p after the temperature (vLLM, SGLang).
    Defaults: no truncation."""
    x = logits.float()
    if engine in TRUNCATION_FIRST:
        x = _truncate(x, top_k, top_p, min_p)
        return torch.softmax(x / temperature, dim=-1)
    return torch.softmax(_truncate(x / temperature, top_k, top_p, min_p), dim=-1)


def _truncate(x: torch.Tensor, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    if top_k and 0 < top_k < x.shape[-1]:
        kth = x.topk(top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        p = torch.softmax(x, dim=-1)
        sp, idx = p.sort(dim=-1, descending=True)
        drop = (sp.cumsum(-1) - sp) >= top_p  # keep the smallest prefix reaching top_p
        x = x.masked_fill(drop.scatter(-1, idx, drop), float("-inf"))
    if min_p > 0.0:
        p = torch.softmax(x, dim=-1)
        x = x.masked_fill(p < min_p * p.max(dim=-1, keepdim=True).values, float("-inf"))
    return x


def draft_probs(rule: AcceptanceRule, logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The q a sampling draft draws from under `rule`: softmax(logits / T), over the top k logits when
    the rule truncates (llama.cpp draft-simple: top 10)."""
    x = logits.float()
    if rule.draft_top_k:
        x = _truncate(x, rule.draft_top_k, 1.0, 0.0)
    return torch.softmax(x / temperature, dim=-1)


# -- one drafted token ------------------------------------------------------------------------------
def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalised max(p - q, 0): what to sample from after rejecting a draft drawn from q (p if empty)."""
    r = (p - q).clamp_min(0)
    s = r.sum()
    return r / s if s > 0 else p


def accept_step(rule: AcceptanceRule, p: torch.Tensor, q: torch.Tensor, token: int,
                generator) -> tuple[bool, torch.Tensor]:
    """Verify one drafted token under `rule`: (accepted, the distribution for what comes next at this
    node: p itself when accepted, the residual when rejected - a point mass where the engine has
    already drawn the token, as llama.cpp's sample-and-match does).

    p: the target's distribution at the node; q: the draft's over the same ids (one-hot for an argmax
    draft); token: the drafted id (-1 outside the target vocab: rejected).

    Siblings in a tree are tried one after another, p becoming the residual after each rejection:
    with a fresh coin each that is SGLang's one coin against the running sum of the siblings' p
    (P(accept the 2nd) = p2 / (1 - p1) either way) when its thresholds are 1 (the default).
    """
    if token < 0:
        return False, p
    pt, qt = float(p[token]), float(q[token])
    if rule.test == "argmax":
        best = int(p.argmax())
        return (True, p) if best == token else (False, _point(p, best))
    if rule.test == "match":  # the target samples its own token; accepted when it is the draft's
        own = int(torch.multinomial(p, 1, generator=generator))
        return (True, p) if own == token else (False, _point(p, own))
    u = float(torch.rand((), generator=generator, device=p.device))
    if rule.test == "threshold":
        ok = pt > 0 and (u < pt / max(rule.threshold_acc, 1e-9) or pt >= rule.threshold_single)
    elif rule.test == "p/q":
        ok = qt > 0 and u < min(1.0, pt / qt)  # vLLM tests p/q >= u: the same up to a null set
    else:
        raise ValueError(f"the loop does not run rule {rule.name!r} ({rule.test})")
    return (True, p) if ok else (False, residual(p, q))


def _point(p: torch.Tensor, i: int) -> torch.Tensor:
    out = torch.zeros_like(p)
    out[i] = 1.0
    return out


# -- exact expectations ------------------------------------------------------------------------------
def token_acceptance(rule: AcceptanceRule, p: torch.Tensor, q: torch.Tensor | None = None,
                     token: int | None = None) -> float:
    """The probability that one depth accepts, given the target's p and the draft's q there (q: the
    draft's distribution at the temperature, over the same ids; token: the argmax draft's token,
    default argmax q). Argmax drafts: p(t) (SGLang: 1 if p(t) >= threshold_single else
    min(1, p(t) / threshold_acc); SGLang on CPU: [t is argmax p]). Sampled drafts: sum_x min(p, q)."""
    p = p.double()
    if rule.samples_draft:
        assert q is not None, "a sampled draft needs its q"
        return float(torch.minimum(p, q.double()).sum())
    t = int(token if token is not None else q.argmax())
    if t < 0:
        return 0.0
    pt = float(p[t])
    if rule.test == "argmax":
        return float(int(p.argmax()) == t)
    if rule.test == "threshold":
        return 0.0 if pt <= 0 else (1.0 if pt >= rule.threshold_single else min(1.0, pt / rule.threshold_acc))
    return pt


def exact_chain_acceptance(rule: AcceptanceRule, p_rows, q_rows=None, tokens=None) -> dict:
    """Per-position expectations of a drafted chain from the distributions along it.

    p_rows: [K, V] the target's distribution at each drafted depth (at the temperature); q_rows: [K, V]
    the draft's (at the temperature for a sampled draft; any scores whose argmax is the drafted token
    for an argmax draft); tokens: the argmax draft's tokens (default argmax of q_rows).

    Exact for argmax drafts along the chain the draft produced (the chain is deterministic given the
    context, so prod_{i<=j} alpha_i is E[position j accepted]); for sampled drafts exact when each
    depth's p and q do not depend on the tokens drawn before (fixed logits), otherwise the on-path value.
    Returns {per_depth (alpha_i), unconditional (prod_{i<=j} alpha_i), accept_length (1 + sum)}.
    """
    k = len(p_rows)
    alphas = [token_acceptance(rule, torch.as_tensor(p_rows[i]), None if q_rows is None else torch.as_tensor(q_rows[i]),
                               None if tokens is None else int(tokens[i])) for i in range(k)]
    unc, run = [], 1.0
    for a in alphas:
        run *= a
        unc.append(run)
    return {"rule": rule.name, "per_depth": alphas, "unconditional": unc, "accept_length": 1.0 + sum(unc)}
