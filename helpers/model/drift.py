"""Target drift: the target a draft is served with is not the one its training states came from.

A target quantized, rotated (QuaRot / SpinQuant folded into the weights) or moved to another
revision after the draft was trained keeps every file shape right, yet the aux hidden states the
draft reads change, and acceptance drops (vllm-ascend#5974: a rotated quantized target; fixed by
rotating the draft's fc, vllm-ascend#6914). The check: the served target's hidden states at the
draft's aux layers, on the training samples' own token ids (teacher-forced, one forward per
sample), against the states stored in the samples, layer by layer:

- `cosine`: mean over positions of cos(stored, served);
- `relative_error`: mean over positions of |served - stored| / |stored|;
- for the draft: its step-0 logits on the stored and on the served states, with the same token
  ids (the draft's own embedding), compared by their Spearman rank correlation (mean over
  positions) and by how often the argmax agrees (`top1_agreement`).

The served states come from a target folder (`recapture`: the layers the samples' capture.json
names as `captured_layers`, else those the engine captures for the draft) or from a folder of
states the user captured from the served build (paired with the samples by file name). A
drift is named when any aux layer's relative error exceeds `RELATIVE_ERROR_LIMIT` (the stored
states' own bf16 rounding is ~0.3 %); it is an error when the draft's argmax agrees on fewer than
`AGREEMENT_LIMIT` of positions (the draft no longer reads the states it was trained on).

`DriftCheck.write_states(out)` writes the served states as a samples folder (SpecForge's layout,
the same splits and names), which `helpers.measure.drift` scores the draft on to predict the
acceptance the drift costs.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from helpers.core.errors import BadInputError
from helpers.engines.registry import DEFAULT_ENGINE
from helpers.io.samples import Sample, read_manifests, sample_files, split_folders, write_sample
from helpers.model.draft import Eagle3Draft
from helpers.model.target import HiddenStateCapture, Target

RELATIVE_ERROR_LIMIT = 0.05  # above this mean relative error at an aux layer: the states drifted
AGREEMENT_LIMIT = 0.8  # the draft's step-0 argmax on stored vs served states agreeing less: an error


@dataclass
class LayerDrift:
    layer: int  # target decoder layer whose input the aux state is
    cosine: float
    relative_error: float
    norm_ratio: float = 1.0  # mean |served| / |stored|: 1 for a rotation

    def to_dict(self) -> dict:
        return {"layer": self.layer, "cosine": self.cosine, "relative_error": self.relative_error,
                "norm_ratio": self.norm_ratio}


@dataclass
class DriftCheck:
    """The stored samples' aux states against the served target's, per aux layer and for the draft."""

    samples: str
    served: str  # the served target's folder, or the folder of states captured from it
    layers: list[int]
    layers_source: str
    per_layer: list[LayerDrift]
    draft_rank_correlation: float | None
    top1_agreement: float | None
    final_cosine: float | None  # the last hidden state (after the final norm), when compared
    samples_compared: int
    positions: int
    served_states: dict = field(default_factory=dict, repr=False)  # split -> [(file name, Sample)]

    @property
    def max_relative_error(self) -> float:
        return max(x.relative_error for x in self.per_layer)

    @property
    def drifted(self) -> bool:
        return self.max_relative_error > RELATIVE_ERROR_LIMIT

    @property
    def severe(self) -> bool:
        return self.drifted and self.top1_agreement is not None and self.top1_agreement < AGREEMENT_LIMIT

    def kind(self) -> str:
        """'none', 'rotation-like' (every norm kept, directions turned: cosine under 0.5 with norms within
        2 %), or 'perturbation' (quantization, another revision)."""
        if not self.drifted:
            return "none"
        if min(x.cosine for x in self.per_layer) < 0.5 and all(abs(x.norm_ratio - 1) < 0.02 for x in self.per_layer):
            return "rotation-like"
        return "perturbation"

    def summary(self) -> str:
        worst = max(self.per_layer, key=lambda x: x.relative_error)
        return (f"aux states at layers {self.layers}: relative error up to {worst.relative_error:.3f} "
                f"(layer {worst.layer}, cosine {worst.cosine:.3f}); the draft's step-0 argmax agrees on "
                f"{_pct(self.top1_agreement)} of positions, logit rank correlation {_num(self.draft_rank_correlation)}")

    def to_dict(self) -> dict:
        return {"samples": self.samples, "served": self.served, "layers": self.layers,
                "layers_source": self.layers_source, "per_layer": [x.to_dict() for x in self.per_layer],
                "max_relative_error": self.max_relative_error, "draft_rank_correlation": self.draft_rank_correlation,
                "top1_agreement": self.top1_agreement, "final_cosine": self.final_cosine,
                "samples_compared": self.samples_compared, "positions": self.positions,
                "drifted": self.drifted, "severe": self.severe, "kind": self.kind(),
                "limits": {"relative_error": RELATIVE_ERROR_LIMIT, "top1_agreement": AGREEMENT_LIMIT}}

    def write_states(self, out) -> Path:
        """The served states as a samples folder (same splits and file names as the samples)."""
        out = Path(out)
        for split, items in self.served_states.items():
            base = out if split == "all" else out / split
            for rel, s in items:  # written uncompressed: a `.ckpt.gz` name loses its `.gz`
                write_sample(base / rel.removesuffix(".gz"), s.input_ids, s.loss_mask, s.hidden_state, s.aux_hidden_state)
        return out


def _pct(x) -> str:
    return "?" if x is None else f"{100 * x:.1f} %"


def _num(x) -> str:
    return "?" if x is None else f"{x:.3f}"


def _parts(samples) -> dict[str, Path]:
    return split_folders(samples) or {"all": Path(samples)}


def captured_layers_of(samples, target: Target | None, draft, engine: str) -> tuple[list[int], str]:
    """The target layers whose input the samples' aux states are: capture.json's `captured_layers`,
    else the layers `engine` captures for `draft` on `target`."""
    found = {m.captured_layers for m in read_manifests(samples) if m.captured_layers}
    if len(found) == 1:
        return list(found.pop()), "the samples' capture.json"
    if len(found) > 1:
        raise BadInputError(samples, f"its splits were captured at different layers ({sorted(found)})")
    if target is None:
        raise BadInputError(samples, "has no capture.json naming its captured layers; pass --target to read them "
                            "from the engine's convention")
    return target.draft_layers(draft, engine), f"{engine}'s capture for the draft"


def _files(folder: Path, max_samples: int | None) -> list[Path]:
    files = sample_files(folder)
    return files if max_samples is None else files[:max_samples]


def _load(path: Path) -> Sample:
    from helpers.io.samples import load_sample

    return load_sample(path)


@torch.inference_mode()
def recapture(target: Target, sample: Sample, layers: list[int]) -> Sample:
    """The target's states for the sample's own token ids: aux (inputs of `layers`), final norm output."""
    with HiddenStateCapture(target, layers) as cap:
        ids = sample.input_ids.reshape(1, -1).to(target.input_device)
        target.decoder(input_ids=ids, use_cache=False)
        aux, last = cap.aux()[0].float().cpu(), cap.last()[0].float().cpu()
    return Sample(sample.path, sample.input_ids, sample.loss_mask, last, aux)


@torch.inference_mode()
def regenerate(target: Target, sample: Sample, layers: list[int]) -> Sample:
    """The sample as the served target would have made it: its prompt (the tokens before the first
    loss_mask 1) continued by the target's own greedy output (as many tokens as the sample's answer,
    stopping after an end-of-sequence token), with the target's states on that sequence. This is
    what the target verifies drafts against in serving; the stored samples, captured with
    `--regenerate`, are the original target's own continuation."""
    ids = sample.input_ids.reshape(-1)
    mask = sample.loss_mask.reshape(-1)
    on = mask.nonzero().flatten()
    if on.numel() == 0:
        return recapture(target, sample, layers)
    start, n = int(on[0]), int(mask.numel() - int(on[0]))
    head = ids[:start].reshape(1, -1).to(target.input_device)
    tok = target.tokenizer
    eos = getattr(tok, "eos_token_id", None) if tok is not None else getattr(target.config, "eos_token_id", None)
    eos = set(eos if isinstance(eos, list) else [eos]) - {None}
    out = target.model.generate(input_ids=head, attention_mask=torch.ones_like(head), do_sample=False,
                                max_new_tokens=n, min_new_tokens=n if not eos else None, pad_token_id=0,
                                temperature=None, top_p=None, top_k=None)[0, start:].tolist()
    gen = []
    for t in out:
        gen.append(t)
        if t in eos:
            break
    seq = torch.tensor(ids[:start].tolist() + gen, dtype=torch.int64)
    new_mask = torch.tensor([0] * start + [1] * len(gen), dtype=torch.int64)
    return recapture(target, Sample(sample.path, seq, new_mask, sample.hidden_state, sample.aux_hidden_state), layers)


