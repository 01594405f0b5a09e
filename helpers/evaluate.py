"""Accuracy of an EAGLE-3 draft under each reading of `d2t`: the investigation's standalone test.

Run the draft over hidden-state samples (SpecForge offline layout) and compare what it drafts
with the real tokens, once with `d2t` read as offsets (what every engine does), once read as
absolute ids (the bug in the hand-written test), once with no mapping at all (draft id taken as
the target id). A wiring bug shows as near-zero accuracy on the very data the draft was trained
on under the engines' reading; a generalisation problem shows as a gap between train and
validation.

Alignment (design.md section 2). At position t the draft sees the aux hidden states of t and the
embedding of token t+1 and drafts token t+2; drafting step j (fed with its own output and the
embedding of its own previous draft, mapped to a target id under the reading being tested)
drafts token t+2+j. By default a label counts where `loss_mask` is 1 *at the label's own
position* t+2+j: the label is the token the mask speaks about (an assistant token). SpecForge's
trainer instead masks the output at t with loss_mask[t+j] (it shifts input_ids and the target
logits left before step 0, but loss_mask only between steps); `mask_at="position"` reproduces
that. The two differ only at the edges of the masked spans. With a target head (final norm + lm_head of the target) the draft is also scored against the target's
own argmax at position t+1+j, which is what SpecForge reports as accuracy.

`draft_predictions` is the reusable core: per sample, the drafted target ids for k steps with
labels and mask (the accept-length replay in `helpers.simulate` builds on it). `evaluate` counts
them into an `EvalResult` (`.to_dict()` is the CLI's JSON; fractions in 0..1).
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .devices import parse_dtype
from .errors import BadInputError
from .mapping import READINGS, to_target_ids

ENGINE_READING = "offset"  # SGLang, vLLM and TensorRT-LLM all read d2t as offsets
MASK_AT = ("label", "position")  # whose loss_mask decides if step j at position t counts
SPLIT_NAMES = {"train": ("train",), "val": ("val", "validation", "valid", "eval", "test")}
NEAR_ZERO = 0.05  # top-1 at or below this on trained-on data: "scores nothing"
GOOD = 0.30  # a reading at or above this is "the working one" when the engines' one scores
# at most max(NEAR_ZERO, a quarter of it)
GAP = 0.10  # train top-1 this far above validation: a generalisation gap
NO_D2T_WARNING = (
    "{ckpt} has no d2t: scored under the 'none' reading only (draft id taken as target id); "
    "this says nothing about the mapping the engines will use"
)

# -- the target's own head (final norm + lm_head), for SpecForge-style accuracy ----------------------
@dataclass
class TargetHead:
    """The target model's final RMSNorm and lm_head: `argmax(lm_head(norm(hidden)))`."""

    lm_head: torch.Tensor  # [V, H]
    norm_weight: torch.Tensor | None  # [H]; None: hidden states are used as they are
    eps: float = 1e-6
    path: str | None = None

    @property
    def hidden_size(self) -> int:
        return int(self.lm_head.shape[1])

    @property
    def vocab_size(self) -> int:
        return int(self.lm_head.shape[0])

    @torch.inference_mode()
    def argmax(self, hidden: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
        """[..., H] hidden states -> [...] target argmax ids, `chunk` positions at a time."""
        flat = hidden.reshape(-1, hidden.shape[-1])  # [N, H]
        out = torch.empty(flat.shape[0], dtype=torch.int64, device=flat.device)
        w = self.lm_head.to(flat.device)
        for i in range(0, flat.shape[0], chunk):
            h = flat[i : i + chunk].to(w.dtype)  # [n, H]
            if self.norm_weight is not None:
                hf = h.float()
                hf = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + self.eps)
                h = (hf * self.norm_weight.to(hf.device).float()).to(w.dtype)
            out[i : i + chunk] = (h @ w.T).argmax(-1)  # [n]
        return out.reshape(hidden.shape[:-1])


