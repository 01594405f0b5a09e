"""What the draft drafts for hidden-state samples, batch by batch: the drafting predictions.

`draft_predictions` is the reusable core behind accuracy (`helpers.measure.evaluate`) and the
accept-length replay (`helpers.measure.replay`): per sample, the target ids the draft drafts for k steps
from every position, with the labels and loss mask they are scored against. `iter_batches` pads
samples into batches, checks each against the draft, and runs `predict_batch` on it for every
reading of d2t at once; `as_model` loads a draft from a path (or takes a loaded one), and
`model_info` / `draft_sizes` / `draft_d2t` read what a loaded draft is.

Alignment (docs/eagle3-facts.md, 'Alignment'): step j at position t drafts token t+2+j; by default a label
counts where `loss_mask` is 1 at the label's own position (`mask_at="label"`), or, as
SpecForge's trainer masks, where loss_mask[t+j] is 1 (`mask_at="position"`, dropping the
positions whose label lies past the end). `mask_at="specforge"` is SpecForge 0.2.0's exact
count (`algorithms/eagle3/model.py: _acc_and_loss`): every t with loss_mask[t+j] = 1 counts,
including the last 1+j positions of a sample, whose label lies past the end and is the pad id 0
there (SpecForge pads the shifted target with zeros, whose argmax is id 0). `mask_at="speculators"`
is speculators 0.9.0's rule (`models/eagle3/data.py: shift_batch`, `metrics.py: align_for_step`):
it drops the first token with the last aux state, so step j at t counts where loss_mask[t+1+j] is 1.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields

import torch

from helpers.core.devices import parse_dtype
from helpers.core.errors import BadInputError
from helpers.core.terms import READINGS, check_reading
from helpers.io.mapping import to_target_ids
from helpers.model.target_head import TargetHead

MASK_AT = ("label", "position", "specforge", "speculators")  # whose loss_mask decides if step j at position t counts


@dataclass(frozen=True)
class Scoring:
    """How a scoring pass drafts and counts (`evaluate`'s scoring knobs, one object).

    `readings` of d2t scored side by side; `steps` drafted per position, the top-`accuracy_topk`
    candidates ranked (the accuracy's top-k, not a drafting tree's width); `mask_at` whose loss_mask decides what counts (`MASK_AT`); batches of `batch_size`;
    at most `max_samples` samples per split; `workers` reader threads (None: decided per folder);
    `progress` bars."""

    readings: tuple = READINGS
    steps: int = 1
    accuracy_topk: int = 5
    mask_at: str = "label"
    batch_size: int = 8
    max_samples: int | None = None
    workers: int | None = None
    progress: bool = True


@dataclass(frozen=True)
class Loading:
    """How a draft given as a path is loaded (`as_model`): device, dtype, an `embed_tokens` from
    elsewhere (`embed_from`), a config.json for a checkpoint without one (`draft_config`)."""

    device: object = None
    dtype: object = None
    embed_from: object = None
    draft_config: object = None


def split_knobs(knobs: dict, *kinds) -> list[dict]:
    """Keyword arguments sorted by which of the dataclasses `kinds` declares them; a TypeError names
    one no kind declares (and what they do declare)."""
    names = [{f.name for f in fields(k)} for k in kinds]
    out = [{} for _ in kinds]
    for key, value in knobs.items():
        i = next((i for i, n in enumerate(names) if key in n), None)
        if i is None:
            known = ", ".join(sorted(set().union(*names)))
            raise TypeError(f"unexpected keyword argument {key!r} (known: {known})")
        out[i][key] = value
    return out


@dataclass
class Predictions:
    """What the draft drafted for one sample, as target ids, with the labels it is scored against.

    Row t holds the chain drafted from position t: column j is step j, which drafts token t+2+j.
    """

    path: str
    pred: torch.Tensor  # [T, K, topk] int64 target ids (rank 0 = the draft's argmax)
    labels: torch.Tensor  # [T, K] int64 token t+2+j (-1 past the end of the sequence)
    mask: torch.Tensor  # [T, K] bool: label exists and its loss_mask is 1
    target_labels: torch.Tensor | None = None  # [T, K] int64 target argmax at t+1+j, with a head


def model_info(model) -> tuple[torch.device, torch.dtype]:
    """(device, dtype) a loaded draft's weights are on."""
    p = next(model.parameters())
    return p.device, p.dtype


def draft_sizes(model) -> tuple[int, int, int]:
    """(target hidden size, target vocab size, draft vocab size) of a loaded draft, as its
    `DraftConfig` normalised them (`helpers.model.config`)."""
    cfg = model.config
    return int(cfg.target_hidden_size), int(cfg.vocab_size), int(cfg.draft_vocab_size)


def draft_d2t(model) -> torch.Tensor | None:
    """A loaded draft's d2t (from `model.d2t` or its mapping), None when it has none."""
    d2t = getattr(model, "d2t", None)
    if d2t is None and getattr(model, "mapping", None) is not None:
        d2t = model.mapping.d2t
    return d2t


def _check_sample(s, aux_width: int, vocab: int, hidden_width: int | None) -> None:
    where = getattr(s, "path", "sample")
    if s.aux_hidden_state.shape[-1] != aux_width:
        raise BadInputError(
            where,
            f"aux_hidden_state is {s.aux_hidden_state.shape[-1]} wide but the checkpoint expects "
            f"3 x target_hidden_size = {aux_width}: samples from another target model?",
        )
    if s.input_ids.numel() and (int(s.input_ids.max()) >= vocab or int(s.input_ids.min()) < 0):
        bad = int(s.input_ids.max()) if int(s.input_ids.max()) >= vocab else int(s.input_ids.min())
        raise BadInputError(where, f"input_ids holds token id {bad}, outside the target vocab of {vocab}")
    if hidden_width is not None and s.hidden_state.shape[-1] != hidden_width:
        raise BadInputError(
            where, f"hidden_state is {s.hidden_state.shape[-1]} wide but the target head expects {hidden_width}"
        )


def _batches(samples: Iterable, batch_size: int) -> Iterator[list]:
    batch: list = []
    for s in samples:
        batch.append(s)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def _shifted(x: torch.Tensor, by: int, fill) -> torch.Tensor:
    """x[:, t + by] at column t, `fill` past the end. [B, T] -> [B, T]."""
    out = torch.full_like(x, fill)
    if by < x.shape[1]:
        out[:, : x.shape[1] - by] = x[:, by:]
    return out


def _padded(batch: list, lengths: list[int], device, dtype):
    """The batch padded to its longest sample: ids, loss_mask and valid [B, T] (CPU), aux [B, T, 3H]."""
    B, T = len(batch), max(lengths)
    W = batch[0].aux_hidden_state.shape[-1]
    ids = torch.zeros(B, T, dtype=torch.int64)  # [B, T]
    lmask = torch.zeros(B, T, dtype=torch.bool)  # [B, T]
    valid = torch.zeros(B, T, dtype=torch.bool)  # [B, T]
    aux = torch.zeros(B, T, W, dtype=dtype, device=device)  # [B, T, 3H]
    for b, s in enumerate(batch):
        n = lengths[b]
        ids[b, :n] = s.input_ids.to(torch.int64)
        lmask[b, :n] = s.loss_mask.reshape(-1)[:n] != 0
        valid[b, :n] = True
        aux[b, :n] = s.aux_hidden_state.to(device=device, dtype=dtype)
    return ids, lmask, valid, aux


def _labels_and_mask(ids, lmask, valid, steps: int, mask_at: str):
    """labels [B, T, K] (token t+2+j, -1 past the end) and mask [B, T, K] (where step j counts)."""
    pad = 0 if mask_at == "specforge" else -1  # SpecForge scores a label past the end as the pad id 0
    padded_ids = ids.masked_fill(~valid, pad)
    labels = torch.stack([_shifted(padded_ids, 2 + j, pad) for j in range(steps)], -1)  # [B, T, K]
    at = {"label": 2, "speculators": 1}.get(mask_at, 0)  # loss_mask of t+2+j (label), t+1+j, or t+j (position)
    mask = torch.stack([_shifted(lmask & valid, at + j, False) for j in range(steps)], -1)  # [B, T, K]
    mask &= labels >= 0
    return labels, mask


def _target_labels(head: TargetHead, batch: list, lengths: list[int], valid, steps: int, device, dtype,
                   mask_at: str = "label"):
    """[B, T, K] the target's own argmax at t+1+j (-1 past the end; 0 with mask_at='specforge'),
    from the samples' hidden states."""
    B, T = valid.shape
    pad = 0 if mask_at == "specforge" else -1
    hid = torch.zeros(B, T, head.hidden_size, dtype=dtype, device=device)  # [B, T, H]
    for b, s in enumerate(batch):
        hid[b, : lengths[b]] = s.hidden_state.to(device=device, dtype=dtype)
    targ = head.argmax(hid).cpu().masked_fill(~valid, pad)  # [B, T] target's choice after t
    return torch.stack([_shifted(targ, 1 + j, pad) for j in range(steps)], -1)  # [B, T, K]


def _draft_ids(model, aux, next_ids, valid, steps: int, readings, topk: int) -> dict:
    """{reading: [B, T, K, topk] target ids the draft drafts under that reading} on the CPU."""
    device, _ = model_info(model)
    d2t = draft_d2t(model)
    attn = valid.to(device)
    preds = {}
    step0 = None
    for r in readings:
        if steps == 1 and step0 is not None:
            logits = step0  # one step does not depend on the reading: reuse it
        else:
            logits = model.draft_steps(aux, next_ids.to(device), steps=steps, reading=r, attention_mask=attn)
            step0 = logits
        per_step = []
        for lg in logits:  # [B, T, draft_vocab]
            top = lg.topk(min(topk, lg.shape[-1]), dim=-1).indices  # [B, T, topk] draft ids
            per_step.append(to_target_ids(top, None if r == "none" else d2t, r).cpu())
        preds[r] = torch.stack(per_step, 2)  # [B, T, K, topk]
    return preds


@torch.inference_mode()
def predict_batch(model, batch: list, steps: int, readings, topk: int, head: TargetHead | None,
                  mask_at: str = "label"):
    """Run the draft on one padded batch for every reading.

    Returns (lengths [B], {reading: pred [B, T, K, topk]}, labels [B, T, K], mask [B, T, K],
    target_labels [B, T, K] or None), all on the CPU.
    """
    device, dtype = model_info(model)
    lengths = [int(s.input_ids.numel()) for s in batch]
    ids, lmask, valid, aux = _padded(batch, lengths, device, dtype)
    next_ids = _shifted(ids, 1, 0)  # [B, T] token t+1 (0 past the end: never scored)
    labels, mask = _labels_and_mask(ids, lmask, valid, steps, mask_at)
    tlabels = None if head is None else _target_labels(head, batch, lengths, valid, steps, device, dtype, mask_at)
    preds = _draft_ids(model, aux, next_ids, valid, steps, readings, topk)
    return lengths, preds, labels, mask, tlabels


def check_mask_at(mask_at: str) -> str:
    """`mask_at` itself when it is one of `MASK_AT`, else a ValueError."""
    if mask_at not in MASK_AT:
        raise ValueError(f"mask_at={mask_at!r}; expected one of {MASK_AT}")
    return mask_at


def as_model(checkpoint, loading: Loading = Loading()):
    """A loaded draft: `checkpoint` itself when it is one, else `load_draft(checkpoint, ...)` as
    `loading` says (a path, or a `Checkpoint` already opened at the door)."""
    if isinstance(checkpoint, torch.nn.Module):
        return checkpoint
    from helpers.model.draft import load_draft

    return load_draft(checkpoint, device=loading.device, dtype=parse_dtype(loading.dtype),
                      embed_from=loading.embed_from, draft_config=loading.draft_config)


def _as_samples(samples, max_samples, aux_width, shard=(0, 1), workers=0, pin_memory=False, ahead=16):
    if isinstance(samples, (str, os.PathLike)):
        from helpers.io.samples import stream_samples

        return stream_samples(samples, max_samples, aux_width, shard=shard, workers=workers, pin_memory=pin_memory,
                              ahead=ahead)
    it = iter(samples)
    if max_samples is not None:
        import itertools

        it = itertools.islice(it, max_samples)
    return it


def _count_files(samples, max_samples) -> int | None:
    if not isinstance(samples, (str, os.PathLike)):
        return max_samples if max_samples is not None else (len(samples) if hasattr(samples, "__len__") else None)
    try:
        from helpers.io.samples import sample_files

        n = len(sample_files(samples))
    except (ImportError, BadInputError, OSError):
        return max_samples
    return n if max_samples is None else min(n, max_samples)


@contextmanager
def cpu_threads(model):
    """Run a small draft on the CPU single-threaded, restoring the thread count after.

    For drafts this small (H < 1024) every matmul is tiny and OpenMP's spin-waiting hand-off
    dominates; on a busy 2-core machine 2 threads measured 20x slower than 1 (0.87 s vs 0.04 s
    per 3-step batch of the bundled draft). Large drafts keep torch's thread count.
    """
    device, _ = model_info(model)
    small = int(getattr(model.config, "hidden_size", None) or 0) < 1024  # a target (a VL config: no hidden_size) too
    before = torch.get_num_threads()
    if device.type == "cpu" and small and before > 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def iter_batches(model, samples, scoring: Scoring, *, head=None, desc: str = "drafting", shard=(0, 1)):
    """(batch of samples, `predict_batch`'s output) per batch, each sample checked against the draft.

    `scoring`: steps, readings, accuracy_topk, mask_at, batch size, sample limit, progress, and `workers`
    threads reading files ahead (pinned memory when the draft is on a GPU; None: none).
    `shard=(rank, world)` keeps every world-th sample file."""
    steps, readings, topk, batch_size = scoring.steps, list(scoring.readings), scoring.accuracy_topk, scoring.batch_size
    max_samples, workers = scoring.max_samples, scoring.workers or 0
    aux_w_cfg, vocab, _ = draft_sizes(model)
    aux_width = 3 * aux_w_cfg
    total = _count_files(samples, max_samples)
    total = None if total is None else len(range(shard[0], total, shard[1]))
    pin = model_info(model)[0].type == "cuda"
    from tqdm.auto import tqdm

    quiet = not scoring.progress or os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true", "yes")
    bar = tqdm(total=total, desc=desc, unit="sample", disable=quiet, leave=False)

    def checked():
        for s in _as_samples(samples, max_samples, aux_width, shard, workers, pin, ahead=2 * batch_size):
            _check_sample(s, aux_width, vocab, None if head is None else head.hidden_size)
            yield s

    try:
        for batch in _batches(checked(), batch_size):
            with cpu_threads(model):
                out = predict_batch(model, batch, steps, readings, topk, head, scoring.mask_at)
            yield batch, out
            bar.update(len(batch))
    finally:
        bar.close()


def draft_predictions(
    model,
    samples,
    *,
    steps: int = 1,
    reading: str = "offset",
    topk: int = 1,
    batch_size: int = 8,
    max_samples: int | None = None,
    target_head: TargetHead | None = None,
    progress: bool = False,
    mask_at: str = "label",
) -> Iterator[Predictions]:
    """Per sample: the target ids the draft drafts for `steps` steps from every position.

    `model` is a loaded `Eagle3Draft` (`helpers.model.draft.load_draft`); `samples` a samples folder
    or an iterable of `helpers.io.samples.Sample`. Step j >= 1 feeds back the step j-1 draft mapped
    to a target id under `reading`. Yields `Predictions` (on the CPU) with `pred [T, steps, topk]`,
    `labels [T, steps]` (token t+2+j, -1 past the end) and `mask [T, steps]` (where the label
    exists and its loss_mask is 1; `mask_at="position"`: where loss_mask[t+j] is 1;
    `mask_at="specforge"`: SpecForge's exact count, as "position" but also where the label lies
    past the end, scored as id 0); a chain from position t is accepted up to the first j where
    `pred[t, j, 0] != labels[t, j]`.
    """
    check_reading(reading)
    if reading != "none" and draft_d2t(model) is None:
        raise BadInputError(None, f"the draft has no d2t: only the 'none' reading can be used, not {reading!r}")
    scoring = Scoring(readings=(reading,), steps=steps, accuracy_topk=topk, mask_at=check_mask_at(mask_at),
                      batch_size=batch_size, max_samples=max_samples, progress=progress, workers=0)
    for batch, (lengths, preds, labels, mask, tl) in iter_batches(model, samples, scoring, head=target_head,
                                                                   desc=f"drafting ({reading})"):
        for b, s in enumerate(batch):
            n = lengths[b]
            yield Predictions(
                path=str(getattr(s, "path", "")),
                pred=preds[reading][b, :n],
                labels=labels[b, :n],
                mask=mask[b, :n],
                target_labels=None if tl is None else tl[b, :n],
            )
