"""The checkpoint fixer: a corrected copy of a draft checkpoint, planned first, checked after.

`plan_fix(src, engine)` works out what a fix would change (offsets from absolute ids, mapping
tensors moved into the weights, t2d built when missing, key renames for the engine,
`draft_vocab_size` in the config) and which error findings that resolves, by running the doctor
on the planned copy; nothing is written and no weight data is read. `fix_checkpoint(src, dst,
engine)` refuses when the plan resolves no error (unless `force=True`); otherwise it writes the
copy into a temporary folder next to `dst`, runs the doctor on it and renames it at the end.
`src` is only ever read.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from helpers.engines.registry import engines_at, engines_for, gguf_engines
from helpers.engines.key_names import KeyInfo, is_known_param, is_mapping_key, parse_key
from helpers.core.errors import BadInputError
from helpers.core.outputs import new_output_dir
from helpers.core.terms import MAX_BUILT_T2D
from helpers.doctor.diagnose import diagnose
from helpers.doctor.fix_plan import FixPlan, FixResult
from helpers.io.origin import Origin
from helpers.io.checkpoint import Checkpoint, open_checkpoint, read_mapping_tensors
from helpers.io.configs import flat_config, read_config
from helpers.io.gguf_files import converter_command, copy_gguf
from helpers.io.mapping import VocabMapping, absolute_to_offsets
from helpers.io.tensor_files import TensorStore


class _PlannedStore(TensorStore):
    """The fixed copy's tensors before anything is written: shapes known, data read on demand."""

    def __init__(self, file: Path) -> None:
        super().__init__()
        self._file = file  # where they will be written (named in the doctor's messages)
        self._load: dict[str, callable] = {}

    def put(self, name: str, shape, dtype: torch.dtype, load) -> None:
        self._where[name] = (self._file, "planned")
        self._meta[name] = (tuple(shape), dtype)
        self._load[name] = load

    def get(self, name: str, device="cpu", dtype: torch.dtype | None = None) -> torch.Tensor:
        t = self._load[name]()
        if dtype is not None and t.dtype.is_floating_point:
            return t.to(device=device, dtype=dtype)
        return t.to(device=device)

    def items(self) -> list[tuple[str, callable, int]]:
        """(name, loader, nbytes) in writing order, as `_write_shards` takes them."""
        return [(k, self._load[k], self.nbytes(k)) for k in self.keys()]


@dataclass
class _PlannedCopy:
    """Everything the copy will hold; writing it needs no further decision."""

    ck: Checkpoint
    tensors: _PlannedStore
    d2t: torch.Tensor | None
    t2d: torch.Tensor | None
    config: dict | None
    copied: list[Path]  # files and folders of `src` copied as they are


def _target_name(info: KeyInfo, engine: str) -> str:
    """The key a tensor gets in the fixed copy."""
    if not is_known_param(info):
        return info.key
    if info.layout:
        ats = engines_at(engine)
        layout = ats[0].value("layout.write", "midlayer") if len(ats) == 1 else "midlayer"  # midlayer: every engine
        return f"{layout}.{info.name}"
    return info.name  # no "model." prefix: both engines accept the bare names


def _open_fix_source(src: Path) -> Checkpoint:
    ck = open_checkpoint(src)
    if ck.format == "gguf":
        return ck
    if not src.is_dir():
        raise BadInputError(src, "fix needs a checkpoint folder (config.json + weights), not a single file")
    if not ck.tensors.keys():
        raise BadInputError(src, "has no weight files to fix (only mapping files)")
    return ck


def _target_vocab(ck: Checkpoint, t2d) -> int | None:
    flat = flat_config(ck.config) if ck.config else {}
    v = flat.get("vocab_size") if isinstance(flat.get("vocab_size"), int) else (
        int(t2d.shape[0]) if t2d is not None else None)
    if v is not None and not 0 < v <= MAX_BUILT_T2D:
        raise BadInputError(ck.config_path or ck.path, f"vocab_size={v} is not a plausible vocab size; "
                            "refusing to build a t2d of that length (correct config.json first)")
    return v


