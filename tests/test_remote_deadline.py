"""Remote reads end, show progress and never answer from a stale cache (issue 40).

Every server here is a real `http.server` in a thread:
- a *trickling* server sends one byte every 2 s for a minute (`metrics --timeout 3`; every 0.4 s
  with `--timeout 1` for the others): the per-read timeout never trips, so only the overall
  deadline ends the read; the bound on the elapsed time is loose (30 s, against a minute of
  trickle), so a loaded machine cannot fail it;
- a *slow* server sends half a file, then holds the rest until a progress line has been printed
  (at most 20 s; PROGRESS_EVERY_S lowered to 0.1 s in this process): stderr is not a terminal,
  the line must appear, and no machine load can make the answer outrun it;
- a range server over a copy of the bundled draft, whose d2t is rewritten between two reads:
  the second read gives the new verdict, whatever the cache held.
"""
from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import SAMPLES

GOOD = SAMPLES / "tiny_draft_sglang"
METRICS = ("# TYPE sglang:spec_accept_length gauge\n"
           'sglang:spec_accept_length{model_name="m"} 2.5\n')


def _serve(handler_class, **attrs):
    """(server, base URL) for `handler_class` (its class attributes set from `attrs`), in a thread."""
    handler = type("H", (handler_class,), attrs)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads, server.block_on_close = True, False
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _stop(server) -> None:
    server.shutdown()
    server.server_close()


class Trickle(http.server.BaseHTTPRequestHandler):
    """A folder `/draft` listed at once (config.json, 600 bytes by HEAD) whose file GETs trickle, and
    every other GET (a folder listing, /metrics, a probe) trickling from its first byte: 200 at
    once, then one byte every 2 s for a minute (until `stop` is set)."""

    stop: threading.Event

    def log_message(self, *args):
        pass

    def do_HEAD(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "600")
        self.end_headers()

    def do_GET(self):  # noqa: N802
        if self.path.rstrip("/") == "/draft":
            page = b'<html><body><a href="config.json">config.json</a></body></html>'
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html" if "." not in self.path.rsplit("/", 1)[-1] else "application/json")
        if "." in self.path.rsplit("/", 1)[-1]:
            self.send_header("Content-Length", "600")
        self.end_headers()
        try:
            gap = 2.0 if self.path == "/metrics" else 0.4  # the case; the others quicker (--timeout 1)
            for _ in range(int(60 / gap)):
                self.wfile.write(b" ")
                self.wfile.flush()
                if self.stop.wait(gap):
                    return
        except OSError:  # the client gave up
            pass


@pytest.fixture
def trickle():
    stop = threading.Event()
    server, base = _serve(Trickle, stop=stop)
    yield base
    stop.set()
    _stop(server)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("D2T_LAB_CACHE", str(tmp_path / "cache"))
    for k in ("D2T_LAB_OFFLINE", "HF_HUB_OFFLINE", "D2T_LAB_REFRESH", "D2T_LAB_TIMEOUT"):
        monkeypatch.delenv(k, raising=False)
    return tmp_path / "cache"


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e308", "3601"])
def test_timeout_outside_its_range_is_one_line(value, cli):
    r = cli("metrics", "http://127.0.0.1:9/metrics", f"--timeout={value}")
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --timeout: "), r.stderr
    assert "(0, 3600]" in lines[0]


SLOW = pytest.mark.slow


@pytest.mark.parametrize("command,path", [
    pytest.param(["metrics"], "/metrics", marks=SLOW), (["metrics"], "/fast/metrics"), pytest.param(["inspect"], "/draft", marks=SLOW),
    pytest.param(["probe"], "", marks=SLOW), pytest.param(["inspect"], "/listing", marks=SLOW),
    pytest.param(["doctor", "--no-weights"], "/draft", marks=SLOW)])
