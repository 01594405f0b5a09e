"""Finding and lazily reading EAGLE-3 draft checkpoints and mapping files.

Producers keep `d2t`/`t2d` in many places (docs/eagle3-facts.md, 'Where producers keep the
mapping'): tensors beside the weights in `model.safetensors` (single or sharded) or
`pytorch_model.bin`; one `.pt` dict `{"d2t","t2d"}` (SpecForge's cache, EAGLE's `cache.pt`);
separate `d2t.pt` + `t2d.pt`; speculators' `d2t.npy` / `t2d.npy` (newer: `d2t-32000.npy`).
Everything here reads only the tensors asked for: safetensors headers parsed directly, tensors
through `safe_open`; torch files with `mmap=True` and `weights_only=True`; numpy with
`mmap_mode`.
Every problem with a file becomes one `BadInputError` naming the file.
"""
from __future__ import annotations

import io
import json
import math
import os
import pickle
import re
import stat
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .errors import BadInputError
from .mapping import VocabMapping

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
MAX_VOCAB = 2**31 - 1  # token ids are int32 in every engine
_NPY_NAME = re.compile(r"^(d2t|t2d)(?:[-_](\d+))?\.npy$")


# -- low-level readers ----------------------------------------------------------------------------
def torch_load(path: str | os.PathLike, *, mmap: bool = True, data: bytes | None = None):
    """`torch.load` with `weights_only=True`, as a one-line `BadInputError` on any failure.

    Pickles that would build arbitrary objects (and so could run code) are refused by
    `weights_only=True` before anything runs. `data`: the file's bytes already in memory (a
    decompressed `.gz`, say); `path` then only names it in messages.
    """
    path = Path(path)
    if data is None:
        _check_readable_file(path)
    else:
        mmap = False
    try:
        with warnings.catch_warnings():  # torch warns on stderr about pickle protocols: not for users
            warnings.simplefilter("ignore")
            src = path if data is None else io.BytesIO(data)
            return torch.load(src, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        msg = str(e)
        glob = re.search(r"GLOBAL ([\w.]+)", msg)
        if glob:
            raise BadInputError(
                path,
                f"refused: loading this pickle would call {glob.group(1)} (code or objects beyond plain "
                "tensors); weights_only=True blocked it and nothing was run",
            ) from None
        op = re.search(r"Unsupported operand (\d+)", msg)
        if op:
            raise BadInputError(path, f"not a readable torch file (invalid pickle data: opcode {op.group(1)})") from None
        raise BadInputError(path, f"not a readable torch file ({_short(msg)})") from None
    except RecursionError:
        raise BadInputError(path, "not a readable torch file (pickle nested too deeply)") from None
    except RuntimeError as e:
        msg = str(e)
        if mmap and ("mmap" in msg or "zip" in msg.lower() and "legacy" in msg.lower()):
            return torch_load(path, mmap=False)
        raise BadInputError(path, f"not a readable torch file ({_short(msg)})") from None
    except (EOFError, zipfile.BadZipFile, ValueError, OSError, TypeError, AttributeError, KeyError, IndexError) as e:
        raise BadInputError(path, f"not a readable torch file ({type(e).__name__}: {_short(str(e))})") from None


def _short(msg: str, n: int = 160) -> str:
    msg = re.sub(r"\x1b\[[0-9;]*m", "", msg)  # terminal colour codes some libraries put in messages
    msg = " ".join("".join(c if c.isprintable() else " " for c in msg).split())
    return msg if len(msg) <= n else msg[: n - 3] + "..."


def _check_readable_file(path: Path) -> None:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise BadInputError(path, "no such file or folder") from None
    except OSError as e:  # symlink loops, permission on a parent
        raise BadInputError(path, f"cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end: never open one
        what = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else (
            "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
        raise BadInputError(path, f"is not a regular file ({what})")
    if st.st_size == 0:
        raise BadInputError(path, "is empty (0 bytes)")
    if not os.access(path, os.R_OK):
        raise BadInputError(path, "is not readable (permission denied)")


def load_npy(path: str | os.PathLike) -> np.ndarray:
    path = Path(path)
    _check_readable_file(path)
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        if "pickle" in str(e).lower() or "Python objects" in str(e):
            raise BadInputError(path, "refused: the .npy holds pickled objects, not a plain array") from None
        raise BadInputError(path, f"not a readable .npy file ({_short(str(e))})") from None
    except (OSError, EOFError) as e:
        raise BadInputError(path, f"not a readable .npy file ({_short(str(e))})") from None


class TensorStore:
    """The tensors of one checkpoint, by name, read lazily from one or more files."""

    def __init__(self) -> None:
        self._where: dict[str, tuple[Path, str]] = {}  # name -> (file, kind)
        self._torch_cache: dict[Path, dict] = {}
        self._meta: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
        self.files: list[Path] = []

    # construction
    def add_safetensors(self, path: Path) -> None:
        # Only the JSON header is read here (not `safe_open`, which maps the whole file: that fails
        # for a file larger than memory, and the draft loader must see shapes first to refuse it).
        for k, (shape, dtype) in read_safetensors_header(path).items():
            self._where[k] = (path, "safetensors")
            self._meta[k] = (shape, dtype)
        self.files.append(path)

    def add_torch(self, path: Path) -> None:
        obj = torch_load(path)
        if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
            obj = obj["state_dict"]
        if isinstance(obj, torch.Tensor):
            obj = {Path(path).stem: obj}
        if not isinstance(obj, dict):
            raise BadInputError(path, f"holds a {type(obj).__name__}, expected a dict of tensors")
        for k, v in obj.items():
            if isinstance(v, torch.Tensor):
                self._where[str(k)] = (path, "torch")
                self._meta[str(k)] = (tuple(v.shape), v.dtype)
        self._torch_cache[path] = obj
        self.files.append(path)

    def add_sharded_index(self, index: Path) -> None:
        _check_readable_file(index)
        try:
            data = json.loads(index.read_text())
            weight_map = data["weight_map"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
            raise BadInputError(index, f"not a valid sharded index ({type(e).__name__}: {_short(str(e))})") from None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise BadInputError(index, "not a valid sharded index (weight_map must map tensor names to shard file names)")
        shards = sorted(set(weight_map.values()))
        for shard in shards:
            if Path(shard).name != shard or shard in ("", ".", ".."):
                raise BadInputError(index, f"names shard {shard!r}, which is not a file name in the index's folder")
            p = index.parent / shard
            if not p.exists():
                raise BadInputError(index, f"names shard {shard} which does not exist")
        for shard in shards:
            p = index.parent / shard
            if p.suffix == ".safetensors":
                self.add_safetensors(p)
            else:
                self.add_torch(p)

    # queries
    def keys(self) -> list[str]:
        return list(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def shape(self, name: str) -> tuple[int, ...]:
        return self._meta[name][0]

    def dtype(self, name: str) -> torch.dtype:
        return self._meta[name][1]

    def nbytes(self, name: str) -> int:
        shape, dtype = self._meta[name]
        return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize

    def file_of(self, name: str) -> Path:
        return self._where[name][0]

    def get(self, name: str, device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> torch.Tensor:
        """Read one tensor (only that one) onto `device`, cast to `dtype` if given."""
        path, kind = self._where[name]
        if kind == "safetensors":
            from safetensors import safe_open

            try:
                with safe_open(str(path), framework="pt", device="cpu") as f:
                    t = f.get_tensor(name)
            except Exception as e:
                raise BadInputError(path, f"tensor {name!r} cannot be read ({_safetensors_problem(str(e))})") from None
        else:
            t = self._torch_cache[path][name]
        if dtype is not None and t.dtype.is_floating_point:
            return t.to(device=device, dtype=dtype)
        return t.to(device=device)

    def find(self, short: str) -> str | None:
        """The key named `short`, or ending in `.short` (for prefixed exports)."""
        if short in self._where:
            return short
        hits = [k for k in self._where if k.endswith("." + short)]
        return hits[0] if len(hits) == 1 else None


_ST_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
                "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_ST_MAX_HEADER = 100_000_000  # safetensors' own limit


def read_safetensors_header(path: str | os.PathLike) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """{tensor name: (shape, dtype)} from a safetensors file's header, checked as safetensors does.

    Reads 8 bytes and the JSON header, nothing else; every inconsistency (truncated file, corrupt
    header, shapes that do not match the data offsets) is a `BadInputError` naming the file.
    """
    path = Path(path)
    _check_readable_file(path)
    bad = lambda words: BadInputError(path, f"not a readable safetensors file: {words}")  # noqa: E731
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise bad("too short to hold a safetensors header")
            n = int.from_bytes(head, "little")
            if n > size - 8 or n > _ST_MAX_HEADER:
                raise bad(f"the header length field ({n:,} bytes) is larger than the file (corrupt or truncated header)")
            raw = f.read(n)
    except OSError as e:
        raise BadInputError(path, f"cannot be read ({e.strerror or e})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise bad("the header is not valid JSON (corrupt header)") from None
    if not isinstance(header, dict):
        raise bad("the header is not a JSON object (corrupt header)")
    out: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dt, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            ok = all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in [*shape, begin, end])
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok or not isinstance(dt, str) or end < begin:
            raise bad(f"tensor {name!r} has an invalid entry in the header (corrupt header)")
        dtype = _st_dtype(dt, path)
        if end - begin != math.prod(shape) * _ST_ITEMSIZE.get(dt, dtype.itemsize):
            raise bad(f"tensor {name!r}: its shape {shape} and dtype {dt} do not match its data offsets in the header")
        out[name] = (tuple(shape), dtype)
        spans.append((begin, end))
    data = size - 8 - n
    pos = 0
    for begin, end in sorted(spans):
        if begin != pos:
            raise bad("the tensors' data offsets in the header overlap or leave gaps (corrupt header)")
        pos = end
    if pos > data:
        raise bad(
            f"the header declares {pos:,} bytes of tensor data but the file holds {data:,} (truncated file?)"
        )
    if pos < data:
        raise bad(f"the file holds {data - pos:,} bytes beyond the tensors its header declares (corrupt file?)")
    return out


def _safetensors_problem(msg: str) -> str:
    """safetensors' header errors, said in words a user can act on."""
    known = {
        "incomplete metadata": "the header declares more tensor data than the file holds (truncated file?)",
        "header too large": "the header length field is larger than the file (corrupt or truncated header)",
        "header too small": "too short to hold a safetensors header",
        "invalid JSON": "the header is not valid JSON (corrupt header)",
        "invalid shape": "a tensor's shape and dtype do not match its data offsets in the header",
        "invalid offset": "a tensor's data offsets in the header are invalid",
        "invalid UTF-8": "the header is not valid text (corrupt header)",
    }
    for k, words in known.items():
        if k.lower() in msg.lower():
            return f"{words} [{_short(msg, 100)}]"
    return _short(msg)


def _st_dtype(name: str, path: Path) -> torch.dtype:
    table = {
        "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
        "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
        "BOOL": torch.bool,
    }
    for k in ("F8_E4M3", "F8_E5M2"):
        if hasattr(torch, "float8_e4m3fn"):
            table[k] = torch.float8_e4m3fn if k == "F8_E4M3" else torch.float8_e5m2
    if name not in table:
        raise BadInputError(path, f"unsupported safetensors dtype {name}")
    return table[name]


# -- configs ---------------------------------------------------------------------------------------
def read_config(path: str | os.PathLike) -> dict:
    """Parse a `config.json` (or the one inside a folder) into a dict."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    _check_readable_file(path)
    try:
        cfg = json.loads(path.read_text())
    except UnicodeDecodeError:
        raise BadInputError(path, "is not text (expected a JSON config)") from None
    except json.JSONDecodeError as e:
        raise BadInputError(path, f"is not valid JSON (line {e.lineno}: {e.msg})") from None
    except RecursionError:
        raise BadInputError(path, "is not a usable JSON config (nested too deeply)") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise BadInputError(path, f"is not a usable JSON config ({_short(str(e), 100)})") from None
    except OSError as e:
        raise BadInputError(path, f"cannot be read ({e.strerror or e})") from None
    if not isinstance(cfg, dict):
        raise BadInputError(path, "is JSON but not an object")
    return cfg


def flat_config(cfg: dict) -> dict:
    """One flat dict for both config styles.

    speculators nests the Llama layer config under `transformer_layer_config`, with the EAGLE-3
    fields (`draft_vocab_size`, `target_hidden_size`, `norm_before_residual`) at the top level.
    """
    nested = cfg.get("transformer_layer_config")
    out = dict(nested) if isinstance(nested, dict) else {}
    for k, v in cfg.items():
        if k == "transformer_layer_config" or (k in out and k in ("vocab_size", "hidden_size")):
            continue  # the nested layer config is the authority for the layer's own sizes
        out[k] = v
    return out


def vocab_sizes(cfg: dict | None, path: str | os.PathLike | None = None) -> tuple[int | None, int | None]:
    """(draft_vocab_size, target_vocab_size) from a config, where it states them.

    With `path` (the config file), a size field that is present but not a positive integer is a
    `BadInputError`; without it such a field is treated as absent.
    """
    if not cfg:
        return None, None
    flat = flat_config(cfg)
    if path is not None:
        for key in ("draft_vocab_size", "target_vocab_size", "vocab_size"):
            v = flat.get(key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise BadInputError(path, f"{key} is {v!r}, expected a positive integer")
            if v is not None and v > MAX_VOCAB:  # engines hold token ids in int32
                raise BadInputError(path, f"{key} = {v:,} is not a plausible vocab size (more than {MAX_VOCAB:,})")
    draft = flat.get("draft_vocab_size")
    target = flat.get("target_vocab_size", flat.get("vocab_size"))
    return (int(draft) if isinstance(draft, int) else None, int(target) if isinstance(target, int) else None)


# -- checkpoints -------------------------------------------------------------------------------------
@dataclass
class Checkpoint:
    """What a path holds: config, lazily readable tensors, and separate mapping files."""

    path: Path
    config: dict | None = None
    config_path: Path | None = None
    tensors: TensorStore = field(default_factory=TensorStore)
    mapping_files: dict[str, Path] = field(default_factory=dict)  # "d2t"/"t2d"/"dict" -> file

    @property
    def sources(self) -> list[str]:
        files = ([self.config_path] if self.config_path else []) + self.tensors.files
        files += [p for p in self.mapping_files.values() if p not in files]
        return [str(p) for p in dict.fromkeys(files)]

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


def _weight_files(folder: Path) -> list[Path]:
    names = {p.name: p for p in folder.iterdir()}
    for idx in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if idx in names:
            return [names[idx]]
    if "model.safetensors" in names:
        return [names["model.safetensors"]]
    st = sorted(p for p in names.values() if p.suffix == ".safetensors")
    if st:
        return st
    if "pytorch_model.bin" in names:
        return [names["pytorch_model.bin"]]
    return sorted(p for p in names.values() if p.suffix == ".bin")


def _mapping_side_files(folder: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for p in sorted(folder.iterdir()):
        m = _NPY_NAME.match(p.name)
        if m:
            found.setdefault(m.group(1), p)
        elif p.name in ("d2t.pt", "t2d.pt", "d2t.pth", "t2d.pth"):
            found.setdefault(p.stem, p)
    if "d2t" not in found:
        for name in ("cache.pt", "vocab_mapping.pt"):
            if (folder / name).exists():
                found["dict"] = folder / name
                break
        else:
            pts = sorted(p for p in folder.glob("*.pt") if p.name not in ("training_state.pt", "optimizer.pt"))
            if len(pts) == 1:
                found["dict"] = pts[0]
    return found


def open_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Open a checkpoint folder or a single weights / mapping file, reading no tensor data yet."""
    path = Path(path)
    try:
        exists = path.exists()
        is_dir = path.is_dir()
    except OSError as e:
        raise BadInputError(path, f"cannot be read ({e.strerror or e})") from None
    if not exists:
        if path.is_symlink():
            raise BadInputError(path, "is a broken or looping symbolic link")
        raise BadInputError(path, "no such file or folder")
    ck = Checkpoint(path=path)
    if is_dir:
        try:
            entries = list(path.iterdir())
        except OSError as e:
            raise BadInputError(path, f"folder cannot be listed ({e.strerror or e})") from None
        if not entries:
            raise BadInputError(path, "is an empty folder")
        if (path / "config.json").exists():
            ck.config_path = path / "config.json"
            ck.config = read_config(ck.config_path)
        for f in _weight_files(path):
            _add_weights(ck.tensors, f)
        ck.mapping_files = _mapping_side_files(path)
        if not ck.tensors.keys() and not ck.mapping_files:
            raise BadInputError(
                path,
                "holds no checkpoint: no model.safetensors, pytorch_model.bin, d2t/t2d (.pt/.npy) "
                "or mapping .pt file",
            )
        return ck
    # a single file
    name = path.name
    if name.endswith(".index.json"):
        ck.tensors.add_sharded_index(path)
    elif name == "config.json":
        raise BadInputError(path, "is a config, not a checkpoint: point at its folder")
    elif _NPY_NAME.match(name):
        ck.mapping_files = {k: v for k, v in _mapping_side_files(path.parent).items() if k in ("d2t", "t2d")}
        ck.mapping_files[_NPY_NAME.match(name).group(1)] = path
    elif path.suffix in (".npy",):
        raise BadInputError(path, "a .npy mapping file must be named d2t*.npy or t2d*.npy")
    elif path.suffix in WEIGHT_SUFFIXES:
        if path.stem in ("d2t", "t2d") and path.suffix != ".safetensors":
            side = _mapping_side_files(path.parent)
            ck.mapping_files = {k: v for k, v in side.items() if k in ("d2t", "t2d")}
            ck.mapping_files[path.stem] = path
        else:
            _add_weights(ck.tensors, path)
    else:
        raise BadInputError(path, f"unrecognised file type {path.suffix or '(no suffix)'}")
    cfg = path.parent / "config.json"
    if cfg.exists():
        ck.config_path, ck.config = cfg, read_config(cfg)
    return ck


def _add_weights(store: TensorStore, f: Path) -> None:
    if f.name.endswith(".index.json"):
        store.add_sharded_index(f)
    elif f.suffix == ".safetensors":
        store.add_safetensors(f)
    else:
        store.add_torch(f)


def _read_side(p: Path):
    if p.suffix == ".npy":
        arr = load_npy(p)
        if arr.dtype.kind not in "biu":  # floats get their own message from VocabMapping
            if arr.dtype.kind != "f":
                raise BadInputError(p, f"holds a {arr.dtype} array, expected integers (d2t) or bool (t2d)")
        try:
            return torch.from_numpy(np.array(arr))
        except (ValueError, OSError) as e:  # a header that promises more data than the file has
            raise BadInputError(p, f"not a readable .npy file ({_short(str(e))})") from None
    obj = torch_load(p)
    if isinstance(obj, dict):
        key = p.stem if p.stem in obj else next((k for k in ("d2t", "t2d") if k in obj), None)
        if key is None:
            raise BadInputError(p, f"holds a dict without a {p.stem!r} tensor (keys: {sorted(map(str, obj))[:6]})")
        obj = obj[key]
    return obj


def read_mapping_tensors(ck: Checkpoint) -> tuple[torch.Tensor | None, torch.Tensor | None, list[str]]:
    """(d2t, t2d, files they came from); either may be None when absent."""
    d2t = t2d = None
    used: list[str] = []
    k = ck.tensors.find("d2t")
    if k is not None:
        d2t = ck.tensors.get(k)
        used.append(str(ck.tensors.file_of(k)))
    k = ck.tensors.find("t2d")
    if k is not None:
        t2d = ck.tensors.get(k)
        used.append(str(ck.tensors.file_of(k)))
    mf = ck.mapping_files
    if d2t is None and "dict" in mf:
        obj = torch_load(mf["dict"])
        if not isinstance(obj, dict) or "d2t" not in obj:
            raise BadInputError(mf["dict"], "is not a mapping dict {'d2t', 't2d'}")
        d2t, t2d = obj["d2t"], obj.get("t2d", t2d)
        used.append(str(mf["dict"]))
    if d2t is None and "d2t" in mf:
        d2t = _read_side(mf["d2t"])
        used.append(str(mf["d2t"]))
    if t2d is None and "t2d" in mf:
        t2d = _read_side(mf["t2d"])
        used.append(str(mf["t2d"]))
    return d2t, t2d, list(dict.fromkeys(used))


def load_mapping(path: str | os.PathLike | Checkpoint) -> VocabMapping:
    """Read `d2t`/`t2d` (only those tensors) and the vocab sizes from wherever they are kept."""
    ck = path if isinstance(path, Checkpoint) else open_checkpoint(path)
    d2t, t2d, used = read_mapping_tensors(ck)
    if d2t is None:
        raise BadInputError(ck.path, "has no d2t tensor (looked in the weights and for d2t/t2d .pt/.npy files)")
    draft_cfg, target_cfg = vocab_sizes(ck.config, ck.config_path)
    where = used[0] if used else str(ck.path)
    if (
        target_cfg is None and isinstance(d2t, torch.Tensor) and isinstance(t2d, torch.Tensor)
        and d2t.dim() == 1 and t2d.dim() == 1 and d2t.numel() and not d2t.dtype.is_floating_point
        and d2t.dtype != torch.bool and int(d2t.max()) >= t2d.numel()
    ):  # the two files come from different vocabularies (a stale cached mapping, say)
        raise BadInputError(
            where,
            f"d2t holds id {int(d2t.max()):,} but t2d ({used[-1]}) has only {t2d.numel():,} entries: "
            "the two files do not belong to the same mapping",
        )
    if draft_cfg is not None and hasattr(d2t, "shape") and len(d2t.shape) == 1 and d2t.shape[0] != draft_cfg:
        raise BadInputError(
            where, f"d2t has {d2t.shape[0]:,} entries but {ck.config_path} says draft_vocab_size={draft_cfg:,}"
        )
    if target_cfg is not None and t2d is not None and hasattr(t2d, "shape") and len(t2d.shape) == 1 and t2d.shape[0] != target_cfg:
        raise BadInputError(
            used[-1], f"t2d has length {t2d.shape[0]:,} but {ck.config_path} says vocab_size={target_cfg:,}"
        )
    return VocabMapping(d2t, t2d, target_vocab_size=target_cfg, sources=used)


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
            or any(_NPY_NAME.match(n) for n in names)
            or {"d2t.pt", "t2d.pt"} & names
        ):
            found.append(d)
            return
        if depth < max_depth:
            for e in entries:
                if e.is_dir() and not e.is_symlink() and not e.name.startswith("."):
                    walk(e, depth + 1)

    walk(root, 0)
    return found


def mapping_verdict(path) -> str:
    """The d2t verdict of a checkpoint as one word for captions: offset, absolute, ... or 'no d2t'."""
    ck = open_checkpoint(path)
    d2t, _, _ = read_mapping_tensors(ck)
    return "no d2t" if d2t is None else load_mapping(ck).verdict().encoding


def inspect_path(path) -> dict:
    """The `inspect --json` object for a path: the mapping summary, key layout and files read."""
    ck = open_checkpoint(path)
    m = load_mapping(ck)
    out = m.summary()
    out["key_layout"] = ck.key_layout
    out["sources"] = m.sources
    out["path"] = str(path)
    return out
