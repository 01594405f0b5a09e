"""Accuracy of an EAGLE-3 draft under each reading of `d2t`: the investigation's standalone test.

Run the draft over hidden-state samples (SpecForge offline layout) and compare what it drafts
with the real tokens, once with `d2t` read as offsets (what every engine does), once read as
absolute ids (the bug in the hand-written test), once with no mapping at all (draft id taken as
the target id). A wiring bug shows as near-zero accuracy on the very data the draft was trained
on under the engines' reading; a generalisation problem shows as a gap between train and
validation.

Alignment (docs/eagle3-facts.md, 'Alignment'). At position t the draft sees the aux hidden states of t and the
embedding of token t+1 and drafts token t+2; drafting step j (fed with its own output and the
embedding of its own previous draft, mapped to a target id under the reading being tested)
drafts token t+2+j. By default a label counts where `loss_mask` is 1 *at the label's own
position* t+2+j: the label is the token the mask speaks about (an assistant token). SpecForge's
trainer instead masks the output at t with loss_mask[t+j] (it shifts input_ids and the target
logits left before step 0, but loss_mask only between steps); `mask_at="position"` reproduces
that. The two differ only at the edges of the masked spans. With a target head (final norm +
lm_head of the target, `helpers.model.target_head`) the draft is also scored against the target's own
argmax at position t+1+j, which is what SpecForge reports as accuracy.

`helpers.measure.predict.draft_predictions` is the reusable core: per sample, the drafted target ids for
k steps with labels and mask (the accept-length replay in `helpers.measure.replay` builds on it).
`evaluate` counts them into an `EvalResult` (`.to_dict()` is the CLI's JSON; fractions in 0..1)
whose `conclusion()` says which kind of bug the numbers point to, and whose `prediction(drafting)`
is the accept length the measured rank table predicts for a chain or SGLang's tree
(`helpers.acceptance.prediction.predict`: the one prediction every front end shows).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path


from helpers.acceptance.drafting import Drafting
from helpers.acceptance.prediction import Prediction, predict
from helpers.core.distributed import SINGLE
from helpers.core.errors import BadInputError
from helpers.core.terms import check_reading
from helpers.io.samples import split_folders
from helpers.measure.conclusion import (
    ENGINE_READING,
    misread,
    no_mapping,
    offset_not_scored,
    split_gap,
    weak_or_healthy,
    wiring,
)
from helpers.measure.predict import (
    Loading,
    Scoring,
    as_model,
    check_mask_at,
    draft_d2t,
    draft_sizes,
    iter_batches,
    model_info,
    split_knobs,
)
from helpers.measure.scores import ScoreCounter, SplitScores, merge_counters, vocab_sets
from helpers.model.target_head import (
    HIDDEN_NORMED,
    TargetHead,
    detect_hidden_normed,
    load_target_head,
)

FULL_VOCAB_NOTE = (
    "{ckpt} has no d2t and its draft vocab is the full target vocab ({n:,} ids): scored under the "
    "engines' identity mapping (the offset reading with d2t = 0), as speculators intends"
)
NO_D2T_WARNING = (
    "{ckpt} has no d2t: scored under the 'none' reading only (draft id taken as target id); "
    "this says nothing about the mapping the engines will use"
)


# -- the result -------------------------------------------------------------------------------------
@dataclass
class EvalResult:
    """Scores of one draft over a samples folder: pooled, and per split when it has train/val."""

    checkpoint: str
    samples: str
    readings: list
    steps: int
    topk: int
    device: str
    dtype: str
    overall: SplitScores
    splits: dict = field(default_factory=dict)  # "train"/"val" -> SplitScores
    warnings: list = field(default_factory=list)
    has_d2t: bool = True
    mask_at: str = "label"
    target_head: str | None = None
    full_vocab: bool = False  # no d2t because the draft keeps the full target vocab: identity is right
    hidden_normed: str | None = None  # with a target head: "yes" (lm_head only) or "no" (norm, then lm_head)
    hidden_normed_how: str | None = None  # "stated", or the auto rule's evidence
    predict_for: tuple = ()  # drafting shapes `to_dict` predicts an accept length for (none: a chain of `steps`)
    # the reading the file's engine uses: offsets (HF checkpoints), absolute ids (a llama.cpp GGUF)
    engine_reading: str = ENGINE_READING

    # the numbers the conclusion rests on
    def reference(self) -> tuple[str, SplitScores]:
        """The split that stands for 'data the draft was trained on': train if present."""
        if "train" in self.splits:
            return "train", self.splits["train"]
        return "all samples", self.overall

    def acceptance(self, reading: str = "offset") -> tuple[float | None, str]:
        """(per-token acceptance, where it was measured) for predicting accept length.

        The step-0 top-1 accuracy under `reading`, on the validation split when there is one
        (held-out text is what serving sees), else on all samples.
        """
        name, part = ("validation split", self.splits["val"]) if "val" in self.splits else ("all samples", self.overall)
        scores = part.readings.get(reading)
        return (None if scores is None else scores.top1), f"{reading} reading, step-0 top-1, {name}"

    def prediction_reading(self) -> str:
        """The reading a prediction is for: the engines' one when scored, else the first scored."""
        return self.engine_reading if self.engine_reading in self.readings else self.readings[0]

    def rank_table(self, reading: str | None = None) -> tuple[list, str]:
        """([steps][topk] rank table, where it was measured): per depth, the share of labels that are the
        draft's rank-r candidate, on the validation split when there is one, else on all samples."""
        reading = reading or self.prediction_reading()
        name, part = ("validation split", self.splits["val"]) if "val" in self.splits else ("all samples", self.overall)
        scores = part.readings.get(reading)
        if scores is None:
            raise ValueError(f"reading {reading!r} was not scored (scored: {', '.join(self.readings)})")
        return scores.rank_table(), (f"{reading} reading, {self.steps} step(s) x top-{self.topk} ranks, {name} "
                                     f"({scores.tokens:,} tokens)")

    def prediction(self, drafting: Drafting, reading: str | None = None) -> Prediction:
        """The accept length this result predicts for `drafting` (chain or SGLang's tree), from its rank
        table under `reading` (default: the engines' reading), with the assumptions it makes."""
        table, where = self.rank_table(reading)
        rate, _ = self.acceptance(reading or self.prediction_reading())
        return predict(table, drafting, source=where, one_rate=rate)

    def diagnosis(self) -> str:
        """'mapping', 'wiring', 'no_mapping', 'coverage', 'generalisation', 'weak', 'healthy', 'no_data'."""
        return self._diagnose()[0]

    def conclusion(self) -> str:
        """One or two sentences saying which kind of bug the numbers point to."""
        return self._diagnose()[1]

    def _diagnose(self) -> tuple[str, str]:
        """(diagnosis, conclusion): the first of the cases below (in this order) that the numbers fit."""
        name, ref = self.reference()
        scored = {r: s for r, s in ref.readings.items() if s.top1 is not None}
        if not scored:
            return "no_data", "No label was scored (no loss_mask positions): nothing to conclude."
        best = max(scored, key=lambda r: scored[r].top1)
        if not self.has_d2t and not self.full_vocab:
            return no_mapping(name, scored["none"])
        er = self.engine_reading
        eng = scored.get(er)
        tr, va = self.splits.get("train"), self.splits.get("val")
        return (
            misread(name, scored, best, eng, er)
            or wiring(name, scored[best])
            or (None if eng is not None else offset_not_scored(name, best, scored[best], er))
            or split_gap(tr, va, er)
            or weak_or_healthy(name, ref, scored, eng, tr, va, er)
        )

    # views
    def to_dict(self) -> dict:
        """The CLI's JSON: pooled scores at the top level, per split under `splits`."""
        d = {
            "checkpoint": self.checkpoint, "samples": self.samples, "device": self.device,
            "dtype": self.dtype, "steps": self.steps, "topk": self.topk,
            "engine_reading": self.engine_reading, "has_d2t": self.has_d2t, "target_head": self.target_head,
            "mask_at": self.mask_at, "full_vocab": self.full_vocab,
            "hidden_normed": self.hidden_normed, "hidden_normed_how": self.hidden_normed_how,
            "warnings": list(self.warnings),
        }
        d.update(self.overall.to_dict())
        d["splits"] = {k: v.to_dict() for k, v in self.splits.items()}
        d["diagnosis"], d["conclusion"] = self._diagnose()
        shapes = self.predict_for or (Drafting(self.steps),)
        d["predicted_accept_length"] = [self.prediction(x).to_dict() for x in shapes] if self._scored() else []
        return d

    def _scored(self) -> bool:
        part = self.splits.get("val", self.overall)
        s = part.readings.get(self.prediction_reading())
        return s is not None and bool(s.tokens)

    def table(self):
        """A pandas DataFrame, one row per (split, reading), accuracies in percent."""
        import pandas as pd

        rows = []
        parts = list(self.splits.items()) or [("all", self.overall)]
        if self.splits:
            parts.append(("all", self.overall))
        for split, sc in parts:
            for r, s in sc.readings.items():
                row = {
                    "split": split, "reading": r, "tokens": s.tokens,
                    "top-1 %": _pct(s.top1), f"top-{self.topk} %": _pct(s.topk),
                    "coverage %": _pct(s.coverage), "covered top-1 %": _pct(s.covered_top1),
                }
                for j, v in enumerate(s.step_top1):  # step 0 = the first drafted token (token t+2)
                    row[f"step {j} top-1 %"] = _pct(v)
                if s.target_top1 is not None:
                    row["vs target argmax top-1 %"] = _pct(s.target_top1)
                rows.append(row)
        return pd.DataFrame(rows).set_index(["split", "reading"])

    def report(self) -> str:
        """The `evaluate` command's text: settings, warnings, the table, the conclusion."""
        head = (f"{self.checkpoint} on {self.samples} ({self.device}, {self.dtype}, {self.steps} step(s), "
                f"top-{self.topk}, mask at {self.mask_at})")
        preds = [self.prediction(x).text() for x in self.predict_for] if self._scored() else []
        return "\n".join([head, *[f"  ! {w}" for w in self.warnings], self.table().to_string(), "",
                          self.conclusion(), *preds])


