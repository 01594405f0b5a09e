"""Accept length over time (vllm#41838: it decays under prefix caching, a restart recovers it):
`metrics URL --watch`, `logs LOG`'s per-interval figures and `probe --repeat`.

The servers here are REAL HTTP servers (http.server on a free port) whose /metrics counters advance
by the number of scrapes made, never by the clock: scrape n shows the counters after the first n
intervals of a fixed script (a fresh-server stretch, a decaying one, an empty interval, a restart),
so every interval's figure is known exactly whatever the timing."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# per interval: (drafts, accepted at positions 0, 1, 2), or "restart" (the counters start again from
# the next entry's values, as a fresh server's after its first traffic)
FRESH = (200, (160, 120, 80))  # 1 + 360 / 200 = 2.8
DECAYED = (200, (100, 60, 30))  # 1 + 190 / 200 = 1.95
SCRIPT = [FRESH, FRESH, FRESH, FRESH, DECAYED, (0, (0, 0, 0)), DECAYED, "restart", FRESH, FRESH, FRESH, DECAYED]


def counters_after(n: int, script=SCRIPT):
    """(drafts, per position) the server shows at its n-th scrape (0: before any interval)."""
    drafts, pos = 0, [0, 0, 0]
    for step in script[:n]:
        if step == "restart":
            drafts, pos = 0, [0, 0, 0]
            continue
        d, p = step
        drafts += d
        pos = [a + b for a, b in zip(pos, p)]
    return drafts, pos


def page(drafts, pos, prefix="vllm:", model="target") -> str:
    lab = f'engine="0",model_name="{model}"' if prefix == "vllm:" else ""
    sep = lambda extra: "{" + ",".join(x for x in (lab, extra) if x) + "}"  # noqa: E731
    lines = [f"# TYPE {prefix}spec_decode_num_drafts counter",
             f"{prefix}spec_decode_num_drafts_total{sep('')} {drafts}",
             f"{prefix}spec_decode_num_draft_tokens_total{sep('')} {3 * drafts}",
             f"{prefix}spec_decode_num_accepted_tokens_total{sep('')} {sum(pos)}"]
    lines += [f"{prefix}spec_decode_num_accepted_tokens_per_pos_total{sep('position=' + chr(34) + str(j) + chr(34))} {c}"
              for j, c in enumerate(pos)]
    return "\n".join(line.replace("{}", "") for line in lines) + "\n"


class CounterServer:
    """A real HTTP server: GET /metrics returns the counters after as many intervals as scrapes made
    so far (the first scrape: none)."""

    def __init__(self, script=SCRIPT, prefix="vllm:"):
        self.script, self.prefix, self.scrapes = list(script), prefix, 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if self.path.rstrip("/") != "/metrics":
                    self.send_error(404)
                    return
                with outer.lock:
                    n = min(outer.scrapes, len(outer.script))
                    outer.scrapes += 1
                body = page(*counters_after(n, outer.script), prefix=outer.prefix).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    with CounterServer() as s:
        yield s


def test_watch_prints_each_interval_flags_decay_and_restarts(server, cli):
    res = cli("metrics", server.url, "--watch", "--interval", "0.05", "--count", str(len(SCRIPT) + 1), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["scrapes"] == len(SCRIPT) + 1 == server.scrapes and out["stopped"] == "count"
    ivs = out["intervals"]
    assert [iv["status"] for iv in ivs] == ["ok"] * 5 + ["no drafts", "ok", "restart"] + ["ok"] * 4
    assert [iv["accept_length"] for iv in ivs[:5]] == pytest.approx([2.8, 2.8, 2.8, 2.8, 1.95])
    assert [iv["flag"] for iv in ivs] == ["baseline"] * 3 + [None, "decayed", None, "decayed", None] \
        + ["baseline"] * 3 + ["decayed"]
    assert [iv["segment"] for iv in ivs] == [1] * 7 + [2] * 5
    # per-interval standard error from the per-position counters: X in {0..3}, P(X >= j) = pos[j-1] / drafts
    p = [0.8, 0.6, 0.4]
    var = sum((2 * j - 1) * q for j, q in enumerate(p, start=1)) - 1.8 ** 2
    assert ivs[0]["stderr"] == pytest.approx((var / 200) ** 0.5)
    assert ivs[0]["stderr_method"] == "per-position"
    assert out["restarts"] == [8] and out["decayed"] == [5, 7, 12]
    assert [b["accept_length"] for b in out["baselines"]] == pytest.approx([2.8, 2.8])
    assert ivs[4]["z"] > 3


def test_watch_text_and_plot(server, cli, tmp_path):
    png = tmp_path / "over_time.png"
    res = cli("metrics", server.url, "--watch", "--interval", "0.05", "--count", "9", "-o", png)
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert "at most 9 scrapes" in text and "Ctrl-C stops" in text
    assert "DECAYED" in text and "no drafts: no drafts in this interval" in text
    assert "restart: counter drafts went down" in text and "new baseline" in text
    assert "decayed: 2 of 3 intervals after the baseline" in text
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    assert f"plot: {png}" in text


def test_watch_is_bounded_by_time(server, cli):
    res = cli("metrics", server.url, "--watch", "--interval", "0.05", "--count", "1000", "--max-seconds", "0.12",
              "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["stopped"] == "time" and out["scrapes"] <= 4 and len(out["intervals"]) == out["scrapes"] - 1


def test_watch_help_states_both_bounds(cli):
    res = cli("metrics", "--help")
    text = " ".join(res.stdout.split())
    assert "at most --count N scrapes" in text and "at most --max-seconds T" in text and "Ctrl-C" in text


def test_watch_refusals(cli, tmp_path, server):
    f = tmp_path / "m.txt"
    f.write_text(page(10, [5, 3, 1]))
    assert "needs a URL" in cli("metrics", f, "--watch").stderr
    assert "--count must be" in cli("metrics", server.url, "--watch", "--count", "1").stderr
    assert "--baseline must be" in cli("metrics", server.url, "--watch", "--baseline", "0", "--count", "2").stderr


def test_watch_a_llamacpp_page(cli):
    with CounterServer(SCRIPT[:5], prefix="llamacpp:") as s:
        res = cli("metrics", s.url, "--watch", "--interval", "0.05", "--count", "6", "--baseline", "2", "--json")
    out = json.loads(res.stdout)
    assert out["kind"] == "llamacpp-prometheus"
    assert [iv["flag"] for iv in out["intervals"]] == ["baseline", "baseline", None, None, "decayed"]


def test_watch_bounds_each_interval_with_the_drafting_flags(server, cli):
    # --num-speculative-tokens 1: at most 2 tokens per verify step, so 2.8 is out of bounds
    res = cli("metrics", server.url, "--watch", "--interval", "0.05", "--count", "3", "--num-speculative-tokens", "1",
              "--json")
    ivs = json.loads(res.stdout)["intervals"]
    assert [iv["status"] for iv in ivs] == ["invalid", "invalid"] and "out of bounds" in ivs[0]["why"]


def test_ctrl_c_stops_cleanly_with_what_was_measured(server):
    """SIGINT to a real `d2t-lab metrics --watch` once the server has answered 4 scrapes."""
    proc = subprocess.Popen([sys.executable, "-m", "helpers", "metrics", server.url, "--watch", "--interval", "0.05",
                             "--count", "100000"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    while server.scrapes < 4 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stopped by Ctrl-C" in out and "#3" in out and "baseline (segment 1" in out


def test_plot_function_returns_what_it_drew():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.plots.serving import plot_accept_length_intervals
    from helpers.serving import over_time

    ivs = [over_time.interval_from_row({"drafts": 200, "accepted": a, "draft_tokens": 600}, i + 1, i, i + 1)
           for i, a in enumerate([360, 360, 360, 190])]
    base = over_time.flag(ivs, 3)
    fig, ax = plt.subplots()
    got = plot_accept_length_intervals(ivs, ax=ax, baselines=base)
    assert got is ax and ivs[3].flag == "decayed"
    assert ivs[0].stderr_method.startswith("bounded")
    plt.close(fig)
