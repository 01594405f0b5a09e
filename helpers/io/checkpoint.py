"""Finding EAGLE-3 draft checkpoints, their configs and their mapping files.

Producers keep `d2t`/`t2d` in many places (docs/eagle3-facts.md, 'Where producers keep the
mapping'): tensors beside the weights in `model.safetensors` (single or sharded) or
`pytorch_model.bin`; one `.pt` dict `{"d2t","t2d"}` (SpecForge's cache, EAGLE's `cache.pt`); separate `d2t.pt` + `t2d.pt`; speculators' `d2t.npy` /
`t2d.npy` (newer: `d2t-32000.npy`); SpecForge 0.2.0's `training_state.pt` (weights and d2t/t2d
under `draft_state_dict`; per-rank `training_state_rank*.pt` hold only optimizer/RNG state).
A `.pt` is weights or a mapping by its content (`pt_kind`), never by its name: optimizer states,
per-rank files and other foreign `.pt` files go to `Checkpoint.ignored`. No d2t with a draft
vocab equal to the target vocab (speculators writes none then) is the identity mapping.
`open_checkpoint` takes what each file of a path is from `helpers.io.layout.layout_of` (decided
once, by name) and opens those files, reading no tensor data (a `.pt` is unpickled, weights_only,
with its storages memory-mapped; the folder's other `.pt` files are told apart by content,
`helpers.io.pt_files.pt_roles`, only when the weights leave something to find; a draft GGUF is
opened by `helpers.io.gguf_files.open_gguf`); `read_mapping_tensors` / `load_mapping` /
`stored_mapping` then read only d2t and t2d, from the open checkpoint. The file readers themselves
(`torch_load`, `load_npy`, safetensors headers, the lazy `TensorStore`) live in
`helpers.io.tensor_files`.
Every problem with a file becomes one `BadInputError` naming the file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from helpers.core.errors import BadInputError
from helpers.io import remote
from helpers.io.configs import read_config_file, vocab_sizes
from helpers.io.gguf_files import LLAMACPP_CONVENTION, open_gguf
from helpers.io.layout import NPY_NAME, layout_of
from helpers.io.mapping import VocabMapping, checked_mapping
from helpers.io.pt_files import follow_latest, pt_roles, refuse_foreign_pt
from helpers.io.tensor_files import (
    TensorStore,
    read_mapping_file,
    torch_load,
)


# -- checkpoints -------------------------------------------------------------------------------------
@dataclass
class Checkpoint:
    """What a path holds: config, lazily readable tensors, and separate mapping files.

    A checkpoint owns its origin: `origin` is the URL a remote one was opened from, `path` its
    cached local stand-in (`stand_in`, which its `TensorStore` shares); ask `is_remote`,
    `display_name`, `local_folder` and `shown(file)` rather than `helpers.io.remote`.
    """

    path: Path
    config: dict | None = None
    config_path: Path | None = None
    tensors: TensorStore = field(default_factory=TensorStore)
    mapping_files: dict[str, Path] = field(default_factory=dict)  # "d2t"/"t2d"/"dict" -> file
    ignored: dict[str, str] = field(default_factory=dict)  # file beside the checkpoint -> why it was not used
    origin: str | None = None  # the URL a remote checkpoint was opened from (`path` is then its cached stand-in)
    stand_in: remote.StandIn | None = None  # a remote checkpoint's cached stand-in (also for its cache folder opened locally)
    format: str = "hf"  # "hf" (safetensors / torch / npy files) or "gguf" (a llama.cpp draft GGUF)
    # how the stored d2t is meant to be read: "offset" (HF checkpoints; SGLang, vLLM, TensorRT-LLM) or
    # "absolute" (a GGUF: llama.cpp's converter stores d2t + arange, and llama.cpp reads absolute ids)
    d2t_convention: str = "offset"

    @property
    def d2t_readers(self) -> tuple[str, ...]:
        """The engines that read this checkpoint's stored d2t with `d2t_convention`, by name."""
        return ("llama.cpp",) if self.format == "gguf" else ("SGLang", "vLLM", "TensorRT-LLM")

    @property
    def is_remote(self) -> bool:
        """Opened from a `hf://` or `http(s)://` URL."""
        return self.origin is not None

    @property
    def display_name(self) -> str:
        """The checkpoint as the user named it: its URL, or its local path."""
        return self.origin or os.fspath(self.path)

    @property
    def local_folder(self) -> Path:
        """The local folder (or file) read: the path itself, or a remote checkpoint's cached stand-in."""
        return self.path

    def shown(self, path) -> str:
        """One of the checkpoint's files as it is named in messages and sources (its URL when remote)."""
        return self.stand_in.display(path) if self.stand_in is not None else os.fspath(path)

    @property
    def config_shown(self) -> str | None:
        """Its config as messages name it (None: it has none)."""
        return None if self.config_path is None else self.shown(self.config_path)

    @property
    def sources(self) -> list[str]:
        files = ([self.config_path] if self.config_path else []) + self.tensors.files
        files += [p for p in self.mapping_files.values() if p not in files]
        return [self.shown(p) for p in dict.fromkeys(files)]

    @property
    def key_layout(self) -> str:
        return key_layout(self.tensors.keys())

    @property
    def weight_keys(self) -> list[str]:
        return [k for k in self.tensors.keys() if k.split(".")[-1] not in ("d2t", "t2d")]


