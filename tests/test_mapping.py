"""VocabMapping: both readings, the verdict, the structure, building from frequencies."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from helpers.core.errors import BadInputError
from helpers.io.mapping import (
    VocabMapping,
    absolute_to_offsets,
    build_from_frequencies,
    offsets_to_absolute,
    to_target_ids,
)


def specforge_recipe(token_dict: Counter, n: int, v: int):
    """The recipe of docs/eagle3-facts.md ('Building the mapping'), written independently of
    helpers.io.mapping: pad with the smallest unused ids 0..N-1 when fewer than N ids were seen,
    take the N most frequent (Counter.most_common), sort ascending, d2t = ids - arange,
    t2d[ids] = True."""
    token_dict = Counter(token_dict)
    if len(token_dict) < n:
        for tok in sorted(set(range(n)) - set(token_dict)):
            token_dict[tok] = 0
            if len(token_dict) >= n:
                break
    used = sorted(k for k, _ in token_dict.most_common(n))
    d2t = torch.tensor([used[i] - i for i in range(len(used))])
    t2d = torch.tensor([i in used for i in range(v)])
    return d2t, t2d


def test_build_matches_recipe_with_padding():
    # 7 distinct tokens seen, draft vocab of 10: 3 padding ids from 0..9 are needed.
    freqs = Counter({50: 9, 3: 7, 41: 7, 17: 5, 88: 2, 60: 1, 2: 1})
    d2t_ref, t2d_ref = specforge_recipe(freqs, 10, 100)
    m = build_from_frequencies(dict(sorted(freqs.items())), 10, 100)
    assert torch.equal(m.d2t, d2t_ref)
    assert torch.equal(m.t2d, t2d_ref)
    # padding took 0, 1 and 4 (2 and 3 were seen), exactly as the recipe does
    assert m.targets("offset")[:4].tolist() == [0, 1, 2, 3]
    assert m.verdict().encoding == "offset"


def test_build_matches_recipe_without_padding_and_with_a_tensor_table():
    g = torch.Generator().manual_seed(0)
    counts = (1000 / torch.arange(1, 501, dtype=torch.float64) ** 1.1).floor().long()  # Zipf-like
    counts = counts[torch.randperm(500, generator=g)]
    d2t_ref, t2d_ref = specforge_recipe(Counter({i: int(c) for i, c in enumerate(counts) if c}), 64, 500)
    m = build_from_frequencies(counts, 64, 500)
    assert torch.equal(m.d2t, d2t_ref) and torch.equal(m.t2d, t2d_ref)


def test_readings_side_by_side():
    d2t = torch.tensor([0, 0, 1, 1, 3])  # kept ids 0, 1, 3, 4, 7
    m = VocabMapping(d2t, target_vocab_size=10)
    assert m.targets("offset").tolist() == [0, 1, 3, 4, 7]
    assert m.targets("absolute").tolist() == [0, 0, 1, 1, 3]
    off, ab = m.reading("offset"), m.reading("absolute")
    assert off.distinct_targets == 5 and ab.distinct_targets == 3
    assert off.valid and not ab.valid
    assert m.verdict().encoding == "offset"  # no t2d, only one reading valid
    assert m.leading_zero_run == 2 and m.zero_entries == 2 and m.distinct_values == 3
    assert m.non_decreasing
    assert m.gaps().tolist() == [1, 2, 1, 3]


@pytest.mark.parametrize(
    "d2t, t2d_ids, v, expected",
    [
        ([0, 0, 1, 1, 3], [0, 1, 3, 4, 7], 10, "offset"),
        ([0, 1, 3, 4, 7], [0, 1, 3, 4, 7], 10, "absolute"),
        ([0, 0, 0, 0], [0, 1, 2, 3], 4, "identity"),
        ([0, 0, 0, 0], [0, 1, 2, 3], 9, "identity"),  # reduced vocab, but t2d keeps exactly 0..N-1: consistent
        ([0, 0, 0, 0], [0, 1, 2, 5], 9, "inconsistent"),  # all zeros with a reduced vocab whose t2d keeps another id
        ([0, 1, 2, 3], [0, 1, 2, 3], 6, "absolute"),  # d2t = arange: offset targets 2i run out of range
        ([0, 1, 2, 3], [0, 1, 3, 5], 9, "inconsistent"),
        ([0, 0, 1, 1, 3], [0, 1, 2, 4, 7], 10, "inconsistent"),
    ],
)
def test_verdict_with_t2d(d2t, t2d_ids, v, expected):
    t2d = torch.zeros(v, dtype=torch.bool)
    t2d[t2d_ids] = True
    verdict = VocabMapping(torch.tensor(d2t), t2d).verdict()
    assert verdict.encoding == expected
    assert (verdict.reasons != ()) == (expected == "inconsistent")


def test_verdict_without_t2d_ambiguous_and_all_zero():
    # strictly increasing d2t: both readings give distinct in-range ids
    assert VocabMapping(torch.tensor([1, 2, 3]), target_vocab_size=10).verdict().encoding == "ambiguous"
    assert VocabMapping(torch.zeros(4, dtype=torch.long), target_vocab_size=4).verdict().encoding == "identity"
    v = VocabMapping(torch.zeros(4, dtype=torch.long), target_vocab_size=40).verdict()
    assert v.encoding == "inconsistent" and "reduced vocab" in v.reasons[0]


def test_conversions_are_inverse():
    ids = torch.tensor([0, 1, 5, 6, 20, 21, 22, 90])
    d2t = absolute_to_offsets(ids)
    assert torch.equal(offsets_to_absolute(d2t), ids)
    assert to_target_ids(torch.tensor([[2, 7]]), d2t, "offset").tolist() == [[5, 90]]
    assert to_target_ids(torch.tensor([[2, 7]]), ids, "absolute").tolist() == [[5, 90]]
    assert to_target_ids(torch.tensor([3]), d2t, "none").tolist() == [3]


@pytest.mark.parametrize(
    "d2t, t2d, fragment",
    [
        (torch.tensor([0.0, 1.0]), None, "dtype torch.float32"),
        (torch.zeros(2, 3, dtype=torch.long), None, "expected 1-D"),
        (torch.tensor([0, -3, 1]), None, "negative"),
        (torch.tensor([0, 1, 50]), torch.zeros(20, dtype=torch.bool), "out of range"),
        (torch.tensor([0, 1]), torch.zeros(20, dtype=torch.int64), "expected bool"),
    ],
)
def test_bad_tensors_are_one_line_errors(d2t, t2d, fragment):
    with pytest.raises(BadInputError) as e:
        VocabMapping(d2t, t2d, sources=["some/d2t.pt"])
    assert fragment in str(e.value) and "some/d2t.pt" in str(e.value) and "\n" not in str(e.value)


def test_kimi_sample_numbers(samples_dir):
    from helpers.io.checkpoint import load_mapping

    m = load_mapping(samples_dir / "kimi_k25_mapping")
    assert (m.draft_vocab_size, m.target_vocab_size) == (32_000, 163_840)
    assert m.leading_zero_run == 124 and m.draft_vocab_size - m.zero_entries == 31_876
    assert m.distinct_values == 20_954
    assert m.d2t[1000:1010].tolist() == [787, 787, 787, 788, 792, 792, 792, 792, 793, 794]
    assert m.d2t[31990:].tolist() == [131446, 131464, 131465, 131529, 131530, 131530, 131586, 131589, 131608, 131608]
    assert int(m.t2d.sum()) == 32_000 and torch.nonzero(m.t2d).flatten()[:10].tolist() == list(range(10))
    assert m.reading("offset").distinct_targets == 32_000 and m.reading("offset").matches_t2d
    assert m.reading("absolute").distinct_targets == 20_954 and not m.reading("absolute").matches_t2d
    assert m.verdict().encoding == "offset"
    assert load_mapping(samples_dir / "kimi_k25_mapping_absolute").verdict().encoding == "absolute"