def _plan_mapping(ck: Checkpoint, codes: set[str], changes: list[str]):
    """(d2t, t2d) as the copy will hold them: offsets, t2d built when missing."""
    d2t, t2d, used = read_mapping_tensors(ck)
    if d2t is not None:
        d2t = torch.as_tensor(np.asarray(d2t)) if not isinstance(d2t, torch.Tensor) else d2t
        d2t = d2t.to(torch.int64)
    if t2d is not None and not isinstance(t2d, torch.Tensor):
        t2d = torch.as_tensor(np.asarray(t2d))
    if d2t is not None and "d2t-absolute" in codes:
        d2t = absolute_to_offsets(d2t)
        changes.append("d2t: absolute target ids converted to offsets (d2t - arange(N))")
    target_vocab = _target_vocab(ck, t2d)
    if d2t is not None and t2d is None and target_vocab is not None:
        try:
            t2d = VocabMapping(d2t, target_vocab_size=target_vocab).t2d_from("offset")
            changes.append("t2d: built from the offsets (it was missing)")
        except (BadInputError, IndexError):
            pass
    if d2t is not None and ck.tensors.find("d2t") is None:
        changes.append(f"d2t/t2d: copied from {Path(used[0]).name} into the weights (engines read them only there)")
    return d2t, t2d


def _plan_tensors(ck: Checkpoint, engine: str, d2t, t2d, file: Path, changes: list[str]) -> _PlannedStore:
    """The weights renamed for `engine`, then d2t/t2d (no tensor data read here)."""
    store = _PlannedStore(file)
    seen: dict[str, str] = {}
    for k in ck.tensors.keys():
        if is_mapping_key(k):
            continue
        new = _target_name(parse_key(k), engine)
        if new in seen:
            raise BadInputError(ck.path, f"keys {seen[new]!r} and {k!r} would both become {new!r}")
        seen[new] = k
        store.put(new, ck.tensors.shape(k), ck.tensors.dtype(k), lambda key=k: ck.tensors.get(key))
    if any(p.suffix != ".safetensors" for p in ck.tensors.files):
        changes.append("weights written as safetensors (from " + ", ".join(p.name for p in ck.tensors.files) + ")")
    renamed = [(old, new) for new, old in seen.items() if old != new]
    if renamed:
        changes.append(f"renamed {len(renamed)} keys, e.g. {renamed[0][0]} -> {renamed[0][1]}")
    for short, t in (("d2t", d2t), ("t2d", t2d)):
        if t is not None:
            name = (ck.tensors.find(short) or short).removeprefix("model.")
            store.put(name, t.shape, t.dtype, lambda t=t: t)
    return store


def _plan_config(ck: Checkpoint, d2t, changes: list[str]) -> dict | None:
    """config.json as the copy will hold it: draft_vocab_size added when missing."""
    cfg = dict(ck.config) if ck.config else None
    if cfg is None or "draft_vocab_size" in flat_config(cfg):
        return cfg
    lm = next((ck.tensors.shape(k) for k in ("lm_head.weight", "model.lm_head.weight") if k in ck.tensors), None)
    n = int(d2t.shape[0]) if d2t is not None else (lm[0] if lm else None)
    if n is not None:
        cfg["draft_vocab_size"] = n
        changes.append(f"config.json: draft_vocab_size = {n} added (engines otherwise size lm_head from vocab_size)")
    return cfg


def _plan_other_files(ck: Checkpoint, changes: list[str]) -> list[Path]:
    """The entries of the folder copied as they are (not weights, index, mapping side files, config)."""
    weight_files = {p.resolve() for p in ck.tensors.files}
    side = {p.resolve() for p in ck.mapping_files.values()}
    entries = sorted(ck.path.iterdir())
    stale = [p.name for p in entries if p.is_file() and p.suffix in (".safetensors", ".bin")
             and p.resolve() not in weight_files]
    if stale:
        changes.append(f"not copied: {', '.join(stale)} (weight files the checkpoint does not load from)")
    copied = [p for p in entries if not (p.resolve() in weight_files or p.resolve() in side or p.name in stale
                                        or p.name.endswith(".index.json") or p.name == "config.json")]
    for p in copied:
        _check_link(ck.path, p)
    return copied