def load_target_head(path, device=None, dtype=None) -> TargetHead:
    """Read only the final norm and lm_head of a target model folder or weights file."""
    from .checkpoint import flat_config, open_checkpoint

    ck = open_checkpoint(path)
    keys = ck.tensors.keys()
    head = next((k for k in ("lm_head.weight", "model.lm_head.weight") if k in keys), None)
    if head is None:
        head = ck.tensors.find("lm_head.weight")
    if head is None:
        raise BadInputError(ck.path, "has no lm_head.weight: cannot compute the target's own argmax")
    norm = next((k for k in ("model.norm.weight", "norm.weight", "final_norm.weight") if k in keys), None)
    cfg = flat_config(ck.config) if ck.config else {}
    eps = float(cfg.get("rms_norm_eps", 1e-6))
    device = device or "cpu"
    lm = ck.tensors.get(head, device=device, dtype=dtype)
    if lm.dim() != 2:
        raise BadInputError(ck.tensors.file_of(head), f"{head} has shape {list(lm.shape)}, expected [vocab, hidden]")
    nw = None if norm is None else ck.tensors.get(norm, device=device, dtype=torch.float32)
    if nw is not None and nw.shape != (lm.shape[1],):
        raise BadInputError(ck.tensors.file_of(norm), f"{norm} has shape {list(nw.shape)}, expected [{lm.shape[1]}]")
    return TargetHead(lm_head=lm, norm_weight=nw, eps=eps, path=str(ck.path))


# -- per-position predictions -----------------------------------------------------------------------
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


def _model_info(model) -> tuple[torch.device, torch.dtype]:
    p = next(model.parameters())
    return p.device, p.dtype


def _config_get(cfg, *names, default=None):
    for n in names:
        v = cfg.get(n) if isinstance(cfg, dict) else getattr(cfg, n, None)
        if v is not None:
            return v
    return default


def _sizes(model) -> tuple[int, int, int]:
    """(target hidden size, target vocab size, draft vocab size) of a loaded draft."""
    cfg = model.config
    hidden = _config_get(cfg, "hidden_size")
    target_hidden = _config_get(cfg, "target_hidden_size", default=hidden)
    vocab = _config_get(cfg, "vocab_size", "target_vocab_size")
    draft_vocab = _config_get(cfg, "draft_vocab_size", default=vocab)
    return int(target_hidden), int(vocab), int(draft_vocab)


def _d2t(model) -> torch.Tensor | None:
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


@torch.inference_mode()
def _predict_batch(model, batch: list, steps: int, readings, topk: int, head: TargetHead | None,
                   mask_at: str = "label"):
    """Run the draft on one padded batch for every reading.

    Returns (lengths [B], {reading: pred [B, T, K, topk]}, labels [B, T, K], mask [B, T, K],
    target_labels [B, T, K] or None), all on the CPU.
    """
    device, dtype = _model_info(model)
    lengths = [int(s.input_ids.numel()) for s in batch]
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
    next_ids = _shifted(ids, 1, 0)  # [B, T] token t+1 (0 past the end: never scored)
    padded_ids = ids.masked_fill(~valid, -1)
    labels = torch.stack([_shifted(padded_ids, 2 + j, -1) for j in range(steps)], -1)  # [B, T, K]
    at = 2 if mask_at == "label" else 0  # loss_mask of the label t+2+j, or of the position t+j
    mask = torch.stack([_shifted(lmask & valid, at + j, False) for j in range(steps)], -1)  # [B, T, K]
    mask &= labels >= 0
    tlabels = None
    if head is not None:
        hid = torch.zeros(B, T, head.hidden_size, dtype=dtype, device=device)  # [B, T, H]
        for b, s in enumerate(batch):
            hid[b, : lengths[b]] = s.hidden_state.to(device=device, dtype=dtype)
        targ = head.argmax(hid).cpu().masked_fill(~valid, -1)  # [B, T] target's choice after t
        tlabels = torch.stack([_shifted(targ, 1 + j, -1) for j in range(steps)], -1)  # [B, T, K]
    d2t = _d2t(model)
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
    return lengths, preds, labels, mask, tlabels


def _check_mask_at(mask_at: str) -> str:
    if mask_at not in MASK_AT:
        raise ValueError(f"mask_at={mask_at!r}; expected one of {MASK_AT}")
    return mask_at


def _as_model(checkpoint, device=None, dtype=None, embed_from=None):
    if isinstance(checkpoint, torch.nn.Module):
        return checkpoint
    from .draft import load_draft

    return load_draft(checkpoint, device=device, dtype=parse_dtype(dtype), embed_from=embed_from)


def _as_samples(samples, max_samples, aux_width):
    if isinstance(samples, (str, os.PathLike)):
        from .samples import iter_samples

        return iter_samples(samples, max_samples=max_samples, expect_aux_width=aux_width)
    it = iter(samples)
    if max_samples is not None:
        import itertools

        it = itertools.islice(it, max_samples)
    return it


