"""Tokens/s of the kit's engine-free loop against real vLLM (its CPU build) on the same pair and prompts.

Pair: the bundled engine pair (data_samples/engine_llama: a Llama target of 8 layers, H 64, and its
EAGLE-3 draft); prompts: the 16 bundled held-out prompts, 32 new tokens each, greedy, a chain of 3,
bf16. Measured in one run, one after the other on the same machine:

- the engine-free loop (`helpers.speculate.loop.speculate`, one prompt at a time: the loop has no
  batching), generated tokens / its wall time;
- vLLM 0.32.0 (`make engine-env`), started once with `--enforce-eager`, the 16 prompts sent one
  request at a time, then all 16 at once; generated tokens / wall time of the requests (start-up
  not counted; it is printed).

Reported: each tokens/s, the accept lengths (the two must agree: same draft, same prompts), and the
ratios vLLM / engine-free. On a tiny pair both are dominated by per-step overhead, not by the model:
the ratio says how much of a real engine's scheduling and batching the loop leaves out, not how
fast a big model would run.

Usage: .venv/bin/python benchmarks/bench_engine.py   (needs .venv-engine: make engine-env)
"""
from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "data_samples" / "engine_llama"
N, TOKENS, K = 16, 32, 3


def harness():
    spec = importlib.util.spec_from_file_location("vllm_cpu", ROOT / "scripts" / "vllm_cpu.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["vllm_cpu"] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


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


def main() -> None:
    v = harness()
    try:
        v.engine_python()
    except v.EngineMissing as e:
        sys.exit(f"bench_engine: {e}")
    torch.set_num_threads(1)
    ids = v.prompt_token_ids(PAIR / "target", ROOT / "data_samples" / "prompts.jsonl", N)
    kit_tps, kit_al, kit_tokens = engine_free(ids)
    print(f"engine-free loop: {kit_tps:8.1f} tokens/s ({kit_tokens} tokens, accept length {kit_al:.3f}, one prompt at a time)")
    with v.Server(PAIR / "target", PAIR / "draft", num_speculative_tokens=K, dtype="bfloat16",
                  extra=("--enforce-eager",)) as server:
        start = server.start()
        if not start.started:
            sys.exit(f"bench_engine: vLLM did not start: {start.error}")
        print(f"vLLM {v.RELEASE} started in {start.seconds:.0f} s")
        v.complete(server, ids[:2], TOKENS)  # warm-up, not counted
        rows = {}
        for label, concurrent in (("one request at a time", False), ("16 requests at once", True)):
            t0 = time.perf_counter()
            responses = v.complete(server, ids, TOKENS, concurrent=concurrent)
            dt = time.perf_counter() - t0
            tokens = sum(r["usage"]["completion_tokens"] for r in responses)
            al = v.served_accept_length(responses)[0]
            rows[label] = tokens / dt
            print(f"vLLM, {label:22s}: {tokens / dt:8.1f} tokens/s ({tokens} tokens, accept length {al:.3f})")
    for label, tps in rows.items():
        print(f"ratio vLLM ({label}) / engine-free: {tps / kit_tps:.2f}")


if __name__ == "__main__":
    main()
