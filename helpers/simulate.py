"""Accept length: closed form, Monte Carlo (chain and tree), and what a measured one means.

Accept length is what serving logs print (`accept len: 1.90`): the number of tokens one
speculative step emits, the target's bonus token included, so its minimum is 1.0 (EAGLE, SGLang
and vLLM agree). This file turns a per-token acceptance into an expected accept length, checks
that by simulation, and judges a measured accept length against the prediction. Measuring it by
running the real draft on hidden-state samples is `helpers.replay`; turning an accept length
into tokens/s is `helpers.throughput` (their names still resolve here, imported on first use).
Numpy only: importing this module does not import torch, so the `simulate` command starts fast.

Chain drafting with k drafted tokens, each accepted with probability a given the ones before:

    E = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)

Tree drafting (SGLang's `--speculative-num-steps S --speculative-eagle-topk K
--speculative-num-draft-tokens N`, EAGLE-2's dynamic tree). The rank-probability model: at every
depth d the target's next token equals the draft's sibling of rank r with probability q[d, r]
(ranks exclusive, sum over r at most 1). A node's path probability is the product of the q of
the ranks along its path. Candidates are built like SGLang does it: the K children of the root,
then at each further depth the K children of the K best nodes of the previous depth (beam
search on path probability); the tree keeps the N - 1 candidates of highest path probability
(the root, the last verified token, is the N-th). Then

    E = 1 + sum over kept nodes of P(path to node accepted) = 1 + sum over kept nodes of prod q.

With one rate a, q[d, r] = a (1 - a)^r: rank 0 is accepted with probability a and each lower
rank catches a share a of what the ranks above it missed. With top-k 1 the tree is the chain.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

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


def _from_counts(counts: np.ndarray, expected: float | None) -> SimResult:
    """SimResult from counts[L] = trials with accept length L."""
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    x = np.arange(counts.size, dtype=np.float64)
    mean = float((x * counts).sum() / n) if n else float("nan")
    var = float(((x - mean) ** 2 * counts).sum() / (n - 1)) if n > 1 else float("nan")
    stderr = math.sqrt(var / n) if n > 1 else float("nan")
    return SimResult(mean=mean, stderr=stderr, trials=n, counts=counts, expected=expected)


def _result(lengths: np.ndarray, max_len: int, expected: float | None) -> SimResult:
    return _from_counts(np.bincount(np.asarray(lengths, dtype=np.int64), minlength=max_len + 1), expected)


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


def _thresholds(p: np.ndarray) -> np.ndarray:
    """Probabilities in [0, 1] -> uint64 thresholds in [0, 2^32]."""
    return np.clip(np.rint(np.asarray(p, dtype=np.float64) * _SCALE), 0, _SCALE).astype(np.uint64)


def _uint32(rng: np.random.Generator, n: int) -> np.ndarray:
    """n uniform uint32 draws (two per raw 64-bit output of the generator)."""
    return rng.bit_generator.random_raw((n + 1) // 2).view(np.uint32)[:n]


def _uint8(rng: np.random.Generator, n: int) -> np.ndarray:
    """n uniform bytes (eight per raw 64-bit output of the generator)."""
    return rng.bit_generator.random_raw((n + 7) // 8).view(np.uint8)[:n]


class _InverseCdf:
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
        low = (_uint32(rng, int(cells.sum())) >> np.uint32(32 - bits)).astype(np.uint64)
        c = np.searchsorted(self.t, np.repeat(lo, cells) + low, side="right")
        hist += np.bincount(np.repeat(rows, cells) * hist.shape[1] + c, minlength=hist.size).reshape(hist.shape)

    def counts(self, draws, rng: np.random.Generator, chunk: int = 1 << 18) -> np.ndarray:
        """hist [rows, len(t) + 1]: for each row r, how many of its draws[r] uniform v have #(t <= v) == c."""
        import torch

        w1, w2, w3 = self.levels
        draws = [int(m) for m in np.atleast_1d(draws)]
        rows, nb1 = len(draws), 1 << w1
        count1 = np.zeros((rows, nb1), dtype=np.int64)  # the top w1 bits of every draw, counted per row
        total, row, done = sum(draws), 0, 0  # one stream, cut into the rows' shares
        for lo in range(0, total, chunk):
            b = _uint8(rng, min(chunk, total - lo))
            if w1 < 8:
                b = b >> np.uint8(8 - w1)
            s = 0
            while s < b.size:
                e = min(b.size, s + draws[row] - done)
                if e - s > 1 << 14:  # torch counts uint8 without widening them to int64 first
                    count1[row] += torch.bincount(torch.from_numpy(b[s:e]), minlength=nb1).numpy()
                else:
                    count1[row] += np.bincount(b[s:e], minlength=nb1)
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
        key += _uint8(rng, n) >> np.uint8(8 - w2)
        count2 = np.bincount(key, minlength=cells.size << w2).reshape(rows, -1)  # [rows, bnd1 * 2^w2]
        lo2, fold2, bnd2 = self.level2
        cells = count2[:, bnd2].ravel()  # [rows * bnd2] still undecided: the last w3 bits, exactly
        self._fold(hist, count2, fold2)
        if cells.sum():
            self._exact(hist, rng, np.tile(lo2[bnd2], rows), cells, np.repeat(np.arange(rows), bnd2.size), w3)
        return hist


