"""Property-based tests (hypothesis) of the d2t/t2d mapping core.

- Building from frequencies, converting between the two encodings and reading back (in memory
  and through files) are inverse operations, and a built mapping's offset targets are the top-N
  ids chosen by an independent reference of the SpecForge/speculators recipe.
- The verdict is total: whatever tensors a file holds (any dtype, any rank, any values), the
  mapping either gives one of the five verdicts or raises `BadInputError` - never another error.

Runs are reproducible in CI: `derandomize=True` (a fixed seed derived from each test), a bounded
number of examples, no deadline, and no example database written into the checkout.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.io.checkpoint import load_mapping
from helpers.core.errors import BadInputError
from helpers.io.mapping import (
    VERDICTS,
    VocabMapping,
    absolute_to_offsets,
    build_from_frequencies,
    offsets_to_absolute,
    to_target_ids,
)

FIXED = dict(derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


# -- strategies ------------------------------------------------------------------------------------
@st.composite
def frequency_problem(draw):
    """(freqs, N, V): a frequency table over a target vocab V and a draft vocab size N <= V."""
    V = draw(st.integers(2, 64))
    N = draw(st.integers(1, V))
    as_dict = draw(st.booleans())
    ids = draw(st.lists(st.integers(0, V - 1), unique=True, max_size=V))
    counts = draw(st.lists(st.integers(1, 50), min_size=len(ids), max_size=len(ids)))  # ties are common
    if as_dict:
        freqs = dict(zip(ids, counts))
    else:
        freqs = torch.zeros(V, dtype=torch.int64)
        freqs[list(ids)] = torch.tensor(counts, dtype=torch.int64)
    return freqs, N, V


def reference_kept(freqs, N: int) -> list[int]:
    """The recipe of docs/eagle3-facts.md ('Building the mapping'), written independently of
    helpers.io.mapping: the N most frequent ids (ties: smaller id first), padded with the smallest
    unused ids of 0..N-1, sorted."""
    if isinstance(freqs, dict):
        seen = {k: c for k, c in freqs.items() if c > 0}
    else:
        seen = {int(i): int(freqs[i]) for i in torch.nonzero(freqs).flatten()}
    ids = np.array(sorted(seen), dtype=np.int64)
    counts = np.array([seen[i] for i in ids], dtype=np.int64)
    order = np.lexsort((ids, -counts))  # primary key: count descending, then id ascending
    chosen = [int(i) for i in ids[order][:N]]
    pad = [i for i in range(N) if i not in set(chosen)]
    return sorted(chosen + pad[: N - len(chosen)])


INT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
ANY_DTYPES = INT_DTYPES + [torch.bool, torch.float16, torch.float32, torch.float64]
VALUES = st.one_of(st.integers(-3, 40), st.sampled_from([-(2**63), 2**63 - 1, 2**31, -1, 0]))


@st.composite
def any_tensor(draw, dtypes=ANY_DTYPES, max_rank=3):
    """A tensor of random dtype, rank (0..max_rank) and values, as a file might hold."""
    shape = draw(st.lists(st.integers(0, 5), max_size=max_rank))
    n = int(np.prod(shape)) if shape else 1
    values = torch.tensor(draw(st.lists(VALUES, min_size=n, max_size=n)), dtype=torch.int64).reshape(shape)
    dtype = draw(st.sampled_from(dtypes))
    return values.to(dtype)  # integer casts wrap, as a file written in that dtype would


@st.composite
def random_t2d(draw):
    """None, a random bool mask, or something that is not a valid t2d at all."""
    kind = draw(st.sampled_from(["none", "bool", "bool", "other"]))
    if kind == "none":
        return None
    if kind == "bool":
        return torch.tensor(draw(st.lists(st.booleans(), max_size=48)), dtype=torch.bool)
    return draw(any_tensor())


# -- building, converting and reading back are inverse -------------------------------------------
@settings(max_examples=150, **FIXED)
@given(frequency_problem())
def test_build_from_frequencies_matches_reference_and_verdict(problem):
    freqs, N, V = problem
    m = build_from_frequencies(freqs, N, V)
    kept = torch.tensor(reference_kept(freqs, N), dtype=torch.int64)
    assert torch.equal(m.targets("offset"), kept)  # offset targets = sorted top-N
    assert torch.equal(torch.nonzero(m.t2d).flatten(), kept)  # t2d marks exactly those ids
    assert m.non_decreasing  # sorted ids => non-decreasing offsets
    assert torch.equal(to_target_ids(torch.arange(N), m.d2t, "offset"), kept)
    if N == V:
        assert m.verdict().encoding == "identity"
    elif m.is_all_zero:
        # kept == 0..N-1 with a reduced vocab: draft id i is target id i, and t2d agrees
        assert m.verdict().encoding == "identity" and m.reading("offset").matches_t2d
    elif N == 1:
        # one draft id: i + d2t[0] == d2t[0], both readings give the same target and match t2d
        assert m.verdict().encoding == "ambiguous"
    else:
        assert m.verdict().encoding == "offset"
        # the same ids stored as absolute ids are recognised as such
        ab = VocabMapping(offsets_to_absolute(m.d2t), m.t2d, target_vocab_size=V)
        assert ab.verdict().encoding == "absolute"
        assert torch.equal(ab.targets("absolute"), kept)


@settings(max_examples=150, **FIXED)
@given(st.lists(st.integers(-(2**40), 2**40), max_size=64), st.sampled_from([torch.int32, torch.int64]))
def test_offsets_and_absolute_conversions_are_inverse(values, dtype):
    x = torch.tensor(values, dtype=torch.int64).to(dtype)
    x64 = x.to(torch.int64)
    assert torch.equal(offsets_to_absolute(absolute_to_offsets(x)), x64)
    assert torch.equal(absolute_to_offsets(offsets_to_absolute(x)), x64)
    assert offsets_to_absolute(x).dtype == torch.int64


@settings(max_examples=40, **FIXED)
@given(frequency_problem(), st.sampled_from(["pt", "npy", "dict"]), st.booleans())
def test_written_and_read_back_through_files(problem, fmt, with_config):
    """build -> convert -> write in a producer's format -> load_mapping -> same tensors, same verdict."""
    freqs, N, V = problem
    m = build_from_frequencies(freqs, N, V)
    with tempfile.TemporaryDirectory() as tmp:
        for name, d2t in (("offsets", m.d2t), ("absolute", offsets_to_absolute(m.d2t))):
            d = Path(tmp) / name
            d.mkdir()
            if fmt == "pt":
                torch.save(d2t, d / "d2t.pt")
                torch.save(m.t2d, d / "t2d.pt")
            elif fmt == "npy":
                np.save(d / f"d2t-{N}.npy", d2t.numpy())
                np.save(d / "t2d.npy", m.t2d.numpy())
            else:
                torch.save({"d2t": d2t, "t2d": m.t2d}, d / "cache.pt")
            if with_config:
                (d / "config.json").write_text(json.dumps({"draft_vocab_size": N, "vocab_size": V}))
            back = load_mapping(d)
            assert torch.equal(back.d2t, d2t) and torch.equal(back.t2d, m.t2d)
            assert back.target_vocab_size == V and back.draft_vocab_size == N
            if name == "offsets":
                assert back.verdict().encoding == m.verdict().encoding
                assert torch.equal(back.targets("offset"), m.targets("offset"))
            else:
                # stored as absolute ids: converting back gives the producer's offsets again
                assert torch.equal(absolute_to_offsets(back.d2t), m.d2t)
                if not m.is_all_zero and 1 < N < V:
                    assert back.verdict().encoding == "absolute"


