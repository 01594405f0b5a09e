"""Hidden-state samples in SpecForge's offline layout, read one file at a time.

Layout: `FOLDER/rows_{g}-{g+N}/data_{i}.ckpt` (or `.ckpt.gz`), each a `torch.save` dict with
`input_ids` [T], `loss_mask` [T], `hidden_state` [1, T, H] (the target's last hidden state) and
`aux_hidden_state` [1, T, 3H] (three target layers concatenated). speculators' generated data
(`data_<i>.pt` with a list `hidden_states`) is read too. Every file is loaded with
`weights_only=True`; a `.gz` is decompressed in memory first. Anything unusable becomes one
`BadInputError` naming the file. A samples folder may hold a `train/` and a `val/` split as
subfolders (`split_folders`).

`capture.json` beside the files (written by `helpers.model.capture`) says what they were captured
from: `read_manifests(samples)` reads it per split as a typed `CaptureManifest` (the target's path,
model_type, layers, hidden size, vocab, config hash; the aux layers; the draft named), so a draft
can be checked against the samples before it is scored (`helpers.model.preflight.check_samples`).
"""
from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from helpers.core.errors import BadInputError
from helpers.io.tensor_files import check_readable_file, torch_load

_DATA = re.compile(r"^data_(\d+)\.(?:ckpt|pt)(\.gz)?$")
_ROWS = re.compile(r"^rows_(\d+)-(\d+)$")
KEYS = ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state")
SPLIT_NAMES = {"train": ("train",), "val": ("val", "validation", "valid", "eval", "test")}


@dataclass
class Sample:
    path: Path
    input_ids: torch.Tensor  # [T] int64
    loss_mask: torch.Tensor  # [T]
    hidden_state: torch.Tensor  # [T, H]
    aux_hidden_state: torch.Tensor  # [T, 3H]

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])

    def pin_memory(self) -> Sample:
        """A copy in pinned memory (a DataLoader with pin_memory=True calls this)."""
        return Sample(self.path, *(t.pin_memory() for t in (self.input_ids, self.loss_mask, self.hidden_state,
                                                              self.aux_hidden_state)))


def _num(p: Path) -> tuple:
    m = _DATA.match(p.name) or _ROWS.match(p.name)
    return (int(m.group(1)) if m else float("inf"), p.name)


def sample_files(folder: str | os.PathLike) -> list[Path]:
    """All `data_*.ckpt[.gz]` files under `folder` (a `rows_*` folder or its parent), in numeric order."""
    folder = Path(folder)
    if not folder.exists():
        raise BadInputError(folder, "no such file or folder")
    if folder.is_file():
        if not _DATA.match(folder.name):
            raise BadInputError(folder, "is not a sample file (expected data_<i>.ckpt, data_<i>.ckpt.gz or data_<i>.pt)")
        return [folder]
    try:
        entries = list(folder.iterdir())
    except OSError as e:
        raise BadInputError(folder, f"folder cannot be listed ({e.strerror or e})") from None
    files = sorted((p for p in entries if p.is_file() and _DATA.match(p.name)), key=_num)
    for sub in sorted((p for p in entries if p.is_dir() and _ROWS.match(p.name)), key=_num):
        files += sorted((p for p in sub.iterdir() if p.is_file() and _DATA.match(p.name)), key=_num)
    if not files:
        raise BadInputError(folder, "holds no hidden-state samples (rows_*/data_*.ckpt or .ckpt.gz)")
    return files


GZIP_MAX_RATIO = 64


def load_sample(path: str | os.PathLike, expect_aux_width: int | None = None) -> Sample:
    """Read and check one sample file."""
    path = Path(path)
    if path.name.endswith(".gz"):
        check_readable_file(path)  # refuses FIFOs and devices before anything blocks on them
        try:
            packed = path.read_bytes()
        except OSError as e:
            raise BadInputError(path, f"cannot be read ({e.strerror or e})") from None
        # Hidden states barely compress (~1.1x); cap the output so a gzip bomb cannot exhaust memory.
        limit = max(GZIP_MAX_RATIO * len(packed), 1 << 20)
        try:
            d = zlib.decompressobj(wbits=31)
            raw = d.decompress(packed, limit)
            if d.unconsumed_tail:
                raise BadInputError(
                    path, f"decompresses to more than {GZIP_MAX_RATIO}x its size: refused as a possible gzip bomb"
                )
            if not d.eof:
                raise BadInputError(path, "corrupt gzip data (the stream ends early: truncated file)")
        except (zlib.error, EOFError) as e:
            raise BadInputError(path, f"corrupt gzip data ({type(e).__name__}: {e})") from None
        if not raw:
            raise BadInputError(path, "decompresses to nothing")
        obj = torch_load(path, data=raw)  # weights_only=True, from memory
    else:
        obj = torch_load(path)
    return _check(path, obj, expect_aux_width)


