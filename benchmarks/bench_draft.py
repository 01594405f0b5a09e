"""Draft forward throughput at the Kimi-K2.5 draft's shapes, against bare matmuls of the same shapes.

Shapes (docs/eagle3-facts.md, 'Investigation'): H 7168, target hidden 7168 (fc 21504 -> 7168),
draft vocab 32,000, 64 heads / 8 kv heads (head_dim 128), intermediate 18,432. Random weights,
fp32 on CPU by default. The embedding table is a row lookup (no FLOPs), so it is kept at
`--embed-rows` rows (default 32,000, not Kimi's 163,840) to save 3.8 GB of RAM.

Measured in one run:
- batched: one forward over B sequences of T tokens;
- one at a time: B forwards of one sequence each;
- reference: for every weight matrix the forward multiplies by, a bare `torch.matmul` of the same
  [tokens, in] x [in, out] shapes (same weights, same tokens), timed the same way.
Printed: tokens/s of each, the reference's FLOP rate, and each forward's achieved FLOP rate as a
fraction of it (target: >= 50 % for the batched path on CPU).

Usage: .venv/bin/python -m benchmarks.bench_draft [--batch 4 --seq 16 --threads N --repeats 2]
"""
from __future__ import annotations

import argparse
import time

import torch

from helpers.model.draft import Eagle3Draft
from helpers.model.config import DraftConfig

KIMI = {
    "hidden_size": 7168, "target_hidden_size": 7168, "draft_vocab_size": 32000, "num_attention_heads": 64,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 18432, "rms_norm_eps": 1e-6,
    "rope_theta": 50000.0,
}


def build(cfg: DraftConfig, dtype) -> Eagle3Draft:
    with torch.device("meta"):
        model = Eagle3Draft(cfg)
    model = model.to_empty(device="cpu").to(dtype)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.uniform_(-1.0, 1.0, generator=g).mul_(p.shape[-1] ** -0.5)
    return model.eval()


def matmul_shapes(model: Eagle3Draft) -> list[torch.Tensor]:
    """The weight matrices one forward step multiplies activations by (embedding excluded)."""
    a, m = model.midlayer.self_attn, model.midlayer.mlp
    return [model.fc.weight, a.q_proj.weight, a.k_proj.weight, a.v_proj.weight, a.o_proj.weight,
            m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight, model.lm_head.weight]


def flops_per_token(model: Eagle3Draft, T: int) -> float:
    c = model.config
    lin = sum(2 * w.shape[0] * w.shape[1] for w in matmul_shapes(model))
    attn = 2 * 2 * c.num_attention_heads * c.head_dim * T  # scores + weighted values, T keys (upper bound)
    return float(lin + attn)


def timeit(fn, repeats: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--intermediate", type=int, default=KIMI["intermediate_size"])
    ap.add_argument("--embed-rows", type=int, default=32000)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    cfg = DraftConfig.from_dict({**KIMI, "intermediate_size": args.intermediate, "vocab_size": args.embed_rows})
    model = build(cfg, dtype)
    n_params = sum(p.numel() for p in model.parameters())
    B, T = args.batch, args.seq
    g = torch.Generator().manual_seed(1)
    aux = torch.randn(B, T, 3 * cfg.target_hidden_size, generator=g, dtype=dtype)  # [B, T, 3Ht]
    ids = torch.randint(0, cfg.vocab_size, (B, T), generator=g)  # [B, T]
    fpt = flops_per_token(model, T)
    weights = matmul_shapes(model)

    with torch.inference_mode():
        t_batched = timeit(lambda: model(aux, ids), args.repeats)
        t_single = timeit(lambda: [model(aux[i : i + 1], ids[i : i + 1]) for i in range(B)], args.repeats)
        x_b = {w.shape[1]: torch.randn(B * T, w.shape[1], generator=g, dtype=dtype) for w in weights}
        x_1 = {k: v[:T] for k, v in x_b.items()}
        t_mm_b = timeit(lambda: [torch.matmul(x_b[w.shape[1]], w.T) for w in weights], args.repeats)
        t_mm_1 = timeit(lambda: [[torch.matmul(x_1[w.shape[1]], w.T) for w in weights] for _ in range(B)], args.repeats)

    tokens = B * T
    mm_flops = sum(2 * w.shape[0] * w.shape[1] for w in weights) * tokens
    ref_rate = mm_flops / t_mm_b
    print(f"draft at Kimi shapes: {n_params / 1e9:.2f} B params ({args.dtype}), B={B} T={T}, "
          f"threads={torch.get_num_threads()}, {fpt / 1e9:.2f} GFLOP/token")
    print(f"bare matmul, same shapes, {tokens} tokens: {ref_rate / 1e9:8.1f} GFLOP/s "
          f"(one sequence of {T} at a time: {mm_flops / t_mm_1 / 1e9:.1f} GFLOP/s)")
    for name, t in (("batched", t_batched), ("one at a time", t_single)):
        rate = fpt * tokens / t
        print(f"forward {name:>13}: {tokens / t:8.1f} tokens/s  {rate / 1e9:8.1f} GFLOP/s  "
              f"= {rate / ref_rate:6.1%} of the bare-matmul rate")
    print(f"ratios: batched / one-at-a-time throughput = {t_single / t_batched:.2f}x; "
          f"batched forward / bare matmul = {fpt * tokens / t_batched / ref_rate:.1%} (target >= 50%)")


if __name__ == "__main__":
    main()