def simulate_chain(accept_rate, k: int, trials: int = 100_000, seed: int | None = 0,
                   chunk: int = 1 << 18) -> SimResult:
    """Monte Carlo accept length of chain drafting: one rate or k per-position rates.

    Vectorised, one uniform draw per verify step: the number of leading accepted tokens N
    satisfies P(N >= j) = a_0 a_1 ... a_(j-1) (all of the first j accepted), so with one uniform u
    per step N = #{j : u < a_0 ... a_(j-1)} (inverse-CDF sampling of the same chain; the draws'
    low bits are drawn only where they decide, see `_InverseCdf`). Accept length 1 + N.
    `simulate_chain_loop` flips one coin per drafted token instead; both estimate the same law.
    """
    rates = _chain_rates(accept_rate, k)
    kk = rates.size
    if kk == 0:
        return _from_counts(np.array([0, int(trials)]), 1.0)
    rng = np.random.default_rng(seed)
    t = np.sort(_thresholds(np.cumprod(rates)))  # ascending; N = k - #(t <= v)
    hist = _InverseCdf(t).counts(int(trials), rng, chunk)[0]  # hist[c] = draws with #(t <= v) == c
    counts = np.zeros(kk + 2, dtype=np.int64)
    counts[1:] = hist[::-1]  # accept length 1 + k - c
    return _from_counts(counts, chain_expected(rates, kk))


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
    return _result(np.asarray(lengths, dtype=np.int64), len(rates) + 1, chain_expected(rates, len(rates)))


# ----------------------------------------------------------------------------------------------
# tree drafting