def _served_pairs(samples, served, target: Target | None, layers, max_samples) -> Iterator[tuple[str, str, Sample, Sample]]:
    """(split, path relative to the split, stored sample, served sample) for each sample."""
    served_parts = None if target is not None else _parts(served)
    for split, folder in _parts(samples).items():
        for f in _files(folder, max_samples):
            stored = _load(f)
            rel = os.fspath(f.relative_to(folder))
            if target is not None:
                new = recapture(target, stored, layers)
            else:
                base = served_parts.get(split, Path(served))
                sf = next((base / r for r in (rel, rel.removesuffix(".gz"), rel + ".gz") if (base / r).is_file()),
                          base / rel)
                if not sf.is_file():
                    raise BadInputError(sf, f"missing: the served states must hold a file for every sample ({rel})")
                new = _load(sf)
                if not torch.equal(new.input_ids.reshape(-1), stored.input_ids.reshape(-1)):
                    raise BadInputError(sf, f"holds other token ids than {f}: states must be captured on the samples' ids")
            if new.aux_hidden_state.shape[-1] != stored.aux_hidden_state.shape[-1]:
                raise BadInputError(served, f"aux states {new.aux_hidden_state.shape[-1]} wide, the samples' "
                                    f"{stored.aux_hidden_state.shape[-1]}: not the same layers or hidden size")
            yield split, rel, stored, new


