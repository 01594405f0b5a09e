"""Tokens/s of the kit's engine-free loop against real vLLM (its CPU build) and real llama.cpp on the same pair and prompts.

Pair: the bundled engine pair (data_samples/engine_llama: a Llama target of 8 layers, H 64, and its
EAGLE-3 draft); prompts: the 16 bundled held-out prompts, 32 new tokens each, greedy, a chain of 3,
bf16. Measured in one run, one after the other on the same machine:

- the engine-free loop (`helpers.speculate.loop.speculate`, one prompt at a time: the loop has no
  batching), generated tokens / its wall time;
- vLLM 0.32.0 (`make engine-env`), started once with `--enforce-eager`, the 16 prompts sent one
  request at a time, then all 16 at once; generated tokens / wall time of the requests (start-up
  not counted; it is printed);
- llama.cpp b11434 (`make engine-env`): the pair converted by llama.cpp's own converter (f32 GGUF),
  `llama-server -t 1` with the draft (`--spec-type draft-eagle3 --spec-draft-n-max 3`), the 16
  prompts one request at a time on one slot, then all 16 at once on 4 slots (`-np 4`); its accept
  length from its /metrics counters (1 + accepted / drafts).

Reported: each tokens/s, the accept lengths (the two must agree: same draft, same prompts), and the
ratios vLLM / engine-free. On a tiny pair both are dominated by per-step overhead, not by the model:
the ratio says how much of a real engine's scheduling and batching the loop leaves out, not how
fast a big model would run.

Usage: .venv/bin/python -m benchmarks.bench_engine   (needs .venv-engine and/or .venv-llamacpp: make engine-env;
an engine whose environment is missing is said and left out)
"""
from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "data_samples" / "engine_llama"
N, TOKENS, K = 16, 32, 3


def harness(name: str = "vllm_cpu"):
    """scripts/NAME.py, the engine harness (vllm_cpu or llamacpp)."""
    return importlib.import_module(f"scripts.{name}")


def engine_free(ids: list[list[int]]) -> tuple[float, float, int]:
    """(tokens/s, accept length, tokens) of the kit's loop over the prompts, one at a time."""
    from helpers.model.draft import load_draft
    from helpers.model.target import load_target
    from helpers.speculate.loop import speculate_prompt
    from helpers.acceptance.drafting import Drafting
    from helpers.speculate.result import SpecRun, SpecSettings

    target = load_target(PAIR / "target", device="cpu", dtype=torch.bfloat16)
    draft = load_draft(PAIR / "draft", "cpu", torch.bfloat16)
    settings = SpecSettings(reading="offset", drafting=Drafting(K), max_new_tokens=TOKENS, engine="vllm")
    run = SpecRun.empty(settings)
    layers = target.draft_layers(draft, settings.engine)
    speculate_prompt(target, draft, ids[0], settings, SpecRun.empty(settings), layers=layers, index=0)  # warm-up, not counted
    t0 = time.perf_counter()
    outputs = [speculate_prompt(target, draft, p, settings, run, layers=layers, index=i) for i, p in enumerate(ids)]
    dt = time.perf_counter() - t0
    tokens = sum(len(o.output_ids) for o in outputs)
    return tokens / dt, run.mean, tokens


def llamacpp_rows(ids: list[list[int]]) -> dict[str, float]:
    """llama.cpp's tokens/s, one request at a time (one slot) and 16 at once (4 slots)."""
    import tempfile

    L = harness("llamacpp")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        t, d = Path(tmp) / "target.gguf", Path(tmp) / "draft.gguf"
        for c in (L.convert(PAIR / "target", t), L.convert(PAIR / "draft", d, target=PAIR / "target")):
            if not c.ok:
                sys.exit(f"bench_engine: llama.cpp's converter refused the pair: {c.error}")
        for label, slots, concurrent in (("one request at a time", 1, False), ("16 requests at once", 4, True)):
            with L.Server(t, d, n_max=K, parallel=slots) as server:
                start = server.start()
                if not start.started:
                    sys.exit(f"bench_engine: llama-server did not start: {start.error}")
                L.complete(server, ids[:2], TOKENS)  # warm-up, not counted
                before = L.spec_counters(server)
                t0 = time.perf_counter()
                responses = L.complete(server, ids, TOKENS, concurrent=concurrent)
                dt = time.perf_counter() - t0
                after = L.spec_counters(server)
            tokens = sum(len(r["tokens"]) for r in responses)
            drafts = after["num_drafts"] - before["num_drafts"]
            al = 1 + (after["num_accepted_tokens"] - before["num_accepted_tokens"]) / drafts if drafts else float("nan")
            rows[f"llama.cpp, {label}"] = tokens / dt
            print(f"llama.cpp {L.RELEASE}, {label:22s} (-np {slots}): {tokens / dt:8.1f} tokens/s ({tokens} tokens, "
                  f"accept length {al:.3f})")
    return rows


def main() -> None:
    v, L = harness(), harness("llamacpp")
    missing = []
    try:
        v.engine_python()
    except v.EngineMissing as e:
        missing.append(str(e))
        v = None
    try:
        L.llamacpp_python(), L.server_binary()
    except L.EngineMissing as e:
        missing.append(str(e))
        L = None
    for m in missing:
        print(f"bench_engine: left out: {m}")
    if v is None and L is None:
        sys.exit("bench_engine: no engine environment (make engine-env)")
    torch.set_num_threads(1)
    ids = harness().prompt_token_ids(PAIR / "target", ROOT / "data_samples" / "prompts.jsonl", N)
    kit_tps, kit_al, kit_tokens = engine_free(ids)
    print(f"engine-free loop: {kit_tps:8.1f} tokens/s ({kit_tokens} tokens, accept length {kit_al:.3f}, one prompt at a time)")
    rows = {}
    if L is not None:
        rows |= llamacpp_rows(ids)
    if v is None:
        for label, tps in rows.items():
            print(f"ratio {label} / engine-free: {tps / kit_tps:.2f}")
        return
    with v.Server(PAIR / "target", PAIR / "draft", num_speculative_tokens=K, dtype="bfloat16",
                  extra=("--enforce-eager",)) as server:
        start = server.start()
        if not start.started:
            sys.exit(f"bench_engine: vLLM did not start: {start.error}")
        print(f"vLLM {v.RELEASE} started in {start.seconds:.0f} s")
        v.complete(server, ids[:2], TOKENS)  # warm-up, not counted
        for label, concurrent in (("one request at a time", False), ("16 requests at once", True)):
            t0 = time.perf_counter()
            responses = v.complete(server, ids, TOKENS, concurrent=concurrent)
            dt = time.perf_counter() - t0
            tokens = sum(r["usage"]["completion_tokens"] for r in responses)
            al = v.served_accept_length(responses)[0]
            rows[f"vLLM, {label}"] = tokens / dt
            print(f"vLLM, {label:22s}: {tokens / dt:8.1f} tokens/s ({tokens} tokens, accept length {al:.3f})")
    for label, tps in rows.items():
        print(f"ratio {label} / engine-free: {tps / kit_tps:.2f}")


if __name__ == "__main__":
    main()
