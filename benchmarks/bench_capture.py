"""Capture throughput against the target's bare forward on the same batches (target: >= 85 %).

The target is a random-weight Llama wider than the bundled one (H 512, 8 layers, 8 heads,
SwiGLU 1536, the bundled 4,096-token tokenizer), saved to a temporary folder; the prompts are the
bundled training prompts with their own text as the answer (teacher-forced, so the work per
sample is one forward). Measured in one run, best of `--repeats`:

- capture: `helpers.model.capture.capture` end to end (tokenizing with the chat template, the forward
  with the aux/final hooks, slicing, bf16 conversion, atomic file writes), into a fresh folder;
- bare: the same padded batches through the same decoder with no hooks and nothing written.

Printed: samples/s and tokens/s of each and capture / bare throughput.

Usage: .venv/bin/python -m benchmarks.bench_capture [--hidden 512 --batch-size 8 --samples 160 --threads N]
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data_samples"


def make_target(folder: Path, hidden: int) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=4096, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=8,
                      num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=512,
                      tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(SAMPLES / "tiny_target" / f, folder / f)
    return folder


def make_prompts(path: Path, n: int) -> Path:
    rows = [json.loads(line) for line in (SAMPLES / "prompts" / "train.jsonl").read_text().splitlines()[:n]]
    path.write_text("".join(json.dumps({"prompt": r["prompt"], "response": r["prompt"]}) + "\n" for r in rows))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--samples", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from helpers.model.capture import _forward, _pad, capture
    from helpers.io.chat import encode_conversation, uses_template
    from helpers.io.prompts import read_prompts
    from helpers.model.target import HiddenStateCapture, load_target

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        target = load_target(make_target(tmp / "target", args.hidden), device="cpu", dtype=torch.float32)
        prompts = make_prompts(tmp / "prompts.jsonl", args.samples)
        template = uses_template(target.tokenizer, "auto")
        seqs = [encode_conversation(target.tokenizer, r.messages, template)[0] for r in read_prompts(prompts)]
        batches = [seqs[i : i + args.batch_size] for i in range(0, len(seqs), args.batch_size)]
        tokens = sum(len(s) for s in seqs)

        def bare() -> float:
            t0 = time.perf_counter()
            with torch.inference_mode():
                for b in batches:
                    ids, att = _pad(b, 0, left=False)
                    target.decoder(input_ids=ids, attention_mask=att, use_cache=False)
            return time.perf_counter() - t0

        def full(k: int) -> float:
            t0 = time.perf_counter()
            capture(target, prompts, tmp / f"out{k}", batch_size=args.batch_size)
            return time.perf_counter() - t0

        def hooks() -> float:  # the forward with the capture hooks, nothing written: for the breakdown
            with HiddenStateCapture(target, [2, 4, 5]) as cap:
                t0 = time.perf_counter()
                for b in batches:
                    _forward(target, cap, b)
                return time.perf_counter() - t0

        bare(), full(-1), hooks()  # warm-up
        hooks_only = min(hooks() for _ in range(args.repeats))
        t_bare = min(bare() for _ in range(args.repeats))
        t_cap = min(full(k) for k in range(args.repeats))
    n = len(seqs)
    print(f"target: random Llama H {args.hidden}, 8 layers, fp32 on CPU ({torch.get_num_threads()} threads); "
          f"{n} samples, {tokens:,} tokens, batches of {args.batch_size}")
    print(f"bare forward   {n / t_bare:8.1f} samples/s  {tokens / t_bare:9.0f} tokens/s")
    print(f"forward+hooks  {n / hooks_only:8.1f} samples/s  {tokens / hooks_only:9.0f} tokens/s")
    print(f"capture        {n / t_cap:8.1f} samples/s  {tokens / t_cap:9.0f} tokens/s")
    ratio = t_bare / t_cap
    print(f"capture / bare throughput: {ratio:.1%} (target >= 85 %) -> {'met' if ratio >= 0.85 else 'NOT met'}")


if __name__ == "__main__":
    main()
