"""Remote checkpoints: http:// served by a real local server that honours Range and counts bytes.

A 200 MB-plus copy of the bundled draft (a big padding tensor added to its safetensors) is served
from a temporary folder; `inspect` and `doctor --no-weights` over http:// must transfer under
1 MB and print the same JSON as on the local copy (apart from the path and the files read, which
name the URL). The cache is a temporary folder (D2T_LAB_CACHE), so each test starts cold.
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
from conftest import SAMPLES, side_file_draft

GOOD = SAMPLES / "tiny_draft_sglang"


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder; answers `Range: bytes=a-b` with 206 and counts every body byte sent."""

    sent = 0
    requests: list = []
    lock = threading.Lock()
    listings = True  # False: a server that lists no folders (the readers then probe the usual names)

    def log_message(self, *args):  # quiet
        pass

    def _count(self, n):
        with RangeHandler.lock:
            RangeHandler.sent += n

    def do_GET(self):  # noqa: N802
        RangeHandler.requests.append((self.command, self.path, self.headers.get("Range")))
        path = self.translate_path(self.path)
        rng = self.headers.get("Range")
        if os.path.isdir(path) and not RangeHandler.listings:
            self.send_error(404)
            return
        if os.path.isdir(path) or not rng or not os.path.isfile(path):
            f = self.send_head()
            if f:
                data = f.read()
                f.close()
                self._count(len(data))  # counted before sending: the client cannot finish before the count
                self.wfile.write(data)
            return
        size = os.path.getsize(path)
        m = re.match(r"bytes=(\d+)-(\d*)$", rng)
        start, end = int(m[1]), (int(m[2]) if m[2] else size - 1)
        end = min(end, size - 1)
        if start >= size:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.end_headers()
            return
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start + 1)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self._count(len(data))  # before sending (see above): a test that resets the count sees no late bytes
        self.wfile.write(data)


