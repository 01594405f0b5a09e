"""Counting a draft's hits into accuracy scores, per reading of d2t and per drafting step.

`ScoreCounter` keeps running counts for one split of the samples: labels scored, top-1 and
top-k hits, how many labels each reading can produce at all (its coverage ceiling, from
`vocab_sets`) and the hits among those, and, with a target head, hits against the target's own
argmax. It also counts, per step, the rank the label holds in the draft's top k (0 .. k-1, the
first rank whose id equals it), so each step has a rank distribution: rank 0 .. k-1, not in the
top k, and among those the labels outside the draft vocab, which no rank can ever catch
(`ReadingScores.rank_distribution`; `helpers.acceptance.prediction` turns it into the predicted
accept length of a chain or tree). `scores()` turns the counts into `SplitScores` /
`ReadingScores` (fractions in 0..1, None where nothing was scored). `helpers.measure.evaluate`
feeds it batches and draws the conclusion.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.io.mapping import to_target_ids


@dataclass
class ReadingScores:
    """Accuracy under one reading (fractions in 0..1; None where nothing was scored)."""

    top1: float | None
    topk: float | None
    step_top1: list  # [K] top-1 per drafting step (step 0 == top1)
    step_topk: list
    coverage: float | None  # share of labels this reading can produce at all (its ceiling)
    covered_top1: float | None  # top-1 among those labels
    covered_topk: float | None
    tokens: int  # labels scored at step 0
    target_top1: float | None = None  # against the target's own argmax (with a target head)
    target_step_top1: list | None = None
    # [K] per step: {"ranks": [P(label at rank r) for r < topk], "not_in_topk": P(at no rank, outside the
    # draft vocab included), "outside_draft_vocab": P(the reading cannot produce it at all)}; None: no label
    rank_distribution: list | None = None

    def rank_table(self) -> list:
        """[K][topk]: P(the label is the draft's rank-r candidate at step j), 0 where nothing was scored."""
        return [[0.0] * len(self.rank_distribution[0]["ranks"]) if d is None else list(d["ranks"])
                for d in self.rank_distribution] if self.rank_distribution else []

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SplitScores:
    samples: int
    tokens: int
    coverage: float | None  # share of labels in the draft vocab (t2d, else the offset targets)
    readings: dict  # reading -> ReadingScores

    def to_dict(self) -> dict:
        return {
            "samples_scored": self.samples, "tokens": self.tokens, "coverage": self.coverage,
            "readings": {r: s.to_dict() for r, s in self.readings.items()},
        }


def rank_counts(pred: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[K, topk] int64: per step, how many counted labels are the draft's rank-r candidate (the first
    rank holding the label: under a misread mapping two ranks can name the same target id).

    pred [..., K, topk] target ids, labels [..., K], mask [..., K] (any leading dims)."""
    eq = (pred == labels[..., None]) & mask[..., None].bool()  # [..., K, topk]
    first = eq & (eq.long().cumsum(-1) == 1)
    return first.reshape(-1, *first.shape[-2:]).sum(0)


def rank_distribution(predictions, in_vocab: torch.Tensor | None = None) -> list:
    """The rank distribution per step (`ReadingScores.rank_distribution`) of `Predictions`
    (`helpers.measure.predict.draft_predictions`): counted labels only (their mask). `in_vocab`
    bool [V]: the target ids the draft can produce (None: "outside_draft_vocab" not counted, 0)."""
    counts, n, outside = None, None, None
    for p in predictions:
        rc = rank_counts(p.pred, p.labels, p.mask)
        m = p.mask.bool()
        counts = rc if counts is None else counts + rc
        nj = m.sum(0)
        n = nj if n is None else n + nj
        out = torch.zeros_like(nj)
        if in_vocab is not None:
            out = (~in_vocab[p.labels.clamp(min=0)] & m).sum(0)
        outside = out if outside is None else outside + out
    if counts is None:
        return []
    return [_rank_row(counts[j], int(n[j]), int(outside[j])) for j in range(counts.shape[0])]


def _rank_row(counts: torch.Tensor, n: int, outside: int) -> dict | None:
    """One step's rank distribution from its counts: [topk] rank counts, labels counted, labels outside
    the draft vocab (`ReadingScores.rank_distribution`); None when nothing was counted."""
    if n == 0:
        return None
    ranks = [int(x) / n for x in counts.tolist()]
    return {"ranks": ranks, "not_in_topk": max(0.0, 1.0 - sum(ranks)), "outside_draft_vocab": outside / n}


def _frac(a, b):
    return None if b == 0 else float(a) / float(b)


class ScoreCounter:
    """Running counts for one split, per reading and per step."""

    def __init__(self, readings, steps, vocab_sets: dict, true_set: torch.Tensor, with_head: bool, topk: int = 1):
        self.readings, self.steps, self.with_head, self.topk = list(readings), steps, with_head, int(topk)
        self.vocab_sets, self.true_set = vocab_sets, true_set
        z = lambda: torch.zeros(steps, dtype=torch.int64)  # noqa: E731
        self.n = z()
        self.true_cov = 0
        self.samples = 0
        self.c = {r: {k: z() for k in ("top1", "topk", "cov", "cov1", "covk", "t1", "tn")} for r in readings}
        for r in readings:  # rank[j, r]: labels of step j that are the draft's rank-r candidate
            self.c[r]["rank"] = torch.zeros(steps, self.topk, dtype=torch.int64)

    def add(self, lengths, preds, labels, mask, tlabels) -> None:
        self.samples += len(lengths)
        self.n += mask.sum((0, 1))
        lab = labels.clamp(min=0)  # [B, T, K]
        self.true_cov += int((self.true_set[lab[..., 0]] & mask[..., 0]).sum())
        for r in self.readings:
            p = preds[r]  # [B, T, K, topk]
            hit1 = (p[..., 0] == labels) & mask  # [B, T, K]
            hitk = (p == labels[..., None]).any(-1) & mask
            cov = self.vocab_sets[r][lab] & mask
            c = self.c[r]
            c["rank"][:, : p.shape[-1]] += rank_counts(p, labels, mask)
            c["top1"] += hit1.sum((0, 1))
            c["topk"] += hitk.sum((0, 1))
            c["cov"] += cov.sum((0, 1))
            c["cov1"] += (hit1 & cov).sum((0, 1))
            c["covk"] += (hitk & cov).sum((0, 1))
            if tlabels is not None:
                tm = mask & (tlabels >= 0)
                c["t1"] += ((p[..., 0] == tlabels) & tm).sum((0, 1))
                c["tn"] += tm.sum((0, 1))

    def _flat(self) -> list:
        parts = [self.n, torch.tensor([self.true_cov, self.samples])]
        parts += [self.c[r][k] for r in self.readings for k in sorted(self.c[r])]
        return parts

    def all_reduce(self, ranks) -> None:
        """Sum the counts over all ranks of a torchrun run (nothing happens in a single process)."""
        if not ranks.distributed:
            return
        from helpers.core.distributed import sum_counts

        parts = self._flat()
        total = sum_counts(torch.cat([p.reshape(-1).to(torch.int64) for p in parts]), ranks)
        at = 0
        out = []
        for p in parts:
            out.append(total[at : at + p.numel()].reshape(p.shape))
            at += p.numel()
        self.n, (self.true_cov, self.samples) = out[0], (int(out[1][0]), int(out[1][1]))
        i = 2
        for r in self.readings:
            for k in sorted(self.c[r]):
                self.c[r][k] = out[i]
                i += 1

    def merge(self, other: ScoreCounter) -> ScoreCounter:
        out = ScoreCounter(self.readings, self.steps, self.vocab_sets, self.true_set, self.with_head, self.topk)
        out.n, out.true_cov, out.samples = self.n + other.n, self.true_cov + other.true_cov, self.samples + other.samples
        for r in self.readings:
            for k in self.c[r]:
                out.c[r][k] = self.c[r][k] + other.c[r][k]
        return out

    def _ranks(self, c: dict, j: int) -> dict | None:
        """Step j's rank distribution (see `ReadingScores.rank_distribution`), None when nothing was scored."""
        n = int(self.n[j])
        return _rank_row(c["rank"][j], n, n - int(c["cov"][j]))

    def scores(self) -> SplitScores:
        n0 = int(self.n[0])
        out = {}
        for r in self.readings:
            c = self.c[r]
            out[r] = ReadingScores(
                top1=_frac(c["top1"][0], n0),
                topk=_frac(c["topk"][0], n0),
                step_top1=[_frac(c["top1"][j], self.n[j]) for j in range(self.steps)],
                step_topk=[_frac(c["topk"][j], self.n[j]) for j in range(self.steps)],
                coverage=_frac(c["cov"][0], n0),
                covered_top1=_frac(c["cov1"][0], c["cov"][0]),
                covered_topk=_frac(c["covk"][0], c["cov"][0]),
                tokens=n0,
                target_top1=_frac(c["t1"][0], c["tn"][0]) if self.with_head else None,
                target_step_top1=[_frac(c["t1"][j], c["tn"][j]) for j in range(self.steps)] if self.with_head else None,
                rank_distribution=[self._ranks(c, j) for j in range(self.steps)],
            )
        return SplitScores(samples=self.samples, tokens=n0, coverage=_frac(self.true_cov, n0), readings=out)


def vocab_sets(d2t, mapping, readings, vocab: int, draft_vocab: int):
    """Per reading: bool [V] of the target ids it can produce; and the true draft vocab (from the
    draft's `mapping`'s t2d when it has one that fits). `d2t`: the draft's (`predict.draft_d2t`) or None."""
    sets = {}
    for r in readings:
        t = torch.arange(draft_vocab) if r == "none" or d2t is None else to_target_ids(
            torch.arange(draft_vocab), d2t.cpu(), r
        )
        m = torch.zeros(vocab, dtype=torch.bool)
        m[t[(t >= 0) & (t < vocab)]] = True
        sets[r] = m
    if mapping is not None and mapping.t2d is not None and mapping.t2d.numel() == vocab:
        true = mapping.t2d.cpu().bool()
    else:
        true = sets.get("offset") if d2t is not None and "offset" in sets else None
        if true is None:
            t = torch.arange(draft_vocab) if d2t is None else to_target_ids(torch.arange(draft_vocab), d2t.cpu(), "offset")
            true = torch.zeros(vocab, dtype=torch.bool)
            true[t[(t >= 0) & (t < vocab)]] = True
    return sets, true


def merge_counters(counters):
    """One `ScoreCounter` holding the counts of all of `counters` (the pooled splits)."""
    out = counters[0]
    for c in counters[1:]:
        out = out.merge(c)
    return out
