"""The d2t / t2d vocabulary mapping of an EAGLE-3 draft, and both ways of reading it.

`d2t` is int64 of shape [draft_vocab]. Every engine (SGLang, vLLM, TensorRT-LLM) and every
producer (EAGLE, SpecForge, speculators) stores *offsets*: `target_id = i + d2t[i]`. A common bug
is to read it as absolute ids (`target_id = d2t[i]`). `t2d` is bool of shape [target_vocab],
True where a target id is kept in the draft vocab; consistency means
`nonzero(t2d) == arange(draft_vocab) + d2t`.

This module knows nothing about files: `helpers.io.checkpoint` finds and reads the tensors and hands
them to `VocabMapping`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from helpers.core.errors import BadInputError
from helpers.core.terms import check_reading

VERDICTS = ("offset", "absolute", "identity", "ambiguous", "inconsistent")


@dataclass(frozen=True)
class Reading:
    """What one way of reading `d2t` gives: the target ids and how they check out."""

    name: str  # "offset" or "absolute"
    targets: torch.Tensor = field(repr=False)  # [draft_vocab] int64 target ids
    distinct_targets: int
    in_range: bool | None  # None when the target vocab size is unknown
    matches_t2d: bool | None  # None when there is no t2d
    min_id: int
    max_id: int

    @property
    def valid(self) -> bool:
        """A usable mapping: one distinct, in-range target per draft id."""
        return (
            self.distinct_targets == self.targets.numel()
            and self.min_id >= 0
            and self.in_range is not False
        )

    def as_dict(self) -> dict:
        return {
            "distinct_targets": self.distinct_targets,
            "in_range": self.in_range,
            "matches_t2d": self.matches_t2d,
            "valid": self.valid,
            "min_id": self.min_id,
            "max_id": self.max_id,
        }


@dataclass(frozen=True)
class Verdict:
    """How the mapping is encoded, with the evidence a person can check."""

    encoding: str  # one of VERDICTS
    evidence: tuple[str, ...]
    reasons: tuple[str, ...] = ()  # why it is inconsistent (empty otherwise)

    def as_dict(self) -> dict:
        return {"verdict": self.encoding, "evidence": list(self.evidence), "reasons": list(self.reasons)}


def _check_d2t(d2t, source) -> torch.Tensor:
    if isinstance(d2t, np.ndarray):
        d2t = torch.from_numpy(np.ascontiguousarray(d2t))
    if not isinstance(d2t, torch.Tensor):
        raise BadInputError(source, f"d2t is a {type(d2t).__name__}, expected an integer tensor")
    if d2t.dtype.is_floating_point or d2t.dtype.is_complex or d2t.dtype == torch.bool:
        raise BadInputError(source, f"d2t has dtype {d2t.dtype}, expected an integer dtype (int64)")
    if d2t.dim() != 1:
        raise BadInputError(source, f"d2t has shape {list(d2t.shape)}, expected 1-D [draft_vocab]")
    if d2t.numel() == 0:
        raise BadInputError(source, "d2t is empty")
    return d2t.to(torch.int64)


def _check_t2d(t2d, source, target_vocab_size) -> torch.Tensor | None:
    if t2d is None:
        return None
    if isinstance(t2d, np.ndarray):
        t2d = torch.from_numpy(np.ascontiguousarray(t2d))
    if not isinstance(t2d, torch.Tensor):
        raise BadInputError(source, f"t2d is a {type(t2d).__name__}, expected a bool tensor")
    if t2d.dtype != torch.bool:
        raise BadInputError(source, f"t2d has dtype {t2d.dtype}, expected bool [target_vocab]")
    if t2d.dim() != 1:
        raise BadInputError(source, f"t2d has shape {list(t2d.shape)}, expected 1-D [target_vocab]")
    if target_vocab_size is not None and t2d.numel() != target_vocab_size:
        raise BadInputError(
            source,
            f"t2d has length {t2d.numel()} but the target vocab size is {target_vocab_size}",
        )
    return t2d


class VocabMapping:
    """`d2t` (+ optional `t2d`) with both vocab sizes; both readings and a verdict.

    >>> m = VocabMapping(torch.tensor([0, 0, 1, 3]), target_vocab_size=8)
    >>> m.targets("offset").tolist()
    [0, 1, 3, 6]
    """

    def __init__(
        self,
        d2t,
        t2d=None,
        *,
        draft_vocab_size: int | None = None,
        target_vocab_size: int | None = None,
        sources: list[str] | None = None,
    ):
        self.sources = list(sources or [])
        where = self.sources[0] if self.sources else "d2t"
        self.d2t = _check_d2t(d2t, where)
        if draft_vocab_size is not None and draft_vocab_size != self.d2t.numel():
            raise BadInputError(
                where,
                f"d2t has {self.d2t.numel()} entries but the draft vocab size is {draft_vocab_size}",
            )
        self.draft_vocab_size = self.d2t.numel()
        t2d_where = self.sources[-1] if self.sources else "t2d"
        if target_vocab_size is None and t2d is not None and hasattr(t2d, "shape") and len(t2d.shape) == 1:
            target_vocab_size = int(t2d.shape[0])
        self.t2d = _check_t2d(t2d, t2d_where, target_vocab_size)
        self.target_vocab_size = target_vocab_size
        lo, hi = int(self.d2t.min()), int(self.d2t.max())
        # a negative entry is a valid offset when the draft vocab is not in target-id order (NeMo
        # Automodel keeps it in frequency order): only a negative target id is impossible
        offsets = self.d2t + torch.arange(self.d2t.numel(), dtype=self.d2t.dtype)
        if lo < 0 and int(offsets.min()) < 0:
            i = int(torch.argmin(offsets))
            raise BadInputError(
                where,
                f"d2t[{i}] = {int(self.d2t[i])} is negative: neither an offset (target id {int(offsets[i])}) "
                "nor an absolute id can be negative",
            )
        if target_vocab_size is not None and hi >= target_vocab_size:
            i = int(torch.argmax(self.d2t))
            raise BadInputError(
                where,
                f"d2t[{i}] = {hi} is >= the target vocab size {target_vocab_size}: "
                "out of range under either reading",
            )
        self._readings: dict[str, Reading] = {}

    # -- readings ---------------------------------------------------------------------------
    def targets(self, reading: str = "offset") -> torch.Tensor:
        """Target id of every draft id under `reading` ('offset', 'absolute' or 'none')."""
        if reading == "offset":
            return self.d2t + torch.arange(self.draft_vocab_size, dtype=torch.int64)
        if reading == "absolute":
            return self.d2t.clone()
        check_reading(reading)
        return torch.arange(self.draft_vocab_size, dtype=torch.int64)

    def reading(self, name: str) -> Reading:
        if name not in self._readings:
            t = self.targets(name)
            in_range = None if self.target_vocab_size is None else bool(int(t.max()) < self.target_vocab_size)
            matches = None
            if self.t2d is not None:
                kept = self.t2d_ids
                matches = bool(kept.numel() == t.numel() and torch.equal(kept, torch.sort(t).values))
            self._readings[name] = Reading(
                name=name,
                targets=t,
                distinct_targets=int(torch.unique(t).numel()),
                in_range=in_range,
                matches_t2d=matches,
                min_id=int(t.min()),
                max_id=int(t.max()),
            )
        return self._readings[name]

    @property
    def t2d_ids(self) -> torch.Tensor | None:
        """The target ids t2d keeps, ascending (computed once)."""
        if self.t2d is None:
            return None
        if getattr(self, "_t2d_ids", None) is None:
            self._t2d_ids = torch.nonzero(self.t2d).flatten()
        return self._t2d_ids

    # -- structure a person checks by eye -----------------------------------------------------
    @property
    def leading_zero_run(self) -> int:
        nz = torch.nonzero(self.d2t).flatten()
        return self.draft_vocab_size if nz.numel() == 0 else int(nz[0])

    @property
    def zero_entries(self) -> int:
        return int((self.d2t == 0).sum())

    @property
    def non_decreasing(self) -> bool:
        return bool((self.d2t[1:] >= self.d2t[:-1]).all())

    @property
    def distinct_values(self) -> int:
        return int(torch.unique(self.d2t).numel())

    def gaps(self, reading: str = "offset") -> torch.Tensor:
        """Differences between consecutive kept target ids (sorted), [draft_vocab - 1]."""
        t = torch.sort(self.targets(reading)).values
        return t[1:] - t[:-1]

    @property
    def is_all_zero(self) -> bool:
        return self.zero_entries == self.draft_vocab_size

    # -- verdict ----------------------------------------------------------------------------
    def verdict(self) -> Verdict:
        off, ab = self.reading("offset"), self.reading("absolute")
        n, v = self.draft_vocab_size, self.target_vocab_size
        ev = [
            f"offset reading: {off.distinct_targets:,} distinct target ids of {n:,}, max id {off.max_id:,}"
            + ("" if off.in_range is None else (", all in range" if off.in_range else f", out of range (vocab {v:,})"))
            + ("" if off.matches_t2d is None else (", equal to t2d" if off.matches_t2d else ", not equal to t2d")),
            f"absolute reading: {ab.distinct_targets:,} distinct target ids of {n:,}, max id {ab.max_id:,}"
            + ("" if ab.in_range is None else (", all in range" if ab.in_range else f", out of range (vocab {v:,})"))
            + ("" if ab.matches_t2d is None else (", equal to t2d" if ab.matches_t2d else ", not equal to t2d")),
        ]
        if self.is_all_zero:
            if v is not None and v == n and (self.t2d is None or bool(self.t2d.all())):
                return Verdict("identity", tuple(ev + ["d2t is all zeros and the draft and target vocab sizes are equal"]))
            if self.t2d is not None and off.matches_t2d:  # the N most frequent ids happen to be 0..N-1
                return Verdict("identity", tuple(ev + [
                    f"d2t is all zeros and t2d keeps exactly target ids 0..{n - 1:,}: draft id i is target id i"]))
            if v is None:
                return Verdict(
                    "ambiguous",
                    tuple(ev + ["d2t is all zeros: identity if the vocab sizes are equal, but the target vocab size is unknown"]),
                )
            return Verdict(
                "inconsistent",
                tuple(ev),
                (
                    f"d2t is all zeros with a reduced vocab ({n:,} draft vs {v:,} target ids): it maps draft id i to "
                    f"target id i, so only target ids 0..{n - 1:,} could ever be proposed"
                    + ("" if self.t2d is None or off.matches_t2d else ", and t2d keeps other ids"),
                ),
            )
        if self.t2d is not None:
            if off.matches_t2d and ab.matches_t2d:  # only possible with one draft id: i + d2t[0] == d2t[0]
                return Verdict("ambiguous", tuple(ev + ["both readings give the same target ids and reproduce t2d"]))
            if off.matches_t2d and not ab.matches_t2d:
                return Verdict("offset", tuple(ev + ["only the offset reading reproduces t2d"]))
            if ab.matches_t2d and not off.matches_t2d:
                return Verdict("absolute", tuple(ev + ["only the absolute reading reproduces t2d"]))
            reasons = [f"neither reading reproduces t2d ({self.t2d_ids.numel():,} True entries)"]
            if self.t2d_ids.numel() != n:
                reasons.append(f"t2d keeps {self.t2d_ids.numel():,} ids but d2t has {n:,} entries")
            reasons += self._invalid_reasons(off, ab)
            return Verdict("inconsistent", tuple(ev), tuple(reasons))
        if off.valid and ab.valid:
            return Verdict(
                "ambiguous",
                tuple(ev + ["no t2d, and both readings give distinct in-range ids: the tensors cannot tell"]),
            )
        if off.valid:
            return Verdict("offset", tuple(ev + ["no t2d; only the offset reading gives distinct in-range ids"]))
        if ab.valid:
            return Verdict("absolute", tuple(ev + ["no t2d; only the absolute reading gives distinct in-range ids"]))
        return Verdict("inconsistent", tuple(ev), tuple(self._invalid_reasons(off, ab)))

    @staticmethod
    def _invalid_reasons(*readings: Reading) -> list[str]:
        out = []
        for r in readings:
            if r.distinct_targets != r.targets.numel():
                out.append(f"{r.name} reading maps {r.targets.numel():,} draft ids onto only {r.distinct_targets:,} target ids")
            if r.in_range is False:
                out.append(f"{r.name} reading reaches target id {r.max_id:,}, out of range")
        return out

    # -- conversions ------------------------------------------------------------------------
    def in_other_encoding(self) -> VocabMapping:
        """The same kept ids stored the other way: what a misencoded copy of this mapping looks like.

        A mapping whose verdict is `absolute` comes back as offsets (the fix); any other comes back
        as absolute ids (the misencoding). `t2d`, the sizes and the source files are kept, so the
        figures of both can be put side by side without a second file.
        """
        if self.verdict().encoding == "absolute":
            d2t = absolute_to_offsets(self.d2t)
        else:
            d2t = offsets_to_absolute(self.d2t)
        return VocabMapping(d2t, self.t2d, target_vocab_size=self.target_vocab_size, sources=self.sources)

    def t2d_from(self, reading: str = "offset") -> torch.Tensor:
        """The t2d a given reading implies (needs the target vocab size)."""
        if self.target_vocab_size is None:
            raise ValueError("target vocab size unknown")
        t2d = torch.zeros(self.target_vocab_size, dtype=torch.bool)
        t2d[self.targets(reading)] = True
        return t2d

    def summary(self) -> dict:
        """The numbers `inspect --json` prints (without `sources`)."""
        verdict = self.verdict()
        gaps = self.gaps("offset")
        return {
            "verdict": verdict.encoding,
            "evidence": list(verdict.evidence),
            "reasons": list(verdict.reasons),
            "draft_vocab_size": self.draft_vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "has_t2d": self.t2d is not None,
            "t2d_true": None if self.t2d is None else self.t2d_ids.numel(),
            "zero_entries": self.zero_entries,
            "nonzero_entries": self.draft_vocab_size - self.zero_entries,
            "leading_zero_run": self.leading_zero_run,
            "non_decreasing": self.non_decreasing,
            "distinct_values": self.distinct_values,
            "offset_reading": self.reading("offset").as_dict(),
            "absolute_reading": self.reading("absolute").as_dict(),
            "gaps": {
                "min": int(gaps.min()) if gaps.numel() else None,
                "max": int(gaps.max()) if gaps.numel() else None,
                "consecutive": int((gaps == 1).sum()),
            },
        }


# -- building and converting -----------------------------------------------------------------
def checked_mapping(d2t, t2d, used: list[str], sizes: tuple, config_shown: str | None) -> VocabMapping:
    """A stored d2t / t2d as a `VocabMapping`, refused where they contradict each other or the config's
    vocab sizes (`sizes`: (draft_vocab_size, target vocab) as `helpers.io.configs.vocab_sizes` reads
    them; `used`: the files read, d2t's first; `config_shown`: the config as messages name it)."""
    draft_cfg, target_cfg = sizes
    where = used[0]  # the file d2t came from
    if (
        target_cfg is None and isinstance(d2t, torch.Tensor) and isinstance(t2d, torch.Tensor)
        and d2t.dim() == 1 and t2d.dim() == 1 and d2t.numel() and not d2t.dtype.is_floating_point
        and d2t.dtype != torch.bool and int(d2t.max()) >= t2d.numel()
    ):  # the two files come from different vocabularies (a stale cached mapping, say)
        raise BadInputError(
            where,
            f"d2t holds id {int(d2t.max()):,} but t2d ({used[-1]}) has only {t2d.numel():,} entries: "
            "the two files do not belong to the same mapping",
        )
    if draft_cfg is not None and hasattr(d2t, "shape") and len(d2t.shape) == 1 and d2t.shape[0] != draft_cfg:
        raise BadInputError(
            where, f"d2t has {d2t.shape[0]:,} entries but {config_shown} says draft_vocab_size={draft_cfg:,}"
        )
    if target_cfg is not None and t2d is not None and hasattr(t2d, "shape") and len(t2d.shape) == 1 and t2d.shape[0] != target_cfg:
        raise BadInputError(
            used[-1], f"t2d has length {t2d.shape[0]:,} but {config_shown} says vocab_size={target_cfg:,}"
        )
    return VocabMapping(d2t, t2d, target_vocab_size=target_cfg, sources=used)


def offsets_to_absolute(d2t: torch.Tensor) -> torch.Tensor:
    """Offset encoding -> absolute target ids (`i + d2t[i]`)."""
    return d2t.to(torch.int64) + torch.arange(d2t.numel(), dtype=torch.int64)


def absolute_to_offsets(ids: torch.Tensor) -> torch.Tensor:
    """Absolute target ids -> offset encoding (`ids[i] - i`)."""
    return ids.to(torch.int64) - torch.arange(ids.numel(), dtype=torch.int64)


def select_draft_vocab(freqs, draft_vocab_size: int) -> list[int]:
    """The kept target ids, ascending: the N most frequent, padded as the producers pad.

    `freqs` is a mapping `{target_id: count}` or a 1-D tensor/array of counts indexed by target
    id (ids with count 0 count as unseen). Ties are broken by ascending id, as speculators does
    (SpecForge's `Counter.most_common` keeps first-seen order, which is the same when the counts
    were collected in ascending id order, as `unique()` returns them). When fewer than N distinct
    ids were seen, both producers fill up with the smallest unused ids from 0..N-1.
    """
    if isinstance(freqs, Mapping):
        items = [(int(k), int(c)) for k, c in freqs.items()]
    else:
        arr = np.asarray(freqs.cpu() if isinstance(freqs, torch.Tensor) else freqs)
        if arr.ndim != 1:
            raise ValueError("frequency table must be 1-D")
        ids = np.flatnonzero(arr)
        items = [(int(i), int(arr[i])) for i in ids]
    if any(c < 0 for _, c in items) or any(k < 0 for k, _ in items):
        raise ValueError("frequencies and token ids must be non-negative")
    items.sort(key=lambda kc: (-kc[1], kc[0]))
    chosen = [k for k, _ in items[:draft_vocab_size]]
    if len(chosen) < draft_vocab_size:
        have = set(chosen)
        for tid in range(draft_vocab_size):
            if len(chosen) >= draft_vocab_size:
                break
            if tid not in have:
                chosen.append(tid)
    return sorted(chosen)


def build_from_frequencies(freqs, draft_vocab_size: int, target_vocab_size: int) -> VocabMapping:
    """Build `d2t` (offsets) and `t2d` from token frequencies, as SpecForge and speculators do."""
    kept = torch.tensor(select_draft_vocab(freqs, draft_vocab_size), dtype=torch.int64)
    if int(kept.max()) >= target_vocab_size:
        raise ValueError(f"token id {int(kept.max())} is outside the target vocab of {target_vocab_size}")
    t2d = torch.zeros(target_vocab_size, dtype=torch.bool)
    t2d[kept] = True
    return VocabMapping(absolute_to_offsets(kept), t2d, target_vocab_size=target_vocab_size)


def to_target_ids(draft_ids: torch.Tensor, d2t: torch.Tensor | None, reading: str = "offset") -> torch.Tensor:
    """Map draft-vocab ids (any shape) to target ids under a reading.

    `reading='none'` (or `d2t is None`) takes the draft id as the target id.
    """
    if check_reading(reading) == "none" or d2t is None:
        return draft_ids
    d2t = d2t.to(draft_ids.device)
    if reading == "offset":
        return draft_ids + d2t[draft_ids]
    return d2t[draft_ids]  # absolute


# -- tables for notebooks and reports -------------------------------------------------------------
def readings_frame(m: VocabMapping):
    """Both readings side by side as a pandas DataFrame (one row per reading)."""
    import pandas as pd

    rows = {name: m.reading(name).as_dict() for name in ("offset", "absolute")}
    df = pd.DataFrame(rows).T
    df.index.name = "reading"
    return df[["distinct_targets", "in_range", "matches_t2d", "valid", "min_id", "max_id"]]


def window_frame(m: VocabMapping, start: int, stop: int):
    """Draft ids start..stop-1 with d2t, both readings, and the gap to the previous kept id.

    Shows why repeated offsets are expected: equal consecutive offsets mean consecutive target
    ids (gap 1), not several draft tokens sharing one target. A window reaching past the end of
    the draft vocab is moved back inside it.
    """
    import pandas as pd

    width = stop - start
    start = max(0, min(start, m.draft_vocab_size - width))  # a window past the end slides back
    stop = min(start + width, m.draft_vocab_size)
    off = m.targets("offset")
    return pd.DataFrame(
        {
            "draft_id": list(range(start, stop)),
            "d2t": m.d2t[start:stop].tolist(),
            "offset_target (i + d2t[i])": off[start:stop].tolist(),
            "absolute_target (d2t[i])": m.d2t[start:stop].tolist(),
            "gap_to_previous_target": [None if i == 0 else int(off[i] - off[i - 1]) for i in range(start, stop)],
        }
    ).set_index("draft_id")


def repeated_offsets_explained(m: VocabMapping) -> dict:
    """Counts that show repeated d2t values are consecutive kept ids under the offset reading."""
    same_offset = int((m.d2t[1:] == m.d2t[:-1]).sum())
    consecutive = int((m.gaps("offset") == 1).sum())
    return {
        "pairs_with_equal_offset": same_offset,
        "pairs_of_consecutive_target_ids": consecutive,
        "equal": same_offset == consecutive and m.non_decreasing,
        "absolute_reading_collisions": m.draft_vocab_size - m.reading("absolute").distinct_targets,
    }
