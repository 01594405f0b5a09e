"""The engines' acceptance rules under sampling (helpers/engines/acceptance_rules.py), run through the
loop's own `verify` on a fixed toy chain: per-position acceptance over many seeded trials matches
the exact expectation within a few standard errors, rules that should agree agree (vLLM's default,
SGLang's chain, llama.cpp's EAGLE-3: accept the draft's argmax with probability p), rules that should
differ differ (textbook vs one-hot), and every lossless rule emits the target's distribution."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from helpers.acceptance import sampling
from helpers.engines import acceptance_rules as A
from helpers.model.drafter import Proposal
from helpers.speculate import verify as S

V, K, T = 16, 3, 0.8
N = 6000  # trials per rule: SE of a frequency near 0.5 is about 0.0065


def _toy():
    g = torch.Generator().manual_seed(7)
    target = torch.randn(K + 1, V, generator=g) * 1.2  # row i: the target's logits after node i
    draft = target[:K] + torch.randn(K, V, generator=g) * 0.9  # a draft that roughly agrees
    return target, draft


class _IdDrafter:
    """What `verify` asks of a drafter: draft ids are target ids."""

    device = torch.device("cpu")

    @staticmethod
    def target_ids(ids):
        return ids


def _trial(rule, target, draft, gen):
    """One verify step of a K-chain drafted as `rule` drafts: (accepted depth count, first emitted token)."""
    tokens, q = [0], {}
    for i in range(K):
        if rule.samples_draft:
            qi = sampling.draft_probs(rule, draft[i], T)
            tokens.append(int(torch.multinomial(qi, 1, generator=gen)))
            q[i + 1] = qi
        else:
            tokens.append(int(draft[i].argmax()))
    prop = Proposal(tokens, [-1] + list(range(K)), list(range(K + 1)), tokens, q)
    path, nxt, _ = S.verify(prop, target, T, _IdDrafter(), gen, rule)
    first = prop.tokens[path[0]] if path else nxt
    return len(path), first


def _run(rule, target, draft, n=N, seed=0):
    gen = torch.Generator().manual_seed(seed)
    accepted = np.zeros(K)
    firsts = np.zeros(V)
    for _ in range(n):
        a, first = _trial(rule, target, draft, gen)
        accepted[:a] += 1
        firsts[first] += 1
    return accepted / n, firsts


def _exact(rule, target, draft):
    p = [sampling.target_probs(target[i], T) for i in range(K)]
    q = [sampling.draft_probs(rule, draft[i], T) for i in range(K)] if rule.samples_draft else [draft[i] for i in range(K)]
    return sampling.exact_chain_acceptance(rule, p, q)


@pytest.fixture(scope="module")
def toy():
    return _toy()


@pytest.fixture(scope="module")
def runs(toy):
    target, draft = toy
    names = ["vllm-greedy-draft", "vllm-probabilistic", "sglang-target-only", "llamacpp-eagle3",
             "llamacpp-draft-simple", "textbook", "sglang-cpu-greedy"]
    return {n: _run(A.get_rule(n), target, draft, seed=i) for i, n in enumerate(names)}


@pytest.mark.parametrize("name", ["vllm-greedy-draft", "vllm-probabilistic", "sglang-target-only", "llamacpp-eagle3",
                                  "llamacpp-draft-simple", "textbook", "sglang-cpu-greedy"])
def test_per_position_frequency_matches_the_exact_expectation(toy, runs, name):
    rule = A.get_rule(name)
    exact = _exact(rule, *toy)["unconditional"]
    freq, _ = runs[name]
    for j, (f, e) in enumerate(zip(freq, exact)):
        se = math.sqrt(max(e * (1 - e), 1e-12) / N)
        assert abs(f - e) <= 4 * se + 1e-9, (name, j, f, e, se)


def test_one_hot_rules_are_one_law_and_differ_from_the_textbook(toy, runs):
    ex = {n: _exact(A.get_rule(n), *toy) for n in runs}
    same = [ex[n]["unconditional"] for n in ("vllm-greedy-draft", "sglang-target-only", "llamacpp-eagle3")]
    assert np.allclose(same[0], same[1]) and np.allclose(same[0], same[2])
    assert np.allclose(ex["vllm-probabilistic"]["unconditional"], ex["textbook"]["unconditional"])
    # the toy is soft enough that sampling the draft and weighing it by p/q accepts clearly more per depth
    greedy, textbook = np.array(same[0]), np.array(ex["textbook"]["unconditional"])
    gap = textbook - greedy
    se = np.sqrt((greedy * (1 - greedy) + textbook * (1 - textbook)) / N)
    assert (gap > 5 * se).all(), (greedy, textbook)
    f_g, f_t = runs["vllm-greedy-draft"][0], runs["textbook"][0]
    assert (f_t - f_g > 3 * se).all(), (f_g, f_t)  # and the loop's frequencies tell them apart
    # llama.cpp's draft-simple (top-10 q) is not the textbook's full q
    assert not np.allclose(ex["llamacpp-draft-simple"]["unconditional"], ex["textbook"]["unconditional"], atol=1e-3)


@pytest.mark.parametrize("name", ["vllm-greedy-draft", "vllm-probabilistic", "llamacpp-eagle3", "llamacpp-draft-simple",
                                  "textbook", "sglang-target-only"])
def test_lossless_rules_emit_the_target_distribution(toy, runs, name):
    """The first token a step emits (accepted draft or residual sample) follows p at the root."""
    target, _ = toy
    p = sampling.target_probs(target[0], T).numpy()
    counts = runs[name][1]
    keep = p * N >= 5
    expected = p[keep] * N
    observed = counts[keep]
    rest_e, rest_o = N - expected.sum(), N - observed.sum()
    chi2 = float(((observed - expected) ** 2 / expected).sum() + ((rest_o - rest_e) ** 2 / rest_e if rest_e > 5 else 0))
    dof = int(keep.sum()) - (0 if rest_e > 5 else 1)
    assert chi2 < dof + 6 * math.sqrt(2 * dof), (name, chi2, dof)


def test_sglang_on_cpu_is_greedy(toy, runs):
    target, draft = toy
    exact = _exact(A.get_rule("sglang-cpu-greedy"), target, draft)
    assert set(exact["per_depth"]) <= {0.0, 1.0}
    first = runs["sglang-cpu-greedy"][1]
    assert first[int(target[0].argmax())] == N


def test_the_loops_chain_expectation_is_the_closed_form(toy):
    target, draft = toy
    rule = A.get_rule("vllm-greedy-draft")
    tokens = [0] + [int(draft[i].argmax()) for i in range(K)]
    prop = Proposal(tokens, [-1] + list(range(K)), list(range(K + 1)), tokens, {})
    got = S.chain_expectation(prop, target, T, rule)
    want = _exact(rule, target, draft)["unconditional"]
    assert np.allclose(got, want)
    p = [sampling.target_probs(target[i], T) for i in range(K)]
    assert np.isclose(want[-1], float(np.prod([float(p[i][tokens[i + 1]]) for i in range(K)])))


def test_rules_are_data_with_sources():
    for r in A.RULES.values():
        assert r.engine in ("vllm", "llamacpp", "sglang", "textbook")
        assert r.draft in ("argmax", "sample") and r.q in ("one-hot", "draft", "draft-top10")
        if r.engine != "textbook":
            assert r.sources and all(s.file and s.lines for s in r.sources), r.name
        assert r.to_dict()["name"] == r.name
    assert A.rule_for_engine("vllm==0.32.0").name == "vllm-greedy-draft"
    assert A.rule_for_engine("llama.cpp").name == "llamacpp-eagle3"
    assert A.rule_for_engine("sglang").name == "sglang-target-only"
    assert A.rule_for_engine("tokenspeed").name == "textbook"
    assert A.rule_for_engine("vllm", "textbook").name == "textbook"
    with pytest.raises(ValueError):
        A.get_rule("nope")


def test_llamacpp_target_chain_truncates_before_the_temperature():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0])
    plain = sampling.target_probs(logits, 0.7)
    assert torch.allclose(plain, torch.softmax(logits / 0.7, -1))
    assert torch.allclose(sampling.target_probs(logits, 0.7, engine="llamacpp"), plain)  # top_k 0, top_p 1, min_p 0: plain
    cut = sampling.target_probs(logits, 0.7, top_k=2, engine="llamacpp")
    assert (cut[2:] == 0).all() and torch.isclose(cut.sum(), torch.tensor(1.0))
    mp = sampling.target_probs(logits, 2.0, min_p=0.3, engine="llamacpp")  # min-p judged at T = 1: e^-1 = 0.37 kept, e^-2 not
    assert mp[1] > 0 and mp[2] == 0


def test_settings_state_the_rule():
    from helpers.speculate.result import SpecRun, SpecSettings

    s = SpecSettings(temperature=0.7, engine="vllm")
    assert s.rule.name == "vllm-greedy-draft" and s.to_dict()["acceptance_rule"] == "vllm-greedy-draft"
    assert SpecSettings(temperature=0.0, engine="vllm").to_dict()["acceptance_rule"] == "greedy"
    assert SpecSettings(temperature=1.0, acceptance_rule="textbook").rule.name == "textbook"
    with pytest.raises(ValueError):
        SpecSettings(temperature=1.0, acceptance_rule="vllm-synthetic")
    d = SpecRun.empty(s).to_dict()
    assert d["acceptance_rule"] == "vllm-greedy-draft" and d["temperature"] == 0.7
    assert d["engine_counts"]["acceptance_rule"] == "vllm-greedy-draft"
    assert SpecRun.empty(SpecSettings(temperature=1.0, acceptance_rule="textbook")).expected_per_position is None
