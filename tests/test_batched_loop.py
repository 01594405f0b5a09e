"""The engine-free loop verifying a batch of prompts at once (`helpers.speculate.batched`): the same
greedy tokens and counts as one prompt at a time on both engine pairs (a Llama target, and the
DeepSeek-V3-shaped MLA target of the Kimi pair) and the tiny pair, both readings, chains and trees
(per-row tree masks, per-row beams, each row's accepted path kept); trees on sliding-window targets;
sampled runs reproduce with their seeds, each prompt's tokens independent of the batch."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from helpers.acceptance.drafting import Drafting
from helpers.core.errors import BadInputError
from helpers.io.prompts import read_prompts
from helpers.speculate.builder import build_run, spec_settings
from helpers.speculate.loop import speculate
from helpers.speculate.result import SpecSettings
from conftest import SAMPLES

# (draft, target, engine): the Kimi draft's aux ids are vLLM's
PAIRS = {"llama": ("engine_llama/draft", "engine_llama/target", None),
         "kimi": ("engine_kimi/draft", "engine_kimi/target", "vllm"),
         "tiny": ("tiny_draft_sglang", "tiny_target", "sglang")}
TREES = {"sglang-log": Drafting(5, 4, 16), "small": Drafting(3, 2, 5)}  # the demo log's tree, and a small one


@pytest.fixture(scope="module")
def pairs(one_thread):
    loaded = {}

    def get(name: str, dtype: str = "float32"):
        if (name, dtype) not in loaded:
            draft, target, engine = PAIRS[name]
            if not (SAMPLES / draft).exists():
                pytest.skip(f"data_samples/{draft} is not here")
            loaded[name, dtype] = build_run(SAMPLES / draft, SAMPLES / target, 3, engine=engine,
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


@pytest.mark.parametrize("pair", ["tiny", "llama"])
@pytest.mark.parametrize("reading", ["offset", "absolute"])
@pytest.mark.parametrize("tree", sorted(TREES))
def test_greedy_tree_batched_equals_one_at_a_time(pairs, records, pair, reading, tree):
    """fp32, 9 prompts, trees: batch 4 (prompts join as others finish) and 16 against batch 1; one
    target forward verifies every row's tree."""
    (target, draft), settings = pairs(pair)
    st = replace(settings, reading=reading, drafting=TREES[tree])
    one = speculate(target, draft, records, replace(st, batch_size=1))
    assert one.batched_forwards["target"] == one.target_forwards
    for bs in (4, 16):
        run = speculate(target, draft, records, replace(st, batch_size=bs))
        _same(one, run)
        assert run.batched_forwards["target"] < one.target_forwards / 2  # forwards were shared
    if reading == "offset":
        assert one.mean > 2.0  # tree paths were accepted: kept slots of non-first children were exercised
        assert any(k == "bonus" for p in one.prompts for k in p.kinds)
    else:
        assert one.mean == 1.0


def test_greedy_tree_on_the_mla_target(pairs, records):
    """The DeepSeek-V3-shaped MLA target (its own key and value widths) and MLA draft: trees batched."""
    (target, draft), settings = pairs("kimi")
    st = replace(settings, drafting=TREES["sglang-log"])
    one = speculate(target, draft, records, replace(st, batch_size=1))
    _same(one, speculate(target, draft, records, replace(st, batch_size=5)))
    assert one.mean > 2.0


def test_trees_of_different_sizes_in_one_batch(pairs, records, monkeypatch):
    """Rows whose trees differ in size (one node dropped where the root is odd, in the one-prompt
    drafter and the batched one alike): the smaller trees are padded, and nothing changes."""
    from helpers.model import drafter as D

    def trim(p: D.Proposal) -> D.Proposal:
        if p.tokens[0] % 2 == 0:
            return p
        q = {k: v for k, v in p.q.items() if k < p.size - 1}
        return D.Proposal(p.tokens[:-1], p.parent[:-1], p.depth[:-1], p.draft_ids[:-1], q)

    one_row, batch = D.Drafter.propose, D.BatchDrafter.propose_trees
    monkeypatch.setattr(D.Drafter, "propose", lambda self, *a, **k: trim(one_row(self, *a, **k)))
    monkeypatch.setattr(D.BatchDrafter, "propose_trees", lambda self, *a, **k: [trim(p) for p in batch(self, *a, **k)])
    (target, draft), settings = pairs("tiny")
    st = replace(settings, drafting=TREES["small"])
    one = speculate(target, draft, records, replace(st, batch_size=1))
    run = speculate(target, draft, records, replace(st, batch_size=9))
    _same(one, run)
    verify_fed = one.target_tokens_fed - sum(len(p.prompt_ids) for p in one.prompts)
    assert verify_fed < 5 * one.verify_steps  # some trees were trimmed
    assert one.mean > 1.5


