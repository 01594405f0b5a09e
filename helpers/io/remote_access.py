"""One remote checkpoint folder as the network sees it (`RemoteFolder`: listing, sizes and ETags,
whole files, byte ranges through `huggingface_hub.HfFileSystem` or `fsspec`'s HTTP file system),
and the time every remote call may wait (`--timeout`). `helpers.io.remote` keeps the cache that
these reads fill and the readers' side of it.

Two limits hold for every answer: the per-read timeout (connect, and between two reads: a server
that says nothing) and an overall deadline (`deadline(nbytes)`: `--timeout` for a small answer, one
more second per 64 kB of a known size), so a server that trickles a byte every few seconds ends
too (`within_deadline`; metrics and probe calls use it with `--timeout` as the deadline). A read
that takes longer than PROGRESS_EVERY_S shows its progress (`Progress`): a plain line on stderr
then and every PROGRESS_EVERY_S, at a terminal or not (a log, a pipe, CI).
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from pathlib import Path

from helpers.core.errors import BadInputError

TIMEOUT_ENV = "D2T_LAB_TIMEOUT"


DEFAULT_TIMEOUT = 30.0  # seconds to connect, and between two reads of one answer
MAX_TIMEOUT = 3600.0  # --timeout is a number of seconds in (0, MAX_TIMEOUT]
MIN_RATE = 64 << 10  # bytes/s: a known-size answer arriving slower than this on average is taken as stalled
REFRESH_ENV = "D2T_LAB_REFRESH"  # set by --refresh: the cache is bypassed (everything fetched again)
PROGRESS_EVERY_S = 10  # a read longer than this shows progress (README: "a wait over 10 s")


PROBED = ("config.json", "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
          "pytorch_model.bin.index.json", "d2t.npy", "t2d.npy", "d2t.pt", "t2d.pt", "training_state.pt")


_FILE_SUFFIXES = (".safetensors", ".json", ".npy", ".pt", ".pth", ".bin")


_HF = re.compile(r"^hf://(?P<org>[^/@\s]+)/(?P<repo>[^/@\s]+)(?:@(?P<rev>[^/\s]+))?(?:/(?P<sub>.*))?$")



def timeout() -> float:
    """Seconds every remote call waits to connect and between reads: `--timeout` (which sets
    $D2T_LAB_TIMEOUT), else the default. A server that accepts and never answers ends here."""
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        t = float(text or DEFAULT_TIMEOUT)
    except ValueError:
        raise BadInputError(f"${TIMEOUT_ENV}", f"must be a number of seconds, got {text!r}") from None
    _check_timeout(t, f"${TIMEOUT_ENV}")
    return t


def _check_timeout(t: float, name: str) -> None:
    if not 0 < t <= MAX_TIMEOUT:  # NaN fails too
        raise BadInputError(name, f"must be a number of seconds in (0, {MAX_TIMEOUT:g}], got {t:g}")


def set_timeout(seconds: float | None) -> None:
    """`--timeout SECONDS` for this process and the processes it starts (None: unchanged); one
    line naming the flag when it is not in (0, MAX_TIMEOUT]."""
    if seconds is not None:
        _check_timeout(float(seconds), "--timeout")
        os.environ[TIMEOUT_ENV] = repr(float(seconds))


def set_refresh(on: bool) -> None:
    """`--refresh`: this run (this process and the notebooks it starts) fetches every remote file
    again, once: the environment carries a token naming the run, and the cache records it."""
    if on:
        os.environ[REFRESH_ENV] = f"run-{os.getpid()}-{time.time_ns()}"


def refresh() -> str | None:
    """The token of the run that asked for `--refresh` (None: the cache is used when still valid).
    $D2T_LAB_REFRESH set by hand to 1 / true / yes / on refreshes once per process."""
    value = os.environ.get(REFRESH_ENV, "").strip()
    if value.lower() in ("", "0", "false", "no", "off"):
        return None
    return f"{value}-{os.getpid()}" if value.lower() in ("1", "true", "yes", "on") else value


def deadline(nbytes: int = 0) -> float:
    """Seconds one whole answer may take: `--timeout`, plus a second per MIN_RATE bytes expected."""
    return timeout() + max(0, int(nbytes)) / MIN_RATE


def seconds_text(s: float) -> str:
    """A wait in seconds as messages print it (3, 0.5, 3.1: no float noise)."""
    return f"{round(s, 1):g}"


class DeadlineExceeded(TimeoutError):
    """An answer that did not arrive whole within its deadline (a trickling or stalled server)."""

    def __init__(self, seconds: float):
        super().__init__(f"no whole answer within {seconds_text(seconds)} s")
        self.seconds = seconds


def within_deadline(seconds: float, fn, *args, progress: Progress | str | None = None, **kwargs):
    """`fn(*args, **kwargs)`, or `DeadlineExceeded` once `seconds` have passed without its result.

    The call runs in a daemon thread: a socket that keeps receiving a byte now and then never
    trips a per-read timeout, so the caller stops waiting instead (the abandoned read ends with
    its own timeout, or with the process). While it waits, the caller's thread prints
    `progress` (a `Progress`, or a label: a plain "waiting for" line), once the wait has lasted
    PROGRESS_EVERY_S; an abandoned read prints nothing more."""
    box: dict = {}

    def work():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the caller as it was raised
            box["error"] = e

    if isinstance(progress, str):
        progress = Progress(progress, None, seconds)
    worker = threading.Thread(target=work, daemon=True, name="d2t-lab-remote-read")
    worker.start()
    end = time.monotonic() + seconds
    while worker.is_alive():
        left = end - time.monotonic()
        if left <= 0:
            break
        worker.join(left if progress is None else min(left, progress.due()))
        if progress is not None and worker.is_alive() and end - time.monotonic() > 0.5:  # not at the deadline
            progress.tick()
    if worker.is_alive():
        raise DeadlineExceeded(seconds)
    if "error" in box:
        raise box["error"]
    if progress is not None:
        progress.close()
    return box["value"]


class Progress:
    """What a remote read has done so far, shown on stderr once it has taken PROGRESS_EVERY_S: one
    plain line then and one every PROGRESS_EVERY_S (at a terminal as in a log, a pipe or CI: the
    README's promise), and a last one when it ends. The reading thread only counts (`update`);
    the waiting thread prints (`within_deadline`), so a read abandoned at its deadline stays quiet.
    `total`: the bytes expected (None: unknown, the line says how long it has waited)."""

    def __init__(self, what: str, total: int | None, limit: float | None = None):
        self.what, self.total, self.limit, self.done = what, None if total is None else int(total), limit, 0
        self.start = time.monotonic()
        self.shown = None  # when the last line was printed (None: never)
        self.stream = sys.stderr  # where the lines go, fixed now (a test's captured stderr stays its own)

    def update(self, n: int) -> None:
        self.done += n

    def due(self) -> float:
        """Seconds until the next line is due (at least a little: the caller sleeps that long)."""
        last = self.start if self.shown is None else self.shown
        return max(0.05, last + PROGRESS_EVERY_S - time.monotonic())

    def tick(self) -> None:
        now = time.monotonic()
        if now - (self.start if self.shown is None else self.shown) >= PROGRESS_EVERY_S:
            self._line(now)

    def _line(self, now: float) -> None:
        if self.total:
            got = f"downloading {self.what}: {_size(self.done)} of {_size(self.total)} " \
                  f"({100 * self.done / self.total:.0f} %), "
        else:
            got = f"waiting for {self.what}: "
        limit = "" if self.limit is None else f" (at most {seconds_text(self.limit)} s)"
        try:
            print(f"{got}{now - self.start:.0f} s{limit}", file=self.stream, flush=True)
        except (OSError, ValueError):  # a closed stream: progress is never worth an error
            pass
        self.shown = now

    def close(self) -> None:
        """The last line (complete), only when an earlier one was shown."""
        if self.shown is not None:
            if self.total:
                self.done = max(self.done, self.total)
            self._line(time.monotonic())


def unreachable(e: BaseException | None) -> bool:
    """A connection that could not be made or was cut (the server down, a name that does not resolve)."""
    names = {c.__name__ for c in type(e).__mro__} if e is not None else set()
    return bool(names & {"ConnectionError", "ClientConnectorError", "ClientConnectionError", "ServerDisconnectedError",
                         "ConnectError", "gaierror"})


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

    def shown(self, name: str | None) -> str:
        """A file (None: the folder) as messages name it: hf:// kept for the Hub."""
        where = self.base if name is None else self.path_of(name)
        return ("hf://" + where) if self.url.lower().startswith("hf://") else where

    def listing(self) -> dict[str, dict]:
        """{file name: {size, etag, last_modified}} of the files a checkpoint reader may need (the
        validators the cache compares: ETag / LFS hash / blob id, Last-Modified, size)."""
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
                    info = within_deadline(deadline(), self.fs.info, self.path_of(name), progress=self.shown(name))
                except FileNotFoundError as e:
                    if unreachable(e.__cause__):  # fsspec says "not found" for a server that is down
                        raise e.__cause__ from None
                    continue
            infos[name] = {"size": int(info.get("size") or 0), "etag": _etag(info),
                           "last_modified": _last_modified(info)}
        return infos

    def _names(self) -> dict[str, dict | None]:
        """Names in the folder (with their info where the listing gives it)."""
        try:
            entries = within_deadline(deadline(), self.fs.ls, self.base, detail=True, progress=self.shown(None))
        except FileNotFoundError:
            entries = []
        except Exception as e:
            if isinstance(self.fs, _hf_type()) or timed_out(e) or unreachable(e):
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
            limit = deadline(end - start)
            progress = Progress(self.shown(name), end - start, limit)
            data = within_deadline(limit, self._read_range, name, start, end, size, progress, progress=progress)
        except ValueError as e:
            if "range" not in str(e).lower():
                raise
            limit = deadline(size)
            progress = Progress(self.shown(name), size, limit)
            return within_deadline(limit, self._read_whole, name, start, end, size, progress, progress=progress)
        if len(data) != end - start:
            raise BadInputError(self.path_of(name), f"the server sent {len(data):,} bytes for a {end - start:,}-byte range")
        return data


    def _read_range(self, name: str, start: int, end: int, size: int, progress: Progress) -> bytes:
        chunk = 1 << 20  # a big range is read in pieces, so that its progress can be shown
        parts = []
        with self.fs.open(self.path_of(name), "rb", block_size=1 << 16, cache_type="none", size=size) as f:
            f.seek(start)
            pos = start
            while pos < end:
                part = f.read(min(chunk, end - pos))
                if not part:
                    break
                parts.append(part)
                pos += len(part)
                progress.update(len(part))
        return b"".join(parts)

    def _whole_path(self, name: str) -> Path | None:
        return None if self.folder is None else self.folder / "whole" / name

    def _read_whole(self, name: str, start: int, end: int, size: int, progress: Progress) -> bytes:
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
                progress.update(len(block))
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



def _last_modified(info: dict) -> str | None:
    for k in ("Last-Modified", "last_modified", "last-modified"):
        if info.get(k):
            return str(info[k])
    return None


def _etag(info: dict) -> str | None:
    lfs = info.get("lfs")
    if isinstance(lfs, dict) and lfs.get("sha256"):
        return str(lfs["sha256"])
    for k in ("blob_id", "ETag", "etag", "last_commit"):
        if info.get(k):
            return str(info[k]) if not isinstance(info[k], dict) else json.dumps(info[k], sort_keys=True, default=str)
    return None