def _pct(x):
    return None if x is None else round(100.0 * x, 2)


def evaluate(checkpoint, samples, *, target_head=None, hidden_normed: str = "auto", ranks=None, predict_for=(),
             name: str | None = None, **settings) -> EvalResult:
    """Score a draft (path, opened `Checkpoint` or loaded `Eagle3Draft`) over a samples folder under each reading.

    `settings`: `Scoring`'s fields (readings, steps, accuracy_topk, mask_at, batch_size, max_samples,
    workers, progress) and `Loading`'s (device, dtype, embed_from, draft_config), by name
    (`evaluate(ck, samples, steps=3, device="cpu")`); `score` takes the two objects and a loaded
    draft instead (one form each, never both). `topk` is the old name of `accuracy_topk` (the
    accuracy's top-k, not a drafting tree's width), still read. `name`: how the result names the checkpoint
    (default: the path given, else the draft's source).

    `samples` may hold `train/` and `val/` subfolders: each is scored (up to `max_samples`
    samples each) and reported side by side, and pooled at the top level. `target_head` (a target
    model folder with final norm + lm_head, or a `TargetHead`) adds scores against the target's
    own argmax. A draft without d2t is scored under 'none' only, with a warning - unless its draft
    vocab is the full target vocab (speculators then writes no d2t): then the identity mapping is
    the engines' one, and it is scored as the 'offset' reading (d2t = 0).

    `draft_config`: a config.json for a checkpoint without one beside it (a SpecForge trainer step
    folder; give the draft config the trainer was given).

    `mask_at`: 'label' (default) scores step j at t where loss_mask[t+2+j] is 1; 'position' where
    loss_mask[t+j] is 1, as SpecForge's trainer masks (it shifts loss_mask once per step only),
    but only where the label exists; 'specforge' is SpecForge 0.2.0's exact count
    (`algorithms/eagle3/model.py: _acc_and_loss`, `acc_j = sum(correct * loss_mask_j) /
    sum(loss_mask_j)`): every t with loss_mask[t+j] = 1, including the last 1+j positions of a
    sample, whose label lies past the end and is the pad id 0 (SpecForge pads the shifted target
    with zeros, whose argmax is 0; its loss_mask is not shifted by the first shift). With a target
    head, the 'vs target argmax' figures then equal SpecForge's acc_j to the token. 'speculators'
    is speculators 0.9.0's rule: step j at t counts where loss_mask[t+1+j] is 1 (its shift_batch
    drops the first token with the last aux state).

    `workers`: threads reading and decompressing sample files ahead of the draft (None: one
    when there are 32 files or more, else none; `helpers.io.samples.stream_samples`). `ranks` (`helpers.core.distributed.Ranks`, from
    torchrun or a notebook's own process group): this process scores every world-th file and the
    counts are summed over ranks, so every rank returns the whole run's result.

    `predict_for`: drafting shapes (`helpers.acceptance.drafting.Drafting`) whose predicted accept
    length `to_dict` states (default: a chain of `steps`); score `steps` and `topk` at least as deep
    and as wide as the shapes, or the prediction says what it lacked.

    `hidden_normed` ('yes' | 'no' | 'auto', with a target head): whether the samples'
    `hidden_state` is already after the target's final norm. SpecForge stores it after the norm
    and its target head is lm_head only, so 'yes' scores against argmax(lm_head(h)) and 'no'
    against argmax(lm_head(norm(h))). 'auto' (default) decides from the first samples (up to 4):
    a normed state is h = w * x / rms(x), so RMS(h / w) = 1 at every position; 90 % or more of
    the positions within 2 % of 1 means normed, 10 % or less means not normed, anything between
    is refused (say which). The result records what was used (`hidden_normed`,
    `hidden_normed_how`). See docs/eagle3-facts.md, 'Offline hidden states'.
    """
    if "topk" in settings:
        settings["accuracy_topk"] = settings.pop("topk")
    more_scoring, more_loading = split_knobs(settings, Scoring, Loading)
    scoring = Scoring(**more_scoring)
    scoring = replace(scoring, readings=tuple(scoring.readings))
    _checked_readings(scoring, samples)  # refused before the draft loads (`score` checks again for its own callers)
    _checked_normed(hidden_normed)
    model = as_model(checkpoint, Loading(**more_loading))
    name = name or (str(checkpoint) if isinstance(checkpoint, (str, os.PathLike)) else None)
    return score(model, samples, scoring, target_head=target_head, hidden_normed=hidden_normed, ranks=ranks,
                 predict_for=predict_for, name=name)


