"""Real llama.cpp (b11434) against the kit's engine-free loop, on the bundled engine pair (make test-engine).

llama.cpp's own converter turns data_samples/engine_llama into GGUF (f32); `llama-server` serves the
target with the draft as its EAGLE-3 drafter (`--spec-type draft-eagle3 --spec-draft-n-max 3`,
one slot, one thread), the 16 bundled prompts go in as the token ids the kit's loop feeds (the
target's chat template), 32 tokens each, greedy. `d2t-lab speculate --engine llamacpp` runs the same
prompts in fp32, and its `engine_counts` count the steps as llama.cpp does (a draft of at most
min(3, tokens left - 1), no draft on the last token). Checked: at least 15 of 16 prompts
token-identical, the accept length within 0.05 of llama.cpp's 1 + accepted / drafts, and the
drafts, draft tokens and per-position accepted counts equal to the server's /metrics counters.
"""
from __future__ import annotations

import json

import pytest

from conftest import SAMPLES

pytestmark = pytest.mark.engine

N, TOKENS, K = 16, 32, 3


@pytest.fixture(scope="module")
def served(llamacpp, llamacpp_pair, vllm_cpu_free_ids, tmp_path_factory):
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with llamacpp.Server(llamacpp_pair["target"], llamacpp_pair["draft"], n_max=K, log_path=log) as server:
        started = server.start()
        assert started.started, f"llama-server did not start on the engine pair: {started.error}"
        responses = llamacpp.complete(server, vllm_cpu_free_ids, TOKENS)
        counters = llamacpp.spec_counters(server)
    with llamacpp.Server(llamacpp_pair["target"], None, log_path=log.with_name("plain.log")) as server:
        assert server.start().started
        plain = llamacpp.complete(server, vllm_cpu_free_ids, TOKENS)
    return {"responses": responses, "counters": counters, "plain": plain, "log": log.read_text(errors="replace")}


@pytest.fixture(scope="module")
def vllm_cpu_free_ids():
    """The prompts as token ids, through the target's tokenizer and chat template (as the loop feeds them)."""
    from conftest import script_module

    return script_module("vllm_cpu").prompt_token_ids(SAMPLES / "engine_llama" / "target", SAMPLES / "prompts.jsonl", N)


@pytest.fixture(scope="module")
def kit(cli, llamacpp_pair):
    pair = llamacpp_pair["hf"]
    r = cli("speculate", str(pair / "draft"), "--target", str(pair / "target"), "--engine", "llamacpp",
            "--num-speculative-tokens", str(K), "--max-new-tokens", str(TOKENS), "--max-prompts", str(N),
            "--readings", "offset", "--dtype", "float32", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["readings"]["offset"]


def test_speculative_output_is_the_targets_own(served):
    same = sum(a["tokens"] == b["tokens"] for a, b in zip(served["responses"], served["plain"]))
    assert same == N, f"llama.cpp with the draft changed {N - same} of {N} outputs"


def test_tokens_match_the_engine_free_loop(served, kit):
    same = sum(r["tokens"] == p["output_ids"] for r, p in zip(served["responses"], kit["prompts"]))
    assert same >= 15, f"only {same} of {N} prompts token-identical"


def test_counts_are_llamacpps_own(served, kit):
    c, ec = served["counters"], kit["engine_counts"]
    assert ec["engine"] == "llamacpp"
    assert ec["accepted_per_position"] == c["per_pos"], (ec, c)
    assert (ec["drafts"], ec["draft_tokens"], ec["accepted"]) == (c["num_drafts"], c["num_draft_tokens"],
                                                                  c["num_accepted_tokens"])
    served_al = 1 + c["num_accepted_tokens"] / c["num_drafts"]
    assert abs(served_al - ec["accept_length"]) <= 0.05, (served_al, ec["accept_length"])
    assert served_al > 1.5  # healthy in llama.cpp: the agreement is not two runs at 1.0
    print(f"llama.cpp b11434: accept length {served_al:.4f} = 1 + {c['num_accepted_tokens']} / {c['num_drafts']}, "
          f"per position {c['per_pos']}; kit {ec['accept_length']:.4f}, per position {ec['accepted_per_position']}")


def test_answers_timings_add_up_to_the_counters(served, llamacpp):
    drafted, accepted = llamacpp.served_counts(served["responses"])
    assert (drafted, accepted) == (served["counters"]["num_draft_tokens"], served["counters"]["num_accepted_tokens"])


def test_the_loop_on_the_gguf_itself_counts_as_llamacpp(served, cli, llamacpp_pair):
    """`speculate` on the converter-made GGUF draft: its d2t holds absolute ids, so `absolute` is the reading
    llama.cpp uses; that reading reproduces the server's counts, the offset reading accepts nothing."""
    pair = llamacpp_pair["hf"]
    r = cli("speculate", str(llamacpp_pair["draft"]), "--target", str(pair / "target"), "--engine", "llamacpp",
            "--num-speculative-tokens", str(K), "--max-new-tokens", str(TOKENS), "--max-prompts", str(N),
            "--readings", "absolute,offset", "--dtype", "float32", "--json")
    assert r.returncode == 0, r.stderr
    runs = json.loads(r.stdout)["readings"]
    c = served["counters"]
    ec = runs["absolute"]["engine_counts"]
    assert (ec["drafts"], ec["accepted"], ec["accepted_per_position"]) == (c["num_drafts"], c["num_accepted_tokens"],
                                                                          c["per_pos"])
    assert runs["offset"]["engine_counts"]["accepted"] == 0
