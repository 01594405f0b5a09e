"""Reading tensor files safely and lazily: torch files, .npy arrays, safetensors headers.

`torch_load` (always `weights_only=True`), `load_npy` (`mmap_mode`, no pickles) and
`read_safetensors_header` (8 bytes and the JSON header, checked as safetensors checks it) read
one file each; `TensorStore` holds the tensors of one checkpoint by name, reading a tensor only
when asked for it. `check_readable_file` refuses what would block or mislead before anything is
opened (FIFOs, devices, folders, empty or unreadable files). Every problem with a file becomes
one `BadInputError` naming the file. Which files a checkpoint holds is `helpers.io.layout`'s
decision, opening them `helpers.io.checkpoint`'s; this module knows nothing about EAGLE-3.
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
from pathlib import Path

import numpy as np
import torch

from helpers.core.errors import BadInputError


def torch_load(path: str | os.PathLike, *, mmap: bool = True, data: bytes | None = None):
    """`torch.load` with `weights_only=True`, as a one-line `BadInputError` on any failure.

    Pickles that would build arbitrary objects (and so could run code) are refused by
    `weights_only=True` before anything runs. `data`: the file's bytes already in memory (a
    decompressed `.gz`, say); `path` then only names it in messages.
    """
    path = Path(path)
    if data is None:
        check_readable_file(path)
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
        raise BadInputError(path, f"not a readable torch file ({short_message(msg)})") from None
    except RecursionError:
        raise BadInputError(path, "not a readable torch file (pickle nested too deeply)") from None
    except RuntimeError as e:
        msg = str(e)
        if mmap and ("mmap" in msg or "zip" in msg.lower() and "legacy" in msg.lower()):
            return torch_load(path, mmap=False)
        raise BadInputError(path, f"not a readable torch file ({short_message(msg)})") from None
    except (EOFError, zipfile.BadZipFile, ValueError, OSError, TypeError, AttributeError, KeyError, IndexError) as e:
        raise BadInputError(path, f"not a readable torch file ({type(e).__name__}: {short_message(str(e))})") from None


def short_message(msg: str, n: int = 160) -> str:
    """A library's error message as one printable line of at most `n` characters."""
    msg = re.sub(r"\x1b\[[0-9;]*m", "", msg)  # terminal colour codes some libraries put in messages
    msg = " ".join("".join(c if c.isprintable() else " " for c in msg).split())
    return msg if len(msg) <= n else msg[: n - 3] + "..."


def check_readable_file(path: Path) -> None:
    """A `BadInputError` unless `path` is a non-empty regular file this process may read."""
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
    """A `.npy` array, memory-mapped; pickled object arrays are refused."""
    path = Path(path)
    check_readable_file(path)
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        if "pickle" in str(e).lower() or "Python objects" in str(e):
            raise BadInputError(path, "refused: the .npy holds pickled objects, not a plain array") from None
        raise BadInputError(path, f"not a readable .npy file ({short_message(str(e))})") from None
    except (OSError, EOFError) as e:
        raise BadInputError(path, f"not a readable .npy file ({short_message(str(e))})") from None


def read_mapping_file(p: Path):
    """The d2t or t2d tensor of a file named for it: a .npy array, or a .pt tensor (or dict holding it)."""
    if p.suffix == ".npy":
        arr = load_npy(p)
        if arr.dtype.kind not in "biu":  # floats get their own message from VocabMapping
            if arr.dtype.kind != "f":
                raise BadInputError(p, f"holds a {arr.dtype} array, expected integers (d2t) or bool (t2d)")
        try:
            return torch.from_numpy(np.array(arr))
        except (ValueError, OSError) as e:  # a header that promises more data than the file has
            raise BadInputError(p, f"not a readable .npy file ({short_message(str(e))})") from None
    obj = torch_load(p)
    if isinstance(obj, dict):
        key = p.stem if p.stem in obj else next((k for k in ("d2t", "t2d") if k in obj), None)
        if key is None:
            raise BadInputError(p, f"holds a dict without a {p.stem!r} tensor (keys: {sorted(map(str, obj))[:6]})")
        obj = obj[key]
    return obj


STATE_DICT_KEYS = ("state_dict", "draft_state_dict")  # containers a torch file may keep its tensors in


def unwrap_state_dict(obj):
    """The dict of tensors inside a loaded torch file: `obj[k]` for a container key, else `obj`."""
    if isinstance(obj, dict):
        for k in STATE_DICT_KEYS:
            if isinstance(obj.get(k), dict):
                return obj[k]
    return obj