def _count_files(samples, max_samples) -> int | None:
    if not isinstance(samples, (str, os.PathLike)):
        return max_samples if max_samples is not None else (len(samples) if hasattr(samples, "__len__") else None)
    try:
        from .samples import sample_files

        n = len(sample_files(samples))
    except (ImportError, BadInputError, OSError):
        return max_samples
    return n if max_samples is None else min(n, max_samples)


@contextmanager
def _cpu_threads(model):
    """Run a small draft on the CPU single-threaded, restoring the thread count after.

    For drafts this small (H < 1024) every matmul is tiny and OpenMP's spin-waiting hand-off
    dominates; on a busy 2-core machine 2 threads measured 20x slower than 1 (0.87 s vs 0.04 s
    per 3-step batch of the bundled draft). Large drafts keep torch's thread count.
    """
    device, _ = _model_info(model)
    small = int(_config_get(model.config, "hidden_size", default=0)) < 1024
    before = torch.get_num_threads()
    if device.type == "cpu" and small and before > 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _iter_batches(model, samples, *, steps, readings, topk, batch_size, max_samples, head, progress, desc,
                  mask_at="label"):
    aux_w_cfg, vocab, _ = _sizes(model)
    aux_width = 3 * aux_w_cfg
    total = _count_files(samples, max_samples)
    from tqdm.auto import tqdm

    quiet = not progress or os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true", "yes")
    bar = tqdm(total=total, desc=desc, unit="sample", disable=quiet, leave=False)

    def checked():
        for s in _as_samples(samples, max_samples, aux_width):
            _check_sample(s, aux_width, vocab, None if head is None else head.hidden_size)
            yield s

    try:
        for batch in _batches(checked(), batch_size):
            with _cpu_threads(model):
                out = _predict_batch(model, batch, steps, readings, topk, head, mask_at)
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

    `model` is a loaded `Eagle3Draft` (`helpers.draft.load_draft`); `samples` a samples folder
    or an iterable of `helpers.samples.Sample`. Step j >= 1 feeds back the step j-1 draft mapped
    to a target id under `reading`. Yields `Predictions` (on the CPU) with `pred [T, steps, topk]`,
    `labels [T, steps]` (token t+2+j, -1 past the end) and `mask [T, steps]` (where the label
    exists and its loss_mask is 1; `mask_at="position"`: where loss_mask[t+j] is 1, SpecForge's
    literal choice); a chain from position t is accepted up to the first j where
    `pred[t, j, 0] != labels[t, j]`.
    """
    if reading not in READINGS:
        raise ValueError(f"unknown reading {reading!r}; expected one of {READINGS}")
    if reading != "none" and _d2t(model) is None:
        raise BadInputError(None, f"the draft has no d2t: only the 'none' reading can be used, not {reading!r}")
    for batch, (lengths, preds, labels, mask, tl) in _iter_batches(
        model, samples, steps=steps, readings=[reading], topk=topk, batch_size=batch_size,
        max_samples=max_samples, head=target_head, progress=progress, desc=f"drafting ({reading})",
        mask_at=_check_mask_at(mask_at),
    ):
        for b, s in enumerate(batch):
            n = lengths[b]
            yield Predictions(
                path=str(getattr(s, "path", "")),
                pred=preds[reading][b, :n],
                labels=labels[b, :n],
                mask=mask[b, :n],
                target_labels=None if tl is None else tl[b, :n],
            )


# -- counting ---------------------------------------------------------------------------------------
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


def _frac(a, b):
    return None if b == 0 else float(a) / float(b)


class _Counter:
    """Running counts for one split, per reading and per step."""

    def __init__(self, readings, steps, vocab_sets: dict, true_set: torch.Tensor, with_head: bool):
        self.readings, self.steps, self.with_head = list(readings), steps, with_head
        self.vocab_sets, self.true_set = vocab_sets, true_set
        z = lambda: torch.zeros(steps, dtype=torch.int64)  # noqa: E731
        self.n = z()
        self.true_cov = 0
        self.samples = 0
        self.c = {r: {k: z() for k in ("top1", "topk", "cov", "cov1", "covk", "t1", "tn")} for r in readings}

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
            c["top1"] += hit1.sum((0, 1))
            c["topk"] += hitk.sum((0, 1))
            c["cov"] += cov.sum((0, 1))
            c["cov1"] += (hit1 & cov).sum((0, 1))
            c["covk"] += (hitk & cov).sum((0, 1))
            if tlabels is not None:
                tm = mask & (tlabels >= 0)
                c["t1"] += ((p[..., 0] == tlabels) & tm).sum((0, 1))
                c["tn"] += tm.sum((0, 1))

    def merge(self, other: _Counter) -> _Counter:
        out = _Counter(self.readings, self.steps, self.vocab_sets, self.true_set, self.with_head)
        out.n, out.true_cov, out.samples = self.n + other.n, self.true_cov + other.true_cov, self.samples + other.samples
        for r in self.readings:
            for k in self.c[r]:
                out.c[r][k] = self.c[r][k] + other.c[r][k]
        return out

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
            )
        return SplitScores(samples=self.samples, tokens=n0, coverage=_frac(self.true_cov, n0), readings=out)


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

    def diagnosis(self) -> str:
        """'mapping', 'wiring', 'no_mapping', 'coverage', 'generalisation', 'weak', 'healthy', 'no_data'."""
        return self._diagnose()[0]

    def conclusion(self) -> str:
        """One or two sentences saying which kind of bug the numbers point to."""
        return self._diagnose()[1]

    def _diagnose(self) -> tuple[str, str]:
        name, ref = self.reference()
        scored = {r: s for r, s in ref.readings.items() if s.top1 is not None}
        if not scored:
            return "no_data", "No label was scored (no loss_mask positions): nothing to conclude."
        pct = lambda x: "n/a" if x is None else f"{100 * x:.1f} %"  # noqa: E731
        best = max(scored, key=lambda r: scored[r].top1)
        if not self.has_d2t:
            s = scored["none"]
            return "no_mapping", (
                f"No d2t in the checkpoint: with draft ids taken as target ids the draft scores "
                f"{pct(s.top1)} top-1 on {name}; that says nothing about the mapping the engines will use "
                "- find the d2t that belongs to these weights and score it under the offset reading."
            )
        eng = scored.get(ENGINE_READING)
        if (
            eng is not None and best != ENGINE_READING and scored[best].top1 >= GOOD
            and eng.top1 <= max(NEAR_ZERO, scored[best].top1 / 4)
        ):
            what = {
                "absolute": "this checkpoint's d2t holds absolute target ids where SGLang, vLLM and "
                "TensorRT-LLM expect offsets (convert it with helpers.mapping.absolute_to_offsets)",
                "none": "the draft ids already are target ids, so d2t should be all zeros (identity) "
                "and the stored one sends every draft to the wrong target",
            }[best]
            return "mapping", (
                f"Wiring/mapping bug: on {name} the draft scores {pct(eng.top1)} top-1 under the offset "
                f"reading the engines use but {pct(scored[best].top1)} under the {best} reading: {what}."
            )
        if scored[best].top1 <= NEAR_ZERO:
            return "wiring", (
                f"Wiring bug outside the mapping: on {name} the draft scores at most {pct(scored[best].top1)} "
                "top-1 under every reading - check that the weights were loaded (key layout midlayer.* vs "
                "layers.0.*), the aux hidden-state layers, embed_tokens, and the samples' alignment."
            )
        if eng is None:
            return "weak", f"Best reading {best}: {pct(scored[best].top1)} top-1 on {name} (the offset reading was not scored)."
        tr, va = self.splits.get("train"), self.splits.get("val")
        if tr is not None and va is not None:
            t1, v1 = tr.readings[ENGINE_READING].top1, va.readings[ENGINE_READING].top1
            tc, vc = tr.readings[ENGINE_READING].covered_top1, va.readings[ENGINE_READING].covered_top1
            if t1 is not None and v1 is not None and t1 - v1 > GAP and tc is not None and vc is not None \
                    and tc - vc <= GAP / 2:
                return "coverage", (
                    f"Not a wiring bug: offset top-1 is {pct(t1)} on train but {pct(v1)} on validation, and "
                    f"the gap is coverage - {pct(va.coverage)} of validation labels are in the draft vocab "
                    f"against {pct(tr.coverage)} of train labels, while among covered labels the draft "
                    f"scores {pct(vc)} vs {pct(tc)}. A draft vocab built from more varied text would close it."
                )
            if t1 is not None and v1 is not None and t1 - v1 > GAP:
                return "generalisation", (
                    f"Generalisation gap, not a wiring bug: offset top-1 is {pct(t1)} on train but {pct(v1)} "
                    "on validation - the draft fits its training data and the mapping is read correctly, "
                    "but it does not carry over to new text (more or more varied training data)."
                )
        cov = ref.coverage
        if eng.top1 < GOOD:
            return "weak", (
                f"No sign of a wiring bug (no reading beats offset), but the draft is weak: {pct(eng.top1)} "
                f"offset top-1 on {name} with a coverage ceiling of {pct(cov)} - look at training and "
                "the draft vocab, not at the mapping."
            )
        others = ", ".join(f"{r} {pct(x.top1)}" for r, x in scored.items() if r != ENGINE_READING)
        text = (
            f"Healthy: the offset reading the engines use is the one that works: {pct(eng.top1)} top-1 on {name}"
            + ("" if va is None else f", {pct(va.readings[ENGINE_READING].top1)} on validation")
            + (f" (other readings: {others})." if others else ".")
        )
        if va is None or tr is None:
            return "healthy", text + f" Coverage ceiling {pct(cov)}; no train/validation split to compare."
        vo, to = va.readings[ENGINE_READING], tr.readings[ENGINE_READING]
        diff = None if None in (vo.top1, to.top1) else to.top1 - vo.top1
        if diff is None or diff <= 0.02 or None in (vo.covered_top1, to.covered_top1, vo.coverage, to.coverage):
            return "healthy", text + " Train and validation agree: no generalisation gap."
        # top1 = coverage x covered_top1 (a hit is always a covered label), so the difference splits
        # exactly into (coverage difference) x covered_top1(train) + coverage(val) x (the rest)
        by_cov = (to.coverage - vo.coverage) * to.covered_top1
        what = "coverage, not generalisation" if by_cov >= diff / 2 else "mostly accuracy on covered labels"
        return "healthy", text + (
            f" The {100 * diff:.1f}-point train/validation difference is {what}: {pct(to.coverage)} vs "
            f"{pct(vo.coverage)} of labels are in the draft vocab ({100 * by_cov:.1f} points), and among "
            f"those the draft scores {pct(to.covered_top1)} vs {pct(vo.covered_top1)}."
        )

    # views
    def to_dict(self) -> dict:
        """The CLI's JSON: pooled scores at the top level, per split under `splits`."""
        d = {
            "checkpoint": self.checkpoint, "samples": self.samples, "device": self.device,
            "dtype": self.dtype, "steps": self.steps, "topk": self.topk,
            "engine_reading": ENGINE_READING, "has_d2t": self.has_d2t, "target_head": self.target_head,
            "mask_at": self.mask_at,
            "warnings": list(self.warnings),
        }
        d.update(self.overall.to_dict())
        d["splits"] = {k: v.to_dict() for k, v in self.splits.items()}
        d["diagnosis"], d["conclusion"] = self._diagnose()
        return d

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
                for j, v in enumerate(s.step_top1):
                    row[f"step {j + 1} top-1 %"] = _pct(v)
                if s.target_top1 is not None:
                    row["vs target argmax top-1 %"] = _pct(s.target_top1)
                rows.append(row)
        return pd.DataFrame(rows).set_index(["split", "reading"])


