"""What each file of a checkpoint path is, decided in one place before anything is opened.

Producers keep a draft's files in many layouts (docs/eagle3-facts.md, 'Where producers keep the
mapping'). `layout_of` names a path's files by their names: a llama.cpp draft GGUF (its magic and
architecture asked of `helpers.io.gguf_files`), the config, the weights files in the order a loader
reads them (a sharded index, else `model.safetensors`, else every `.safetensors`, else
`pytorch_model.bin`, else every `.bin`), the single-file weights lying beside a sharded index, and
the d2t/t2d side files named as such (`d2t*.npy`, `d2t.pt`, `t2d.bin`, ...). The other `.pt` files
beside the weights are told apart by their content, and only when the weights leave something to
find (`helpers.io.pt_files.pt_roles`). Opening what the layout names is
`helpers.io.checkpoint.open_checkpoint`'s job: nothing here reads a tensor or a config.
Every problem with a path becomes one `BadInputError` naming it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from helpers.core.errors import BadInputError
from helpers.io.gguf_files import draft_gguf

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
NPY_NAME = re.compile(r"^(d2t|t2d)(?:[-_](\d+))?\.npy$")


@dataclass
class Layout:
    """The files of one checkpoint path, each named for what it is (none opened yet)."""

    gguf: Path | None = None  # a llama.cpp draft GGUF: the whole checkpoint, nothing else is read
    config: Path | None = None  # the config.json beside the weights
    weights: list[Path] = field(default_factory=list)  # weights files in reading order (a sharded index first)
    beside: list[Path] = field(default_factory=list)  # single-file weights lying beside a sharded index
    mapping_files: dict[str, Path] = field(default_factory=dict)  # "d2t" / "t2d" -> the file named for it


def layout_of(path: Path, is_dir: bool) -> Layout:
    """What each file of an existing local `path` (a folder or a single file) is.

    By name; where names cannot tell (a folder holding no HF weights nor d2t/t2d files, a file
    without a suffix), `helpers.io.gguf_files.draft_gguf` says whether it is, or holds, a draft GGUF."""
    files, told = _folder_layout(path) if is_dir else _file_layout(path)
    if not told:
        gguf = draft_gguf(path)
        if gguf is not None:
            return Layout(gguf=gguf)
        if not is_dir:
            raise BadInputError(path, "unrecognised file type (no suffix)")
    return files


def _folder_layout(folder: Path) -> tuple[Layout, bool]:
    """A folder's layout by name, and whether its names tell (it holds HF weights or d2t/t2d files)."""
    try:
        entries = sorted(folder.iterdir())
    except OSError as e:
        raise BadInputError(folder, f"folder cannot be listed ({e.strerror or e})") from None
    if not entries:
        raise BadInputError(folder, "is an empty folder")
    weights, beside = weights_files(entries)
    config = folder / "config.json"
    told = any(p.name.endswith(WEIGHT_SUFFIXES) or p.name.endswith(".index.json") or NPY_NAME.match(p.name)
               for p in entries)
    return Layout(config=config if config.exists() else None, weights=weights, beside=beside,
                  mapping_files=mapping_side_files(entries)), told


def _file_layout(path: Path) -> tuple[Layout, bool]:
    """A single file's layout by name (a draft GGUF, a mapping file named as such with its partner
    beside it, else weights), and whether its name tells (it has a suffix)."""
    if path.suffix.lower() == ".gguf":
        return Layout(gguf=path), True
    if path.suffix == "":
        return Layout(), False
    name, key = path.name, mapping_name(path)
    if name == "config.json":
        raise BadInputError(path, "is a config, not a checkpoint: point at its folder")
    if path.suffix == ".npy" and key is None:
        raise BadInputError(path, "a .npy mapping file must be named d2t*.npy or t2d*.npy")
    if key is None and not name.endswith(".index.json") and path.suffix not in WEIGHT_SUFFIXES:
        raise BadInputError(path, f"unrecognised file type {path.suffix}")
    config = path.parent / "config.json"
    config = config if config.exists() else None
    if key is None:
        return Layout(config=config, weights=[path]), True
    mapping = {k: v for k, v in mapping_side_files(sorted(path.parent.iterdir())).items() if k in ("d2t", "t2d")}
    mapping[key] = path
    return Layout(config=config, mapping_files=mapping), True


def weights_files(entries: list[Path]) -> tuple[list[Path], list[Path]]:
    """(the weights files a folder's loader reads, the single-file weights beside its sharded index).

    Its sharded index, else model.safetensors, else every .safetensors, else pytorch_model.bin, else
    every .bin."""
    names = {p.name: p for p in entries}
    files = sorted(p for p in names.values() if p.suffix == ".bin")
    for pick in (["model.safetensors.index.json"], ["pytorch_model.bin.index.json"], ["model.safetensors"],
                 sorted(n for n, p in names.items() if p.suffix == ".safetensors"), ["pytorch_model.bin"]):
        if pick and all(n in names for n in pick):
            files = [names[n] for n in pick]
            break
    beside = []
    if files and files[0].name.endswith(".index.json"):
        beside = [names[n] for n in ("model.safetensors", "pytorch_model.bin") if n in names]
    return files, beside


def mapping_side_files(entries: list[Path]) -> dict[str, Path]:
    """The mapping files among a folder's sorted entries BY NAME: d2t/t2d .npy (any size suffix) and
    d2t.pt / t2d.pt."""
    found: dict[str, Path] = {}
    for p in entries:
        m = NPY_NAME.match(p.name)
        if m:
            found.setdefault(m.group(1), p)
        elif p.name in ("d2t.pt", "t2d.pt", "d2t.pth", "t2d.pth"):
            found.setdefault(p.stem, p)
    return found


def mapping_name(path: Path) -> str | None:
    """'d2t' or 't2d' for a file named as a mapping file (`d2t*.npy`, `d2t.pt`, `t2d.bin`, ...), else None."""
    m = NPY_NAME.match(path.name)
    if m:
        return m.group(1)
    if path.stem in ("d2t", "t2d") and path.suffix in WEIGHT_SUFFIXES and path.suffix != ".safetensors":
        return path.stem
    return None