class TensorStore:
    """The tensors of one checkpoint, by name, read lazily from one or more files."""

    def __init__(self, stand_in=None) -> None:
        self.stand_in = stand_in  # `helpers.io.remote.StandIn` when the files are a remote checkpoint's cached stand-in
        self._where: dict[str, tuple[Path, str]] = {}  # name -> (file, kind)
        self._torch_cache: dict[Path, dict] = {}
        self._meta: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
        self._spans: dict[str, tuple[int, int]] = {}  # safetensors: name -> byte span in its file
        self._read: dict[str, torch.Tensor] = {}  # tensors `read_all` holds, on the CPU as stored
        self._lazy: dict[str, object] = {}  # name -> a callable returning the tensor (`add_lazy`)
        self.files: list[Path] = []
        # a tensor stored in more than one shard of a sharded checkpoint: name -> the files holding it
        # (the index's shard is the one read); and weights files beside an index that were not read
        self.duplicates: dict[str, list[Path]] = {}
        self.unread: dict[Path, str] = {}

    # construction
    def add_safetensors(self, path: Path) -> None:
        # Only the JSON header is read here (not `safe_open`, which maps the whole file: that fails
        # for a file larger than memory, and the draft loader must see shapes first to refuse it).
        spans: dict[str, tuple[int, int]] = {}
        size = self.stand_in.stub_size(path) if self.stand_in is not None else None
        shown = self.stand_in.display(path) if self.stand_in is not None else None
        for k, (shape, dtype) in read_safetensors_header(path, spans, size=size, shown=shown).items():
            self._where[k] = (path, "remote" if size is not None else "safetensors")
            self._meta[k] = (shape, dtype)
            self._spans[k] = spans[k]
        self.files.append(path)

    def add_files(self, files: list[Path], check=None, beside: list[Path] = ()) -> None:
        """Add weights files in order (`add_file`); `beside`: single-file weights lying beside the sharded
        index `files[0]`, noted in `unread` when the index does not name them (a stray single-file
        export, an older save)."""
        for f in files:
            self.add_file(f, check)
        for p in beside:
            if p not in self.files:
                self.unread[p] = (f"a single-file checkpoint beside the sharded index {files[0].name}: "
                                  "the index's shards were read, this file was not")

    def add_file(self, f: Path, check=None) -> None:
        """Add one weights file: a sharded index, a safetensors file, or a torch file (`check(f, obj)`:
        called on a `.pt` / `.pth` file's content first, to refuse what is no weights)."""
        if f.name.endswith(".index.json"):
            self.add_sharded_index(f)
        elif f.suffix == ".safetensors":
            self.add_safetensors(f)
        elif check is not None and f.suffix in (".pt", ".pth"):
            obj = torch_load(f)
            check(f, obj)
            self.add_torch(f, obj)
        else:
            self.add_torch(f)

    def add_torch(self, path: Path, obj=None) -> None:
        """Add the tensors of a torch file (`obj`: its content, when already loaded).

        A dict of tensors, or one holding them under `state_dict` or `draft_state_dict` (SpecForge's
        `training_state.pt`); non-tensor entries (step counters, ids) are skipped.
        """
        obj = torch_load(path) if obj is None else obj
        obj = unwrap_state_dict(obj)
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

    def add_lazy(self, path: Path, name: str, shape: tuple[int, ...], dtype: torch.dtype, read) -> None:
        """Add one tensor of `path` that `read()` returns when asked for (a file format with its own reader,
        such as GGUF: `helpers.io.gguf_files`); `shape` and `dtype` are what `read()` returns."""
        self._where[name] = (path, "lazy")
        self._meta[name] = (tuple(shape), dtype)
        self._lazy[name] = read
        if path not in self.files:
            self.files.append(path)

    def add_sharded_index(self, index: Path) -> None:
        check_readable_file(index)
        try:
            data = json.loads(index.read_text())
            weight_map = data["weight_map"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
            raise BadInputError(index, f"not a valid sharded index ({type(e).__name__}: {short_message(str(e))})") from None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise BadInputError(index, "not a valid sharded index (weight_map must map tensor names to shard file names)")
        shards = sorted(set(weight_map.values()))
        for shard in shards:
            if Path(shard).name != shard or shard in ("", ".", ".."):
                raise BadInputError(index, f"names shard {shard!r}, which is not a file name in the index's folder")
            p = index.parent / shard
            if not p.exists():
                raise BadInputError(index, f"names shard {shard} which does not exist")
        held: dict[str, list[Path]] = {}  # tensor name -> the shards that hold it
        for shard in shards:
            p = index.parent / shard
            before = set(self._where)
            if p.suffix == ".safetensors":
                self.add_safetensors(p)
            else:
                self.add_torch(p)
            for k in (set(self._where) - before) | {k for k in before if self._where[k][0] == p}:
                held.setdefault(k, []).append(p)
        for k, files in held.items():
            if len(files) > 1:  # the same name in two shards: the index says which one a loader reads
                self.duplicates[k] = files
                named = index.parent / weight_map[k] if k in weight_map else files[0]
                if self._where[k][0] != named:
                    self._reread(named, k)

    def _reread(self, path: Path, name: str) -> None:
        """Point `name` at its copy in `path` (a shard read before another that holds the same name)."""
        if path.suffix == ".safetensors":
            spans: dict[str, tuple[int, int]] = {}
            size = self.stand_in.stub_size(path) if self.stand_in is not None else None
            meta = read_safetensors_header(path, spans, size=size)
            self._where[name] = (path, "remote" if size is not None else "safetensors")
            self._meta[name], self._spans[name] = meta[name], spans[name]
        else:
            t = self._torch_cache[path][name] if path in self._torch_cache else unwrap_state_dict(torch_load(path))[name]
            self._where[name] = (path, "torch")
            self._meta[name] = (tuple(t.shape), t.dtype)

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

    def read_all(self, names=None) -> None:
        """Read `names` (default: every tensor) with one pass over each file; `get` then serves them
        from memory until `release`. What a caller that needs a whole checkpoint uses, so each file
        is opened once rather than once per tensor."""
        by_file: dict[Path, list[str]] = {}
        for n in (self.keys() if names is None else names):
            if n not in self._read:
                by_file.setdefault(self._where[n][0], []).append(n)
        for path, group in by_file.items():
            if self._where[group[0]][1] != "safetensors":
                for n in group:
                    self._read[n] = self.get(n)
                continue
            from safetensors import safe_open

            try:
                with safe_open(str(path), framework="pt", device="cpu") as f:
                    for n in group:
                        self._read[n] = f.get_tensor(n)
            except Exception as e:
                raise BadInputError(path, f"tensors cannot be read ({_safetensors_problem(str(e))})") from None

    def release(self) -> None:
        """Forget what `read_all` read."""
        self._read.clear()

    def get(self, name: str, device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> torch.Tensor:
        """Read one tensor (only that one) onto `device`, cast to `dtype` if given."""
        path, kind = self._where[name]
        if name in self._read:
            t = self._read[name]
        elif kind == "remote":  # a stub of a remote file: only this tensor's bytes are fetched
            t = self._from_bytes(name, *self._spans[name])
        elif kind == "lazy":
            t = self._lazy[name]()
        elif kind == "safetensors":
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

    def get_rows(self, name: str, a: int, b: int) -> torch.Tensor:
        """Rows [a, b) of a tensor, reading only those rows where the file allows it."""
        path, kind = self._where[name]
        shape = self._meta[name][0]
        if kind == "remote" and len(shape) >= 1:
            b = min(b, shape[0])
            row = self.nbytes(name) // max(shape[0], 1)
            start = self._spans[name][0]
            return self._from_bytes(name, start + a * row, start + b * row, (b - a, *shape[1:]))
        if kind == "safetensors":
            from safetensors import safe_open

            try:  # a fresh mapping per call, so pages read are released after each chunk
                with safe_open(str(path), framework="pt", device="cpu") as f:
                    return f.get_slice(name)[a:b]
            except Exception as e:
                raise BadInputError(path, f"tensor {name!r} cannot be read ({_safetensors_problem(str(e))})") from None
        return self.get(name)[a:b]

    def _from_bytes(self, name: str, start: int, end: int, shape=None) -> torch.Tensor:
        shape = self._meta[name][0] if shape is None else shape
        dtype = self._meta[name][1]
        raw = self.stand_in.read_range(self._where[name][0], start, end)
        if not raw:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)

    def find(self, short: str) -> str | None:
        """The key named `short`, or ending in `.short` (for prefixed exports)."""
        return find_key(self._where, short)


def find_key(names, short: str) -> str | None:
    """The name `short` among `names`, or the one name ending in `.short` (for prefixed exports)."""
    if short in names:
        return short
    hits = [k for k in names if k.endswith("." + short)]
    return hits[0] if len(hits) == 1 else None


_ST_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
                "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_ST_MAX_HEADER = 100_000_000  # safetensors' own limit


def read_safetensors_header(path: str | os.PathLike, spans: dict | None = None, *, size: int | None = None,
                            shown: str | None = None) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """{tensor name: (shape, dtype)} from a safetensors file's header, checked as safetensors does.

    Reads 8 bytes and the JSON header, nothing else; every inconsistency (truncated file, corrupt
    header, shapes that do not match the data offsets) is a `BadInputError` naming the file.
    `spans`, when given, receives each tensor's byte span in the file. A stub of a remote file
    (`helpers.io.remote`) is checked against the remote file's `size` and named by its URL (`shown`).
    """
    path = Path(path)
    check_readable_file(path)
    shown = os.fspath(path) if shown is None else shown
    bad = lambda words: BadInputError(shown, f"not a readable safetensors file: {words}")  # noqa: E731
    size = path.stat().st_size if size is None else size
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
    found = []
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
        found.append((begin, end))
        if spans is not None:
            spans[name] = (8 + n + begin, 8 + n + end)
    data = size - 8 - n
    pos = 0
    for begin, end in sorted(found):
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
            return f"{words} [{short_message(msg, 100)}]"
    return short_message(msg)


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
