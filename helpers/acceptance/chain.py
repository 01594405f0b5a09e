"""Accept length: closed form, Monte Carlo (chain and tree), and what a measured one means.

Accept length is what serving logs print (`accept len: 1.90`): the number of tokens one
speculative step emits, the target's bonus token included, so its minimum is 1.0 (EAGLE, SGLang
and vLLM agree). This file turns a per-token acceptance into an expected accept length, checks
that by simulation, and judges a measured accept length against the prediction. Measuring it by
running the real draft on hidden-state samples is `helpers.measure.replay`; turning an accept length
into tokens/s is `helpers.acceptance.throughput`.
Numpy only: importing this module does not import torch, so the `simulate` command starts fast.

Chain drafting with k drafted tokens, each accepted with probability a given the ones before:

    E = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)

Tree drafting (SGLang's steps / topk / draft tokens) is `helpers.acceptance.tree`, the Monte Carlo
machinery `helpers.acceptance.montecarlo`. The drafting shape itself (chain or SGLang's tree, its
check and each engine's names for it) is `helpers.acceptance.drafting.Drafting`.
"""
from __future__ import annotations

import math

import numpy as np

from helpers.acceptance.montecarlo import (
    InverseCdf,
    SimResult,
    from_counts,
    from_lengths,
    thresholds,
)
from helpers.acceptance.tree import tree_expected

# ----------------------------------------------------------------------------------------------
# chain drafting


def chain_expected(accept_rate, k: int) -> float:
    """Expected accept length of chain drafting with k tokens, bonus token included (>= 1).

    accept_rate: one rate a, or a sequence of k per-position rates a_j (the probability that
    drafted token j is accepted given tokens 0..j-1 were); then E = 1 + sum_j prod_{i<=j} a_i.
    """
    rates = _chain_rates(accept_rate, k)
    if rates.size == 0:
        return 1.0
    if np.all(rates == rates[0]):
        a = float(rates[0])
        if a == 1.0:
            return float(k + 1)
        return (1.0 - a ** (k + 1)) / (1.0 - a)
    return float(1.0 + np.cumprod(rates).sum())


def _chain_rates(accept_rate, k: int) -> np.ndarray:
    k = int(k)
    if k < 0:
        raise ValueError(f"draft tokens must be >= 0, got {k}")
    rates = np.asarray(accept_rate, dtype=np.float64)
    if rates.ndim == 0:
        rates = np.full(k, float(rates))
    elif rates.shape != (k,):
        raise ValueError(f"per-position rates must have length k={k}, got shape {tuple(rates.shape)}")
    if np.any(~np.isfinite(rates)) or np.any(rates < 0) or np.any(rates > 1):
        raise ValueError(f"acceptance rates must lie in [0, 1], got {rates.tolist()}")
    return rates


def simulate_chain(accept_rate, k: int, trials: int = 100_000, seed: int | None = 0,
                   chunk: int = 1 << 18) -> SimResult:
    """Monte Carlo accept length of chain drafting: one rate or k per-position rates.

    Vectorised, one uniform draw per verify step: the number of leading accepted tokens N
    satisfies P(N >= j) = a_0 a_1 ... a_(j-1) (all of the first j accepted), so with one uniform u
    per step N = #{j : u < a_0 ... a_(j-1)} (inverse-CDF sampling of the same chain; the draws'
    low bits are drawn only where they decide, see `InverseCdf`). Accept length 1 + N.
    `simulate_chain_loop` flips one coin per drafted token instead; both estimate the same law.
    """
    rates = _chain_rates(accept_rate, k)
    kk = rates.size
    if kk == 0:
        return from_counts(np.array([0, int(trials)]), 1.0)
    rng = np.random.default_rng(seed)
    t = np.sort(thresholds(np.cumprod(rates)))  # ascending; N = k - #(t <= v)
    hist = InverseCdf(t).counts(int(trials), rng, chunk)[0]  # hist[c] = draws with #(t <= v) == c
    counts = np.zeros(kk + 2, dtype=np.int64)
    counts[1:] = hist[::-1]  # accept length 1 + k - c
    return from_counts(counts, chain_expected(rates, kk))


