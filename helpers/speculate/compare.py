"""Prediction vs measurement for speculative decoding: what the offline numbers say the accept length
should be, next to what `helpers.speculate.loop` measured.

- `predicted_chain` / `predicted_tree`: evaluate's per-step top-1 accuracy taken as the acceptance
  of each drafted position, through the chain formula (`helpers.acceptance.chain.chain_expected`) or the
  exact expectation of SGLang's tree (`helpers.acceptance.tree.tree_expected`);
- `predicted_per_position`: the unconditional per-position acceptance those rates imply
  (the product of the rates up to the position), vLLM's definition;
- `by_answer_position`: the loop's verify steps split at a length (the samples' answer length), so a
  gap that lies past the text the samples hold shows as such;
- `replay_walk`: the replay (the real draft on captured states, `helpers.measure.replay`) visited the way a
  verifier visits positions: from the first generated token, each step jumps by its accept length.
  The plain replay averages every position equally; a decoding loop does not - where the draft
  fails it spends one verify step per token, where it succeeds one per several tokens - so the
  loop's mean (tokens / verify steps) is the walked mean, not the per-position one, whenever
  accept lengths cluster (a draft that knows one part of a text and not another).
"""
from __future__ import annotations

import math

import numpy as np

from helpers.acceptance.chain import chain_expected
from helpers.acceptance.drafting import Drafting
from helpers.acceptance.tree import tree_expected
from helpers.measure.replay import ReplayResult, accept_lengths


def _rates(step_rates, steps: int) -> list[float]:
    r = [0.0 if x is None or (isinstance(x, float) and math.isnan(x)) else float(x) for x in step_rates]
    if not r:
        raise ValueError("no per-step rates")
    return (r + [r[-1]] * steps)[:steps]


def predicted_chain(step_rates, k: int) -> float:
    """Expected accept length of a K-token chain with per-position acceptance `step_rates`."""
    return float(chain_expected(_rates(step_rates, k), k))


def predicted_tree(step_rates, steps: int, topk: int, draft_tokens: int) -> float:
    """Expected accept length of SGLang's tree with per-depth acceptance `step_rates` (rank 0)."""
    return float(tree_expected(_rates(step_rates, steps), steps, topk, draft_tokens))


def predicted_per_position(step_rates, k: int) -> list[float]:
    """Unconditional acceptance at drafted positions 0..k-1: the running product of the rates."""
    return np.cumprod(_rates(step_rates, k)).tolist()


def predicted(step_rates, drafting: Drafting) -> float:
    """The accept length the per-step rates predict for a drafting shape."""
    d = drafting
    return predicted_chain(step_rates, d.steps) if d.is_chain else predicted_tree(step_rates, d.steps, d.topk,
                                                                               d.num_draft_tokens)


def by_answer_position(prompts, first: int, steps: int) -> dict:
    """The loop's verify steps split by where they draft: "within" the first `first` generated tokens
    (every token the step drafts lies before token `first`: the stretch a sample whose answers are
    `first` tokens long holds) and "past" it. Each: mean accept length, standard error, verify steps.

    `prompts`: `PromptRun`s or their dicts (`accept_lengths`); generated token 0 is the prefill's, so
    verify step i drafts from token 1 + (sum of the accept lengths before it) on, `steps` deep.
    """
    parts = {"within": [], "past": []}
    for p in prompts:
        lengths = p["accept_lengths"] if isinstance(p, dict) else p.accept_lengths
        start = 1
        for n in lengths:
            parts["within" if start + int(steps) <= int(first) else "past"].append(int(n))
            start += int(n)
    out = {}
    for k, xs in parts.items():
        x = np.asarray(xs, dtype=np.float64)
        se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else None
        out[k] = {"mean": float(x.mean()) if x.size else None, "stderr": se, "verify_steps": int(x.size)}
    return out


def walk(lengths: np.ndarray, positions: np.ndarray, start: int) -> list[int]:
    """Accept lengths at the positions a verifier visits: start, then start + L, ... while counted."""
    at = dict(zip(positions.tolist(), lengths.tolist()))
    out, t = [], int(start)
    while t in at:
        out.append(int(at[t]))
        t += at[t]
    return out


def replay_walk(checkpoint_or_model, samples_dir, steps: int = 5, reading: str = "offset",
                max_samples: int | None = None, batch_size: int = 8) -> ReplayResult:
    """The replay's accept lengths at the positions a decoding loop verifies from (see the docstring).

    Each sample's walk starts where a loop's first verify step drafts from: the position before
    the first generated token's successor (the first loss-mask token is the prefill's token).
    """
    from helpers.measure.predict import as_model, draft_predictions

    model = as_model(checkpoint_or_model)
    counts = np.zeros(int(steps) + 2, dtype=np.int64)
    n = 0
    for p in draft_predictions(model, samples_dir, steps=int(steps), reading=reading, topk=1,
                               batch_size=batch_size, max_samples=max_samples, progress=False):
        lengths, pos = accept_lengths(p.pred, p.labels, p.mask)
        if pos.size:
            for L in walk(lengths, pos, int(pos[0]) + 1):
                counts[L] += 1
        n += 1
    return ReplayResult(str(getattr(model, "source", "(loaded draft)")), str(samples_dir), reading, int(steps),
                        counts, n)


def comparison(run, *, step_rates=None, replay: ReplayResult | None = None,
               walked: ReplayResult | None = None, prediction=None) -> dict:
    """Measured accept length next to each prediction given: a dict for tables and numbers.json.

    `prediction` (`helpers.acceptance.prediction.Prediction`, from `EvalResult.prediction`): the rank
    table's expectation for the run's shape; `predicted_from_accuracy` is then that figure (the one
    every front end shows), `predicted_from_top1` the per-step top-1 figure it replaces for trees,
    and `prediction` its dict (rank table, engines' flags, assumptions)."""
    s = run.settings
    shape = Drafting(s["steps"], s["topk"], s["num_draft_tokens"])
    out = {"reading": s["reading"], "measured": run.mean, "measured_stderr": run.stderr,
           "verify_steps": run.verify_steps}
    if step_rates is not None:
        out["predicted_from_accuracy"] = predicted(step_rates, shape)
        out["predicted_per_position_unconditional"] = predicted_per_position(step_rates, s["steps"])
    if prediction is not None:
        if step_rates is not None:
            out["predicted_from_top1"] = out["predicted_from_accuracy"]
        out["predicted_from_accuracy"], out["prediction"] = prediction.value, prediction.to_dict()
    if replay is not None:
        out["replay"], out["replay_stderr"] = replay.mean, replay.stderr
    if walked is not None:
        out["replay_walked"], out["replay_walked_stderr"] = walked.mean, walked.stderr
    return out