def _from_speculators(path: Path, obj: dict) -> dict:
    """speculators' generated data (`data_<i>.pt`: input_ids, loss_mask, hidden_states = a list of
    [T, H] tensors, one per captured layer): the first ones are the aux states, the last is the
    last hidden state (by default the output of layer L-1, before the final norm)."""
    hs = obj["hidden_states"]
    if not isinstance(hs, (list, tuple)) or len(hs) < 2 or not all(isinstance(h, torch.Tensor) for h in hs):
        raise BadInputError(path, "hidden_states must be a list of at least 2 tensors (speculators' layout)")
    if obj.get("loss_mask") is None:
        raise BadInputError(path, "has no loss_mask (speculators' generator leaves it to its preprocessing step)")
    flat = [h.reshape(h.shape[-2], h.shape[-1]) if h.dim() == 3 else h for h in hs]
    return {"input_ids": obj["input_ids"], "loss_mask": obj["loss_mask"], "hidden_state": flat[-1],
            "aux_hidden_state": torch.cat(flat[:-1], dim=-1)}


def _check(path: Path, obj, expect_aux_width) -> Sample:
    if isinstance(obj, dict) and "hidden_states" in obj and "aux_hidden_state" not in obj:
        obj = _from_speculators(path, obj)
    if not isinstance(obj, dict):
        raise BadInputError(path, f"holds a {type(obj).__name__}, expected a dict with keys {', '.join(KEYS)}")
    missing = [k for k in KEYS if k not in obj]
    if missing:
        raise BadInputError(path, f"lacks {', '.join(missing)} (has {', '.join(sorted(map(str, obj))[:8])})")
    for k in KEYS:
        if not isinstance(obj[k], torch.Tensor):
            raise BadInputError(path, f"{k} is a {type(obj[k]).__name__}, expected a tensor")
    ids, mask, hid, aux = (obj[k] for k in KEYS)
    ids = ids.reshape(-1) if ids.dim() == 2 and ids.shape[0] == 1 else ids
    mask = mask.reshape(-1) if mask.dim() == 2 and mask.shape[0] == 1 else mask
    if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.dtype.is_complex:
        raise BadInputError(path, f"input_ids has shape {list(ids.shape)} dtype {ids.dtype}, expected [T] integers")
    T = ids.shape[0]
    if T == 0:
        raise BadInputError(path, "input_ids is empty")
    if int(ids.min()) < 0:
        raise BadInputError(path, f"input_ids holds a negative id ({int(ids.min())})")
    if mask.shape != (T,):
        raise BadInputError(path, f"loss_mask has shape {list(mask.shape)}, expected [{T}] like input_ids")
    for name, t in (("hidden_state", hid), ("aux_hidden_state", aux)):
        if t.dim() == 3 and t.shape[0] == 1:
            t = t[0]
        if t.dim() != 2 or t.shape[0] != T:
            raise BadInputError(path, f"{name} has shape {list(obj[name].shape)}, expected [1, {T}, width]")
        if not t.dtype.is_floating_point:
            raise BadInputError(path, f"{name} has dtype {t.dtype}, expected floating point")
        if not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise BadInputError(path, f"{name} holds {bad} NaN/Inf value(s)")
        if name == "hidden_state":
            hid = t
        else:
            aux = t
    if aux.shape[1] != 3 * hid.shape[1]:
        raise BadInputError(
            path, f"aux_hidden_state width {aux.shape[1]} is not 3 x hidden_state width {hid.shape[1]}"
        )
    if expect_aux_width is not None and aux.shape[1] != expect_aux_width:
        raise BadInputError(
            path,
            f"aux_hidden_state width {aux.shape[1]} does not match the checkpoint: expected "
            f"{expect_aux_width} (3 x target_hidden_size {expect_aux_width // 3})",
        )
    return Sample(path, ids.to(torch.int64), mask, hid, aux)