def score(model, samples, scoring: Scoring, *, target_head=None, hidden_normed: str = "auto", ranks=None,
          predict_for=(), name: str | None = None) -> EvalResult:
    """`evaluate` on a loaded draft with its `Scoring` (see `evaluate` for the arguments): the
    draft is opened and loaded once, by whoever calls (the CLI: at its door, `preflight`'s opened
    checkpoint). `name`: how the result names the checkpoint (default: the draft's source)."""
    readings = _checked_readings(scoring, samples)
    _checked_normed(hidden_normed)
    dev, dt = model_info(model)
    _, vocab, draft_vocab = draft_sizes(model)
    d2t = draft_d2t(model)
    head = _target_head_for(target_head, vocab, dev, dt)
    how = None
    if head is not None:
        head, how = _head_normed(head, samples, hidden_normed)
    notes = []
    full_vocab = d2t is None and vocab == draft_vocab
    source = getattr(model, "source", None)
    shown = str(source or name or "(loaded draft)")  # the notes name the draft's source first
    name = name or str(source or "(loaded draft)")  # the result: the path given first
    if full_vocab:
        notes.append(FULL_VOCAB_NOTE.format(ckpt=shown, n=vocab))
        readings = ["offset"]
    elif d2t is None:
        notes.append(NO_D2T_WARNING.format(ckpt=shown))
        warnings.warn(notes[-1], stacklevel=2)
        readings = ["none"]
    scoring = replace(scoring, readings=tuple(readings))
    sets = vocab_sets(d2t, getattr(model, "mapping", None), readings, vocab, draft_vocab)
    counters = _count_splits(model, samples, scoring, sets, head, ranks or SINGLE)
    overall = counters.pop("all") if "all" in counters else merge_counters(list(counters.values()))
    return EvalResult(
        checkpoint=name,
        samples=str(samples) if isinstance(samples, (str, os.PathLike)) else "(samples)",
        readings=readings, steps=scoring.steps, topk=scoring.accuracy_topk, device=str(dev),
        dtype=str(dt).removeprefix("torch."),
        overall=overall.scores(), splits={k: c.scores() for k, c in counters.items()},
        warnings=notes, has_d2t=d2t is not None, target_head=None if head is None else head.path,
        mask_at=scoring.mask_at, full_vocab=full_vocab,
        hidden_normed=None if head is None else ("yes" if head.hidden_normed else "no"),
        hidden_normed_how=how, predict_for=tuple(predict_for or ()),
        engine_reading="absolute" if getattr(getattr(model, "checkpoint", None), "d2t_convention", "offset") == "absolute"
        else ENGINE_READING,
    )


