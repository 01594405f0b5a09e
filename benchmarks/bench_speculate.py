"""The speculative decoding loop's own cost (target: <= 10 % of wall time) and KV cache reuse.

Target: a random-weight Llama wider than the bundled one (H 512, 8 layers, SwiGLU 1536, the
bundled 4,096-token tokenizer), saved to a temporary folder; draft: the bundled draft's shape with
random weights and its fc widened to the target's 3 x 512 aux states (the bundled d2t kept). The
target has far more than 8x the draft's parameters (printed). With random weights the draft's
tokens are rarely accepted, so each verify step is close to one token: the worst case for the
loop's overhead per token. Measured in one run, for a 5-token chain and an SGLang tree
(steps 5, topk 4, draft tokens 16), over the bundled held-out prompts:

- wall time of `helpers.speculate.loop.speculate`, the time inside the target's forward calls and
  inside the draft's layer calls; overhead = the rest (tree building, verification, cache cuts);
- target forwards per generated token against 1 / accept length, and the tokens the target
  computed against prompt tokens + verify-step tokens (nothing recomputed).

A second part runs the bundled (trained) pair, where drafts are accepted, to show forwards per
token = 1 / accept length above 1.

Usage: .venv/bin/python -m benchmarks.bench_speculate [--hidden 512 --prompts 8 --max-new-tokens 48]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data_samples"


def make_draft(hidden_target: int):
    from helpers.model.draft import Eagle3Draft, load_draft

    bundled = load_draft(SAMPLES / "tiny_draft_sglang", "cpu", torch.float32)
    cfg = bundled.config.__class__(**{**bundled.config.__dict__, "target_hidden_size": hidden_target})
    torch.manual_seed(1)
    draft = Eagle3Draft(cfg).eval()
    draft.set_mapping(bundled.mapping)
    return draft


def params(m) -> int:
    return sum(p.numel() for p in m.parameters())


def line(name: str, run, judge: bool = True) -> str:
    s = run.seconds
    verdict = f" (target <= 10 %: {'met' if run.overhead_fraction <= 0.10 else 'NOT met'})" if judge else ""
    fed_expected = sum(len(p.prompt_ids) for p in run.prompts) + run.verify_steps * run.settings["num_draft_tokens"]
    return (f"{name:7s} accept length {run.mean:.3f}; wall {s['total']:.2f} s = target {s['target']:.2f} s + "
            f"draft {s['draft']:.2f} s + loop {s['total'] - s['target'] - s['draft']:.2f} s -> loop overhead "
            f"{run.overhead_fraction:.1%}{verdict}; "
            f"target forwards/token {run.forwards_per_token:.4f} (prefills counted) vs 1/accept length {1 / run.mean:.4f}; "
            f"target tokens computed {run.target_tokens_fed} (prompts + verified nodes {fed_expected})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    args = ap.parse_args()

    from benchmarks.bench_capture import make_target

    from helpers.model.draft import load_draft
    from helpers.io.prompts import read_prompts
    from helpers.acceptance.drafting import Drafting
    from helpers.speculate.result import SpecSettings
    from helpers.speculate.loop import speculate
    from helpers.model.target import load_target

    records = list(read_prompts(SAMPLES / "prompts.jsonl", args.prompts))
    shapes = {"chain5": {"drafting": Drafting.chain(5)}, "tree": {"drafting": Drafting.tree(5, 4, 16)}}
    with tempfile.TemporaryDirectory() as tmp:
        target = load_target(make_target(Path(tmp) / "target", args.hidden), device="cpu", dtype=torch.float32)
        draft = make_draft(args.hidden)
        print(f"target: random Llama H {args.hidden}, 8 layers, {params(target.model) / 1e6:.1f} M parameters; "
              f"draft {params(draft) / 1e6:.2f} M parameters ({params(target.model) / params(draft):.0f}x); "
              f"fp32 on CPU; {len(records)} prompts x {args.max_new_tokens} new tokens")
        speculate(target, draft, records[:1], SpecSettings(max_new_tokens=8))  # warm-up
        for name, shape in shapes.items():
            print(line(name, speculate(target, draft, records, SpecSettings(max_new_tokens=args.max_new_tokens, **shape))))
    print("bundled trained pair (tiny target + tiny_draft_sglang; the target is no larger than the draft, so the "
          "overhead criterion does not apply):")
    target = load_target(SAMPLES / "tiny_target", device="cpu", dtype=torch.float32)
    draft = load_draft(SAMPLES / "tiny_draft_sglang", "cpu", torch.float32)
    for name, shape in shapes.items():
        print(line(name, speculate(target, draft, records, SpecSettings(max_new_tokens=args.max_new_tokens, **shape)),
                   judge=False))


if __name__ == "__main__":
    main()
