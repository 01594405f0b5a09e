"""Monte Carlo machinery: exact vectorised draws, and the estimate they are summarised into.

`SimResult` is a Monte Carlo estimate of the accept length (mean, standard error, the counts per
accept length, and the exact expectation when known, so `z` says how far apart they are).
`InverseCdf` does the drawing: many independent draws, each from the same law over a few
outcomes given by ascending thresholds, counted per outcome without materialising one 32-bit
uniform per draw (see the comment above `LEVELS`). `helpers.acceptance.chain` (chain drafting) and
`helpers.acceptance.tree` (SGLang's tree) build on it. Numpy only.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

# The work sizes worth simulating (`simulate` refuses more, one line, exit 2). No engine drafts more
# than a few dozen tokens per verify step (SGLang's and vLLM's EAGLE settings keep at most 64 tree
# nodes), and past 256 drafted tokens a chain's accept length no longer moves: its last term
# A^(K+1) is below 2e-12 for every rate A <= 0.9 (0.9^257). The same 256 bounds a tree's depth,
# and `helpers.serving.bounds` finds an accept length above MAX_DRAFT_TOKENS + 1 implausible when
# nothing states the drafting. 64 children per node (SGLang's topk is 1 to 10 in practice) keeps a
# tree's candidates (T + (S - 1) T^2) within a second's work. 100,000,000 trials take about a
# second and give a standard error below 1e-4 of the spread; more changes no printed digit.
MAX_DRAFT_TOKENS = 256
MAX_TOPK = 64
MAX_TRIALS = 100_000_000


@dataclass
class SimResult:
    """A Monte Carlo estimate of the accept length."""

    mean: float
    stderr: float  # standard error of the mean: std / sqrt(trials)
    trials: int
    counts: np.ndarray  # [max_len + 1] counts[L] = trials with accept length L (counts[0] == 0)
    expected: float | None = None  # closed form / exact expectation when known

    @property
    def distribution(self) -> np.ndarray:
        """Share of trials with each accept length (index = accept length)."""
        return self.counts / max(self.trials, 1)

    @property
    def z(self) -> float | None:
        """(mean - expected) / stderr, when an expectation is known."""
        if self.expected is None:
            return None
        if self.stderr == 0:
            return 0.0 if abs(self.mean - self.expected) < 1e-12 else math.inf
        return (self.mean - self.expected) / self.stderr

    def to_dict(self) -> dict:
        return {
            "mean": self.mean,
            "stderr": self.stderr,
            "trials": self.trials,
            "expected": self.expected,
            "distribution": {int(i): float(p) for i, p in enumerate(self.distribution) if i > 0},
        }


def from_counts(counts: np.ndarray, expected: float | None) -> SimResult:
    """SimResult from counts[L] = trials with accept length L."""
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    x = np.arange(counts.size, dtype=np.float64)
    mean = float((x * counts).sum() / n) if n else float("nan")
    var = float(((x - mean) ** 2 * counts).sum() / (n - 1)) if n > 1 else float("nan")
    stderr = math.sqrt(var / n) if n > 1 else float("nan")
    return SimResult(mean=mean, stderr=stderr, trials=n, counts=counts, expected=expected)


def from_lengths(lengths: np.ndarray, max_len: int, expected: float | None) -> SimResult:
    """SimResult from one accept length per trial (each at most `max_len`)."""
    return from_counts(np.bincount(np.asarray(lengths, dtype=np.int64), minlength=max_len + 1), expected)


# Vectorised draws. A step's randomness is one uniform 32-bit integer v: an event of probability
# p is `v < round(p * 2^32)` (exact to 2^-32), and what a step needs is c = #(thresholds <= v) for
# ascending thresholds (inverse-CDF sampling). The bits of v are drawn lazily, most significant
# first: the top byte of every draw, counted per value; a byte value whose whole range of v lies
# between two thresholds already fixes c, and only the draws in the few byte values that hold a
# threshold draw their next byte, then (for the rarer ones still undecided) their last 16 bits
# and are compared exactly. The low bits of a uniform are uniform and independent of the top
# ones, so every draw gets an exact 32-bit uniform; the work is one byte per draw, counted.
LEVELS = (8, 8, 16)  # bits drawn per level, most significant first (three levels, sum 32)
_SCALE = float(1 << 32)


def thresholds(p: np.ndarray) -> np.ndarray:
    """Probabilities in [0, 1] -> uint64 thresholds in [0, 2^32]."""
    return np.clip(np.rint(np.asarray(p, dtype=np.float64) * _SCALE), 0, _SCALE).astype(np.uint64)


def uniform_uint32(rng: np.random.Generator, n: int) -> np.ndarray:
    """n uniform uint32 draws (two per raw 64-bit output of the generator)."""
    return rng.bit_generator.random_raw((n + 1) // 2).view(np.uint32)[:n]


def uniform_uint8(rng: np.random.Generator, n: int) -> np.ndarray:
    """n uniform bytes (eight per raw 64-bit output of the generator)."""
    return rng.bit_generator.random_raw((n + 7) // 8).view(np.uint8)[:n]


def _bincount_uint8(b: np.ndarray, n: int) -> np.ndarray:
    """np.bincount of uint8 values. torch counts uint8 without widening them to int64 first (3.5x
    faster on large batches), so it is used for large batches when it is already loaded, or when
    the batch is large enough to pay for loading it; a small run (the `simulate` command's
    default) stays numpy-only and starts fast."""
    if b.size > 1 << 14 and ("torch" in sys.modules or b.size > 1 << 22):
        import torch

        return torch.bincount(torch.from_numpy(b), minlength=n).numpy()
    return np.bincount(b, minlength=n)


class InverseCdf:
    """Draws -> how many have #(t <= v) == c, for ascending uint64 thresholds t in [0, 2^32].

    Built once per set of thresholds: which c each value of the top w1 bits fixes (`fold1`) and
    the boundary bins where a threshold lies inside (`bnd1`); the same for the next w2 bits inside
    the boundary bins (`level2`, built when first needed). `counts` draws the top w1 bits of every
    draw and counts them per row; draws in a boundary bin draw their next w2 bits (or, when they
    are few, all their remaining bits at once) and the ones still undecided their last w3 bits,
    compared exactly. See the comment above `LEVELS`.
    """

    EXACT_BELOW = 4096  # this few undecided draws: draw all their remaining bits at once

    def __init__(self, t: np.ndarray, levels=LEVELS):
        levels = tuple(int(w) for w in levels)
        if len(levels) != 3 or sum(levels) != 32 or not (1 <= levels[0] <= 8 and 1 <= levels[1] <= 8):
            raise ValueError(f"levels must be three widths (the first two 1..8 bits) summing to 32, got {levels}")
        self.t = np.asarray(t, dtype=np.uint64)
        self.levels = levels
        w1, w2, w3 = levels
        self.lo1 = np.arange(1 << w1, dtype=np.uint64) << np.uint64(32 - w1)
        self.fold1, self.bnd1 = self._bins(self.lo1, 32 - w1)
        self._level2 = None

    @property
    def level2(self):
        """(first value of each sub-bin [bnd1 * 2^w2], fold plan, boundary sub-bins), built on first use."""
        if self._level2 is None:
            w1, w2, w3 = self.levels
            lo2 = (self.lo1[self.bnd1][:, None] | (np.arange(1 << w2, dtype=np.uint64) << np.uint64(w3))[None, :]).ravel()
            self._level2 = (lo2, *self._bins(lo2, w3))
        return self._level2

    def _bins(self, lo: np.ndarray, span_bits: int):
        """Bins starting at ascending `lo`, 2^span_bits values wide -> (fold plan, boundary bins).

        The bins edges[c] .. edges[c + 1] - 1 have #(t <= v) == c at their first value; boundary
        bins are those where it changes inside. The plan (settled mask, the c of every non-empty
        run of bins, where each run starts) lets `_fold` sum a row's bins by c in one reduceat.
        Found from where each threshold falls, so the cost follows len(t).
        """
        t = self.t
        if not lo.size:
            return (np.ones(0, dtype=np.int64), np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)), lo.astype(np.intp)
        edges = np.concatenate([[0], np.searchsorted(lo, t, side="left"), [lo.size]])  # first bin with lo >= t_j
        at = np.searchsorted(lo, t, side="right") - 1  # the bin whose start is the last <= t_j
        start = lo[np.maximum(at, 0)]
        boundary = np.unique(at[(at >= 0) & (t > start) & (t - start < np.uint64(1 << span_bits))])
        settled = np.ones(lo.size, dtype=np.int64)
        settled[boundary] = 0
        runs = np.flatnonzero(edges[1:] > edges[:-1])  # the c that own at least one bin
        return (settled, runs, edges[runs]), boundary

    @staticmethod
    def _fold(hist: np.ndarray, count: np.ndarray, plan) -> None:
        """hist [rows, len(t) + 1] += the draws of count [rows, bins] in settled bins, by c.
        `count` is overwritten (its boundary bins are zeroed)."""
        settled, runs, starts = plan
        if not runs.size:
            return
        count *= settled
        hist[:, runs] += np.add.reduceat(count, starts, axis=1)

    def _exact(self, hist: np.ndarray, rng: np.random.Generator, lo: np.ndarray, cells: np.ndarray,
               rows: np.ndarray, bits: int) -> None:
        """The cells[i] draws of row rows[i] whose values start at lo[i] draw their last `bits`
        bits; add them to hist by exact comparison."""
        low = (uniform_uint32(rng, int(cells.sum())) >> np.uint32(32 - bits)).astype(np.uint64)
        c = np.searchsorted(self.t, np.repeat(lo, cells) + low, side="right")
        hist += np.bincount(np.repeat(rows, cells) * hist.shape[1] + c, minlength=hist.size).reshape(hist.shape)

    def counts(self, draws, rng: np.random.Generator, chunk: int = 1 << 18) -> np.ndarray:
        """hist [rows, len(t) + 1]: for each row r, how many of its draws[r] uniform v have #(t <= v) == c."""
        w1, w2, w3 = self.levels
        draws = [int(m) for m in np.atleast_1d(draws)]
        rows, nb1 = len(draws), 1 << w1
        count1 = np.zeros((rows, nb1), dtype=np.int64)  # the top w1 bits of every draw, counted per row
        total, row, done = sum(draws), 0, 0  # one stream, cut into the rows' shares
        for lo in range(0, total, chunk):
            b = uniform_uint8(rng, min(chunk, total - lo))
            if w1 < 8:
                b = b >> np.uint8(8 - w1)
            s = 0
            while s < b.size:
                e = min(b.size, s + draws[row] - done)
                count1[row] += _bincount_uint8(b[s:e], nb1)
                done += e - s
                if done == draws[row]:
                    row, done = row + 1, 0
                s = e
        hist = np.zeros((rows, self.t.size + 1), dtype=np.int64)
        cells = count1[:, self.bnd1].ravel()  # [rows * bnd1] draws in a boundary bin
        self._fold(hist, count1, self.fold1)
        n = int(cells.sum())
        if n == 0:
            return hist
        nbnd = self.bnd1.size
        if n <= self.EXACT_BELOW:  # few: all their remaining bits at once
            self._exact(hist, rng, np.tile(self.lo1[self.bnd1], rows), cells, np.repeat(np.arange(rows), nbnd), w2 + w3)
            return hist
        # many: their next w2 bits first, counted per (row, boundary bin, next bits)
        key = np.repeat(np.arange(cells.size, dtype=np.int32) << np.int32(w2), cells)  # [n]
        key += uniform_uint8(rng, n) >> np.uint8(8 - w2)
        count2 = np.bincount(key, minlength=cells.size << w2).reshape(rows, -1)  # [rows, bnd1 * 2^w2]
        lo2, fold2, bnd2 = self.level2
        cells = count2[:, bnd2].ravel()  # [rows * bnd2] still undecided: the last w3 bits, exactly
        self._fold(hist, count2, fold2)
        if cells.sum():
            self._exact(hist, rng, np.tile(lo2[bnd2], rows), cells, np.repeat(np.arange(rows), bnd2.size), w3)
        return hist