def _head_normed(head: TargetHead, samples, hidden_normed: str) -> tuple[TargetHead, str]:
    """A copy of `head` set for the samples' states (see `evaluate`), and how that was decided."""
    import dataclasses

    if hidden_normed != "auto":
        if hidden_normed == "no" and head.norm_weight is None:
            raise BadInputError(head.path, "has no final norm weight: hidden_normed='no' cannot be applied")
        return dataclasses.replace(head, hidden_normed=hidden_normed == "yes"), "stated"
    first = []
    if isinstance(samples, (str, os.PathLike)):
        from helpers.io.samples import iter_samples

        folder = next(iter(split_folders(samples).values()), samples)
        first = [s.hidden_state for s in iter_samples(folder, max_samples=4)]
    elif isinstance(samples, (list, tuple)):
        first = [s.hidden_state for s in samples[:4]]
    if not first:
        return dataclasses.replace(head, hidden_normed=True), (
            "assumed (the samples cannot be read twice to check): after the final norm, SpecForge's layout")
    normed, how = detect_hidden_normed(head, first)
    return dataclasses.replace(head, hidden_normed=normed), how


def _checked_readings(scoring: Scoring, samples) -> list:
    """The readings to score, each once; a ValueError or BadInputError for a bad argument."""
    check_mask_at(scoring.mask_at)
    if scoring.steps < 1 or scoring.accuracy_topk < 1:
        raise ValueError("steps and accuracy_topk must be at least 1")
    readings = list(dict.fromkeys(scoring.readings))
    for r in readings:
        check_reading(r)
    if isinstance(samples, (str, os.PathLike)) and not Path(samples).exists():
        raise BadInputError(samples, "no such samples folder")
    return readings


