"""Accept-length simulation: closed form, Monte Carlo (chain, tree), replay, throughput model, CLI."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.acceptance.montecarlo import InverseCdf as _InverseCdf
from helpers.acceptance.montecarlo import thresholds as _thresholds
from helpers.acceptance.montecarlo import uniform_uint8 as _uint8
from helpers.acceptance.montecarlo import uniform_uint32 as _uint32
from helpers.measure.replay import accept_lengths, replay
from helpers.acceptance.tree import (
    build_tree,
    rank_probabilities,
    simulate_tree,
    simulate_tree_loop,
    tree_expected,
)
from helpers.acceptance.chain import (
    chain_expected,
    expected_accept_length,
    rate_for_accept_length,
    simulate_chain,
    simulate_chain_loop,
)
from helpers.acceptance.throughput import throughput_model
from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]

RATES = [0.05, 0.3, 0.6, 0.85, 0.97]
KS = [1, 3, 7, 16]
# (12, 1, 13): ten depths per draw; (3, 10, 60): more nodes at a depth than one integer key holds
TREES = [(2, 2, 4), (3, 2, 6), (4, 3, 10), (5, 4, 16), (6, 2, 9), (8, 4, 32), (3, 4, 40), (12, 1, 13), (3, 10, 60)]


# -- chain ---------------------------------------------------------------------------------------
def test_chain_closed_form_against_the_sum():
    for a, k in itertools.product(RATES, KS):
        assert chain_expected(a, k) == pytest.approx(sum(a**j for j in range(k + 1)), rel=1e-12)
    assert chain_expected(1.0, 5) == 6.0
    assert chain_expected(0.0, 5) == 1.0
    assert chain_expected(0.5, 0) == 1.0


def test_chain_per_position_rates():
    rates = [0.9, 0.5, 0.2]
    assert chain_expected(rates, 3) == pytest.approx(1 + 0.9 + 0.45 + 0.09)
    with pytest.raises(ValueError):
        chain_expected([0.5, 0.5], 3)
    with pytest.raises(ValueError):
        chain_expected(1.2, 3)


# Monte Carlo against the exact expectation over a grid. One point lands beyond 3 standard errors
# by chance 0.27 % of the time, so with ~50 points a fixed per-point 3-s.e. check fails for about
# one seed choice in eight whatever the code. Each point must be within 4 s.e. (a real bias at
# these trial counts lands far outside), and the grid as a whole must look like N(0, 1) draws:
# at most 2 points beyond 3 s.e. and a mean z^2 near 1 (test_grid_z_scores_behave_like_noise).
def _chain_point(a, k):
    return simulate_chain(a, k, trials=40_000, seed=k * 100 + int(a * 100))


def _tree_point(shape, a):
    steps, topk, n = shape
    return simulate_tree(a, steps, topk, n, trials=40_000, seed=hash(shape) % 1000 + int(a * 100))


@pytest.mark.parametrize("a,k", list(itertools.product(RATES, KS)))
def test_chain_monte_carlo_agrees_with_the_closed_form(a, k):
    r = _chain_point(a, k)
    assert r.expected == pytest.approx(chain_expected(a, k))
    assert abs(r.mean - r.expected) <= 4 * r.stderr + 1e-12, (r.mean, r.expected, r.stderr)
    assert r.counts[0] == 0 and r.counts.sum() == r.trials
    assert r.counts[1:].size == k + 1  # lengths 1 .. k + 1


def test_chain_monte_carlo_distribution_is_geometric():
    a, k = 0.6, 4
    r = simulate_chain(a, k, trials=200_000, seed=1)
    want = [(1 - a) * a**j for j in range(k)] + [a**k]
    got = r.distribution[1:]
    se = np.sqrt(np.asarray(want) * (1 - np.asarray(want)) / r.trials)
    assert np.all(np.abs(got - want) <= 4 * se)


def test_chain_monte_carlo_per_position_rates():
    rates = [0.9, 0.7, 0.5, 0.3, 0.1]
    r = simulate_chain(rates, 5, trials=100_000, seed=3)
    assert abs(r.mean - chain_expected(rates, 5)) <= 3 * r.stderr


def _chi_square_z(counts, probs) -> float:
    """(chi^2 - dof) / sqrt(2 dof) of counts against probs, cells expected under 5 pooled."""
    counts, probs = np.asarray(counts, dtype=np.float64), np.asarray(probs, dtype=np.float64)
    n = counts.sum()
    assert np.all(counts[probs == 0] == 0), "a draw landed on an outcome of probability 0"
    e = probs * n
    big = e >= 5
    obs, exp = np.r_[counts[big], counts[~big].sum()], np.r_[e[big], e[~big].sum()]
    keep = exp > 0
    dof = int(keep.sum()) - 1
    if dof < 1:
        return 0.0
    chi = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    return (chi - dof) / np.sqrt(2 * dof)


def _threshold_sets():
    rng = np.random.default_rng(11)
    few = np.sort(rng.integers(0, 2**32 + 1, 7, dtype=np.uint64))
    edges = np.array([0, 1 << 24, 5 << 24, (5 << 24) + (3 << 16) + 7, (5 << 24) + (3 << 16) + 9, 2**32], dtype=np.uint64)
    tail = _thresholds(np.cumsum(rng.dirichlet(np.full(300, 0.1)))[:-1])  # many tiny outcomes packed together
    dup = np.sort(np.concatenate([few, few[:3], [few[4] + 1]])).astype(np.uint64)
    return {"few": few, "edges-and-ends": edges, "dirichlet-300": np.sort(tail), "duplicates": dup}


@pytest.mark.parametrize("levels", [(8, 8, 16), (2, 2, 28), (1, 8, 23), (8, 1, 23), (3, 3, 26)])
@pytest.mark.parametrize("name", list(_threshold_sets()))
def test_lazy_bits_draw_the_exact_law(name, levels):
    # every row's counts follow P(c) = (t_c - t_(c-1)) / 2^32; coarse levels push most draws
    # through the boundary-bin paths (next bits, then the last bits compared exactly)
    t = _threshold_sets()[name]
    probs = np.diff(np.concatenate([[0.0], t.astype(np.float64), [2.0**32]])) / 2.0**32
    rows = [150_000, 60_000, 0, 7, 3_000]
    hist = _InverseCdf(t, levels).counts(rows, np.random.default_rng(sum(levels) + len(t)), chunk=1 << 16)
    assert hist.shape == (len(rows), t.size + 1)
    assert hist.sum(axis=1).tolist() == rows
    for r, m in enumerate(rows):
        if m:
            assert _chi_square_z(hist[r], probs) < 5, (name, levels, r)


def test_the_law_check_catches_a_wrong_law():
    # the check above must be able to fail: counts drawn with thresholds one part in 200 off
    t = _threshold_sets()["few"]
    probs = np.diff(np.concatenate([[0.0], t.astype(np.float64), [2.0**32]])) / 2.0**32
    off = np.sort(_thresholds(np.clip(t.astype(np.float64) / 2.0**32 * 1.005, 0, 1)))
    hist = _InverseCdf(off).counts(400_000, np.random.default_rng(1))[0]
    assert _chi_square_z(hist, probs) > 5


def test_settled_draws_are_counted_from_their_top_byte():
    # thresholds on byte edges: no draw needs more than its top byte, so the counts equal a plain
    # count of the same byte stream (same seed)
    t = np.array([3 << 24, 3 << 24, 100 << 24, 255 << 24, 2**32], dtype=np.uint64)
    n = 50_000
    got = _InverseCdf(t).counts(n, np.random.default_rng(3))[0]
    v = _uint8(np.random.default_rng(3), n).astype(np.uint64) << np.uint64(24)
    want = np.bincount(np.searchsorted(t, v, side="right"), minlength=t.size + 1)
    assert got.tolist() == want.tolist()


def test_boundary_draws_draw_their_low_bits_from_the_same_stream():
    # one threshold inside byte 200: the draws in that byte take 24 more bits from the stream
    t = np.array([(200 << 24) + 12345], dtype=np.uint64)
    n = 20_000  # few boundary draws: their remaining bits come at once
    got = _InverseCdf(t).counts(n, np.random.default_rng(5))[0]
    rng = np.random.default_rng(5)
    top = _uint8(rng, n)
    m = int((top == 200).sum())
    low = (_uint32(rng, m) >> np.uint32(8)).astype(np.uint64)
    want = [int((top < 200).sum()) + int(((200 << 24) + low < t[0]).sum()), 0]
    want[1] = n - want[0]
    assert got.tolist() == want
    assert 0 < m < _InverseCdf.EXACT_BELOW


def test_tree_monte_carlo_follows_the_exact_length_distribution():
    # stronger than the mean: the share of walks ending at each depth, against the exact law
    for (steps, topk, n), a in itertools.product([(8, 4, 32), (5, 3, 14), (6, 2, 40)], [0.3, 0.7]):
        tree = build_tree(a, steps, topk, n)
        dist = tree.length_distribution()
        assert dist.sum() == pytest.approx(1.0) and (dist >= -1e-12).all()
        assert (np.arange(dist.size) * dist).sum() == pytest.approx(tree.expected())
        r = simulate_tree(a, steps, topk, n, trials=200_000, seed=steps * 10 + topk)
        assert _chi_square_z(r.counts, np.clip(dist, 0, None)) < 5, (steps, topk, n, a)


def test_monte_carlo_is_reproducible_with_a_seed():
    assert simulate_tree(0.6, 6, 3, 20, trials=50_000, seed=4).counts.tolist() == \
        simulate_tree(0.6, 6, 3, 20, trials=50_000, seed=4).counts.tolist()
    assert simulate_chain(0.6, 9, trials=50_000, seed=4).counts.tolist() == \
        simulate_chain(0.6, 9, trials=50_000, seed=4).counts.tolist()
    assert simulate_chain(0.6, 9, trials=50_000, seed=4).counts.tolist() != \
        simulate_chain(0.6, 9, trials=50_000, seed=5).counts.tolist()


def test_chain_loop_agrees_with_the_vectorised_simulation():
    a, k = 0.7, 6
    loop = simulate_chain_loop(a, k, trials=20_000, seed=5)
    vec = simulate_chain(a, k, trials=20_000, seed=5)
    exact = chain_expected(a, k)
    assert abs(loop.mean - exact) <= 3 * loop.stderr
    assert abs(vec.mean - exact) <= 3 * vec.stderr


# -- tree ----------------------------------------------------------------------------------------
def test_rank_probabilities_from_one_rate():
    q = rank_probabilities(0.5, steps=2, topk=3)
    assert q.shape == (2, 3)
    assert np.allclose(q[0], [0.5, 0.25, 0.125]) and np.allclose(q[1], q[0])
    assert np.allclose(rank_probabilities([0.5, 0.2], 2, 1)[:, 0], [0.5, 0.2])
    with pytest.raises(ValueError):
        rank_probabilities(np.array([[0.6, 0.6]]), 2, 2)  # ranks exclusive: sum must be <= 1


def test_tree_by_hand():
    # steps 2, topk 2, a 0.5: q = [0.5, 0.25]. Depth 1: 0.5, 0.25; depth 2: 0.25, 0.125, 0.125, 0.0625.
    # Three drafted nodes (4 draft tokens with the root): 0.5, then 0.25 at depth 1 before 0.25 at depth 2.
    t = build_tree(0.5, steps=2, topk=2, draft_tokens=4)
    assert t.nodes == 3
    assert sorted(t.prob[1:].tolist()) == [0.25, 0.25, 0.5]
    assert t.depth[1:].tolist() == [1, 1, 2]
    assert t.expected() == pytest.approx(2.0)
    # all six candidates kept: E = 1 + (0.5 + 0.25) + (0.5 + 0.25) * (0.5 + 0.25)
    assert tree_expected(0.5, 2, 2, 7) == pytest.approx(1 + 0.75 + 0.75 * 0.75)
    # more draft tokens than candidates: still the six
    assert tree_expected(0.5, 2, 2, 50) == pytest.approx(1 + 0.75 + 0.75 * 0.75)


def test_tree_beam_expands_only_the_topk_best():
    # steps 3, topk 2: depth 3 candidates hang only under the 2 best depth-2 nodes
    t = build_tree(0.5, steps=3, topk=2, draft_tokens=100)
    assert t.nodes == 2 + 4 + 4
    d2 = np.flatnonzero(t.depth == 2)
    parents3 = set(t.parent[t.depth == 3].tolist())
    best2 = set(d2[np.argsort(-t.prob[d2], kind="stable")[:2]].tolist())
    assert parents3 == best2


@pytest.mark.parametrize("a", [0.2, 0.5, 0.8, 1.0])
@pytest.mark.parametrize("steps", [1, 3, 6])
def test_tree_with_topk_one_is_the_chain(a, steps):
    for n in (2, steps + 1, steps + 5):
        k = min(steps, n - 1)
        assert tree_expected(a, steps, 1, n) == pytest.approx(chain_expected(a, k), rel=1e-12)
        assert expected_accept_length(a, n, topk=1, steps=steps) == pytest.approx(chain_expected(a, k))
    r = simulate_tree(a, steps, 1, steps + 1, trials=20_000, seed=steps)
    c = simulate_chain(a, steps, trials=20_000, seed=steps + 1)
    assert abs(r.mean - c.expected) <= 3 * max(r.stderr, 1e-9)
    assert abs(c.mean - r.expected) <= 3 * max(c.stderr, 1e-9)


def test_tree_exact_against_enumerating_every_outcome():
    # independent of the sum over nodes: enumerate the rank drawn at each depth (or none) and walk
    for (steps, topk, n), a in itertools.product([(2, 2, 4), (3, 3, 8), (4, 2, 9)], [0.3, 0.7]):
        t = build_tree(a, steps, topk, n)
        q = t.q
        total = 0.0
        for seq in itertools.product(range(topk + 1), repeat=steps):
            p, node, length = 1.0, 0, 1
            for d, r in enumerate(seq):
                p *= q[d, r] if r < topk else 1 - q[d].sum()
            for r in seq:
                if r == topk or t.child[node, r] < 0:
                    break
                node, length = t.child[node, r], length + 1
            total += p * length
        assert total == pytest.approx(t.expected(), rel=1e-12)


TREE_RATES = [0.15, 0.5, 0.8]


@pytest.mark.parametrize("shape", TREES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("a", TREE_RATES)
def test_tree_monte_carlo_agrees_with_the_exact_expectation(shape, a):
    steps, topk, n = shape
    r = _tree_point(shape, a)
    assert r.expected == pytest.approx(tree_expected(a, steps, topk, n))
    assert abs(r.mean - r.expected) <= 4 * r.stderr, (r.mean, r.expected, r.stderr)
    assert 1.0 <= r.mean <= steps + 1


def test_grid_z_scores_behave_like_noise():
    z = [_chain_point(a, k).z for a, k in itertools.product(RATES, KS) if 0 < a < 1]
    z += [_tree_point(shape, a).z for shape, a in itertools.product(TREES, TREE_RATES)]
    z = np.asarray(z)
    assert np.isfinite(z).all()
    beyond = int((np.abs(z) > 3).sum())
    assert beyond <= 2, np.round(z, 2).tolist()  # expected 0.13 of ~47; 3 or more: p ~ 3e-4
    assert 0.5 <= float((z**2).mean()) <= 1.6, np.round(z, 2).tolist()  # chi^2 / dof, sd ~0.2


def test_tree_monte_carlo_with_per_depth_q():
    q = np.array([[0.5, 0.2, 0.1], [0.4, 0.3, 0.1], [0.3, 0.2, 0.2]])
    r = simulate_tree(q, 3, 3, 12, trials=60_000, seed=9)
    assert abs(r.mean - tree_expected(q, 3, 3, 12)) <= 3 * r.stderr


def test_tree_loop_agrees():
    loop = simulate_tree_loop(0.6, 5, 3, 12, trials=20_000, seed=2)
    assert abs(loop.mean - tree_expected(0.6, 5, 3, 12)) <= 3 * loop.stderr


def test_more_draft_tokens_never_hurt():
    vals = [tree_expected(0.6, 6, 4, n) for n in range(2, 40)]
    assert all(b >= a - 1e-12 for a, b in zip(vals, vals[1:]))


def test_rate_for_accept_length_inverts():
    for k in (3, 16):
        a = rate_for_accept_length(2.5, k)
        assert chain_expected(a, k) == pytest.approx(2.5, abs=1e-8)
    a = rate_for_accept_length(1.9, 16, topk=4, steps=5)
    assert tree_expected(a, 5, 4, 16) == pytest.approx(1.9, abs=1e-8)
    assert 0.15 < a < 0.3  # the investigation's ~0.20 per-token acceptance


# -- throughput ----------------------------------------------------------------------------------
def test_throughput_model_with_the_investigation_numbers():
    m = throughput_model(90, 1.9, 46.7)
    assert m.step_cost == pytest.approx(1.9 * 90 / 46.7)
    assert m.step_cost == pytest.approx(3.66, abs=0.01)
    assert m.break_even == pytest.approx(3.66, abs=0.01)
    assert float(m.tps(1.9)) == pytest.approx(46.7)
    assert float(m.tps(m.break_even)) == pytest.approx(90)
    assert float(m.speedup(2 * m.step_cost)) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        throughput_model(90, 0.5, 46.7)


def test_simulate_and_throughput_do_not_import_torch():
    """Importing the numbers modules loads no torch (the package's own __init__ is skipped here;
    a large Monte Carlo run may still import torch for its byte counting, on first use)."""
    import subprocess
    import sys

    code = (
        "import sys, types; pkg = types.ModuleType('helpers'); pkg.__path__ = [sys.argv[1]]; "
        "sys.modules['helpers'] = pkg; import helpers.acceptance.chain, helpers.acceptance.drafting, helpers.acceptance.throughput; "
        "helpers.acceptance.chain.chain_expected(0.5, 4); helpers.acceptance.tree.build_tree(0.5, 3, 2, 6); "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pandas') "
        "or m in ('helpers.measure.replay', 'helpers.measure.predict', 'helpers.measure.evaluate', 'helpers.model.draft')); "
        "print(heavy[:5]); sys.exit(1 if heavy else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "helpers")], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


# -- replay --------------------------------------------------------------------------------------
def test_accept_lengths_by_hand():
    pred = torch.tensor([[1, 2, 3], [1, 9, 3], [5, 5, 5], [1, 2, 3], [1, 2, 3]])
    labels = torch.tensor([[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, -1], [1, 2, 3]])
    mask = torch.ones(5, 3, dtype=torch.bool)
    mask[4, 0] = False  # first label not trained on: not counted
    lengths, pos = accept_lengths(pred, labels, mask)
    assert lengths.tolist() == [4, 2, 1]
    assert pos.tolist() == [0, 1, 2]


TINY = SAMPLES / "tiny_draft_sglang"
HIDDEN = SAMPLES / "tiny_hidden_states"
needs_samples = pytest.mark.skipif(not (TINY.exists() and HIDDEN.exists()), reason="bundled samples not generated yet")


@needs_samples
def test_replay_offset_clearly_above_the_misread_mapping():
    from helpers.model.draft import load_draft

    model = load_draft(TINY, device="cpu")
    steps = 4
    good = replay(model, HIDDEN, steps=steps, reading="offset", max_samples=6, progress=False)
    bad = replay(model, HIDDEN, steps=steps, reading="absolute", max_samples=6, progress=False)
    assert good.positions == bad.positions > 100
    assert good.counts[0] == 0 and good.counts.size == steps + 2
    assert bad.mean <= 1.05  # misread: almost nothing accepted
    assert good.mean >= bad.mean + 0.5
    assert good.mean > 1.0 + 3 * good.stderr
    # the per-step rates reproduce the replayed mean through the chain formula
    assert chain_expected(good.step_rates, steps) == pytest.approx(good.mean, rel=1e-9)


@needs_samples
def test_replay_mirror_image_for_a_checkpoint_storing_absolute_ids():
    ckpt = SAMPLES / "tiny_draft_absolute"
    as_absolute = replay(ckpt, HIDDEN / "val", steps=3, reading="absolute", max_samples=2, progress=False)
    as_offset = replay(ckpt, HIDDEN / "val", steps=3, reading="offset", max_samples=2, progress=False)
    assert as_offset.mean <= 1.05 and as_absolute.mean >= as_offset.mean + 0.5


@needs_samples
def test_replay_counts_the_positions_whose_window_fits():
    from helpers.io.samples import iter_samples

    r = replay(TINY, HIDDEN / "val", steps=3, max_samples=2, progress=False)
    want = 0
    for s in iter_samples(HIDDEN / "val", max_samples=2):
        T = s.length
        lm = s.loss_mask.reshape(-1)
        want += sum(1 for t in range(T - 2 - 3 + 1) if lm[t + 2] != 0)
    assert r.positions == want
    assert r.samples_read == 2


# -- CLI -----------------------------------------------------------------------------------------
def test_cli_simulate_chain_json(cli):
    p = cli("simulate", "--accept-rate", "0.7", "--draft-tokens", "7", "--trials", "50000", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["mode"] == "chain"
    assert d["expected_accept_length"] == pytest.approx((1 - 0.7**8) / 0.3)
    assert abs(d["monte_carlo_mean"] - d["expected_accept_length"]) <= 3 * d["monte_carlo_stderr"]
    assert d["trials"] == 50000


def test_cli_simulate_tree_json_and_report(cli):
    p = cli("simulate", "--accept-rate", "0.6", "--draft-tokens", "32", "--topk", "4", "--steps", "8", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["mode"] == "tree" and d["tree_nodes"] == 31
    assert d["expected_accept_length"] == pytest.approx(tree_expected(0.6, 8, 4, 32))
    assert abs(d["monte_carlo_mean"] - d["expected_accept_length"]) <= 3 * d["monte_carlo_stderr"]
    p = cli("simulate", "--accept-rate", "0.21", "--draft-tokens", "16", "--topk", "4", "--steps", "5")
    assert p.returncode == 0 and "expected accept length: 1.91" in p.stdout


def test_cli_throughput(cli):
    p = cli("throughput", "--baseline-tps", "90", "--accept-length", "1.9", "--spec-tps", "46.7", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["step_cost"] == pytest.approx(3.66, abs=0.01)
    assert d["break_even_accept_length"] == pytest.approx(3.66, abs=0.01)
    assert d["tps_at"]["1"] == pytest.approx(90 / d["step_cost"])
    p = cli("throughput", "--baseline-tps", "90", "--accept-length", "1.9", "--spec-tps", "46.7")
    assert "break-even accept length: 3.66" in p.stdout


def test_cli_simulate_bad_rate_is_one_line(cli):
    p = cli("simulate", "--accept-rate", "1.5", "--draft-tokens", "4")
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = cli("throughput", "--baseline-tps", "90", "--accept-length", "1.9", "--spec-tps", "0")
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # a real interpreter start
def test_benchmark_script_runs_and_checks_its_estimates():
    # a small run of benchmarks/bench_simulate.py: both simulations timed, estimates within 3 s.e.
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_simulate", "--chain-steps", "50000", "--tree-steps", "20000",
                          "--loop-chain", "2000", "--loop-tree", "1000", "--rounds", "1"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "chain k=16" in out.stdout and "tree 8/4/32" in out.stdout
    assert "speed-up target (>= 100x over the loop):" in out.stdout
    assert "more than 3 s.e." not in out.stdout