def test_a_trickling_server_ends_at_the_deadline(command, path, trickle, cache, cli):
    """/metrics: the issue's case (a byte every 2 s, --timeout 3); the rest a byte every 0.4 s with
    --timeout 1. /draft: its config.json trickles; /listing: the folder listing itself trickles."""
    url, limit = trickle + path, "3" if path == "/metrics" else "1"
    t0 = time.monotonic()
    r = cli(*command, url, "--timeout", limit)
    took = time.monotonic() - t0
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith(("waiting for", "downloading"))]
    assert len(lines) == 1 and lines[0].startswith(f"error: {url}") and f"within {limit} s" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert took < 30, took  # the trickle lasts 60 s: only a deadline ends the read this soon


class Slow(http.server.SimpleHTTPRequestHandler):
    """Serves a folder (Range honoured); the files named in `slow` go out half at once, the rest once
    `printed` is set (a progress line was shown) or after 20 s."""

    slow: set = set()
    printed: threading.Event | None = None
    requests: list

    def log_message(self, *args):
        pass

    def do_HEAD(self):  # noqa: N802
        self.requests.append(("HEAD", self.path, None))
        super().do_HEAD()

    def do_GET(self):  # noqa: N802
        rng = self.headers.get("Range")
        self.requests.append(("GET", self.path, rng))
        path = self.translate_path(self.path)
        if self.path == "/metrics":
            return self._send(METRICS.encode(), 200, {"Content-Type": "text/plain"})
        if not os.path.isfile(path):
            return super().do_GET()
        data = Path(path).read_bytes()
        size, status, headers = len(data), 200, {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes",
                                                 "Last-Modified": self.date_time_string(int(os.stat(path).st_mtime))}
        m = re.match(r"bytes=(\d+)-(\d*)$", rng or "")
        if m:
            start, end = int(m[1]), min(int(m[2]) if m[2] else size - 1, size - 1)
            data, status = data[start:end + 1], 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        self._send(data, status, headers, slow=os.path.basename(path) in self.slow)

    def _send(self, data: bytes, status: int, headers: dict, slow: bool = False):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        half = len(data) // 2 if slow else len(data)
        try:
            self.wfile.write(data[:half])
            self.wfile.flush()
            if slow:
                self.printed.wait(20)
            self.wfile.write(data[half:])
        except OSError:
            pass


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "served"
    shutil.copytree(GOOD, root / "draft")
    _rewrite_d2t(root / "draft" / "model.safetensors", absolute=False)  # written as the tests rewrite it: same size
    old = time.time() - 3600  # files an hour old: a Last-Modified that can vouch for a copy
    for p in (root / "draft").iterdir():
        os.utime(p, (old, old))
    return root


def _served(folder, requests, slow=(), printed=None):
    def make(*a, **kw):
        return handler(*a, directory=str(folder), **kw)

    handler = type("S", (Slow,), {"slow": set(slow), "requests": requests, "printed": printed})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make)
    server.daemon_threads, server.block_on_close = True, False
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _lines_signal(monkeypatch) -> threading.Event:
    """PROGRESS_EVERY_S lowered to 0.1 s in this process; the event is set once a line is printed."""
    from helpers.io import remote_access

    printed, line = threading.Event(), remote_access.Progress._line

    def shown(self, now):
        line(self, now)
        printed.set()

    monkeypatch.setattr(remote_access, "PROGRESS_EVERY_S", 0.1)
    monkeypatch.setattr(remote_access.Progress, "_line", shown)
    return printed


def test_a_slow_download_prints_progress_lines_off_a_terminal(folder, cache, cli, monkeypatch):
    printed = _lines_signal(monkeypatch)
    server, base = _served(folder, [], slow={"config.json"}, printed=printed)
    try:
        r = cli("inspect", f"{base}/draft", "--json", "--timeout", "30")
    finally:
        _stop(server)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"] == "offset"
    size = (folder / "draft" / "config.json").stat().st_size
    shown = [ln for ln in r.stderr.splitlines() if ln.startswith(f"downloading {base}/draft/config.json: ")]
    assert len(shown) >= 2, r.stderr  # at least one while it waits, and the last one when it ends
    assert re.fullmatch(rf".*: \d+ bytes of {size} bytes \(\d+ %\), \d+ s \(at most 30 s\)", shown[0]), shown[0]
    assert shown[-1].split(": ", 1)[1].startswith(f"{size} bytes of {size} bytes (100 %)"), shown[-1]


