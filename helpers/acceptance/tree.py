"""Tree drafting: SGLang's draft tree under the rank-probability model, exactly and by Monte Carlo.

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

`build_tree` builds the kept tree, `tree_expected` is its exact expectation, `simulate_tree` the
vectorised Monte Carlo (`simulate_tree_loop` the plain-loop reference). Numpy only; the public
names are re-exported by `helpers.acceptance.chain`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from helpers.acceptance.montecarlo import (
    InverseCdf,
    SimResult,
    from_counts,
    from_lengths,
    thresholds,
)


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


def _walk_table(tree: DraftTree) -> tuple[np.ndarray, np.ndarray]:
    """(NEXT, q_none) for the vectorised walk over `tree`'s n nodes.

    States 0..n-1: standing at node i; n + i: the walk stopped at node i. NEXT[state * (topk + 1)
    + rank] (rank topk: none matched) is the kept child, else "stopped here" [2n * (topk + 1)];
    q_none [steps, topk + 1] is q with the probability that no rank matches appended.
    """
    n, k1 = tree.parent.size, tree.topk + 1
    stop = n + np.arange(n)  # state n + i: the walk stopped at node i
    # NEXT[state * (topk + 1) + rank] (rank topk: none matched): the kept child, else "stopped here"
    nxt = np.concatenate([np.where(tree.child >= 0, tree.child, stop[:, None]), stop[:, None]], axis=1)
    nxt = np.concatenate([nxt, np.repeat(stop[:, None], k1, axis=1)]).ravel()  # [2n * (topk + 1)]
    q_none = np.concatenate([tree.q, np.clip(1.0 - tree.q.sum(axis=1, keepdims=True), 0.0, 1.0)], axis=1)
    return nxt, q_none


def _merged_outcomes(state: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Combinations of ranks that lead every node to the same place are one outcome for the walk.

    state [nodes, combinations]: where each combination takes a walker from each node (one of 2n
    states). Returns (dest [nodes, outcomes], merged [combinations] -> its outcome).
    """
    nodes = state.shape[0]
    base = 2 * n
    if base ** nodes < 1 << 62:  # a column's destinations as one integer, decoded below
        place = np.int64(base) ** np.arange(nodes, dtype=np.int64)  # [nodes] digit weights
        column = state[0] if nodes == 1 else place @ state
        uniq = np.unique(column)
        dest = (uniq[None, :] // place[:, None]) % base
        merged = np.searchsorted(uniq, column)
    else:
        _, first, merged = np.unique(state, axis=1, return_index=True, return_inverse=True)
        dest = state[:, first]
    return dest, merged


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
    (`InverseCdf`). `simulate_tree_loop` walks one trial and one depth at a time instead.
    """
    tree = build_tree(accept_rate, steps, topk, draft_tokens)
    n, k1 = tree.parent.size, topk + 1
    nxt, q_none = _walk_table(tree)
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
        dest, merged = _merged_outcomes(state, n)
        pm = np.bincount(merged.ravel(), weights=p)  # [merged outcomes]
        order = np.argsort(-pm, kind="stable")  # likeliest first: the tiny outcomes share few bins
        state = dest[:, order]
        t = thresholds(np.cumsum(pm[order])[:-1])  # merged outcome order[c] for #(t <= v) == c
        hist = InverseCdf(t).counts(walking, rng, chunk)  # [nodes, merged outcomes]
        reached = np.bincount(state.ravel(), weights=hist.ravel(), minlength=2 * n)
        reached = np.rint(reached).astype(np.int64)  # exact: counts < 2^53
        counts += np.bincount(1 + tree.depth, weights=reached[n:], minlength=steps + 2).astype(np.int64)
        nodes = np.flatnonzero(reached[:n])
        walking = reached[nodes]
    counts += np.bincount(1 + tree.depth[nodes], weights=walking, minlength=steps + 2).astype(np.int64)
    return from_counts(counts, tree.expected())


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
    return from_lengths(np.asarray(lengths, dtype=np.int64), steps + 1, tree.expected())