def key_layout(keys) -> str:
    """'midlayer' (SGLang/SpecForge/EAGLE), 'layers.0' (speculators/vLLM), 'mixed' or 'none'."""
    mid = any(k.startswith("midlayer.") or ".midlayer." in k for k in keys)
    lay = any(k.startswith("layers.0.") or ".layers.0." in k for k in keys)
    return "mixed" if mid and lay else "midlayer" if mid else "layers.0" if lay else "none"


def open_checkpoint(path: str | os.PathLike, *, fetch_whole: bool = False) -> Checkpoint:
    """Open a checkpoint folder or a single weights / mapping file, reading no tensor data yet.

    `path` may also be `hf://ORG/REPO[@REV][/SUBDIR]` or an http(s) URL (`helpers.io.remote`): then
    only configs, headers and small mapping files are fetched, into the cache (`fetch_whole`: also
    .pt / .bin weights, which cannot be read by range, up to `remote.WHOLE_LIMIT`), once, here; the
    checkpoint keeps the stand-in and reads the rest through it.
    """
    where, tip = remote.locate(path, whole_limit=remote.WHOLE_LIMIT if fetch_whole else None)
    if not remote.is_remote(path):  # a local path (`where`: its stand-in when it lies in the cache)
        return _open_local(path, where, tip)
    try:
        ck = _open_local(where.path, where)
    except BadInputError as e:
        if e.path is None:
            raise
        raise BadInputError(where.display(e.path), e.problem) from None
    ck.origin = where.url
    return ck


def _open_local(path: str | os.PathLike, stand_in: remote.StandIn | None, tip: str | None = None) -> Checkpoint:
    shown = path if isinstance(path, str) else None  # Path('hf://a/b') would print hf:/a/b
    path = Path(path)
    try:
        exists = path.exists()
        is_dir = path.is_dir()
    except OSError as e:
        raise BadInputError(path, f"cannot be read ({e.strerror or e})") from None
    if not exists:
        if path.is_symlink():
            raise BadInputError(path, "is a broken or looping symbolic link")
        raise BadInputError(shown if shown is not None else path,
                            "no such file or folder" + (f" (not a local path nor a URL; {tip})" if tip else ""))
    files = layout_of(path, is_dir)  # what each file is, decided once; then each is opened
    ck = Checkpoint(path=path, tensors=TensorStore(stand_in), stand_in=stand_in)
    if files.gguf is not None:  # a llama.cpp draft GGUF: its metadata as the config, its tensors under HF names
        config, _ = open_gguf(files.gguf, ck.tensors)
        ck.path = files.gguf
        ck.config, ck.config_path = config, files.gguf
        ck.format, ck.d2t_convention = "gguf", LLAMACPP_CONVENTION
        return ck
    ck.mapping_files = dict(files.mapping_files)
    if files.config is not None:  # the config first: what the weights are checked against
        ck.config_path, ck.config = files.config, read_config_file(files.config)
    ck.tensors.add_files(files.weights, check=None if is_dir else refuse_foreign_pt, beside=files.beside)
    need_weights = is_dir and not ck.tensors.keys()
    if need_weights or is_dir and ck.tensors.find("d2t") is None and "d2t" not in files.mapping_files:
        pts = pt_roles(path, files.mapping_files, need_weights=need_weights)  # a folder's other .pt files, by content
        for p, obj in pts.weights:
            ck.tensors.add_torch(p, obj)
        if pts.mapping is not None:
            ck.mapping_files["dict"] = pts.mapping
        ck.ignored.update(pts.ignored)
    if is_dir and not ck.tensors.keys() and not ck.mapping_files:
        latest = follow_latest(path) if ck.config is None else None
        if latest is not None:  # a SpecForge trainer output folder: its latest save, as its exporter does
            return _open_local(latest, stand_in)
        subs = [p.name for p in find_checkpoints(path, max_depth=1) if p != path]
        ign = "; ".join(f"{Path(k).name}: {v}" for k, v in ck.ignored.items())
        raise BadInputError(
            path,
            "holds no checkpoint: no model.safetensors, pytorch_model.bin, d2t/t2d (.pt/.npy), "
            "mapping .pt or training_state.pt with draft weights"
            + (f" (ignored {ign})" if ign else "")
            + (f"; it holds checkpoint folders {', '.join(subs[:8])}: point at one" if subs else ""),
        )
    return ck