def test_sampled_trees_reproduce_with_their_seed(pairs, records):
    """A tree drafted by the draft's top-k, verified at temperature 1 by SGLang's rule and by the
    textbook one: each prompt's generator is its own, so batched tokens are the one-at-a-time
    tokens, again with the same seed, others with another seed."""
    (target, draft), settings = pairs("tiny")
    for rule in (None, "textbook"):
        st = replace(settings, drafting=TREES["sglang-log"], temperature=1.0, acceptance_rule=rule, seed=3)
        one = speculate(target, draft, records, replace(st, batch_size=1))
        run = speculate(target, draft, records, replace(st, batch_size=4))
        _same(one, run)
        _same(run, speculate(target, draft, records, replace(st, batch_size=4)))
        other = speculate(target, draft, records, replace(st, batch_size=4, seed=4))
        assert [p.output_ids for p in other.prompts] != [p.output_ids for p in run.prompts]


@pytest.mark.parametrize("family", ["mistral", "gemma3"])
def test_trees_batched_on_sliding_window_targets(family, one_thread, tmp_path):
    """Window 8, prompts of 3 to 9 tokens, 40 new tokens (the window is crossed in every row):
    Mistral (every layer slides; the bundled target's weights, so drafts are accepted) and Gemma 3
    (sliding and full layers: one tree mask per attention type, per row)."""
    import torch
    import shutil

    from test_speculate_sliding import DRAFT, TINY, TOKENIZER_FILES, _model

    from helpers.model.draft import load_draft
    from helpers.model.target import load_target

    _model(family).save_pretrained(tmp_path)
    for f in TOKENIZER_FILES:
        if (TINY / f).exists():
            shutil.copy(TINY / f, tmp_path / f)
    target, draft = load_target(tmp_path, "cpu", "float32"), load_draft(DRAFT, "cpu", torch.float32)
    prompts = [[1] + [17 + 31 * k + 7 * i for i in range(k)] for k in range(2, 9, 2)]
    st = SpecSettings(max_new_tokens=40, drafting=Drafting(3, 4, 8))
    one = speculate(target, draft, prompts, replace(st, batch_size=1))
    run = speculate(target, draft, prompts, replace(st, batch_size=4))
    _same(one, run)
    assert run.batched_forwards["target"] < one.target_forwards / 2
    if family == "mistral":
        assert one.mean > 1.3


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


# -- each side alone, with random weights (every key matters): the batched trees against one row --------
def _random_tree(gen, root: int, size: int, vocab: int):
    from helpers.model.drafter import Proposal

    parent, depth = [-1], [0]
    for i in range(1, size):
        p = int(torch.randint(0, i, (1,), generator=gen))
        parent.append(p), depth.append(depth[p] + 1)
    return Proposal([root] + torch.randint(3, vocab, (size - 1,), generator=gen).tolist(), parent, depth, [-1] * size)