def _check_link(folder: Path, p: Path) -> None:
    """A symlink among the files fix copies is followed only when its target is the checkpoint's own:
    inside the checkpoint folder, or a blob of the Hugging Face cache the folder is a snapshot of
    (`.../snapshots/REV/` beside `.../blobs/`). A link out of the checkpoint is refused (one line):
    fix never copies a file from elsewhere on the machine into the copy."""
    if not p.is_symlink():
        return
    real, home = p.resolve(), folder.resolve()
    blobs = home.parent.parent / "blobs" if home.parent.name == "snapshots" else None
    if real == home or home in real.parents or (blobs is not None and blobs in real.parents):
        return
    raise BadInputError(p, f"is a symlink out of the checkpoint (to {real}): fix copies only the checkpoint's own "
                           "files; replace the link with the file, or move it out of the folder")


def _error_counts(findings) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in findings:
        if f.severity == "error":
            counts[f.code] = counts.get(f.code, 0) + 1
    return counts


def plan_fix(src, engine: str = "all", target_config=None, *, check_weights: bool = False) -> FixPlan:
    """What `fix_checkpoint(src, ..., engine)` would change, and which errors that resolves.

    Nothing is written and no weight data is read (only headers, d2t/t2d and config.json; with
    `check_weights=True` the NaN/Inf scan runs on `src` too, so `unfixable` can list it). The
    doctor is run on `src` and on the planned copy (keys, mapping, config, shapes as they will
    be written); an error code whose count drops is in `fixes`, errors left are `unfixable`.
    """
    engines_for(engine)
    if Origin(src).is_remote:
        raise BadInputError(str(src).strip(), "fix writes a corrected copy of a local folder: download the checkpoint "
                            "first (hf download ORG/REPO --local-dir DIR), then fix DIR")
    src = Path(src)
    ck = _open_fix_source(src)
    if target_config is not None and not isinstance(target_config, dict):
        target_config = read_config(target_config)
    if ck.format == "gguf":
        return _plan_gguf_fix(ck, target_config, check_weights)
    before = diagnose(ck, engine, target_config, check_weights=check_weights)
    changes: list[str] = []
    d2t, t2d = _plan_mapping(ck, {f.code for f in before if f.severity == "error"}, changes)
    store = _plan_tensors(ck, engine, d2t, t2d, src / "model.safetensors", changes)
    cfg = _plan_config(ck, d2t, changes)
    copy = _PlannedCopy(ck, store, d2t, t2d, cfg, _plan_other_files(ck, changes))
    planned = Checkpoint(path=src, config=cfg, tensors=store)
    after = diagnose(planned, engine, target_config, check_weights=False)
    if check_weights:  # fix never changes weight values: what the scan found stays
        after += [f for f in before if f.code == "nonfinite-weights"]
    was, now = _error_counts(before), _error_counts(after)
    fixes = [code for code in was if now.get(code, 0) < was[code]]
    unfixable = [f for f in after if f.severity == "error"]
    plan = FixPlan(src=src, engine=engine, changes=changes, fixes=fixes, unfixable=unfixable,
                   before=before, copy=copy)
    if any(a.key in gguf_engines() for a in engines_at(engine)):
        plan.next_step = ("llama.cpp loads a GGUF made by its converter from this HF copy: "
                          + converter_command("DST", None, "DST.gguf").replace("TARGET_DIR", "TARGET")
                          + " (TARGET: the target model's HF folder), then d2t-lab doctor DST.gguf")
    return plan


@dataclass
class _GgufCopy:
    """A draft GGUF copied with some tensors replaced (GGUF names -> arrays as they are to be stored)."""

    src: Path
    replace: dict