# -- the verdict is total -----------------------------------------------------------------------------
def verdict_or_bad_input(make):
    """Either one of the five verdicts (and a JSON-able summary) or BadInputError; nothing else."""
    try:
        m = make()
        v = m.verdict()
    except BadInputError as e:
        assert "\n" not in str(e)
        return None
    assert v.encoding in VERDICTS
    if v.encoding == "inconsistent":
        assert v.reasons, "an inconsistent verdict must say why"
    json.dumps(m.summary())  # what `inspect --json` prints
    return v.encoding


@settings(max_examples=400, **FIXED)
@given(any_tensor(), random_t2d(), st.one_of(st.none(), st.integers(-2, 48)))
def test_verdict_is_total_for_any_tensors(d2t, t2d, target_vocab_size):
    verdict_or_bad_input(lambda: VocabMapping(d2t, t2d, target_vocab_size=target_vocab_size, sources=["d2t.pt", "t2d.pt"]))


@settings(max_examples=300, **FIXED)
@given(any_tensor(dtypes=INT_DTYPES, max_rank=1), random_t2d())
def test_verdict_is_total_for_integer_vectors(d2t, t2d):
    """Plausible-looking d2t (1-D integers) with a random bool t2d: the common case, sampled densely."""
    verdict_or_bad_input(lambda: VocabMapping(d2t, t2d))