@pytest.mark.parametrize("family", ["gpt_oss", "gemma3", "mistral"])
def test_batched_tree_masks_and_kept_paths_equal_the_uncached_forward(family, one_thread):
    """Three rows (prompts of 5, 2 and 8 tokens), random trees of 6 and 4 nodes (padding), window 3
    (the window cuts ancestors too), 6 rounds each keeping a random path: every node's verify logits
    equal the model's logits for its row's context + its ancestors + itself computed without a cache."""
    from test_speculate_sliding import _model

    from helpers.model.layer import NO_POSITION
    from helpers.speculate.batched import BatchTargetCache, tree_inputs

    model = _model(family, window=3)
    if family == "mistral":  # the bundled target's weights: make every key matter
        torch.manual_seed(2)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(3, 4096, (k,), generator=gen).tolist() for k in (5, 2, 8)]
    tc = BatchTargetCache(model)
    kw = {tc.argument: tc.cache, "use_cache": True}
    worst, accepted = 0.0, 0
    with torch.inference_mode():
        L = max(len(s) for s in seqs)
        pos = torch.arange(L)[None].expand(3, L)
        lens = torch.tensor([len(s) for s in seqs])
        model(input_ids=torch.tensor([s + [0] * (L - len(s)) for s in seqs]), position_ids=pos,
              attention_mask=tc.masks(pos, model.dtype, "cpu"), cache_position=torch.arange(L), **kw)
        tc.appended(torch.where(pos < lens[:, None], pos, torch.full_like(pos, NO_POSITION)))
        for rnd in range(6):
            props = [_random_tree(gen, int(torch.randint(3, 4096, (1,), generator=gen)), 6 - 2 * ((b + rnd) % 2), 4096)
                     for b in range(3)]
            toks, depth, tree = tree_inputs(props)
            n = [len(s) for s in seqs]
            positions = torch.tensor(n)[:, None] + depth
            m = toks.shape[1]
            logits = model(input_ids=toks, position_ids=positions, attention_mask=tc.masks(positions, model.dtype, "cpu", tree),
                           cache_position=torch.arange(tc.slots, tc.slots + m), **kw).logits
            paths = []
            for b, p in enumerate(props):
                for i in range(p.size):
                    anc, j = [], i
                    while j >= 0:
                        anc.append(p.tokens[j])
                        j = p.parent[j]
                    ref = model(input_ids=torch.tensor([seqs[b] + anc[::-1]])).logits[0, -1]
                    worst = max(worst, float((logits[b, i] - ref).abs().max()))
                leaf = int(torch.randint(1, p.size, (1,), generator=gen))  # a path to a random non-root node
                path, j = [], leaf
                while j > 0:
                    path.append(j)
                    j = p.parent[j]
                paths.append(path[::-1])
            tc.keep_paths(paths, n)
            for b, (p, path) in enumerate(zip(props, paths)):
                seqs[b] += [p.tokens[0]] + [p.tokens[k] for k in path]
                accepted += len(path)
    assert accepted >= 18 and min(len(s) for s in seqs) > 4 * 3
    assert worst < 1e-4, f"{family}: batched verify logits differ from the uncached forward by {worst:.2e}"


@pytest.mark.parametrize("shape", [(5, 4, 16), (3, 2, 9), (4, 3, 30)])
def test_batched_tree_drafting_equals_one_row(shape, one_thread):
    """`BatchDrafter.propose_trees` against `Drafter.propose` row by row: three rows with contexts
    of 7, 3 and 11 positions (padded slots in the batched cache), the bundled draft with its weights
    perturbed (so each beam node's ancestors matter), two rounds: the same trees."""
    from helpers.model.draft import load_draft
    from helpers.model.drafter import BatchDrafter, Drafter

    steps, topk, n_tokens = shape
    draft = load_draft(SAMPLES / "tiny_draft_sglang", "cpu", torch.float32)
    torch.manual_seed(3)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * 0.5 * float(p.std() if p.numel() > 1 else 0.1))
    width, vocab = draft.fc.weight.shape[1], draft.config.vocab_size
    gen = torch.Generator().manual_seed(4)
    batch = BatchDrafter(draft)
    rows = [Drafter(draft) for _ in range(3)]
    deepest = 0
    with torch.inference_mode():
        for rnd, lengths in enumerate(((7, 3, 11), (2, 4, 1))):
            M = max(lengths)
            aux = torch.randn(3, M, width, generator=gen)
            ids = torch.randint(3, vocab, (3, M), generator=gen)
            batch.extend(aux, ids, torch.tensor(lengths))
            for r, k in enumerate(lengths):
                rows[r].extend(aux[r:r + 1, :k], ids[r:r + 1, :k])
            roots = torch.randint(3, vocab, (3,), generator=gen).tolist()
            trees = batch.propose_trees(roots, steps, topk, n_tokens)
            for r, root in enumerate(roots):
                one = rows[r].propose(root, steps, topk, n_tokens)
                got = trees[r]
                assert (got.tokens, got.parent, got.depth, got.draft_ids) == (one.tokens, one.parent, one.depth,
                                                                              one.draft_ids), (rnd, r)
                assert got.size == min(n_tokens, 1 + topk + (steps - 1) * topk * topk)
                deepest = max(deepest, max(got.depth))
    assert deepest >= 3  # beam nodes whose ancestors were followed (depth 3 reads depth 2's keys) were kept