def _plan_gguf_fix(ck: Checkpoint, target_config, check_weights: bool) -> FixPlan:
    """A llama.cpp GGUF: offsets in d2t become absolute ids; every other key and tensor is copied."""
    before = diagnose(ck, "llamacpp", target_config, check_weights=check_weights)
    changes: list[str] = []
    replace_: dict = {}
    store = _PlannedStore(ck.path)
    for k in ck.tensors.keys():
        store.put(k, ck.tensors.shape(k), ck.tensors.dtype(k), lambda key=k: ck.tensors.get(key))
    if "gguf-d2t-offsets" in {f.code for f in before if f.severity == "error"}:
        d2t = ck.tensors.get("d2t").to(torch.int64)
        ids = d2t + torch.arange(d2t.shape[0], dtype=torch.int64)
        replace_["d2t"] = ids.numpy()
        store.put("d2t", ids.shape, torch.int64, lambda ids=ids: ids)
        changes.append("d2t: offsets converted to absolute target ids (d2t + arange(N)), as llama.cpp reads them; "
                       "every other metadata key and tensor copied as stored")
    planned = replace(ck, tensors=store)
    after = diagnose(planned, "llamacpp", target_config, check_weights=False)
    if check_weights:
        after += [f for f in before if f.code == "nonfinite-weights"]
    was, now = _error_counts(before), _error_counts(after)
    fixes = [code for code in was if now.get(code, 0) < was[code]]
    unfixable = [f for f in after if f.severity == "error"]
    return FixPlan(src=ck.path, engine="llamacpp", changes=changes, fixes=fixes, unfixable=unfixable,
                   before=before, copy=_GgufCopy(ck.path, replace_))