def _checked_normed(hidden_normed: str) -> None:
    if hidden_normed not in HIDDEN_NORMED:
        raise ValueError(f"hidden_normed={hidden_normed!r}; expected one of {HIDDEN_NORMED}")


def _target_head_for(target_head, vocab: int, device, dtype) -> TargetHead | None:
    """`evaluate`'s target_head argument as a loaded `TargetHead` that fits the draft's target vocab, or None."""
    head = target_head or None  # "" (an empty notebook parameter) means none
    if head is not None and not isinstance(head, TargetHead):
        head = load_target_head(head, device=device, dtype=dtype)
    if head is not None and head.vocab_size != vocab:
        raise BadInputError(head.path, f"lm_head has {head.vocab_size} rows but the draft's target vocab is {vocab}")
    return head


def _count_splits(model, samples, scoring: Scoring, sets, head: TargetHead | None, ranks=SINGLE) -> dict:
    """{split: ScoreCounter} for each split of `samples` ({'all': ...} when it has no train/val);
    `sets`: `vocab_sets`' (per reading, the target ids it can produce; the true draft vocab)."""
    parts = split_folders(samples) or {"all": samples}
    counters = {}
    for split, folder in parts.items():
        cnt = ScoreCounter(list(scoring.readings), scoring.steps, *sets, head is not None, scoring.accuracy_topk)
        here = replace(scoring, progress=scoring.progress and ranks.main,
                       workers=_workers(folder, scoring.max_samples, scoring.workers))
        for _, out in iter_batches(model, folder, here, head=head, desc=f"scoring {split}",
                                   shard=(ranks.rank, ranks.world)):
            cnt.add(*out)
        cnt.all_reduce(ranks)
        if cnt.samples == 0:
            raise BadInputError(folder if isinstance(folder, (str, os.PathLike)) else None, "holds no samples to score")
        counters[split] = cnt
    return counters


def _workers(folder, max_samples, workers) -> int:
    """Reader processes for a folder: as asked, else one when it holds 32 files or more."""
    if workers is not None:
        return max(0, int(workers))
    if not isinstance(folder, (str, os.PathLike)):
        return 0
    from helpers.measure.predict import _count_files

    return 1 if (_count_files(folder, max_samples) or 0) >= 32 else 0


def evaluate_settings(settings, **overrides) -> EvalResult:
    """`evaluate` on a `helpers.ui.settings.RunSettings`: its checkpoint and samples, scored to its
    drafting depth with its device, dtype, sample limit, embed_from and target head; `overrides`
    are `evaluate`'s other keyword arguments (readings, topk, mask_at, ...)."""
    return evaluate(settings.checkpoint, settings.samples, **{**settings.evaluate_kwargs(), **overrides})


def missing_samples_note(samples) -> str | None:
    """Why a notebook cannot score anything with `samples` (None/empty/absent), or None when it can."""
    if samples is None or str(samples).strip() == "":
        return "No samples folder given (samples is empty): the accuracy cells are skipped."
    if not Path(samples).exists():
        return f"Samples folder {samples} does not exist: the accuracy cells are skipped."
    return None
