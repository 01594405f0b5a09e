"""Checkpoints where they live: `hf://ORG/REPO[@REV][/SUBDIR]` and `http(s)://` URLs, read by the byte.

`mirror(url)` turns a remote checkpoint folder (or one file of it) into a local folder in the
cache that the readers of `helpers.io.checkpoint` open as they open any folder:

- `config.json`, sharded indexes, `d2t`/`t2d` `.npy` and small `.pt` files are fetched whole;
- each `.safetensors` file becomes a *stub*: its 8-byte length and JSON header only (a few
  kilobytes, fetched with one HTTP range request), with the remote file's size recorded in the
  manifest; `helpers.io.tensor_files` reads a stub's header as a header and fetches a tensor's
  bytes (`read_range`) only when that tensor is asked for, through the `StandIn` (`stand_in`,
  `locate`) its checkpoint keeps. `inspect` of a 4 GB draft fetches its header, `d2t` and `t2d`:
  kilobytes.

Access goes through `huggingface_hub.HfFileSystem` (hf://; `HF_TOKEN` is honoured, as the hub
library does) and `fsspec`'s `HTTPFileSystem` (http/https; aiohttp underneath). No HTTP is
spoken here directly.

The cache (`cache_dir()`): `$D2T_LAB_CACHE`, else `$XDG_CACHE_HOME/d2t-lab/remote`, else
`~/.cache/d2t-lab/remote`; one folder per URL holding `files/` (the mirror), `ranges/` (tensor
bytes fetched so far), `whole/` (whole files, only from a server without range support) and the
manifest. Each cached file keeps its validators (size, ETag or the Hub's LFS hash / blob id,
Last-Modified). Online, the remote listing is read each time (a HEAD per file where the server
lists no folder) and a cached file is reused only when its size and a validator are unchanged;
a file the server gives no validator for is fetched again. With `D2T_LAB_OFFLINE=1` or
`HF_HUB_OFFLINE=1`, or when the server cannot be reached, the cache alone is used, and one line on
stderr says so and how old the copy is. `--refresh` ($D2T_LAB_REFRESH) fetches everything again.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers.core.errors import BadInputError, clip
from helpers.io.remote_access import (TIMEOUT_ENV, DeadlineExceeded, RemoteFolder, refresh, seconds_text, timed_out,
                                     timeout)

SCHEMES = ("hf://", "http://", "https://")
CACHE_ENV = "D2T_LAB_CACHE"
OFFLINE_ENVS = ("D2T_LAB_OFFLINE", "HF_HUB_OFFLINE")
MANIFEST = "d2t-lab-remote.json"
WHOLE_LIMIT = 64 << 20  # a .pt / .bin / .npy is fetched whole up to this size (or when it is the only weights)


def is_remote(path) -> bool:
    """A `hf://`, `http://` or `https://` location (a string: `Path` would collapse its `//`)."""
    return isinstance(path, str) and path.strip().lower().startswith(SCHEMES)


def cache_dir() -> Path:
    """Where remote checkpoints are cached ($D2T_LAB_CACHE overrides)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "d2t-lab" / "remote"


def offline() -> bool:
    """True when D2T_LAB_OFFLINE or HF_HUB_OFFLINE is set: only the cache is read."""
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on") for k in OFFLINE_ENVS)


def hint(path: str) -> str | None:
    """'did you mean hf://ORG/REPO?' for a missing local path that looks like a Hub location."""
    s = str(path).strip()
    if s.lower().startswith("hf:"):
        rest = s[3:].lstrip("/")
    elif s.startswith("huggingface.co/") or s.startswith("www.huggingface.co/"):
        rest = s.split("/", 1)[1]
    elif re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w.-]+)?(/[\w./-]*)?", s) and not s.startswith("."):
        rest = s
    else:
        return None
    return f"did you mean hf://{rest or 'ORG/REPO'}?"


# -- the cache ---------------------------------------------------------------------------------------
def _folder_for(url: str) -> Path:
    slug = re.sub(r"[^\w.-]+", "_", url.split("://", 1)[-1])[:80].strip("_")
    return cache_dir() / f"{slug}-{hashlib.sha256(url.encode()).hexdigest()[:12]}"