def _fix_gguf(plan: FixPlan, dst: Path, target_config, check_weights: bool) -> FixResult:
    """Write the corrected GGUF: `dst` itself when it ends in .gguf, else a new folder `dst` holding it."""
    out = dst if dst.suffix.lower() == ".gguf" else dst / plan.src.name
    if out is not dst:
        dst.mkdir()
    tmp = out.with_name(f".{out.stem}.tmp-{os.getpid()}.gguf")
    try:
        copy_gguf(plan.copy.src, tmp, plan.copy.replace)
        from helpers.core.outputs import normal_modes

        normal_modes(tmp)
        after = diagnose(tmp, "llamacpp", target_config, check_weights=check_weights)
        if out.exists():
            raise BadInputError(out, "appeared while the fixed copy was written; nothing was overwritten")
        os.rename(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        if out is not dst:
            shutil.rmtree(dst, ignore_errors=True)
        raise
    after.path = out
    changes = plan.changes or ["nothing needed changing; written as a plain copy"]
    return FixResult(dst=out, changes=changes, findings=after, plan=plan)


# -- writing the copy ---------------------------------------------------------------------------
def _write_shards(tensors: list[tuple[str, callable, int]], folder: Path, max_shard: int = 2 << 30) -> list[str]:
    """Write (name, loader, nbytes) triples as safetensors, one shard at a time (loaders run lazily)."""
    from safetensors.torch import save_file

    groups: list[list[tuple[str, callable, int]]] = [[]]
    size = 0
    for name, load, nbytes in tensors:
        if groups[-1] and size + nbytes > max_shard:
            groups.append([])
            size = 0
        groups[-1].append((name, load, nbytes))
        size += nbytes
    names = ["model.safetensors"] if len(groups) == 1 else [
        f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    weight_map = {}
    for fname, group in zip(names, groups):
        data = {name: load().contiguous() for name, load, _ in group}
        save_file(data, str(folder / fname), metadata={"format": "pt"})
        weight_map.update({name: fname for name in data})
        del data
    if len(names) > 1:
        total = sum(nb for g in groups for *_, nb in g)
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return names


def _write_side_files(copy: _PlannedCopy, folder: Path) -> None:
    """Keep mapping files beside the weights, corrected, so no stale mapping remains."""
    d2t, t2d = copy.d2t, copy.t2d
    for kind, p in copy.ck.mapping_files.items():
        if kind == "dict":
            torch.save({"d2t": d2t, "t2d": t2d} if t2d is not None else {"d2t": d2t}, folder / p.name)
        elif kind in ("d2t", "t2d"):
            val = d2t if kind == "d2t" else t2d
            if val is None:
                continue
            if p.suffix == ".npy":
                np.save(folder / p.name, val.numpy())
            else:
                torch.save(val, folder / p.name)


def _write_copy(copy: _PlannedCopy, folder: Path) -> None:
    """Write the planned copy into the (empty, new) `folder`."""
    _write_shards(copy.tensors.items(), folder)
    for p in copy.copied:
        if p.is_dir():
            shutil.copytree(p, folder / p.name, symlinks=True)
        else:
            shutil.copy2(p, folder / p.name)
    _write_side_files(copy, folder)
    if copy.config is not None:
        (folder / "config.json").write_text(json.dumps(copy.config, indent=2) + "\n")


def _temp_folder_beside(dst: Path) -> Path:
    try:
        return Path(tempfile.mkdtemp(prefix=f".{dst.name}.tmp-", dir=dst.parent))
    except OSError as e:
        raise BadInputError(dst.parent, f"cannot create a folder here ({e.strerror or e})") from None


def _publish(tmp: Path, dst: Path) -> None:
    """Give the finished copy normal folder modes and rename it to `dst` (never over anything)."""
    if dst.exists() or dst.is_symlink():
        raise BadInputError(dst, "appeared while the fixed copy was written; nothing was overwritten")
    from helpers.core.outputs import normal_modes

    normal_modes(tmp)  # mkdtemp made it private and save_file writes 0600: normal modes under the umask
    os.rename(tmp, dst)


def fix_checkpoint(src, dst, engine: str = "all", target_config=None, *, check_weights: bool = True,
                   force: bool = False) -> FixResult:
    """Write a corrected copy of the checkpoint folder `src` to `dst` (which must not exist).

    `src` is only read. Fixes: absolute d2t ids -> offsets; d2t/t2d held only beside the weights
    -> into the weights; t2d added when missing; decoder-layer keys renamed for `engine`
    (`midlayer.*` for sglang/all, `layers.0.*` for vllm) and `model.` prefixes dropped;
    `draft_vocab_size` added to config.json when missing. Other files are copied.

    The changes are planned first (`plan_fix`). When they resolve no error finding for `engine`
    (a healthy checkpoint, or only errors fix cannot repair), `BadInputError` says why and
    nothing is written, not even a temporary folder; `force=True` writes the copy anyway.
    Otherwise everything is written into a temporary folder beside `dst`, checked by the doctor
    (with `target_config`; `check_weights` runs its NaN/Inf scan) and renamed at the end.
    """
    engines_for(engine)
    dst = new_output_dir(dst, "fixed copy")
    check_apart(src, dst)
    plan = plan_fix(src, engine, target_config)
    if not plan.matters and not force:
        raise BadInputError(plan.src, plan.refusal)
    if isinstance(plan.copy, _GgufCopy):
        return _fix_gguf(plan, dst, target_config, check_weights)
    if dst.suffix.lower() == ".gguf":
        raise BadInputError(dst, "fix writes an HF checkpoint folder from an HF checkpoint; llama.cpp's GGUF is made "
                            "by its converter: fix into a folder DST, then "
                            + converter_command("DST", None, dst).replace("TARGET_DIR", "TARGET")
                            + " (TARGET: the target model's HF folder)")
    tmp = _temp_folder_beside(dst)
    try:
        _write_copy(plan.copy, tmp)
        after = diagnose(tmp, engine, target_config, check_weights=check_weights)
        _publish(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    changes = plan.changes or ["nothing needed changing; written as a plain copy"]
    return FixResult(dst=dst, changes=changes, findings=after, plan=plan)


def check_apart(src, dst) -> None:
    """One line (BadInputError) when the new folder `dst` would lie inside the checkpoint `src`
    (fix promises never to write there) or `src` inside `dst`; symlinks resolved. Nothing is written."""
    if Origin(src).is_remote:
        return
    try:
        a = Path(src).resolve()
        if a.is_file() and a.suffix.lower() == ".gguf":  # a GGUF is one file: only it is the source
            if Path(dst).absolute().resolve() == a:
                raise BadInputError(dst, "is the GGUF being fixed; fix never writes into its source")
            return
        if a.is_file():  # a checkpoint given by one of its files: the folder holding it is the source
            a = a.parent
        b = Path(dst).parent.resolve() / Path(dst).name
    except (OSError, RuntimeError):
        return  # a path that cannot be resolved is refused by the readers, with its own line
    if b == a or a in b.parents:
        raise BadInputError(dst, f"is inside the checkpoint being fixed ({src}); fix never writes into its source: "
                            "choose a folder outside it")
    if b in a.parents:
        raise BadInputError(dst, f"contains the checkpoint being fixed ({src}); choose a folder outside it")