def rank_probabilities(accept_rate, steps: int, topk: int) -> np.ndarray:
    """q [steps, topk]: P(target token == sibling of rank r at depth d), from a rate or rates.

    accept_rate: one rate a (every depth), a sequence of `steps` per-depth rates, or an explicit
    2-D q of shape [steps, topk] (or [1, topk], the same at every depth).
    From a rate a: q[d, r] = a (1 - a)^r (so top-k 1 is the chain with rate a).
    """
    x = np.asarray(accept_rate, dtype=np.float64)
    steps, topk = int(steps), int(topk)
    if steps < 1 or topk < 1:
        raise ValueError(f"steps and topk must be >= 1, got steps={steps}, topk={topk}")
    if x.ndim <= 1:
        if x.ndim == 1 and x.shape[0] != steps:
            raise ValueError(f"per-depth rates must have length steps={steps}, got {x.shape[0]}")
        a = np.broadcast_to(x, (steps,)).astype(np.float64)
        if np.any(~np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
            raise ValueError(f"acceptance rates must lie in [0, 1], got {np.atleast_1d(x).tolist()}")
        q = a[:, None] * (1.0 - a[:, None]) ** np.arange(topk)[None, :]
    elif x.ndim == 2 and x.shape[1] == topk and x.shape[0] in (1, steps):
        q = np.broadcast_to(x, (steps, topk)).copy()
    else:
        raise ValueError(f"q must have shape [{steps}, {topk}] or [1, {topk}], got {tuple(x.shape)}")
    if np.any(~np.isfinite(q)) or np.any(q < 0) or np.any(q.sum(axis=1) > 1 + 1e-9):
        raise ValueError("rank probabilities must be >= 0 and sum to at most 1 at each depth")
    return q


@dataclass
class DraftTree:
    """The kept draft tree: node i (1..n) has `parent[i]`, `depth[i]`, `rank[i]`, `prob[i]`.

    Node 0 is the root (the last verified token, depth 0, prob 1). `child[i, r]` is the kept
    child of node i with rank r, or -1.
    """

    steps: int
    topk: int
    draft_tokens: int
    q: np.ndarray  # [steps, topk]
    parent: np.ndarray  # [n + 1]
    depth: np.ndarray  # [n + 1]
    rank: np.ndarray  # [n + 1]
    prob: np.ndarray  # [n + 1] path probability
    child: np.ndarray = field(repr=False)  # [n + 1, topk]

    @property
    def nodes(self) -> int:
        """Drafted nodes kept (the root not counted)."""
        return int(self.parent.size - 1)

    def expected(self) -> float:
        """Exact expected accept length: 1 + sum over kept nodes of their path probability."""
        return float(1.0 + self.prob[1:].sum())

    def length_distribution(self) -> np.ndarray:
        """Exact law of the accept length: [steps + 2], index = accept length (index 0 is 0).

        The walk reaches depth d exactly when the ranks drawn so far spell the path of a kept node
        at depth d, and those events are disjoint, so P(L >= d + 1) = sum of prob over the kept
        nodes at depth d.
        """
        reach = np.bincount(self.depth, weights=self.prob, minlength=self.steps + 2)  # [depth] P(L >= depth + 1)
        dist = np.zeros(self.steps + 2)
        dist[1:] = reach[:-1] - reach[1:]
        return dist


def build_tree(accept_rate, steps: int, topk: int, draft_tokens: int) -> DraftTree:
    """The tree SGLang verifies for (steps, topk, draft_tokens) under the rank-probability model.

    Candidates: the topk children of the root; at each next depth the topk children of the topk
    best candidates of the previous depth. Kept: the draft_tokens - 1 candidates of highest path
    probability (ties: shallower first, then in creation order), which is always a tree since a
    child is never more probable than its parent.
    """
    q = rank_probabilities(accept_rate, steps, topk)
    if int(draft_tokens) < 1:
        raise ValueError(f"draft tokens must be >= 1 (it counts the root), got {draft_tokens}")
    # candidates: (prob, depth, order, parent_candidate, rank)
    cand_prob, cand_depth, cand_parent, cand_rank = [1.0], [0], [-1], [-1]
    beam, q_rows = [0], q.tolist()
    for d in range(steps):
        layer = []
        for b in beam:
            for r in range(topk):
                cand_prob.append(cand_prob[b] * q_rows[d][r])
                cand_depth.append(d + 1)
                cand_parent.append(b)
                cand_rank.append(r)
                layer.append(len(cand_prob) - 1)
        # the topk best of this depth are expanded next (the sort is stable: creation order breaks ties)
        beam = sorted(layer, key=cand_prob.__getitem__, reverse=True)[:topk]
    # candidates are created depth by depth, so creation order already puts shallower ones first
    order = sorted(range(1, len(cand_prob)), key=cand_prob.__getitem__, reverse=True)
    kept = sorted(order[: int(draft_tokens) - 1])
    index = {0: 0}
    for i in kept:
        index[i] = len(index)
    n = len(index)
    parent, depth, rank, prob = [-1] * n, [0] * n, [-1] * n, [1.0] * n
    child = np.full((n, topk), -1, dtype=np.int64)
    for i in kept:
        j = index[i]
        p = cand_parent[i]
        if p not in index:  # cannot happen with probabilities <= 1; kept as a guard
            raise AssertionError("kept node without its parent")
        parent[j], depth[j], rank[j], prob[j] = index[p], cand_depth[i], cand_rank[i], cand_prob[i]
    kept_idx = np.arange(1, n)
    child[np.asarray(parent[1:], dtype=np.intp), np.asarray(rank[1:], dtype=np.intp)] = kept_idx
    return DraftTree(int(steps), int(topk), int(draft_tokens), q, np.array(parent, dtype=np.int64),
                     np.array(depth, dtype=np.int64), np.array(rank, dtype=np.int64),
                     np.array(prob, dtype=np.float64), child)


def tree_expected(accept_rate, steps: int, topk: int, draft_tokens: int) -> float:
    """Exact expected accept length of SGLang's tree drafting (see `build_tree`)."""
    return build_tree(accept_rate, steps, topk, draft_tokens).expected()


def _depth_groups(steps: int, k1: int) -> list[range]:
    """Consecutive depths whose ranks one draw picks together: as many as keep the joint outcomes
    (k1 = top-k + 1 per depth) at or under 1024, at least one."""
    g = 1
    while g < steps and k1 ** (g + 1) <= 1024:
        g += 1
    return [range(d, min(d + g, steps)) for d in range(0, steps, g)]


def simulate_tree(accept_rate, steps: int, topk: int, draft_tokens: int, trials: int = 100_000,
                  seed: int | None = 0, chunk: int = 1 << 18) -> SimResult:
    """Monte Carlo accept length of tree drafting, vectorised over trials.

    Each trial draws, at every depth, which rank (or none) the target's token has, independently
    with probabilities q[d]; the walk goes from the root to the kept child of that rank while one
    exists. Accept length = 1 + the depth where the walk stops.

    Vectorised: consecutive depths are grouped (four at top-k 4) and one uniform draw per trial
    picks the ranks of all of them (inverse CDF over the product of the depths' laws, which is
    drawing them independently). Where each combination of ranks takes a walker from each node is
    a table, built by walking the child pointers; combinations that take every walker of the group
    to the same place are one outcome (their probabilities add). Trials are interchangeable, so
    the walk keeps how many stand at each node, and every one of them draws its own uniform
    (`_InverseCdf`). `simulate_tree_loop` walks one trial and one depth at a time instead.
    """
    tree = build_tree(accept_rate, steps, topk, draft_tokens)
    n, k1 = tree.parent.size, topk + 1
    stop = n + np.arange(n)  # state n + i: the walk stopped at node i
    # NEXT[state * (topk + 1) + rank] (rank topk: none matched): the kept child, else "stopped here"
    nxt = np.concatenate([np.where(tree.child >= 0, tree.child, stop[:, None]), stop[:, None]], axis=1)
    nxt = np.concatenate([nxt, np.repeat(stop[:, None], k1, axis=1)]).ravel()  # [2n * (topk + 1)]
    q_none = np.concatenate([tree.q, np.clip(1.0 - tree.q.sum(axis=1, keepdims=True), 0.0, 1.0)], axis=1)
    rng = np.random.default_rng(seed)
    counts = np.zeros(steps + 2, dtype=np.int64)
    nodes, walking = np.array([0]), np.array([int(trials)], dtype=np.int64)  # trials at each node
    laws = {}
    for depths in _depth_groups(steps, k1):
        if not nodes.size:
            break
        law = q_none[list(depths)]  # [group depths, topk + 1]
        key = law.tobytes()
        if key not in laws:  # one rate: the same law for every group of the same size
            laws[key] = functools.reduce(np.multiply.outer, law).ravel()  # [(topk + 1)^depths], first depth major
        p = laws[key]
        state = nodes[:, None]
        for _ in depths:  # [nodes, outcomes so far] where each combination of ranks leads
            state = nxt[(state * k1)[:, :, None] + np.arange(k1)].reshape(nodes.size, -1)
        # combinations that lead every node to the same place are one outcome for the walk
        base = 2 * n
        if base ** nodes.size < 1 << 62:  # a column's destinations as one integer, decoded below
            place = np.int64(base) ** np.arange(nodes.size, dtype=np.int64)  # [nodes] digit weights
            column = state[0] if nodes.size == 1 else place @ state
            uniq = np.unique(column)
            dest = (uniq[None, :] // place[:, None]) % base
            merged = np.searchsorted(uniq, column)
        else:
            _, first, merged = np.unique(state, axis=1, return_index=True, return_inverse=True)
            dest = state[:, first]
        pm = np.bincount(merged.ravel(), weights=p)  # [merged outcomes]
        order = np.argsort(-pm, kind="stable")  # likeliest first: the tiny outcomes share few bins
        state = dest[:, order]
        t = _thresholds(np.cumsum(pm[order])[:-1])  # merged outcome order[c] for #(t <= v) == c
        hist = _InverseCdf(t).counts(walking, rng, chunk)  # [nodes, merged outcomes]
        reached = np.bincount(state.ravel(), weights=hist.ravel(), minlength=2 * n)
        reached = np.rint(reached).astype(np.int64)  # exact: counts < 2^53
        counts += np.bincount(1 + tree.depth, weights=reached[n:], minlength=steps + 2).astype(np.int64)
        nodes = np.flatnonzero(reached[:n])
        walking = reached[nodes]
    counts += np.bincount(1 + tree.depth[nodes], weights=walking, minlength=steps + 2).astype(np.int64)
    return _from_counts(counts, tree.expected())


def simulate_tree_loop(accept_rate, steps: int, topk: int, draft_tokens: int, trials: int = 10_000,
                       seed: int | None = 0) -> SimResult:
    """The same tree simulation as a plain Python loop (reference for tests and benchmarks)."""
    import random

    tree = build_tree(accept_rate, steps, topk, draft_tokens)
    q = tree.q.tolist()
    child = tree.child.tolist()
    rnd = random.Random(seed)
    lengths = []
    for _ in range(int(trials)):
        node, n = 0, 1
        for d in range(steps):
            u, acc, r = rnd.random(), 0.0, topk
            for j in range(topk):
                acc += q[d][j]
                if u < acc:
                    r = j
                    break
            if r == topk or child[node][r] < 0:
                break
            node = child[node][r]
            n += 1
        lengths.append(n)
    return _result(np.asarray(lengths, dtype=np.int64), steps + 1, tree.expected())


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


@dataclass(frozen=True)
class Drafting:
    """A drafting setup: a chain of `draft_tokens` tokens, or SGLang's tree (steps, topk, draft_tokens)."""

    draft_tokens: int
    topk: int = 1
    steps: int | None = None  # None: chain

    @property
    def is_chain(self) -> bool:
        return self.steps is None

    @property
    def label(self) -> str:
        if self.is_chain:
            return f"chain, {self.draft_tokens} tokens"
        return f"tree {self.steps}/{self.topk}/{self.draft_tokens} (steps/topk/draft tokens)"

    def expected(self, accept_rate) -> float:
        return expected_accept_length(accept_rate, self.draft_tokens, self.topk, self.steps)

    def simulate(self, accept_rate, trials: int = 100_000, seed: int | None = 0) -> SimResult:
        if self.is_chain:
            return simulate_chain(accept_rate, self.draft_tokens, trials=trials, seed=seed)
        return simulate_tree(accept_rate, self.steps, self.topk, self.draft_tokens, trials=trials, seed=seed)

    def rate_for(self, accept_length: float) -> float:
        """The per-token acceptance this setup needs to reach `accept_length`."""
        return rate_for_accept_length(accept_length, self.draft_tokens, self.topk, self.steps)


def prediction_table(accept_rate, setups, trials: int = 100_000, seed: int = 0):
    """pandas DataFrame: per drafting setup, the exact expectation and the Monte Carlo estimate."""
    import pandas as pd

    rows = []
    for i, d in enumerate(setups):
        r = d.simulate(accept_rate, trials=trials, seed=seed + i)
        rows.append({"drafting": d.label, "accept rate": accept_rate if np.ndim(accept_rate) == 0 else str(accept_rate),
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
        return (f"Predicted accept length {predicted:.2f} for {drafting_label} (per-token acceptance {rate:.3f}). "
                "No serving measurement was given (pass --log) to compare with.")
    return f"{drafting_label}: " + judge_accept_length(measured, predicted, break_even)


# ----------------------------------------------------------------------------------------------
# moved: the replay of the real draft and the throughput model live in their own modules (the
# replay needs torch and the draft; this module and `helpers.throughput` need only numpy). The
# names still resolve here, imported on first use.
_MOVED = {
    "ReplayResult": "replay", "accept_lengths": "replay", "replay": "replay",
    "ThroughputModel": "throughput", "throughput_model": "throughput",
}


def __getattr__(name: str):
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(f"{__package__}.{_MOVED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_MOVED))
