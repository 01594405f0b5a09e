"""What a `.pt` file holds, decided by its content and never by its name.

Trainers leave many `.pt` files beside a draft: SpecForge's `training_state.pt` (weights under
`draft_state_dict`) and per-rank `training_state_rank<r>.pt`, speculators'
`optimizer_state_dict.pt`, vocab-mapping caches. `pt_kind` tells them apart, `scan_pts` reads a
folder's, and `follow_latest` finds SpecForge's `<run_id>-latest` step. Every file is loaded
with `weights_only=True` (`helpers.io.tensor_files.torch_load`).
"""
from __future__ import annotations

from pathlib import Path

import torch

from helpers.core.errors import BadInputError
from helpers.io.tensor_files import torch_load, unwrap_state_dict

MAPPING_NAMES = ("cache.pt", "vocab_mapping.pt")  # tie-breakers only: the content decides


def _is_int_vector(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dim() == 1 and not t.dtype.is_floating_point \
        and not t.dtype.is_complex and t.dtype != torch.bool


def pt_kind(obj) -> tuple[str, str]:
    """(kind, what it holds) of a loaded `.pt`: 'mapping', 'weights', 'optimizer', 'rank' or 'other'.

    Decided by content, never by file name:
    - 'mapping': a dict whose tensors are `d2t` (a 1-D integer tensor) and optionally `t2d` (a 1-D
      bool or integer tensor), nothing else (SpecForge's vocab-mapping cache, EAGLE's `cache.pt`);
    - 'weights': a dict of tensors with at least one `*.weight`, at the top level or under
      `state_dict` / `draft_state_dict` (SpecForge 0.2.0's `training_state.pt`); may hold d2t/t2d;
    - 'optimizer': `optimizer.state_dict()` (`state` + `param_groups`; speculators'
      `optimizer_state_dict.pt`), or a list of them;
    - 'rank': SpecForge's per-rank `training_state_rank<r>.pt` (`optimizer` + `rng`, no weights);
    - 'other': anything else (the second item says what).
    """
    if isinstance(obj, list) and obj and all(isinstance(o, dict) and {"state", "param_groups"} <= set(o) for o in obj):
        return "optimizer", f"a list of {len(obj)} optimizer states (state, param_groups)"
    if not isinstance(obj, dict):
        return "other", f"a {type(obj).__name__}, not a dict of tensors"
    keys = set(map(str, obj))
    if {"state", "param_groups"} <= keys:
        return "optimizer", "an optimizer state (state, param_groups)"
    if {"optimizer", "rng"} & keys and not any(isinstance(v, torch.Tensor) for v in obj.values()) \
            and not any(isinstance(obj.get(k), dict) for k in ("state_dict", "draft_state_dict")):
        return "rank", f"a per-rank training state ({', '.join(sorted(keys))}), no weights"
    inner = unwrap_state_dict(obj)
    tensors = {str(k): v for k, v in inner.items() if isinstance(v, torch.Tensor)}
    if any(k.endswith("weight") for k in tensors):
        where = next((f" under {k!r}" for k in ("draft_state_dict", "state_dict") if inner is obj.get(k)), "")
        return "weights", f"{len(tensors)} tensors{where}"
    if "d2t" in tensors and set(tensors) <= {"d2t", "t2d"}:
        d2t, t2d = tensors["d2t"], tensors.get("t2d")
        if not _is_int_vector(d2t):
            return "other", f"a dict whose d2t is not a 1-D integer tensor ({d2t.dtype}, shape {list(d2t.shape)})"
        if t2d is not None and not (t2d.dim() == 1 and (t2d.dtype == torch.bool or _is_int_vector(t2d))):
            return "other", f"a dict whose t2d is not a 1-D bool tensor ({t2d.dtype}, shape {list(t2d.shape)})"
        return "mapping", "a mapping dict {'d2t'" + (", 't2d'}" if t2d is not None else "}")
    shown = sorted(keys)[:6]
    return "other", f"a dict without a d2t mapping or draft weights (keys: {shown})"


def scan_pts(folder: Path, skip: set[Path]) -> list[tuple[Path, str, str, object]]:
    """(file, kind, what, content or the BadInputError) for each .pt/.pth in `folder` not in `skip`."""
    out = []
    for p in sorted(folder.iterdir()):
        if p.suffix not in (".pt", ".pth") or p in skip or not p.is_file():
            continue
        try:
            obj = torch_load(p)
        except BadInputError as e:
            out.append((p, "unreadable", e.problem, e))
            continue
        kind, what = pt_kind(obj)
        out.append((p, kind, what, obj))
    return out


def follow_latest(folder: Path) -> Path | None:
    """SpecForge's `<run_id>-latest` symlink in a trainer output folder, when there is exactly one."""
    links = [p for p in folder.iterdir() if p.name.endswith("-latest") and p.is_symlink() and p.is_dir()]
    return links[0] if len(links) == 1 else None