def _quiet_server(settle: float = 0.3, limit: float = 10.0) -> None:
    """Wait until the server has sent nothing for `settle` s (a request the last run left in flight)."""

    end = time.time() + limit
    last, since = RangeHandler.sent, time.time()
    while time.time() < end and time.time() - since < settle:
        time.sleep(0.05)
        if RangeHandler.sent != last:
            last, since = RangeHandler.sent, time.time()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(local folder, base URL) of a 200 MB-plus draft served over http://127.0.0.1."""
    root = tmp_path_factory.mktemp("served")
    big = root / "big_draft"
    shutil.copytree(GOOD, big)
    t = load_file(str(big / "model.safetensors"))
    t["zz_padding.weight"] = torch.zeros(210 * 1024 * 1024 // 4, dtype=torch.float32)  # 210 MB the readers must skip
    save_file(t, str(big / "model.safetensors"))
    side_file_draft(root / "speculators")  # d2t / t2d in side files: each fetched beside the weights
    shutil.copytree(GOOD, root / "sglang")
    assert (big / "model.safetensors").stat().st_size > 200 * 1024 * 1024
    old = time.time() - 3600  # files an hour old, as served files are: a Last-Modified that vouches for a cached
    for p in root.rglob("*"):  # copy (one from the second the copy was fetched cannot: tests/test_remote_deadline.py)
        os.utime(p, (old, old))

    def handler(*a, **kw):
        return RangeHandler(*a, directory=str(root), **kw)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("D2T_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("D2T_LAB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    RangeHandler.sent = 0
    RangeHandler.requests = []
    return tmp_path / "cache"


def _same_apart_from_location(a: dict, b: dict, local: Path, url: str) -> None:
    a, b = dict(a), dict(b)
    assert a.pop("path") == str(local) and b.pop("path") == url
    if "sources" in a:
        sa, sb = a.pop("sources"), b.pop("sources")
        assert [s.replace(str(local), url) for s in sa] == sb
    assert a == b


@pytest.mark.parametrize("command", [["inspect"], ["doctor", "--no-weights"]])
def test_http_reads_kilobytes_and_gives_the_local_json(command, served, cache, cli):
    root, base = served
    local, url = root / "big_draft", f"{base}/big_draft"
    want = cli(*command, local, "--json")
    RangeHandler.sent = 0
    got = cli(*command, url, "--json")
    assert got.returncode == want.returncode, got.stderr
    assert RangeHandler.sent < 1_000_000, RangeHandler.sent
    assert any(r[2] for r in RangeHandler.requests), "no range request was made"
    _same_apart_from_location(json.loads(want.stdout), json.loads(got.stdout), local, url)


def test_second_online_run_reuses_the_cache_and_servers_without_listings_work(served, cache, cli, monkeypatch):
    root, base = served
    url = f"{base}/big_draft"
    first = cli("inspect", url, "--json")
    cold = RangeHandler.sent
    RangeHandler.sent, RangeHandler.requests = 0, []
    again = cli("inspect", url, "--json")
    assert again.stdout == first.stdout
    assert not any(r[2] for r in RangeHandler.requests), "cached bytes were fetched again"
    assert RangeHandler.sent < cold / 3, (RangeHandler.sent, cold)
    monkeypatch.setattr(RangeHandler, "listings", False)
    monkeypatch.setenv("D2T_LAB_CACHE", str(cache.parent / "cache-nolisting"))
    probed = cli("inspect", f"{base}/speculators", "--json")
    assert probed.returncode == 0, probed.stderr
    local = json.loads(cli("inspect", root / "speculators", "--json").stdout)
    _same_apart_from_location(local, json.loads(probed.stdout), root / "speculators", f"{base}/speculators")


def test_http_single_file_and_side_mapping_files(served, cache, cli):
    root, base = served
    r = cli("inspect", f"{base}/speculators", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    local = json.loads(cli("inspect", root / "speculators", "--json").stdout)
    _same_apart_from_location(local, data, root / "speculators", f"{base}/speculators")
    assert any(s.endswith("/speculators/d2t.npy") for s in data["sources"])
    one = cli("inspect", f"{base}/big_draft/model.safetensors", "--json")
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["verdict"] == json.loads(cli("inspect", root / "big_draft", "--json").stdout)["verdict"]


def test_offline_from_the_cache_and_cold_cache_refused(served, cache, cli, monkeypatch):
    root, base = served
    url = f"{base}/big_draft"
    online = cli("doctor", url, "--no-weights", "--json")
    monkeypatch.setenv("D2T_LAB_OFFLINE", "1")
    _quiet_server()
    RangeHandler.sent = 0
    offline = cli("doctor", url, "--no-weights", "--json")
    assert RangeHandler.sent == 0 and offline.returncode == online.returncode
    assert json.loads(offline.stdout) == json.loads(online.stdout)
    cold = cli("inspect", f"{base}/speculators")
    assert cold.returncode == 2 and "offline" in cold.stderr and "\n" not in cold.stderr.strip()


def test_tensors_are_fetched_by_range_and_match(served, cache):
    from helpers.io.checkpoint import open_checkpoint

    root, base = served
    ck = open_checkpoint(f"{base}/big_draft")
    local = open_checkpoint(root / "big_draft")
    for key in ("fc.weight", "lm_head.weight", "d2t"):
        assert torch.equal(ck.tensors.get(key), local.tensors.get(key))
    rows = ck.tensors.get_rows("embed_tokens.weight", 5, 9)
    assert torch.equal(rows, local.tensors.get("embed_tokens.weight")[5:9])
    assert RangeHandler.sent < 1_000_000


@pytest.mark.slow
def test_evaluate_and_figures_read_remote_drafts(served, cache, cli, tmp_path):
    root, base = served
    samples = SAMPLES / "tiny_hidden_states"
    args = ("--samples", samples, "--max-samples", "4", "--device", "cpu", "--json")
    local = json.loads(cli("evaluate", root / "sglang", *args).stdout)
    r = cli("evaluate", f"{base}/sglang", *args)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["checkpoint"] == f"{base}/sglang"
    assert got["readings"] == local["readings"] and got["conclusion"] == local["conclusion"]
    figs = cli("figures", f"{base}/sglang", "-o", tmp_path / "figs", "--json")
    assert figs.returncode == 0, figs.stderr
    files = json.loads(figs.stdout)["files"]
    assert files and all(Path(f).stat().st_size > 0 for f in files)
    assert all(Path(f).name.startswith("sglang") for f in files)


def test_fix_refuses_a_remote_source_with_one_line(served, cache, cli, tmp_path):
    _, base = served
    r = cli("fix", f"{base}/sglang", tmp_path / "fixed")
    assert r.returncode == 2 and f"{base}/sglang: " in r.stderr and "download" in r.stderr
    assert not (tmp_path / "fixed").exists()


def test_missing_paths_say_what_was_meant(cli, tmp_path):
    r = cli("inspect", "hf:/org/repo")
    assert r.returncode == 2 and "did you mean hf://org/repo?" in r.stderr
    r = cli("inspect", "some-org/some-draft")
    assert r.returncode == 2 and "did you mean hf://some-org/some-draft?" in r.stderr
    r = cli("inspect", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "did you mean" not in r.stderr


def test_hf_url_keeps_both_slashes_in_messages(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("D2T_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network here: the cold cache is refused, naming the URL
    r = cli("inspect", "hf://org/repo")
    assert r.returncode == 2
    assert r.stderr.startswith("hf://org/repo: ") or "hf://org/repo:" in r.stderr, r.stderr


def test_hub_locations_parse():
    from helpers.io import remote, remote_access

    assert remote.is_remote("hf://a/b") and remote.is_remote("https://x/y") and not remote.is_remote("a/b")
    m = remote_access._HF.match("hf://org/repo@v1.0/sub/dir")
    assert (m["org"], m["repo"], m["rev"], m["sub"]) == ("org", "repo", "v1.0", "sub/dir")


# -- hf:// against a local stand-in for the Hub's HTTP API (HF_ENDPOINT) --------------------------------
class HubHandler(http.server.BaseHTTPRequestHandler):
    """The few Hub endpoints HfFileSystem uses: repo info, tree listing, paths-info, resolve (with Range).

    Repo ORG/NAME is the folder NAME under the served root; every request's Authorization is kept.
    """

    root: Path = Path(".")
    seen: list = []
    sent = 0

    def log_message(self, *args):
        pass

    def _json(self, obj, code=200):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _entry(self, repo: Path, rel: str) -> dict:
        p = repo / rel
        if p.is_dir():
            return {"type": "directory", "path": rel, "oid": "d" * 40}
        e = {"type": "file", "path": rel, "size": p.stat().st_size, "oid": f"{abs(hash(rel)):040x}"[:40]}
        if rel.endswith(".safetensors"):
            e["lfs"] = {"oid": f"{p.stat().st_size:064x}", "size": p.stat().st_size, "pointerSize": 130}
        return e

    def do_POST(self):  # noqa: N802 - paths-info
        HubHandler.seen.append((self.path, self.headers.get("Authorization")))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        m = re.match(r"^/api/models/[^/]+/([^/]+)/paths-info/", self.path)
        repo = self.root / m[1]
        from urllib.parse import parse_qs

        self._json([self._entry(repo, p) for p in parse_qs(body).get("paths", []) if (repo / p).exists()])

    def do_HEAD(self):  # noqa: N802
        self.do_GET(head=True)

    def do_GET(self, head=False):  # noqa: N802
        from urllib.parse import unquote, urlparse

        HubHandler.seen.append((self.path, self.headers.get("Authorization")))
        path = urlparse(self.path).path
        m = re.match(r"^/api/models/([^/]+)/([^/]+)(?:/revision/([^/]+))?$", path)
        if m:
            ok = (self.root / m[2]).is_dir()
            return self._json({"id": f"{m[1]}/{m[2]}", "sha": "a" * 40} if ok else {"error": "Repository not found"},
                              200 if ok else 404)
        m = re.match(r"^/api/models/[^/]+/([^/]+)/tree/[^/]+/?(.*)$", path)
        if m:
            repo, sub = self.root / m[1], unquote(m[2])
            return self._json([self._entry(repo, f"{sub}/{n}" if sub else n) for n in sorted(os.listdir(repo / sub))])
        m = re.match(r"^/[^/]+/([^/]+)/resolve/[^/]+/(.*)$", path)
        if not m:
            return self._json({"error": "not found"}, 404)
        f = self.root / m[1] / unquote(m[2])
        size = f.stat().st_size
        rng = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        start, end = (int(rng[1]), min(int(rng[2]) if rng[2] else size - 1, size - 1)) if rng else (0, size - 1)
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("X-Repo-Commit", "a" * 40)
        self.send_header("ETag", '"e"')
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if not head:
            with open(f, "rb") as fh:
                fh.seek(start)
                data = fh.read(end - start + 1)
            self.wfile.write(data)
            HubHandler.sent += len(data)


@pytest.fixture(scope="module")
def hub(served):
    root, _ = served
    shutil.copytree(SAMPLES / "producers", root / "producers")
    HubHandler.root = root
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_hf_locations_read_by_range_with_the_token(hub, cache, cli, monkeypatch):
    root, endpoint = hub
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    HubHandler.seen, HubHandler.sent = [], 0
    r = cli("doctor", "hf://org/big_draft", "--no-weights", "--json")
    local = cli("doctor", root / "big_draft", "--no-weights", "--json")
    assert r.returncode == local.returncode, r.stderr
    _same_apart_from_location(json.loads(local.stdout), json.loads(r.stdout), root / "big_draft", "hf://org/big_draft")
    assert HubHandler.sent < 1_000_000
    repo_calls = [(p, auth) for p, auth in HubHandler.seen if "/big_draft" in p]
    assert repo_calls and all(auth == "Bearer hf_test_token" for _, auth in repo_calls)
    sub = cli("inspect", "hf://org/producers@main/speculators_control", "--json")
    assert sub.returncode == 0, sub.stderr
    data = json.loads(sub.stdout)
    assert data["path"] == "hf://org/producers@main/speculators_control"
    assert data["sources"][0].startswith("hf://org/producers@main/speculators_control/")
    missing = cli("inspect", "hf://org/no_such_repo")
    assert missing.returncode == 2 and "hf://org/no_such_repo: " in missing.stderr
    assert "HF_TOKEN" in missing.stderr


# -- servers that do less: no range support, no answer at all ------------------------------------------
class PlainHandler(http.server.SimpleHTTPRequestHandler):
    """`python -m http.server` as it is: Range headers ignored, every GET answered with the whole file."""

    sent = 0

    def log_message(self, *args):
        pass

    def copyfile(self, source, outputfile):
        data = source.read()
        PlainHandler.sent += len(data)
        try:
            outputfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client read the start it wanted and left
            pass


@pytest.fixture(scope="module")
def plain(served):
    root, _ = served

    def handler(*a, **kw):
        return PlainHandler(*a, directory=str(root), **kw)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("command", [["inspect"], ["doctor", "--no-weights"]])
def test_a_server_without_range_support_gets_whole_files_with_a_note(command, plain, cache, cli):
    root, base = plain
    local, url = root / "sglang", f"{base}/sglang"
    want = cli(*command, local, "--json")
    got = cli(*command, url, "--json")
    assert got.returncode == want.returncode, got.stderr
    assert "Traceback" not in got.stderr
    _same_apart_from_location(json.loads(want.stdout), json.loads(got.stdout), local, url)
    size = (local / "model.safetensors").stat().st_size
    assert "does not answer range requests" in got.stderr and "model.safetensors" in got.stderr, got.stderr
    assert f"{size / 1024:.1f} kB" in got.stderr or f"{size / 2**20:.1f} MB" in got.stderr, got.stderr
    PlainHandler.sent = 0
    again = cli(*command, url, "--json")  # the whole copy is cached: not downloaded a second time
    assert again.stdout == got.stdout and "does not answer range" not in again.stderr
    assert PlainHandler.sent < size, PlainHandler.sent


@pytest.fixture
def silent():
    """A server that accepts connections and never answers (the hang of issue 31)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held, stop = [], threading.Event()

    def accept():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    t.join()
    for c in held:
        c.close()
    sock.close()


@pytest.mark.parametrize("command", [["inspect"], pytest.param(["doctor", "--no-weights"], marks=pytest.mark.slow),
                                     pytest.param(["metrics"], marks=pytest.mark.slow)])  # test-fast: one of three
def test_a_server_that_never_answers_ends_within_the_timeout(command, silent, cache, cli):
    url = f"{silent}/draft" if command[0] != "metrics" else f"{silent}/metrics"
    cli(command[0], "--help")  # the command's modules imported first: what is timed is the wait alone
    t0 = time.monotonic()
    r = cli(*command, url, "--timeout", "1")
    took = time.monotonic() - t0
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {url}"), r.stderr
    assert "did not answer within 1 s" in lines[0], lines[0]
    assert took < 30, took  # the server never answers: only the timeout ends it (loose: a loaded machine is slow)
    assert not any(cache.rglob("*.safetensors")) if cache.exists() else True