def iter_samples(folder, max_samples: int | None = None, expect_aux_width: int | None = None) -> Iterator[Sample]:
    """Yield checked samples one file at a time, in numeric order."""
    for i, f in enumerate(sample_files(folder)):
        if max_samples is not None and i >= max_samples:
            return
        yield load_sample(f, expect_aux_width)


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


MANIFEST = "capture.json"  # what `capture` writes beside the samples


@dataclass(frozen=True)
class CaptureManifest:
    """What a samples folder's capture.json says about where its hidden states came from (None:
    not stated). Read by `read_manifests`; every field typed, a wrong one refused naming it."""

    path: Path  # the capture.json itself
    target_path: str | None
    model_type: str | None
    num_layers: int | None
    hidden_size: int | None
    vocab_size: int | None
    target_config_sha256: str | None
    engine: str | None
    aux_layer_ids: tuple[int, ...] | None
    captured_layers: tuple[int, ...] | None
    draft: str | None

    def describe(self) -> str:
        """'data_samples/kimi_target (deepseek_v3, 8 layers, H 64, vocab 4,096)'."""
        parts = [self.model_type, None if self.num_layers is None else f"{self.num_layers} layers",
                 None if self.hidden_size is None else f"H {self.hidden_size:,}",
                 None if self.vocab_size is None else f"vocab {self.vocab_size:,}"]
        inner = ", ".join(p for p in parts if p)
        return (self.target_path or "an unnamed target") + (f" ({inner})" if inner else "")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["path"] = os.fspath(self.path)
        for k in ("aux_layer_ids", "captured_layers"):
            d[k] = None if d[k] is None else list(d[k])
        return d


def _field(f: Path, obj: dict, key: str, kind: str, where: str = ""):
    v = obj.get(key)
    if v is None:
        return None
    name = where + key
    if kind == "str":
        if not isinstance(v, str):
            raise BadInputError(f, f"{name} is {v!r}, expected a string")
        return v
    if kind == "int":
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise BadInputError(f, f"{name} is {v!r}, expected a positive integer")
        return v
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v):
        raise BadInputError(f, f"{name} is {v!r}, expected a list of layer numbers")
    return tuple(v)


def read_manifest(folder) -> CaptureManifest | None:
    """The capture.json of one samples folder (or of a rows_* folder's or a file's parent), or None."""
    folder = Path(folder)
    if folder.is_file() or _ROWS.match(folder.name):
        folder = folder.parent if not _ROWS.match(folder.parent.name) else folder.parent.parent
    f = folder / MANIFEST
    if not f.is_file():
        return None
    try:
        obj = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadInputError(f, f"cannot be read as a capture manifest ({type(e).__name__}: {e})") from None
    if not isinstance(obj, dict):
        raise BadInputError(f, f"holds a {type(obj).__name__}, expected a JSON object (a capture manifest)")
    t = obj.get("target")
    if t is not None and not isinstance(t, dict):
        raise BadInputError(f, f"target is {t!r}, expected an object (path, model_type, num_layers, ...)")
    t = t or {}
    return CaptureManifest(
        path=f, target_path=_field(f, t, "path", "str", "target."), model_type=_field(f, t, "model_type", "str", "target."),
        num_layers=_field(f, t, "num_layers", "int", "target."), hidden_size=_field(f, t, "hidden_size", "int", "target."),
        vocab_size=_field(f, t, "vocab_size", "int", "target."),
        target_config_sha256=_field(f, obj, "target_config_sha256", "str"), engine=_field(f, obj, "engine", "str"),
        aux_layer_ids=_field(f, obj, "aux_layer_ids", "ids"), captured_layers=_field(f, obj, "captured_layers", "ids"),
        draft=_field(f, obj, "draft", "str"),
    )


def read_manifests(samples) -> list[CaptureManifest]:
    """The capture manifests of a samples folder: one per split (train/, val/) or one for the
    folder; splits without one are left out (samples made by other tools have none)."""
    if not isinstance(samples, (str, os.PathLike)):
        return []
    folders = list(split_folders(samples).values()) or [Path(samples)]
    found = [read_manifest(f) for f in folders]
    if not any(found) and split_folders(samples):
        found = [read_manifest(samples)]  # one manifest above both splits
    return [m for m in found if m is not None]