def simulate_chain_loop(accept_rate, k: int, trials: int = 10_000, seed: int | None = 0) -> SimResult:
    """The same chain simulation as a plain Python loop (reference for tests and benchmarks)."""
    import random

    rates = _chain_rates(accept_rate, k).tolist()
    rnd = random.Random(seed)
    lengths = []
    for _ in range(int(trials)):
        n = 1
        for a in rates:
            if rnd.random() < a:
                n += 1
            else:
                break
        lengths.append(n)
    return from_lengths(np.asarray(lengths, dtype=np.int64), len(rates) + 1, chain_expected(rates, len(rates)))


def expected_accept_length(accept_rate, draft_tokens: int, topk: int = 1, steps: int | None = None) -> float:
    """Chain (topk 1, steps None) or tree expectation with the CLI's argument names.

    Chain: draft_tokens = k drafted tokens. Tree: SGLang's settings, draft_tokens counts the root.
    """
    if steps is None and int(topk) == 1:
        return chain_expected(accept_rate, draft_tokens)
    if steps is None:
        raise ValueError("tree drafting (topk > 1) needs steps")
    return tree_expected(accept_rate, steps, topk, draft_tokens)


def rate_for_accept_length(target: float, draft_tokens: int, topk: int = 1, steps: int | None = None,
                           tol: float = 1e-10) -> float:
    """The single per-token rate a whose expectation (chain, or tree with steps/topk) is `target`.

    Bisection: the expectation grows with a. With SGLang's tree 5/4/16, 1.9 needs a ~ 0.21.
    """
    top = expected_accept_length(1.0, draft_tokens, topk, steps)
    if not 1.0 <= target <= top:
        raise ValueError(f"accept length with these settings lies in [1, {top:g}], got {target}")
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if expected_accept_length(mid, draft_tokens, topk, steps) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def prediction_table(accept_rate, setups, trials: int = 100_000, seed: int = 0):
    """pandas DataFrame: per drafting setup, the exact expectation and the Monte Carlo estimate.

    `accept_rate`: one rate (or per-position rates) for every setup, or a dict {setup label: its
    rates} (a chain's per-position rates, a tree's rank table [steps][topk], as
    `helpers.acceptance.prediction.Prediction.rates()` gives them)."""
    import pandas as pd

    rows = []
    for i, d in enumerate(setups):
        rate = accept_rate[d.label] if isinstance(accept_rate, dict) else accept_rate
        r = d.simulate(rate, trials=trials, seed=seed + i)
        shown = rate if np.ndim(rate) == 0 else ("rank table" if np.ndim(rate) == 2 else
                                                  ", ".join(f"{x:.3f}" for x in np.ravel(rate)))
        rows.append({"drafting": d.label, "accept rate": shown,
                     "expected": r.expected, "monte carlo": r.mean, "std. error": r.stderr, "z": r.z, "trials": r.trials})
    return pd.DataFrame(rows)