def _load_manifest(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def _network_problem(e: Exception) -> bool:
    """A failure to reach the server (as opposed to an answer saying 'no such repo/file')."""
    names = {c.__name__ for c in type(e).__mro__}
    return bool(names & {"ConnectionError", "ConnectError", "ClientConnectorError", "ClientConnectionError",
                         "TimeoutError", "TimeoutException", "OfflineModeIsEnabled", "ServerDisconnectedError",
                         "gaierror"})


def mirror(url: str, whole_limit: int | None = None) -> Path:
    """The local stand-in for a remote checkpoint (a folder, or the file the URL names).

    `.pt` / `.bin` weights cannot be read by range: they are fetched whole when they are the only
    weights, unless larger than `whole_limit` bytes (then left out, as beside safetensors).
    """
    url = url.strip()
    folder = _folder_for(url)
    manifest = _load_manifest(folder)
    if offline():
        if manifest is None:
            raise BadInputError(url, f"is not in the cache ({folder}) and offline mode is on "
                                "(D2T_LAB_OFFLINE / HF_HUB_OFFLINE): run the command once online")
        _note_cached(url, folder, manifest, "offline mode is on")
        return _entry(folder, manifest)
    token, stale = refresh(), None
    if token and manifest is not None and manifest.get("refreshed") != token:
        stale, manifest = manifest, None  # --refresh: everything fetched again, once in this run (its notebooks too)
    try:
        remote = RemoteFolder(url, folder)
        listing = remote.listing()
    except BadInputError:
        raise
    except Exception as e:  # noqa: BLE001 - every library error becomes one line, or the cache
        if manifest is not None and _network_problem(e):
            _note_cached(url, folder, manifest, "the server cannot be reached" if not timed_out(e) else
                         f"the server did not answer within {_waited(e)} s")
            return _entry(folder, manifest)
        if timed_out(e):
            raise BadInputError(url, _no_answer(e)) from None
        if _network_problem(e) and stale is not None:
            raise BadInputError(url, f"cannot be reached ({_say(e)[len('cannot be read ('):-1]}) and --refresh asks "
                                "for a fresh copy: run without --refresh to use the cached one") from None
        if _network_problem(e):
            raise BadInputError(url, f"cannot be reached ({_say(e)[len('cannot be read ('):-1]}) and is not in the "
                                f"cache ({folder})") from None
        raise BadInputError(url, _say(e)) from None
    if not listing:
        raise BadInputError(url, "holds no checkpoint files (looked for config.json, *.safetensors, "
                            "d2t/t2d .npy/.pt, pytorch_model.bin)")
    try:
        return _sync(remote, folder, manifest, listing, whole_limit, refreshed=token)
    except BadInputError as e:
        raise BadInputError(url if e.path is None else e.path, e.problem) from None
    except Exception as e:  # noqa: BLE001 - a read that failed half-way: one line, the cache as it was
        raise BadInputError(url, _say(e)) from None


def _note_cached(url: str, folder: Path, manifest: dict, why: str) -> None:
    """One line on stderr: the cached copy is used unverified, and how old it is."""
    at = manifest.get("checked_at")
    if not isinstance(at, (int, float)):
        try:
            at = (folder / MANIFEST).stat().st_mtime
        except OSError:
            at = None
    age = "" if at is None else (f" from {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(at))}, "
                                 f"{_age(time.time() - at)} old")
    key = (url, why, id(sys.stderr))
    if key in _NOTED:  # once per command, however often it opens the location
        return
    _NOTED.add(key)
    print(f"note: {url}: {why}; using the cached copy{age}, not checked against the server "
          "(--refresh fetches it again once online)", file=sys.stderr, flush=True)


_NOTED: set = set()


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, k in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= k:
            return f"{seconds / k:.1f} {unit}" if unit == "days" else f"{seconds / k:.0f} {unit}"
    return f"{seconds:.0f} s"


def _waited(e: BaseException | None) -> str:
    return seconds_text(e.seconds if isinstance(e, DeadlineExceeded) else timeout())


def _no_answer(e: BaseException | None = None) -> str:
    return (f"the server did not answer within {_waited(e)} s (--timeout SECONDS, or ${TIMEOUT_ENV}); "
            "check the address or try again later")


def _say(e: Exception) -> str:
    if timed_out(e):
        return _no_answer(e)
    name = type(e).__name__
    status = getattr(getattr(e, "response", None), "status_code", None)
    if name in ("RepositoryNotFoundError", "GatedRepoError") or status in (401, 403, 404) and "/api/" in str(e):
        return ("cannot be read: repository not found or access refused (a private or gated repo needs HF_TOKEN "
                "in the environment)")
    if name in ("RevisionNotFoundError",):
        return "cannot be read: no such revision"
    if isinstance(e, FileNotFoundError) or name == "EntryNotFoundError":
        return "no such file or folder on the server"
    return f"cannot be read ({name}: {clip(str(e), 120)})"


def _sync(remote: RemoteFolder, folder: Path, old: dict | None, listing: dict, whole_limit: int | None = None,
          refreshed: str | None = None) -> Path:
    files = folder / "files"
    files.mkdir(parents=True, exist_ok=True)
    (folder / "ranges").mkdir(exist_ok=True)
    old_files = (old or {}).get("files", {})
    has_st = any(n.endswith(".safetensors") for n in listing)
    entries = {}
    for name, info in sorted(listing.items()):
        kind = _kind(name, info["size"], has_st, remote.single and name == remote.target.rsplit("/", 1)[1], whole_limit)
        if kind is None:
            continue
        cached = old_files.get(name, {})
        fresh = _still_valid(cached, info) and (files / name).exists()
        fetched_at = cached.get("fetched_at") if fresh else time.time()  # before the bytes: racy edits show
        if not fresh:
            _drop_ranges(folder, name)
            if kind == "stub":
                _write_stub(remote, files / name, name, info["size"])
            else:
                (files / name).write_bytes(remote.read(name, 0, info["size"], info["size"]))
        entries[name] = {"size": info["size"], "etag": info["etag"], "last_modified": info.get("last_modified"),
                         "kind": kind, "fetched_at": fetched_at}
    for name in set(old_files) - set(entries):
        (files / name).unlink(missing_ok=True)
        _drop_ranges(folder, name)
    manifest = {"url": remote.url, "base": _display_base(remote), "single": remote.single,
                "entry": remote.target.rsplit("/", 1)[1] if remote.single else None, "files": entries,
                "checked_at": time.time(), "refreshed": refreshed}
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(folder / MANIFEST)
    return _entry(folder, manifest)


def _still_valid(cached: dict, now: dict) -> bool:
    """A cached file matches the server's: same size, and the same ETag (or LFS hash / blob id), else
    the same Last-Modified. With no validator on either side it cannot be trusted: fetch again. A
    Last-Modified has whole seconds: one not clearly older than the copy (a file rewritten in the
    second it was fetched keeps its Last-Modified) cannot vouch for it either."""
    if cached.get("size") != now["size"]:
        return False
    if now.get("etag") or cached.get("etag"):
        return cached.get("etag") == now.get("etag")
    if now.get("last_modified") or cached.get("last_modified"):
        if cached.get("last_modified") != now.get("last_modified"):
            return False
        stamp, at = _http_time(now.get("last_modified")), cached.get("fetched_at")
        return stamp is not None and isinstance(at, (int, float)) and stamp < at - 2
    return False


def _http_time(text) -> float | None:
    from email.utils import parsedate_to_datetime

    try:
        return parsedate_to_datetime(str(text)).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _display_base(remote: RemoteFolder) -> str:
    if remote.url.lower().startswith("hf://"):
        return "hf://" + remote.base
    return remote.base


def _kind(name: str, size: int, has_st: bool, named: bool, whole_limit: int | None = None) -> str | None:
    if name.endswith(".safetensors"):
        return "stub"
    if name.endswith(".json"):
        return "whole"
    if name.endswith((".npy", ".pt", ".pth", ".bin")):
        if size <= WHOLE_LIMIT:
            return "whole"
        if whole_limit is not None and size > whole_limit:
            return None
        return "whole" if named or not has_st else None
    return None


def _write_stub(remote: RemoteFolder, dst: Path, name: str, size: int) -> None:
    if size < 8:
        dst.write_bytes(remote.read(name, 0, size, size))
        return
    head = remote.read(name, 0, 8, size)
    n = int.from_bytes(head, "little")
    if n > size - 8 or n > 100_000_000:
        dst.write_bytes(head)  # the header check names the problem when the stub is read
        return
    dst.write_bytes(head + remote.read(name, 8, 8 + n, size))


def _drop_ranges(folder: Path, name: str) -> None:
    (folder / "whole" / name).unlink(missing_ok=True)
    for p in (folder / "ranges").glob(f"{name}.*.bin"):
        p.unlink(missing_ok=True)


def _entry(folder: Path, manifest: dict) -> Path:
    files = folder / "files"
    return files / manifest["entry"] if manifest.get("single") else files


# -- what the file readers ask ----------------------------------------------------------------------
def _stub_manifest(path: Path) -> tuple[Path, dict] | None:
    path = Path(path)
    if path.parent.name != "files":
        return None
    folder = path.parent.parent
    if not (folder / MANIFEST).is_file():
        return None
    m = _load_manifest(folder)
    return (folder, m) if m else None


def read_range(path, start: int, end: int) -> bytes:
    """Bytes [start, end) of the remote file a stub stands for: from the cache, else fetched (and cached)."""
    path = Path(path)
    folder, m = _stub_manifest(path)
    cached = folder / "ranges" / f"{path.name}.{start}-{end}.bin"
    if cached.is_file() and cached.stat().st_size == end - start:
        return cached.read_bytes()
    shown = display(path)
    if offline():
        raise BadInputError(shown, f"bytes {start:,}-{end:,} are not in the cache and offline mode is on: run once online")
    try:
        data = RemoteFolder(m["url"], folder).read(path.name, start, end, int(m["files"][path.name]["size"]))
    except BadInputError:
        raise
    except Exception as e:  # noqa: BLE001
        raise BadInputError(shown, _say(e)) from None
    tmp = cached.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(cached)
    return data


def display(path) -> str:
    """A mirror path as the URL it stands for (any other path unchanged), for messages and sources."""
    p = Path(path)
    for cand in (p, p.parent):
        if cand.name == "files" and (cand.parent / MANIFEST).is_file():
            m = _load_manifest(cand.parent)
            if m:
                rel = p.relative_to(cand)
                return m["base"] + ("/" + rel.as_posix() if str(rel) != "." else "")
    return os.fspath(path)


@dataclass(frozen=True)
class StandIn:
    """A remote location's cached local stand-in, read once when a checkpoint is opened: the
    `Checkpoint` and its `TensorStore` keep it, and ask it (not this module) how a local file is
    named and which safetensors files are stubs of remote ones."""

    url: str  # as given
    path: Path  # the entry: the mirror's `files/` folder, or the one file the URL names
    root: Path  # the mirror's `files/` folder
    base: str  # the URL `root` stands for
    stubs: dict[str, int] = field(default_factory=dict)  # safetensors stub name -> the remote file's size

    def display(self, path) -> str:
        """A file of the stand-in as the URL it stands for (any other path unchanged)."""
        p = Path(path)
        try:
            rel = p.relative_to(self.root)
        except ValueError:
            return os.fspath(path)
        return self.base + ("/" + rel.as_posix() if str(rel) != "." else "")

    def stub_size(self, path) -> int | None:
        """The remote file's size when `path` is a safetensors stub of this stand-in, else None."""
        p = Path(path)
        return self.stubs.get(p.name) if p.parent == self.root else None

    def read_range(self, path, start: int, end: int) -> bytes:
        """Bytes [start, end) of the remote file the stub `path` stands for (cached, else fetched)."""
        return read_range(path, start, end)


def stand_in(url: str, whole_limit: int | None = None) -> StandIn:
    """`mirror(url)` with what the readers need of its manifest, read once."""
    entry = mirror(url, whole_limit=whole_limit)
    found = stand_in_at(entry)
    if found is None:  # a mirror always has its manifest; this is a cache emptied under us
        raise BadInputError(url, f"its cached copy ({entry}) has no manifest: run again with --refresh")
    return StandIn(url=str(url).strip(), path=entry, root=found.root, base=found.base, stubs=found.stubs)


def stand_in_at(path) -> StandIn | None:
    """The stand-in a local path lies in (a mirror's `files/` folder or a file of it), else None."""
    p = Path(path)
    for cand in (p, p.parent):
        if cand.name == "files" and (cand.parent / MANIFEST).is_file():
            m = _load_manifest(cand.parent)
            if m and m.get("base"):
                stubs = {name: int(info["size"]) for name, info in (m.get("files") or {}).items()
                         if isinstance(info, dict) and info.get("kind") == "stub"}
                return StandIn(url=m.get("url") or m["base"], path=p, root=cand, base=m["base"], stubs=stubs)
    return None


def locate(path, whole_limit: int | None = None) -> tuple[StandIn | None, str | None]:
    """(stand-in, tip) for a location: a URL's stand-in, fetched (`stand_in`); a local path's, when
    it lies in the cache (`stand_in_at`), with the 'did you mean hf://' tip for when it is missing."""
    if is_remote(path):
        return stand_in(path, whole_limit=whole_limit), None
    return stand_in_at(path), hint(os.fspath(path))


def via_mirror(url: str, opener):
    """`opener` on the local stand-in of a remote location, its messages naming the URL."""
    try:
        return opener(mirror(url))
    except BadInputError as e:
        if e.path is None:
            raise
        raise BadInputError(display(e.path), e.problem) from None
