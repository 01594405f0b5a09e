"""One remote checkpoint folder as the network sees it (`RemoteFolder`: listing, sizes and ETags,
whole files, byte ranges through `huggingface_hub.HfFileSystem` or `fsspec`'s HTTP file system),
and the time every remote call may wait (`--timeout`). `helpers.io.remote` keeps the cache that
these reads fill and the readers' side of it.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from helpers.core.errors import BadInputError

TIMEOUT_ENV = "D2T_LAB_TIMEOUT"


DEFAULT_TIMEOUT = 30.0  # seconds to connect, and between two reads of one answer


PROBED = ("config.json", "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
          "pytorch_model.bin.index.json", "d2t.npy", "t2d.npy", "d2t.pt", "t2d.pt", "training_state.pt")


_FILE_SUFFIXES = (".safetensors", ".json", ".npy", ".pt", ".pth", ".bin")


_HF = re.compile(r"^hf://(?P<org>[^/@\s]+)/(?P<repo>[^/@\s]+)(?:@(?P<rev>[^/\s]+))?(?:/(?P<sub>.*))?$")



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



def timed_out(e: BaseException) -> bool:
    names = {c.__name__ for c in type(e).__mro__}
    return bool(names & {"TimeoutError", "ServerTimeoutError", "ConnectionTimeoutError", "SocketTimeoutError",
                         "ReadTimeout", "ConnectTimeout", "TimeoutException", "FSTimeoutError"})



class RemoteFolder:
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
            if isinstance(self.fs, _hf_type()) or timed_out(e):
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
