"""What a `.pt` file holds, decided by its content and never by its name.

Trainers leave many `.pt` files beside a draft: SpecForge's `training_state.pt` (weights under
`draft_state_dict`) and per-rank `training_state_rank<r>.pt`, speculators'
`optimizer_state_dict.pt`, vocab-mapping caches. `pt_kind` tells them apart, `scan_pts` reads a
folder's, `pt_roles` decides which of them are a checkpoint's weights or its mapping (the rest are
ignored, each with why), `refuse_foreign_pt` refuses one given as the checkpoint, and
`follow_latest` finds SpecForge's `<run_id>-latest` step. Which files a checkpoint holds by name is
`helpers.io.layout`'s. Every file is loaded with `weights_only=True`
(`helpers.io.tensor_files.torch_load`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from helpers.core.errors import BadInputError
from helpers.io.tensor_files import find_key, torch_load, unwrap_state_dict

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


def refuse_foreign_pt(path: Path, obj) -> None:
    """A `.pt` given as the checkpoint holding an optimizer or a per-rank state: one line."""
    kind, what = pt_kind(obj)
    if kind in ("optimizer", "rank"):
        raise BadInputError(path, f"holds {what}: not draft weights or a d2t mapping")


@dataclass
class PtRoles:
    """What a folder's `.pt` files are to its checkpoint, by content."""

    weights: list[tuple[Path, object]] = field(default_factory=list)  # (file, its content): the draft's weights
    mapping: Path | None = None  # the mapping dict {"d2t", "t2d"} to read
    ignored: dict[str, str] = field(default_factory=dict)  # file -> why it was not used


def pt_roles(folder: Path, side: dict[str, Path], *, need_weights: bool) -> PtRoles:
    """Weights and the mapping from a folder's .pt files (those not in `side`, its d2t/t2d files by
    name), by content; the rest ignored.

    `need_weights`: the folder's other weights files hold no tensor (the .pt weights are then read);
    a mapping dict is picked when neither those weights nor a d2t file named as such hold d2t.
    Foreign files (optimizer states, per-rank training states, unreadable or refused pickles) never
    become the weights or the mapping; a folder whose only file is one is refused, naming it.
    """
    scanned = scan_pts(folder, set(side.values()))
    roles = PtRoles()
    used: set[Path] = set()
    if need_weights:
        owner: dict[str, Path] = {}
        for p, kind, _, obj in scanned:
            if kind != "weights":
                continue
            for k, v in unwrap_state_dict(obj).items():
                if isinstance(v, torch.Tensor) and str(k) in owner:
                    raise BadInputError(folder, f"tensor {k!r} is in both {owner[str(k)].name} and {p.name}")
                if isinstance(v, torch.Tensor):
                    owner[str(k)] = p
            roles.weights.append((p, obj))
            used.add(p)
        has_d2t = find_key(owner, "d2t") is not None
    else:
        has_d2t = False  # asked only when the weights hold no d2t
    if not has_d2t and "d2t" not in side:
        maps = [p for p, kind, _, _ in scanned if kind == "mapping"]
        if len(maps) > 1:
            named = [p for p in maps if p.name in MAPPING_NAMES]
            if len(named) != 1:
                raise BadInputError(
                    folder, f"holds {len(maps)} mapping files ({', '.join(p.name for p in maps)}): point at the one to use"
                )
            maps = named
        if maps:
            roles.mapping = maps[0]
            used.add(maps[0])
    for p, kind, what, obj in scanned:
        if p not in used:
            roles.ignored[str(p)] = what if kind != "unreadable" else f"unreadable: {what}"
    if need_weights and not roles.weights and roles.mapping is None and not side and len(scanned) == 1:
        p, kind, what, obj = scanned[0]
        if kind == "unreadable":
            raise obj
        raise BadInputError(p, f"is not a mapping dict {{'d2t', 't2d'}} nor draft weights: it holds {what}")
    return roles


def follow_latest(folder: Path) -> Path | None:
    """SpecForge's `<run_id>-latest` symlink in a trainer output folder, when there is exactly one."""
    links = [p for p in folder.iterdir() if p.name.endswith("-latest") and p.is_symlink() and p.is_dir()]
    return links[0] if len(links) == 1 else None
