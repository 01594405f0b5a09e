"""The engine-free loop verifying a batch of prompts at once (`helpers.speculate.batched`): the same
greedy tokens and counts as one prompt at a time on both engine pairs (a Llama target, and the
DeepSeek-V3-shaped MLA target of the Kimi pair), both readings; sampled runs reproduce with their
seeds, each prompt's tokens independent of the batch; trees run one at a time."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from helpers.acceptance.drafting import Drafting
from helpers.core.errors import BadInputError
from helpers.io.prompts import read_prompts
from helpers.speculate.builder import build_run, spec_settings
from helpers.speculate.loop import speculate
from helpers.speculate.result import SpecSettings

SAMPLES = Path(__file__).resolve().parents[1] / "data_samples"
PAIRS = {"llama": ("engine_llama", None), "kimi": ("engine_kimi", "vllm")}  # the Kimi draft's aux ids are vLLM's


@pytest.fixture(scope="module")
def pairs(one_thread):
    loaded = {}

    def get(name: str, dtype: str = "float32"):
        if (name, dtype) not in loaded:
            folder, engine = PAIRS[name]
            if not (SAMPLES / folder / "draft").exists():
                pytest.skip(f"data_samples/{folder} is not here")
            loaded[name, dtype] = build_run(SAMPLES / folder / "draft", SAMPLES / folder / "target", 3, engine=engine,
                                            dtype=dtype, max_new_tokens=16)
        return loaded[name, dtype]

    return get


@pytest.fixture(scope="module")
def records():
    return list(read_prompts(SAMPLES / "prompts.jsonl", 9))


def _same(a, b, *, tokens_only: bool = False):
    assert [p.index for p in a.prompts] == [p.index for p in b.prompts]
    for p, q in zip(a.prompts, b.prompts):
        assert p.output_ids == q.output_ids, f"prompt {p.index}"
        assert (p.kinds, p.draft_pos, p.accept_lengths, p.cut_from) == (q.kinds, q.draft_pos, q.accept_lengths, q.cut_from)
    if tokens_only:
        return
    assert a.verify_steps == b.verify_steps
    assert a.histogram == b.histogram
    assert a.accepted_per_position.tolist() == b.accepted_per_position.tolist()
    assert (a.engine_counts.to_dict() if a.engine_counts else None) == (b.engine_counts.to_dict() if b.engine_counts else None)
    # forwards and tokens are counted per prompt, as one at a time; the batched forwards that ran are fewer
    assert (a.target_forwards, a.target_tokens_fed, a.draft_forwards) == (b.target_forwards, b.target_tokens_fed,
                                                                          b.draft_forwards)


@pytest.mark.parametrize("pair", ["llama", "kimi"])
@pytest.mark.parametrize("reading", ["offset", "absolute"])
def test_greedy_batched_equals_one_at_a_time(pairs, records, pair, reading):
    """fp32, 9 prompts: batch 4 (prompts join as others finish) and 16 (all at once) against batch 1."""
    (target, draft), settings = pairs(pair)
    settings = replace(settings, reading=reading)
    one = speculate(target, draft, records, replace(settings, batch_size=1))
    assert one.batched_forwards["target"] == one.target_forwards
    for bs in (4, 16):
        run = speculate(target, draft, records, replace(settings, batch_size=bs))
        _same(one, run)
        assert run.batched_forwards["target"] < one.target_forwards
        assert run.settings["batch_size"] == bs
    if reading == "offset":
        assert one.mean > 1.5  # drafts were accepted: the batched acceptance was exercised
    else:
        assert one.mean == 1.0  # the misread table: nothing accepted, whatever the batch


def test_greedy_bf16(pairs, records):
    """bf16: a batched matmul may round differently from a one-row one, so a near-tie can flip; on
    this pair at most one prompt of nine differs, and the accept length stays within 0.1."""
    (target, draft), settings = pairs("llama", "bfloat16")
    one = speculate(target, draft, records, replace(settings, batch_size=1))
    for bs in (4, 16):
        run = speculate(target, draft, records, replace(settings, batch_size=bs))
        differ = sum(p.output_ids != q.output_ids for p, q in zip(one.prompts, run.prompts))
        assert differ <= 1 and abs(run.mean - one.mean) < 0.1, (bs, differ, run.mean, one.mean)


@pytest.mark.parametrize("engine,rule", [("vllm", None), ("sglang", "textbook"), ("llama.cpp", None)])
def test_sampled_batched_reproduces_with_its_seed(pairs, records, engine, rule):
    """temperature 1.5 (0.7 is too peaked on this pair for seeds to differ): each prompt has its own generator (seed * 1_000_003 + index), so batched
    tokens are the one-at-a-time tokens (argmax drafts, and drafts sampled per row), and a second
    run gives them again; another seed gives others."""
    (target, draft), settings = pairs("llama")
    st = replace(settings, temperature=1.5, engine=engine, acceptance_rule=rule, seed=3)
    one = speculate(target, draft, records, replace(st, batch_size=1))
    run = speculate(target, draft, records, replace(st, batch_size=4))
    _same(one, run)
    again = speculate(target, draft, records, replace(st, batch_size=4))
    _same(run, again)
    other = speculate(target, draft, records, replace(st, batch_size=4, seed=4))
    assert [p.output_ids for p in other.prompts] != [p.output_ids for p in run.prompts]
    if one.expected_per_position is not None:  # argmax-drafted chains: the exact expectation (batched fp32 logits
        # differ from one-row ones in the last bits: 1e-7 relative here)
        assert run.expected_per_position == pytest.approx(one.expected_per_position, rel=1e-5)


def test_a_prompt_alone_equals_it_in_a_batch(pairs, records):
    """A prompt's tokens do not depend on which prompts share its batch (sampled, per-prompt seeds)."""
    (target, draft), settings = pairs("llama")
    st = replace(settings, temperature=0.7, seed=1, batch_size=8)
    run = speculate(target, draft, records, st)
    alone = speculate(target, draft, [records[5]], st)
    assert alone.prompts[0].output_ids == run.prompts[5].output_ids


def test_a_tree_runs_one_prompt_at_a_time(pairs, records):
    (target, draft), settings = pairs("llama")
    st = replace(settings, drafting=Drafting(3, 2, 5), batch_size=8)
    run = speculate(target, draft, records[:3], st)
    assert run.batched_forwards["target"] == run.target_forwards  # no forward was shared
    _same(speculate(target, draft, records[:3], replace(st, batch_size=1)), run)


def test_prompt_ids_of_different_lengths(pairs):
    """Token-id prompts of 1 to 9 tokens (padding in the batched prefill), some shorter than others
    by more than a chain: the same as one at a time."""
    (target, draft), settings = pairs("kimi")
    prompts = [[1] + list(range(100 + k, 100 + 2 * k)) for k in range(9)]
    _same(speculate(target, draft, prompts, replace(settings, batch_size=1)),
          speculate(target, draft, prompts, replace(settings, batch_size=5)))


def test_batch_size_is_checked():
    with pytest.raises(ValueError, match="batch size"):
        SpecSettings(batch_size=0)
    with pytest.raises(BadInputError, match="batch size"):
        spec_settings(3, batch_size=-2)
    assert SpecSettings().to_dict()["batch_size"] == SpecSettings().batch_size >= 1
