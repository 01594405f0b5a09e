"""Checkpoints where they live: `hf://ORG/REPO[@REV][/SUBDIR]` and `http(s)://` URLs, read by the byte.

`mirror(url)` turns a remote checkpoint folder (or one file of it) into a local folder in the
cache that the readers of `helpers.io.checkpoint` open as they open any folder:

- `config.json`, sharded indexes, `d2t`/`t2d` `.npy` and small `.pt` files are fetched whole;
- each `.safetensors` file becomes a *stub*: its 8-byte length and JSON header only (a few
  kilobytes, fetched with one HTTP range request), with the remote file's size recorded in the
  manifest; `helpers.io.tensor_files` reads a stub's header as a header and fetches a tensor's
  bytes (`read_range`) only when that tensor is asked for. `inspect` of a 4 GB draft fetches
  its header, `d2t` and `t2d`: kilobytes.

Access goes through `huggingface_hub.HfFileSystem` (hf://; `HF_TOKEN` is honoured, as the hub
library does) and `fsspec`'s `HTTPFileSystem` (http/https; aiohttp underneath). No HTTP is
spoken here directly.

The cache (`cache_dir()`): `$D2T_LAB_CACHE`, else `$XDG_CACHE_HOME/d2t-lab/remote`, else
`~/.cache/d2t-lab/remote`; one folder per URL holding `files/` (the mirror), `ranges/` (tensor
bytes fetched so far), `whole/` (whole files, only from a server without range support) and the
manifest. Online, the remote listing is read each time (sizes and
ETags / LFS hashes) and a cached file is reused only when they are unchanged; with
`D2T_LAB_OFFLINE=1` or `HF_HUB_OFFLINE=1`, or when the network fails, the cache alone is used.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from helpers.core.errors import BadInputError, clip

TIMEOUT_ENV = "D2T_LAB_TIMEOUT"
DEFAULT_TIMEOUT = 30.0  # seconds to connect, and between two reads of one answer
SCHEMES = ("hf://", "http://", "https://")
CACHE_ENV = "D2T_LAB_CACHE"
OFFLINE_ENVS = ("D2T_LAB_OFFLINE", "HF_HUB_OFFLINE")
MANIFEST = "d2t-lab-remote.json"
WHOLE_LIMIT = 64 << 20  # a .pt / .bin / .npy is fetched whole up to this size (or when it is the only weights)
PROBED = ("config.json", "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
          "pytorch_model.bin.index.json", "d2t.npy", "t2d.npy", "d2t.pt", "t2d.pt", "training_state.pt")
_FILE_SUFFIXES = (".safetensors", ".json", ".npy", ".pt", ".pth", ".bin")
_HF = re.compile(r"^hf://(?P<org>[^/@\s]+)/(?P<repo>[^/@\s]+)(?:@(?P<rev>[^/\s]+))?(?:/(?P<sub>.*))?$")


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


def timeout() -> float:
    """Seconds every remote call waits to connect and between reads: `--timeout` (which sets
    $D2T_LAB_TIMEOUT), else the default. A server that accepts and never answers ends here."""
    try:
        t = float(os.environ.get(TIMEOUT_ENV, "") or DEFAULT_TIMEOUT)
    except ValueError:
        raise BadInputError(None, f"${TIMEOUT_ENV} must be a number of seconds, got {os.environ[TIMEOUT_ENV]!r}") from None
    if not t > 0:
        raise BadInputError(None, f"--timeout must be a positive number of seconds, got {t:g}")
    return t


def set_timeout(seconds: float | None) -> None:
    """`--timeout SECONDS` for this process and the processes it starts (None: unchanged)."""
    if seconds is not None:
        if not seconds > 0:
            raise BadInputError(None, f"--timeout must be a positive number of seconds, got {seconds:g}")
        os.environ[TIMEOUT_ENV] = repr(float(seconds))


def _timed_out(e: BaseException) -> bool:
    names = {c.__name__ for c in type(e).__mro__}
    return bool(names & {"TimeoutError", "ServerTimeoutError", "ConnectionTimeoutError", "SocketTimeoutError",
                         "ReadTimeout", "ConnectTimeout", "TimeoutException", "FSTimeoutError"})


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


# -- one remote folder -----------------------------------------------------------------------------
class _Remote:
    """A remote folder on an fsspec filesystem: listing, range reads, whole reads."""

    def __init__(self, url: str, folder: Path | None = None):
        self.url = url.strip()
        self.folder = folder  # the cache folder: where a whole file goes when the server has no range support
        self.timeout = timeout()
        m = _HF.match(self.url)
        if self.url.lower().startswith("hf://"):
            if not m:
                raise BadInputError(self.url, "is not a Hub location: expected hf://ORG/REPO[@REVISION][/SUBFOLDER]")
            from huggingface_hub import HfFileSystem, constants

            secs = max(1, int(round(self.timeout)))  # the hub library reads these for every call
            constants.HF_HUB_ETAG_TIMEOUT = constants.HF_HUB_DOWNLOAD_TIMEOUT = secs
            self.fs = HfFileSystem(token=os.environ.get("HF_TOKEN") or None, endpoint=os.environ.get("HF_ENDPOINT") or None)
            repo = f"{m['org']}/{m['repo']}" + (f"@{m['rev']}" if m["rev"] else "")
            self.target = repo + (f"/{m['sub'].strip('/')}" if m["sub"] and m["sub"].strip("/") else "")
            self.sep_base = self.target
        else:
            import aiohttp
            from fsspec.implementations.http import HTTPFileSystem

            headers = {}
            token = os.environ.get("HF_TOKEN")
            if token and re.match(r"^https?://([\w-]+\.)*huggingface\.co(/|$)", self.url):
                headers["Authorization"] = f"Bearer {token}"
            limits = aiohttp.ClientTimeout(total=None, connect=self.timeout, sock_connect=self.timeout,
                                           sock_read=self.timeout)
            # skip_instance_cache: a cached filesystem would keep an earlier call's timeout
            self.fs = HTTPFileSystem(headers=headers, client_kwargs={"timeout": limits}, skip_instance_cache=True)
            self.target = self.url
        self.single = _looks_like_file(self.target)
        self.base = self.target.rsplit("/", 1)[0] if self.single else self.target.rstrip("/")

    def path_of(self, name: str) -> str:
        return f"{self.base}/{name}"

    def listing(self) -> dict[str, dict]:
        """{file name: {size, etag}} of the files a checkpoint reader may need."""
        names = self._names()
        if self.single:
            stem = self.target.rsplit("/", 1)[1]
            want = {stem, "config.json"}
            if stem.endswith(".index.json"):  # a sharded index: its shards are stubbed like any safetensors
                want |= {n for n in names if n.endswith(".safetensors")}
            if re.match(r"^(d2t|t2d)", stem):
                want |= {n for n in names if re.match(r"^(d2t|t2d)([-_]\d+)?\.(npy|pt|pth)$", n)}
            names = {n: v for n, v in names.items() if n in want}
        infos = {}
        for name, info in names.items():
            if info is None:
                try:
                    info = self.fs.info(self.path_of(name))
                except FileNotFoundError:
                    continue
            infos[name] = {"size": int(info.get("size") or 0), "etag": _etag(info)}
        return infos

    def _names(self) -> dict[str, dict | None]:
        """Names in the folder (with their info where the listing gives it)."""
        try:
            entries = self.fs.ls(self.base, detail=True)
        except FileNotFoundError:
            entries = []
        except Exception as e:
            if isinstance(self.fs, _hf_type()) or _timed_out(e):
                raise  # a server that does not answer is not probed name by name
            entries = []  # many web servers give no folder listing: probe the usual names instead
        out: dict[str, dict | None] = {}
        for e in entries:
            full = str(e.get("name", "")).rstrip("/")
            if e.get("type") == "directory" or not full:
                continue
            name = full.rsplit("/", 1)[-1]
            if not _relevant(name):
                continue
            if full.startswith(self.base + "/") or not full.startswith(("http://", "https://")):
                out[name] = e if e.get("size") is not None else None
        if not out:
            out = {n: None for n in PROBED}
            if self.single:
                out[self.target.rsplit("/", 1)[1]] = None
        return out

    def read(self, name: str, start: int, end: int, size: int) -> bytes:
        """Bytes [start, end) of a file, by a range request (from a whole copy when the server
        answers range requests with the whole file)."""
        if end <= start:
            return b""
        whole = self._whole_path(name)
        if whole is not None and whole.is_file() and whole.stat().st_size == size:
            with open(whole, "rb") as f:
                f.seek(start)
                return f.read(end - start)
        try:
            with self.fs.open(self.path_of(name), "rb", block_size=1 << 16, cache_type="none", size=size) as f:
                f.seek(start)
                data = f.read(end - start)
        except ValueError as e:
            if "range" not in str(e).lower():
                raise
            return self._read_whole(name, start, end, size)
        if len(data) != end - start:
            raise BadInputError(self.path_of(name), f"the server sent {len(data):,} bytes for a {end - start:,}-byte range")
        return data


    def _whole_path(self, name: str) -> Path | None:
        return None if self.folder is None else self.folder / "whole" / name

    def _read_whole(self, name: str, start: int, end: int, size: int) -> bytes:
        """A server without range support (a plain `python -m http.server`): the whole file, once,
        into the cache (a note on stderr says how big), then the bytes asked for from it."""
        import sys
        import tempfile

        dst = self._whole_path(name)
        if dst is None:
            dst = Path(tempfile.mkdtemp(prefix="d2t-lab-whole-")) / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        print(f"note: {self.path_of(name)}: the server does not answer range requests; downloading the whole "
              f"file once ({_size(size)})", file=sys.stderr, flush=True)
        tmp = dst.with_name(dst.name + ".tmp")
        with self.fs.open(self.path_of(name), "rb", block_size=0) as src, open(tmp, "wb") as out:
            while True:
                block = src.read(1 << 20)
                if not block:
                    break
                out.write(block)
        if tmp.stat().st_size != size:
            got = tmp.stat().st_size
            tmp.unlink()
            raise BadInputError(self.path_of(name), f"the server sent {got:,} bytes of a {size:,}-byte file")
        tmp.replace(dst)
        with open(dst, "rb") as f:
            f.seek(start)
            return f.read(end - start)


def _size(n: int) -> str:
    for unit, k in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} bytes"


def _relevant(name: str) -> bool:
    """A file a checkpoint reader may open (tokenizers and other large JSON files are not)."""
    if name.endswith(".json"):
        return name == "config.json" or name.endswith(".index.json")
    return name.endswith(_FILE_SUFFIXES)


def _hf_type():
    from huggingface_hub import HfFileSystem

    return HfFileSystem


def _looks_like_file(target: str) -> bool:
    last = target.rstrip("/").rsplit("/", 1)[-1]
    return not target.endswith("/") and last.endswith(_FILE_SUFFIXES)


def _etag(info: dict) -> str | None:
    lfs = info.get("lfs")
    if isinstance(lfs, dict) and lfs.get("sha256"):
        return str(lfs["sha256"])
    for k in ("blob_id", "ETag", "etag", "last_commit"):
        if info.get(k):
            return str(info[k]) if not isinstance(info[k], dict) else json.dumps(info[k], sort_keys=True, default=str)
    return None


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
        return _entry(folder, manifest)
    try:
        remote = _Remote(url, folder)
        listing = remote.listing()
    except BadInputError:
        raise
    except Exception as e:  # noqa: BLE001 - every library error becomes one line, or the cache
        if manifest is not None and _network_problem(e):
            return _entry(folder, manifest)
        if _timed_out(e):
            raise BadInputError(url, _no_answer()) from None
        if _network_problem(e):
            raise BadInputError(url, f"cannot be reached ({_say(e)[len('cannot be read ('):-1]}) and is not in the "
                                f"cache ({folder})") from None
        raise BadInputError(url, _say(e)) from None
    if not listing:
        raise BadInputError(url, "holds no checkpoint files (looked for config.json, *.safetensors, "
                            "d2t/t2d .npy/.pt, pytorch_model.bin)")
    try:
        return _sync(remote, folder, manifest, listing, whole_limit)
    except BadInputError as e:
        raise BadInputError(url if e.path is None else e.path, e.problem) from None
    except Exception as e:  # noqa: BLE001 - a read that failed half-way: one line, the cache as it was
        raise BadInputError(url, _say(e)) from None


def _no_answer() -> str:
    return (f"the server did not answer within {timeout():g} s (--timeout SECONDS, or ${TIMEOUT_ENV}); "
            "check the address or try again later")


def _say(e: Exception) -> str:
    if _timed_out(e):
        return _no_answer()
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


def _sync(remote: _Remote, folder: Path, old: dict | None, listing: dict, whole_limit: int | None = None) -> Path:
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
        same = old_files.get(name, {})
        fresh = same.get("size") == info["size"] and same.get("etag") == info["etag"] and (files / name).exists()
        if not fresh:
            _drop_ranges(folder, name)
            if kind == "stub":
                _write_stub(remote, files / name, name, info["size"])
            else:
                (files / name).write_bytes(remote.read(name, 0, info["size"], info["size"]))
        entries[name] = {"size": info["size"], "etag": info["etag"], "kind": kind}
    for name in set(old_files) - set(entries):
        (files / name).unlink(missing_ok=True)
        _drop_ranges(folder, name)
    manifest = {"url": remote.url, "base": _display_base(remote), "single": remote.single,
                "entry": remote.target.rsplit("/", 1)[1] if remote.single else None, "files": entries}
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(folder / MANIFEST)
    return _entry(folder, manifest)


def _display_base(remote: _Remote) -> str:
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


def _write_stub(remote: _Remote, dst: Path, name: str, size: int) -> None:
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


def stub_size(path) -> int | None:
    """The remote file's size when `path` is a safetensors stub in a mirror, else None."""
    found = _stub_manifest(path)
    if found is None:
        return None
    info = found[1].get("files", {}).get(Path(path).name)
    return int(info["size"]) if info and info.get("kind") == "stub" else None


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
        data = _Remote(m["url"], folder).read(path.name, start, end, int(m["files"][path.name]["size"]))
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


def via_mirror(url: str, opener):
    """`opener` on the local stand-in of a remote location, its messages naming the URL."""
    try:
        return opener(mirror(url))
    except BadInputError as e:
        if e.path is None:
            raise
        raise BadInputError(display(e.path), e.problem) from None