def _spearman_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Spearman rank correlation of each row of a with the same row of b ([N, V] -> [N])."""
    ra = a.argsort(-1).argsort(-1).float()
    rb = b.argsort(-1).argsort(-1).float()
    ra, rb = ra - ra.mean(-1, keepdim=True), rb - rb.mean(-1, keepdim=True)
    return (ra * rb).sum(-1) / (ra.norm(dim=-1) * rb.norm(dim=-1)).clamp_min(1e-12)


@torch.inference_mode()
def check_drift(samples, *, target: Target | None = None, states=None, draft: Eagle3Draft | None = None,
                served_draft: Eagle3Draft | None = None, engine: str = DEFAULT_ENGINE, max_samples: int | None = None,
                keep_states: bool = False) -> DriftCheck:
    """Compare the samples' stored states with the served target's (`target`, recaptured on the
    samples' token ids) or with `states` (a samples folder captured from the served build); with a
    loaded `draft`, also its step-0 logits on the stored states against `served_draft`'s (the draft
    as served, e.g. with the served target's embedding; default `draft`) on the served ones.
    `keep_states`: keep the served states (for `DriftCheck.write_states`). `max_samples` per split."""
    if (target is None) == (states is None):
        raise ValueError("give exactly one of target= and states=")
    layers, source = captured_layers_of(samples, target, draft, engine)
    if target is not None and max(layers) >= target.num_layers:
        raise BadInputError(samples, f"its states were captured at layers {layers}, past the target's "
                            f"{target.num_layers} layers: another target")
    n = len(layers)
    cos = torch.zeros(n, dtype=torch.float64)
    rel = torch.zeros(n, dtype=torch.float64)
    ratio = torch.zeros(n, dtype=torch.float64)
    fin = 0.0
    rho = agree = 0.0
    positions = count = 0
    kept: dict = {}
    for split, rel_path, stored, new in _served_pairs(samples, states, target, layers, max_samples):
        a = stored.aux_hidden_state.reshape(-1, stored.aux_hidden_state.shape[-1]).float()
        b = new.aux_hidden_state.reshape(-1, new.aux_hidden_state.shape[-1]).float()
        T = a.shape[0]
        for i, (x, y) in enumerate(zip(a.chunk(n, -1), b.chunk(n, -1))):
            cos[i] += torch.nn.functional.cosine_similarity(x, y, dim=-1).double().sum()
            rel[i] += ((y - x).norm(dim=-1) / x.norm(dim=-1).clamp_min(1e-12)).double().sum()
            ratio[i] += (y.norm(dim=-1) / x.norm(dim=-1).clamp_min(1e-12)).double().sum()
        hs, hn = stored.hidden_state.reshape(T, -1).float(), new.hidden_state.reshape(T, -1).float()
        fin += float(torch.nn.functional.cosine_similarity(hs, hn, dim=-1).double().sum())
        if draft is not None and T > 1:
            dev, dt = draft.fc.weight.device, draft.fc.weight.dtype
            nxt = torch.cat([stored.input_ids.reshape(-1)[1:], stored.input_ids.reshape(-1)[-1:]]).reshape(1, -1).to(dev)
            la = draft(a.reshape(1, T, -1).to(dev, dt), nxt)[0].float().cpu()
            lb = (served_draft or draft)(b.reshape(1, T, -1).to(dev, dt), nxt)[0].float().cpu()
            rho += float(_spearman_rows(la, lb).double().sum())
            agree += float((la.argmax(-1) == lb.argmax(-1)).sum())
        positions += T
        count += 1
        if keep_states:
            kept.setdefault(split, []).append((rel_path, Sample(Path(rel_path), stored.input_ids, stored.loss_mask,
                                                                new.hidden_state, new.aux_hidden_state)))
    if count == 0:
        raise BadInputError(samples, "holds no samples to compare")
    per_layer = [LayerDrift(layer, float(c / positions), float(r / positions), float(q / positions))
                 for layer, c, r, q in zip(layers, cos, rel, ratio)]
    return DriftCheck(
        samples=os.fspath(samples), served=os.fspath(target.path if target is not None else states),
        layers=list(layers), layers_source=source, per_layer=per_layer,
        draft_rank_correlation=None if draft is None else rho / positions,
        top1_agreement=None if draft is None else agree / positions,
        final_cosine=fin / positions, samples_compared=count, positions=positions, served_states=kept)