def judge_accept_length(measured: float, predicted: float, break_even: float | None = None,
                        tolerance: float = 0.15) -> str:
    """One sentence: is a measured accept length at the prediction, below it (a bug), or above it?

    `tolerance`: relative gap (on accept length - 1, the drafted part) still counted as agreement.
    """
    gain_m, gain_p = measured - 1.0, predicted - 1.0
    pays = "" if break_even is None else (
        f" Speculation pays only above the break-even accept length {break_even:.2f}: "
        f"{'it pays' if measured > break_even else 'it does not pay'} at {measured:.2f}"
        + (f", and would {'pay' if predicted > break_even else 'still not pay'} at the prediction." if predicted else "."))
    if gain_p <= 0:
        return f"Measured {measured:.2f}; the prediction is 1.0 (nothing drafted is expected to be accepted).{pays}"
    ratio = gain_m / gain_p
    if ratio < 1 - tolerance:
        return (f"Measured {measured:.2f} is well below the predicted {predicted:.2f}: only {ratio:.0%} of the expected "
                f"accepted draft tokens arrive. That is a deployment bug (mapping, weights, aux layers), not a "
                f"ceiling of the draft.{pays}")
    if ratio > 1 + tolerance:
        return (f"Measured {measured:.2f} is above the predicted {predicted:.2f} ({ratio:.0%} of the expected accepted "
                f"tokens): the accuracy used for the prediction understates the draft on this traffic.{pays}")
    return (f"Measured {measured:.2f} agrees with the predicted {predicted:.2f} ({ratio:.0%} of the expected accepted "
            f"tokens): the draft performs as its accuracy says.{pays}")


def accept_length_status(predicted: float | None, measured: float | None, rate: float | None = None,
                         tolerance: float = 0.15) -> str:
    """One word for `conclude_accept_length`'s case: 'no-prediction', 'broken' (a prediction near
    1.0), 'no-measurement', or how the measurement compares: 'below', 'agrees', 'above'."""
    if predicted is None:
        return "no-prediction"
    if rate is not None and predicted - 1.0 < 0.05:
        return "broken"
    if measured is None:
        return "no-measurement"
    ratio = (measured - 1.0) / (predicted - 1.0)
    return "below" if ratio < 1 - tolerance else "above" if ratio > 1 + tolerance else "agrees"


def conclude_accept_length(predicted: float | None, drafting_label: str, *, rate: float | None = None,
                           measured: float | None = None, measured_from: str | None = None,
                           break_even: float | None = None) -> str:
    """The accept-length conclusion of a run, one paragraph (notebook 04 and the report print it).

    `predicted`: expected accept length for the deployment's drafting at per-token acceptance
    `rate`; `measured`: the serving log's mean accept length (None: no log given).
    """
    status = accept_length_status(predicted, measured, rate)
    if status == "no-prediction":
        head = "No prediction: no samples were given to measure the draft's accuracy (pass --samples)."
        if measured is None:
            return head + " No serving measurement was given either (pass --log)."
        return f"{head} Measured {measured:.2f} ({measured_from or 'serving log'}) for {drafting_label}."
    if status == "broken":
        broken = (f"The draft scores {rate:.1%} top-1 under the offset reading the engines use, so {drafting_label} "
                  f"is expected to accept almost nothing (predicted {predicted:.2f}): the checkpoint itself is "
                  "broken or misread - see the d2t verdict and the doctor's findings.")
        return broken if measured is None else f"{broken} Measured {measured:.2f} ({measured_from or 'serving log'})."
    if status == "no-measurement":
        at = "" if rate is None else f" (per-token acceptance {rate:.3f})"
        return (f"Predicted accept length {predicted:.2f} for {drafting_label}{at}. "
                "No serving measurement was given (pass --log) to compare with.")
    return f"{drafting_label}: " + judge_accept_length(measured, predicted, break_even)


# -- a measured histogram of accept lengths ------------------------------------------------------
def histogram_mean(counts: np.ndarray) -> float:
    """Mean accept length of a histogram (`counts[L]` = how often accept length L was seen)."""
    n = int(counts.sum())
    return float((np.arange(counts.size) * counts).sum() / n) if n else float("nan")


def histogram_stderr(counts: np.ndarray) -> float:
    """Standard error of that mean (the sample variance of the lengths over n)."""
    n = int(counts.sum())
    if n < 2:
        return float("nan")
    x = np.arange(counts.size)
    var = ((x - histogram_mean(counts)) ** 2 * counts).sum() / (n - 1)
    return float(math.sqrt(var / n))
