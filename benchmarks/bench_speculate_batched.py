"""Tokens/s of the engine-free loop verifying 1, 4 and 16 prompts at once (`SpecSettings.batch_size`,
`helpers.speculate.batched`), and optionally real vLLM's 16 requests at once on the same pair and prompts.

Pair: the bundled engine pair (data_samples/engine_llama: a Llama target of 8 layers, H 64, and its
EAGLE-3 draft); prompts: the 16 bundled held-out prompts, 32 new tokens each, greedy, a chain of 3,
bf16, one thread (as benchmarks/bench_engine.py). Each batch size runs the same prompts after a
warm-up; the greedy tokens of every batch size are compared with batch 1's (bf16: a batched matmul
may round a near-tie the other way; the count of prompts that differ is printed).

Reported: tokens/s per batch size (generated tokens / wall time of `speculate`, prefills included),
accept length, target forwards that ran, the ratios to batch 1; with --vllm, vLLM 0.32.0's CPU build
(.venv-engine, `make engine-env`; started once, ~30 s, not counted) on all 16 requests at once, and
the ratio batch 16 / vLLM. The measurements are taken in interleaved rounds (each batch size, then
vLLM, `--repeat` times; the best of each reported), so that load on a shared machine hits both sides
alike; the idle vLLM server takes no CPU between its rounds (measured: 0.06 CPU-seconds in 5 s).
vLLM is not one thread: its API server and engine core run in two processes (1.5 CPU-seconds per
wall second while it serves the 16 requests), each with one OpenMP thread.

Usage: .venv/bin/python -m benchmarks.bench_speculate_batched [--vllm] [--batch-sizes 1,4,16] [--repeat 3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "data_samples" / "engine_llama"
N, TOKENS, K = 16, 32, 3


def harness():
    from scripts import vllm_cpu

    return vllm_cpu


def load_pair():
    from helpers.model.draft import load_draft
    from helpers.model.target import load_target

    return (load_target(PAIR / "target", device="cpu", dtype=torch.bfloat16),
            load_draft(PAIR / "draft", "cpu", torch.bfloat16))


def loop_once(pair, ids: list[list[int]], bs: int):
    """(tokens/s, the run) of the loop at batch size `bs` on `ids`."""
    from helpers.acceptance.drafting import Drafting
    from helpers.speculate.loop import speculate
    from helpers.speculate.result import SpecSettings

    st = SpecSettings(reading="offset", drafting=Drafting(K), max_new_tokens=TOKENS, engine="vllm", batch_size=bs)
    t0 = time.perf_counter()
    run = speculate(*pair, ids, st)
    return run.generated_tokens / (time.perf_counter() - t0), run


def vllm_once(v, server, ids: list[list[int]]):
    """(tokens/s, responses) of vLLM serving every prompt at once."""
    t0 = time.perf_counter()
    responses = v.complete(server, ids, TOKENS, concurrent=True)
    dt = time.perf_counter() - t0
    return sum(r["usage"]["completion_tokens"] for r in responses) / dt, responses


def rounds(v, server, ids, sizes: list[int], repeat: int) -> tuple[dict, tuple | None]:
    """Interleaved rounds: every batch size, then vLLM (when `server`), `repeat` times; the best of each."""
    pair = load_pair()
    for bs in sizes:
        loop_once(pair, ids[:bs], bs)  # warm-up, not counted
    if server is not None:
        v.complete(server, ids[:2], TOKENS)  # warm-up, not counted
    rows: dict[int, tuple[float, object]] = {}
    served = None
    for _ in range(repeat):
        for bs in sizes:
            tps, run = loop_once(pair, ids, bs)
            if bs not in rows or tps > rows[bs][0]:
                rows[bs] = (tps, run)
        if server is not None:
            tps, responses = vllm_once(v, server, ids)
            if served is None or tps > served[0]:
                served = (tps, responses)
    return rows, served


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllm", action="store_true", help="also run real vLLM (CPU) on the 16 prompts at once")
    ap.add_argument("--batch-sizes", default="1,4,16")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds; the best of each side is reported")
    args = ap.parse_args()
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    torch.set_num_threads(1)
    v = harness()
    ids = v.prompt_token_ids(PAIR / "target", ROOT / "data_samples" / "prompts.jsonl", N)
    if not args.vllm:
        rows, served = rounds(v, None, ids, sizes, args.repeat)
        report(rows, sizes, args.repeat)
        return
    try:
        v.engine_python()
    except v.EngineMissing as e:
        sys.exit(f"bench_speculate_batched: vLLM left out: {e}")
    with v.Server(PAIR / "target", PAIR / "draft", num_speculative_tokens=K, dtype="bfloat16",
                  extra=("--enforce-eager",)) as server:
        start = server.start()
        if not start.started:
            sys.exit(f"bench_speculate_batched: vLLM did not start: {start.error}")
        print(f"vLLM {v.RELEASE} started in {start.seconds:.0f} s")
        rows, served = rounds(v, server, ids, sizes, args.repeat)
    report(rows, sizes, args.repeat)
    best, responses = served
    tokens = sum(r["usage"]["completion_tokens"] for r in responses)
    al = v.served_accept_length(responses)[0]
    print(f"vLLM, 16 requests at once: {best:8.1f} tokens/s ({tokens} tokens, accept length {al:.3f}, best of "
          f"{args.repeat} interleaved rounds)")
    top = max(rows)
    print(f"ratio engine-free batch {top} / vLLM 16 at once: {rows[top][0] / best:.2f}")


def report(rows: dict, sizes: list[int], repeat: int) -> None:
    base_tps, base = rows[sizes[0]]
    print(f"engine-free loop, {N} prompts x {TOKENS} tokens, chain of {K}, bf16, one thread "
          f"(best of {repeat} interleaved rounds):")
    for bs, (tps, run) in rows.items():
        differ = sum(p.output_ids != q.output_ids for p, q in zip(base.prompts, run.prompts))
        print(f"  batch {bs:2d}: {tps:8.1f} tokens/s ({run.generated_tokens} tokens, accept length {run.mean:.3f}, "
              f"{run.batched_forwards['target']} target forwards ran for {run.target_forwards} prompt forwards, "
              f"x{tps / base_tps:.2f} of batch {sizes[0]}, {differ} prompts differ from batch {sizes[0]})")


if __name__ == "__main__":
    main()