def test_a_slow_metrics_answer_prints_waiting_lines(cache, cli, monkeypatch):
    printed = _lines_signal(monkeypatch)

    class Late(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            printed.wait(20)  # the answer only after a line was shown
            self.wfile.write(METRICS.encode())

    server, base = _serve(Late)
    try:
        r = cli("metrics", f"{base}/metrics", "--timeout", "30")
    finally:
        _stop(server)
    assert r.returncode == 0, r.stderr
    waits = [ln for ln in r.stderr.splitlines() if ln.startswith(f"waiting for {base}/metrics: ")]
    assert waits and re.fullmatch(r".*: \d+ s \(at most 30 s\)", waits[0]), r.stderr


def _rewrite_d2t(path: Path, absolute: bool) -> None:
    """The draft's d2t as offsets or as absolute target ids: the same size, another verdict."""
    t = load_file(str(path))
    base = load_file(str(GOOD / "model.safetensors"))["d2t"]
    t["d2t"] = base + torch.arange(base.numel()) if absolute else base
    save_file(t, str(path))


def _verdict(r) -> str:
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["verdict"]


def test_a_changed_file_is_fetched_again_and_an_unchanged_one_is_not(folder, cache, cli):
    requests: list = []
    server, base = _served(folder, requests)
    url, st = f"{base}/draft", folder / "draft" / "model.safetensors"
    try:
        assert _verdict(cli("inspect", url, "--json")) == "offset"
        requests.clear()
        assert _verdict(cli("inspect", url, "--json")) == "offset"
        assert not [q for q in requests if q[0] == "GET" and q[2]], requests  # validated, reused: no range read
        size = st.stat().st_size
        _rewrite_d2t(st, absolute=True)
        later = time.time() - 1800
        os.utime(st, (later, later))
        assert st.stat().st_size == size  # only a validator tells the two apart
        assert _verdict(cli("inspect", url, "--json")) == "absolute"
        requests.clear()
        assert _verdict(cli("inspect", url, "--json", "--refresh")) == "absolute"
        assert [q for q in requests if q[0] == "GET" and q[2] and "model.safetensors" in q[1]], requests
    finally:
        _stop(server)


def test_a_file_rewritten_within_the_same_second_is_not_trusted(folder, cache, cli, monkeypatch):
    """Last-Modified has whole seconds: a copy fetched in the second its file changed cannot be vouched
    for. The clock the cache reads is pinned to half a second after the write: no machine load moves it."""
    import types

    from helpers.io import remote

    server, base = _served(folder, [])
    url, st = f"{base}/draft", folder / "draft" / "model.safetensors"
    now = float(int(time.time()) - 600)
    os.utime(st, (now, now))
    monkeypatch.setattr(remote, "time", types.SimpleNamespace(time=lambda: now + 0.5, strftime=time.strftime,
                                                              gmtime=time.gmtime))
    try:
        assert _verdict(cli("inspect", url, "--json")) == "offset"
        stamp = st.stat().st_mtime_ns
        _rewrite_d2t(st, absolute=True)
        os.utime(st, ns=(stamp, stamp))  # the same Last-Modified, the same size: new bytes
        assert _verdict(cli("inspect", url, "--json")) == "absolute"
    finally:
        _stop(server)


def test_a_server_that_is_down_gives_the_cached_copy_with_a_note(folder, cache, cli):
    server, base = _served(folder, [])
    url = f"{base}/draft"
    try:
        first = cli("inspect", url, "--json")
    finally:
        _stop(server)
    assert _verdict(first) == "offset"
    again = cli("inspect", url, "--json")
    assert _verdict(again) == "offset" and again.stdout == first.stdout
    notes = again.stderr.strip().splitlines()
    assert len(notes) == 1 and notes[0].startswith(f"note: {url}: the server cannot be reached; using the cached copy"), \
        again.stderr
    refused = cli("inspect", url, "--json", "--refresh")  # a fresh copy asked for: none to be had
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "--refresh" in refused.stderr
