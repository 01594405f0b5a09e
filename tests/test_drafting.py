"""The one drafting shape (helpers.acceptance.drafting.Drafting): engines' names, the one check every
command runs on drafting settings, and rate-for / metrics reading the same flags the same way.

Refusals are checked through the CLI: one line on stderr, exit 2, naming the flag.
"""
from __future__ import annotations

import json

import pytest

from helpers.acceptance.chain import chain_expected
from helpers.acceptance.drafting import Drafting, fill, tree_candidates
from helpers.acceptance.tree import build_tree
from conftest import SAMPLES


DRAFT = SAMPLES / "tiny_draft_sglang"


def test_one_value_for_chains_and_trees_and_every_engines_names():
    chain = Drafting(3)
    assert chain == Drafting.from_flags(3, 1, 4) == Drafting.from_flags(None, None, 3, lone="drafted")
    assert chain == Drafting.from_flags(None, None, 4, lone="sglang") == Drafting.from_flags(3)
    assert (chain.num_draft_tokens, chain.drafted, chain.is_chain, chain.label) == (4, 3, True, "chain, 3 tokens")
    assert chain.vllm() == {"num_speculative_tokens": 3}
    assert chain.sglang() == {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
    tree = Drafting.tree(5, 4, 16)
    assert tree.eagle() == {"depth": 4, "top_k": 4, "total_token": 16}  # EAGLE's first step runs before `depth`
    assert Drafting.from_eagle(**tree.eagle()) == tree == Drafting.from_sglang(tree.sglang())
    with pytest.raises(ValueError, match="vLLM drafts a chain"):
        tree.vllm()
    # the maths follows the shape: a chain by the closed form, a tree by SGLang's tree
    assert chain.expected(0.6) == pytest.approx(chain_expected(0.6, 3))
    assert tree.expected(0.3) == pytest.approx(build_tree(0.3, 5, 4, 16).expected())
    assert tree.expected(tree.rate_for(1.9)) == pytest.approx(1.9, abs=1e-8)


def test_the_largest_tree_is_what_sglang_can_select():
    # candidates: topk at depth 1, topk x topk at each later depth (the topk best are expanded)
    assert tree_candidates(5, 4) == 68 and tree_candidates(3, 1) == 3
    for steps, topk in [(5, 4), (3, 2), (2, 8), (6, 1)]:
        most = tree_candidates(steps, topk) + 1
        assert build_tree(0.5, steps, topk, most + 50).nodes == most - 1  # the model has no more to keep
        Drafting(steps, topk, most).check() if topk > 1 else Drafting(steps).check()
        if topk > 1:
            with pytest.raises(ValueError, match=f"--draft-tokens {most + 1}: .* at most {most}"):
                Drafting(steps, topk, most + 1).check()


@pytest.mark.parametrize("flags,lone,words", [
    ((0, None, None), "drafted", "--steps 0"),
    ((3, 1, 8), "drafted", "--draft-tokens 8: with --topk 1 a 3-step chain verifies 4"),
    ((5, 4, 100), "sglang", "--draft-tokens 100: .* at most 69"),
    ((None, None, -1), "sglang", "--draft-tokens -1"),
    ((None, None, 1), "sglang", "--draft-tokens 1"),
    ((None, None, 0), "drafted", "--draft-tokens 0"),
    ((3, 0, None), "drafted", "--topk 0"),
    ((None, 4, 16), "sglang", "--topk 4: a tree also needs --steps"),
    ((5, 4, None), "sglang", "--topk 4: a tree needs --draft-tokens"),
    ((3, 1, 3), "sglang", "--draft-tokens 3"),
])
def test_shapes_no_engine_runs_are_refused_naming_the_flag(flags, lone, words):
    with pytest.raises(ValueError, match=words):
        Drafting.from_flags(*flags, lone=lone)


def test_flags_win_and_a_chain_counts_its_own_root():
    assert fill({"steps": 2, "topk": 1}, {"steps": 5, "topk": 4, "draft_tokens": 16})[0] == {"steps": 2, "topk": 1}
    assert fill({"draft_tokens": 8}, {"steps": 5, "topk": 4, "draft_tokens": 16})[0] == \
        {"steps": 5, "topk": 4, "draft_tokens": 8}
    assert fill({}, {"steps": 3, "topk": 1, "draft_tokens": 4}) == ({"steps": 3, "topk": 1, "draft_tokens": 4},
                                                                   {"steps": "stated", "topk": "stated",
                                                                    "draft_tokens": "stated"})


# -- every command refuses the same shapes, in one line naming the flag ----------------------------
def _one_line(r, flag: str):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.strip().count("\n") == 0 and flag in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.fixture()
def sglang_log(tmp_path):
    p = tmp_path / "serve.log"
    p.write_text("[2026-03-01 09:00:00] server_args=ServerArgs(model_path='m', speculative_num_steps=3, "
                 "speculative_eagle_topk=1, speculative_num_draft_tokens=4)\n"
                 + "".join(f"[2026-03-01 09:00:{10 + i:02d} TP0] Decode batch, #running-req: 1, #token: 300, token "
                           f"usage: 0.01, accept len: 2.17, accept rate: 0.54, cuda graph: True, gen throughput "
                           f"(token/s): 80.00, #queue-req: 0\n" for i in range(4)))
    return p


@pytest.mark.parametrize("args,flag", [
    (("--steps", 0), "--steps 0"),
    (("--steps", 3, "--topk", 1, "--draft-tokens", 8), "--draft-tokens 8"),
    (("--steps", 5, "--topk", 4, "--draft-tokens", 100), "--draft-tokens 100"),
    (("--topk", 4, "--draft-tokens", 16), "--topk 4"),
])
def test_speculate_refuses_before_loading_anything(cli, args, flag, tmp_path):
    # a target path that does not exist: the drafting check comes first, nothing is loaded
    r = cli("speculate", DRAFT, "--target", tmp_path / "no-target", *args)
    _one_line(r, flag)


@pytest.mark.parametrize("command", ["simulate", "rate-for"])
@pytest.mark.parametrize("args,flag", [
    (("--steps", 0, "--draft-tokens", 4), "--steps 0"),
    (("--steps", 3, "--topk", 1, "--draft-tokens", 8), "--draft-tokens 8"),
    (("--steps", 5, "--topk", 4, "--draft-tokens", 100), "--draft-tokens 100"),
    (("--draft-tokens", 0), "--draft-tokens 0"),
])
def test_simulate_and_rate_for_refuse_the_same_shapes(cli, command, args, flag):
    value = ("--accept-rate", 0.5) if command == "simulate" else ("--accept-length", 1.5)
    _one_line(cli(command, *value, *args), flag)


@pytest.mark.parametrize("args,flag", [
    (("--draft-tokens", -1), "--draft-tokens -1"),
    (("--steps", 0), "--steps 0"),
    (("--steps", 3, "--topk", 1, "--draft-tokens", 8), "--draft-tokens 8"),
    (("--steps", 5, "--topk", 4, "--draft-tokens", 100), "--draft-tokens 100"),
])
def test_metrics_refuses_the_same_shapes(cli, sglang_log, args, flag):
    _one_line(cli("metrics", sglang_log, *args), flag)


@pytest.mark.parametrize("args,flag", [
    (("--steps", 3, "--topk", 1, "--draft-tokens", 8), "--draft-tokens 8"),
    (("--steps", 0), "--steps 0"),
    (("--steps", 5, "--topk", 4, "--draft-tokens", 100), "--draft-tokens 100"),
])
def test_report_refuses_before_any_notebook(cli, tmp_path, args, flag):
    out = tmp_path / "out"
    _one_line(cli("report", DRAFT, "-o", out, *args), flag)
    assert not out.exists()  # nothing ran, nothing written


def test_metrics_warns_when_steps_disagree_with_the_positions_reported(cli, tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("INFO 02-03 04:05:06 [loggers.py:120] SpecDecoding metrics: Mean acceptance length: 2.20, "
                   "Accepted throughput: 12.00 tokens/s, Drafted throughput: 30.00 tokens/s, Accepted: 120 tokens, "
                   "Drafted: 300 tokens, Per-position acceptance rate: 0.700, 0.350, 0.150, Avg Draft acceptance "
                   "rate: 40.0%\n")
    r = cli("metrics", log, "--steps", 2)
    assert r.returncode == 0, r.stderr
    assert "warning: --steps give a chain of 2 but the source reports acceptance at 3 positions" in r.stdout
    r = cli("metrics", log, "--steps", 3)
    assert r.returncode == 0 and "warning" not in r.stdout


# -- rate-for and metrics: one code path -----------------------------------------------------------
@pytest.mark.parametrize("steps", [2, 3, 5, 8])
def test_rate_for_equals_metrics_on_the_same_settings(cli, sglang_log, steps):
    m = json.loads(cli("metrics", sglang_log, "--topk", 1, "--steps", steps, "--json").stdout)
    r = json.loads(cli("rate-for", "--accept-length", m["accept_length"], "--topk", 1, "--steps", steps,
                       "--json").stdout)
    assert m["drafting"] == r["drafting"] == f"chain, {steps} tokens"
    assert r["per_token_rate"] == m["per_token_rate"]
    assert Drafting(steps).expected(r["per_token_rate"]) == pytest.approx(2.17, abs=1e-8)


def test_rate_for_honours_steps(cli):
    # the case: 2.17 measured with SGLang steps 3, topk 1, 4 draft tokens (the root counted)
    r = json.loads(cli("rate-for", "--accept-length", 2.17, "--draft-tokens", 4, "--topk", 1, "--steps", 3,
                       "--json").stdout)
    assert r["drafting"] == "chain, 3 tokens" and r["num_draft_tokens"] == 4
    assert r["sglang_accept_rate"]["length/N"] == pytest.approx(2.17 / 4)
    assert chain_expected(r["per_token_rate"], 3) == pytest.approx(2.17, abs=1e-8)
    old = json.loads(cli("rate-for", "--accept-length", 2.17, "--draft-tokens", 4, "--json").stdout)  # kept: K = 4
    assert old["drafting"] == "chain, 4 tokens" and old["per_token_rate"] < r["per_token_rate"]


def test_logs_reads_the_start_up_settings_through_the_same_check(cli, tmp_path, sglang_log):
    r = cli("logs", sglang_log)
    assert r.returncode == 0 and "under chain, 3 tokens" in r.stdout
    bad = tmp_path / "bad.log"
    bad.write_text(sglang_log.read_text().replace("speculative_num_draft_tokens=4", "speculative_num_draft_tokens=8"))
    r = cli("logs", bad)
    assert r.returncode == 0 and "not a shape SGLang runs: --draft-tokens 8" in r.stdout
    assert "per-token rate:" not in r.stdout