@st.composite
def near_valid_mapping(draw):
    """A real mapping (offsets, absolute ids or all zeros), then maybe damaged: the region where
    the five verdicts meet. Returns (d2t, t2d, target_vocab_size)."""
    V = draw(st.integers(1, 40))
    N = draw(st.integers(1, V))
    kept = torch.tensor(sorted(draw(st.lists(st.integers(0, V - 1), unique=True, min_size=N, max_size=N))))
    enc = draw(st.sampled_from(["offset", "absolute", "zeros"]))
    d2t = {"offset": absolute_to_offsets(kept), "absolute": kept.clone(), "zeros": torch.zeros(N, dtype=torch.int64)}[enc]
    if draw(st.booleans()):  # damage one entry
        i = draw(st.integers(0, N - 1))
        d2t[i] = draw(VALUES)
    t2d_kind = draw(st.sampled_from(["exact", "none", "all", "flipped", "short"]))
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[kept] = True
    if t2d_kind == "none":
        t2d = None
    elif t2d_kind == "all":
        t2d = torch.ones(V, dtype=torch.bool)
    elif t2d_kind == "flipped":
        j = draw(st.integers(0, V - 1))
        t2d[j] = ~t2d[j]
    elif t2d_kind == "short":
        t2d = t2d[: draw(st.integers(0, V - 1))]
    size = draw(st.sampled_from([None, V, N]))
    return d2t, t2d, size


@settings(max_examples=400, **FIXED)
@given(near_valid_mapping())
def test_verdict_is_total_near_valid_mappings(case):
    d2t, t2d, size = case
    verdict_or_bad_input(lambda: VocabMapping(d2t, t2d, target_vocab_size=size))


@settings(max_examples=40, **FIXED)
@given(any_tensor(), random_t2d(), st.one_of(st.none(), st.integers(1, 48)))
def test_verdict_is_total_through_files(d2t, t2d, vocab_size):
    """The same, for tensors written to d2t.pt / t2d.pt (and a config) and read by load_mapping."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        torch.save(d2t, d / "d2t.pt")
        if t2d is not None:
            torch.save(t2d, d / "t2d.pt")
        if vocab_size is not None:
            (d / "config.json").write_text(json.dumps({"vocab_size": vocab_size}))
        verdict_or_bad_input(lambda: load_mapping(d))


def test_total_verdict_check_can_fail():
    """The helper above rejects an error that is not BadInputError (so the property means something)."""
    with pytest.raises(TypeError):
        verdict_or_bad_input(lambda: (_ for _ in ()).throw(TypeError("boom")))