def read_mapping_tensors(ck: Checkpoint) -> tuple[torch.Tensor | None, torch.Tensor | None, list[str]]:
    """(d2t, t2d, files they came from); either may be None when absent."""
    d2t = t2d = None
    files: list[Path] = []  # the files read, named as the checkpoint names them at the end
    k = ck.tensors.find("d2t")
    if k is not None:
        d2t = ck.tensors.get(k)
        files.append(ck.tensors.file_of(k))
    k = ck.tensors.find("t2d")
    if k is not None:
        t2d = ck.tensors.get(k)
        files.append(ck.tensors.file_of(k))
    mf = ck.mapping_files
    if d2t is None and "dict" in mf:
        obj = torch_load(mf["dict"])
        if not isinstance(obj, dict) or "d2t" not in obj:
            raise BadInputError(mf["dict"], "is not a mapping dict {'d2t', 't2d'}")
        d2t, t2d = obj["d2t"], obj.get("t2d", t2d)
        files.append(mf["dict"])
    if d2t is None and "d2t" in mf:
        d2t = read_mapping_file(mf["d2t"])
        files.append(mf["d2t"])
    if t2d is None and "t2d" in mf:
        t2d = read_mapping_file(mf["t2d"])
        files.append(mf["t2d"])
    return d2t, t2d, list(dict.fromkeys(ck.shown(f) for f in files))


def load_mapping(path: str | os.PathLike | Checkpoint) -> VocabMapping:
    """Read `d2t`/`t2d` (only those tensors) and the vocab sizes from wherever they are kept."""
    ck = path if isinstance(path, Checkpoint) else open_checkpoint(path)
    d2t, t2d, used = read_mapping_tensors(ck)
    if d2t is not None:
        return checked_mapping(d2t, t2d, used, vocab_sizes(ck.config, ck.config_path), ck.config_shown)
    vocab_sizes(ck.config, ck.config_path)  # a size field that is no positive integer is refused first
    full = full_vocab_size(ck)
    if full is not None:  # speculators writes no d2t when the draft keeps the full target vocab
        return VocabMapping(torch.zeros(full, dtype=torch.int64), t2d, target_vocab_size=full,
                            sources=used or [ck.shown(ck.config_path)])
    ign = "; ".join(f"{Path(k).name}: {v}" for k, v in ck.ignored.items())
    raise BadInputError(
        ck.path, "has no d2t tensor (looked in the weights and for d2t/t2d .pt/.npy files and mapping .pt dicts)"
        + (f"; ignored {ign}" if ign else ""),
    )


def stored_mapping(ck: Checkpoint) -> VocabMapping | None:
    """The mapping an open checkpoint stores (d2t and t2d read once, checked as `load_mapping` checks
    them), or None when it stores no d2t."""
    d2t, t2d, used = read_mapping_tensors(ck)
    if d2t is None:
        return None
    return checked_mapping(d2t, t2d, used, vocab_sizes(ck.config, ck.config_path), ck.config_shown)


def full_vocab_size(ck: Checkpoint) -> int | None:
    """N when the checkpoint states a draft vocab equal to its target vocab (no d2t needed), else None.

    The draft vocab is `draft_vocab_size`, or `lm_head`'s rows when the config has none (the
    engines then size lm_head from `vocab_size`); the target vocab is the config's `vocab_size`.
    """
    draft, target = vocab_sizes(ck.config)
    if draft is None:
        k = ck.tensors.find("lm_head.weight")
        draft = ck.tensors.shape(k)[0] if k is not None and len(ck.tensors.shape(k)) == 2 else None
    return target if target is not None and draft == target else None


def find_checkpoints(root: str | os.PathLike, max_depth: int = 3) -> list[Path]:
    """Folders (and lone mapping files) under `root` that `open_checkpoint` can read."""
    root = Path(root)
    found: list[Path] = []

    def walk(d: Path, depth: int) -> None:
        try:
            entries = sorted(d.iterdir())
        except OSError:
            return
        names = {e.name for e in entries}
        if (
            "config.json" in names
            or any(n.endswith(".safetensors") or n.endswith(".index.json") or n == "pytorch_model.bin" for n in names)
            or any(NPY_NAME.match(n) for n in names)
            or {"d2t.pt", "t2d.pt", "training_state.pt"} & names
            or any(n.endswith(".gguf") for n in names)
        ):
            found.append(d)
            return
        if depth < max_depth:
            for e in entries:
                if e.is_dir() and not e.is_symlink() and not e.name.startswith("."):
                    walk(e, depth + 1)

    walk(root, 0)
    return found