def _pct(x):
    return None if x is None else round(100.0 * x, 2)


def split_folders(samples) -> dict[str, Path]:
    """{'train': ..., 'val': ...} when `samples` holds both splits as subfolders, else {}."""
    if not isinstance(samples, (str, os.PathLike)):
        return {}
    root = Path(samples)
    found = {}
    for key, names in SPLIT_NAMES.items():
        for n in names:
            if (root / n).is_dir():
                found[key] = root / n
                break
    return found if len(found) == 2 else {}


def _vocab_sets(model, readings, vocab: int, draft_vocab: int):
    """Per reading: bool [V] of the target ids it can produce; and the true draft vocab."""
    d2t = _d2t(model)
    sets = {}
    for r in readings:
        t = torch.arange(draft_vocab) if r == "none" or d2t is None else to_target_ids(
            torch.arange(draft_vocab), d2t.cpu(), r
        )
        m = torch.zeros(vocab, dtype=torch.bool)
        m[t[(t >= 0) & (t < vocab)]] = True
        sets[r] = m
    mapping = getattr(model, "mapping", None)
    if mapping is not None and mapping.t2d is not None and mapping.t2d.numel() == vocab:
        true = mapping.t2d.cpu().bool()
    else:
        true = sets.get("offset") if d2t is not None and "offset" in sets else None
        if true is None:
            t = torch.arange(draft_vocab) if d2t is None else to_target_ids(torch.arange(draft_vocab), d2t.cpu(), "offset")
            true = torch.zeros(vocab, dtype=torch.bool)
            true[t[(t >= 0) & (t < vocab)]] = True
    return sets, true