ROWS_PER_FOLDER = 64  # SpecForge groups its offline files in folders of this many


def sample_path(folder, index: int, rows: int = ROWS_PER_FOLDER) -> Path:
    """Where sample `index` lives in SpecForge's layout: `rows_{g}-{g+rows}/data_{index}.ckpt`."""
    g = (index // rows) * rows
    return Path(folder) / f"rows_{g}-{g + rows}" / f"data_{index}.ckpt"


def write_sample(path, input_ids, loss_mask, hidden_state, aux_hidden_state) -> None:
    """Write one sample as SpecForge does ([T], [T], [1, T, H], [1, T, 3H]), atomically: to a
    temporary name first, renamed when complete, so an interrupted run leaves no partial file."""
    import io

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    item = {
        "input_ids": input_ids.detach().reshape(-1).to("cpu", torch.int64).clone(),
        "loss_mask": loss_mask.detach().reshape(-1).to("cpu", torch.int64).clone(),
        "hidden_state": hidden_state.detach().reshape(1, *hidden_state.shape[-2:]).cpu().contiguous().clone(),
        "aux_hidden_state": aux_hidden_state.detach().reshape(1, *aux_hidden_state.shape[-2:]).cpu().contiguous().clone(),
    }
    buf = io.BytesIO()
    torch.save(item, buf)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)  # a killed process leaves the old state or the whole file, never a part


class _Failed:
    """A worker's BadInputError, carried back as a value (the main process raises it as it was)."""

    def __init__(self, path, problem):
        self.path, self.problem = path, problem


class _SampleFiles(torch.utils.data.Dataset):
    def __init__(self, files: list[Path], expect_aux_width: int | None):
        self.files, self.width = files, expect_aux_width

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i):
        try:
            return load_sample(self.files[i], self.width)
        except BadInputError as e:
            return _Failed(e.path, e.problem)


def stream_samples(folder, max_samples: int | None = None, expect_aux_width: int | None = None, *,
                   shard: tuple[int, int] = (0, 1), workers: int = 0, pin_memory: bool = False,
                   ahead: int = 16, processes: bool = False) -> Iterator[Sample]:
    """Checked samples in numeric order, like `iter_samples`, with two additions:

    - `shard=(rank, world)`: only files i with i % world == rank (after `max_samples`);
    - `workers > 0`: files are read and decompressed ahead, up to `ahead` files in advance (make
      it at least two of the caller's batches, or the readers stall while a batch is computed),
      while the caller computes on earlier ones; order kept; pinned memory with `pin_memory` (a
      GPU consumer). The readers are threads (zlib and torch release the GIL while they work,
      and nothing is copied between processes), or with `processes=True` `DataLoader` worker
      processes, for reading that holds the GIL.
    """
    rank, world = shard
    files = sample_files(folder)[:max_samples][rank::world]
    if workers <= 0 or len(files) < 2:
        for f in files:
            s = load_sample(f, expect_aux_width)
            yield s.pin_memory() if pin_memory else s
        return
    if processes:
        yield from _process_readers(files, expect_aux_width, workers, pin_memory, ahead)
        return
    import collections
    from concurrent.futures import ThreadPoolExecutor

    def read(f):
        s = load_sample(f, expect_aux_width)
        return s.pin_memory() if pin_memory else s

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="d2t-read") as pool:
        pending = collections.deque()
        todo = iter(files)
        for f in todo:
            pending.append(pool.submit(read, f))
            if len(pending) >= max(1, ahead):
                break
        while pending:
            s = pending.popleft().result()  # a reader's BadInputError is raised here, as it was
            nxt = next(todo, None)
            if nxt is not None:
                pending.append(pool.submit(read, nxt))
            yield s


def _process_readers(files, expect_aux_width, workers, pin_memory, ahead) -> Iterator[Sample]:
    loader = torch.utils.data.DataLoader(_SampleFiles(files, expect_aux_width), batch_size=None, shuffle=False,
                                         num_workers=min(workers, len(files)), pin_memory=pin_memory,
                                         prefetch_factor=max(2, -(-ahead // min(workers, len(files)))),
                                         persistent_workers=False)
    for item in loader:
        if isinstance(item, _Failed):
            raise BadInputError(item.path, item.problem)
        yield item