def evaluate(
    checkpoint,
    samples,
    readings=READINGS,
    steps: int = 1,
    topk: int = 5,
    device=None,
    dtype=None,
    max_samples: int | None = None,
    embed_from=None,
    target_head=None,
    progress: bool = True,
    batch_size: int = 8,
    mask_at: str = "label",
) -> EvalResult:
    """Score a draft (path or loaded `Eagle3Draft`) over a samples folder under each reading.

    `samples` may hold `train/` and `val/` subfolders: each is scored (up to `max_samples`
    samples each) and reported side by side, and pooled at the top level. `target_head` (a target
    model folder with final norm + lm_head, or a `TargetHead`) adds scores against the target's
    own argmax. A draft without d2t is scored under 'none' only, with a warning. `mask_at`:
    'label' (default) scores step j at t where loss_mask[t+2+j] is 1; 'position' where
    loss_mask[t+j] is 1, as SpecForge's trainer masks (it shifts loss_mask once per step only).
    """
    _check_mask_at(mask_at)
    if steps < 1 or topk < 1:
        raise ValueError("steps and topk must be at least 1")
    readings = list(dict.fromkeys(readings))
    for r in readings:
        if r not in READINGS:
            raise ValueError(f"unknown reading {r!r}; expected one of {READINGS}")
    if isinstance(samples, (str, os.PathLike)) and not Path(samples).exists():
        raise BadInputError(samples, "no such samples folder")
    model = _as_model(checkpoint, device, dtype, embed_from)
    dev, dt = _model_info(model)
    head = target_head or None  # "" (an empty notebook parameter) means none
    if head is not None and not isinstance(head, TargetHead):
        head = load_target_head(head, device=dev, dtype=dt)
    _, vocab, draft_vocab = _sizes(model)
    if head is not None and head.vocab_size != vocab:
        raise BadInputError(head.path, f"lm_head has {head.vocab_size} rows but the draft's target vocab is {vocab}")
    notes = []
    has_d2t = _d2t(model) is not None
    if not has_d2t:
        name = str(getattr(model, "source", None) or checkpoint)
        notes.append(NO_D2T_WARNING.format(ckpt=name))
        warnings.warn(notes[-1], stacklevel=2)
        readings = ["none"]
    sets, true = _vocab_sets(model, readings, vocab, draft_vocab)
    parts = split_folders(samples) or {"all": samples}
    counters = {}
    for split, folder in parts.items():
        cnt = _Counter(readings, steps, sets, true, head is not None)
        for _, out in _iter_batches(
            model, folder, steps=steps, readings=readings, topk=topk, batch_size=batch_size,
            max_samples=max_samples, head=head, progress=progress, desc=f"scoring {split}", mask_at=mask_at,
        ):
            cnt.add(*out)
        if cnt.samples == 0:
            raise BadInputError(folder if isinstance(folder, (str, os.PathLike)) else None, "holds no samples to score")
        counters[split] = cnt
    overall = counters.pop("all") if "all" in counters else _merge_all(list(counters.values()))
    return EvalResult(
        checkpoint=str(checkpoint) if not isinstance(checkpoint, torch.nn.Module)
        else str(getattr(checkpoint, "source", None) or "(loaded draft)"),
        samples=str(samples) if isinstance(samples, (str, os.PathLike)) else "(samples)",
        readings=readings, steps=steps, topk=topk, device=str(dev), dtype=str(dt).removeprefix("torch."),
        overall=overall.scores(), splits={k: c.scores() for k, c in counters.items()},
        warnings=notes, has_d2t=has_d2t, target_head=None if head is None else head.path, mask_at=mask_at,
    )


def _merge_all(counters):
    out = counters[0]
    for c in counters[1:]:
        out = out.merge(c)
    return out


def missing_samples_note(samples) -> str | None:
    """Why a notebook cannot score anything with `samples` (None/empty/absent), or None when it can."""
    if samples is None or str(samples).strip() == "":
        return "No samples folder given (samples is empty): the accuracy cells are skipped."
    if not Path(samples).exists():
        return f"Samples folder {samples} does not exist: the accuracy cells are skipped."
    return None
