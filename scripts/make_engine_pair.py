"""Write the engine-ready Llama pair under data_samples/engine_llama/: a target and draft vLLM's CPU build runs.

vLLM's CPU attention takes head sizes 32, 64, 80, 96, 112, 128, ... and the bundled tiny pair uses
16, so no real engine can serve it. This pair is made by the same pipeline as the tiny pair
(scripts/make_samples.py: the same text, tokenizer, prompts, target training, capture and draft
training, same seeds) with two changes:

- heads of size 32: the target has 2 attention heads (H 64), the draft 2 heads / 1 kv head;
- the target trains for 800 steps instead of 400 (see TARGET_STEPS);
- the draft is trained on vLLM's aux-layer convention: its config states
  `eagle_aux_hidden_state_layer_ids` [2, 4, 5] and the samples are captured with `engine="vllm"`,
  so vLLM (which uses the ids as given: the input of layer id) feeds it the states it was trained
  on, the inputs of target layers 2, 4, 5 (SpecForge's default 2, L//2, L-3 for L = 8).

Only the target and the SGLang-layout draft (`midlayer.*`, `d2t` offsets and `t2d` in
model.safetensors, `LlamaForCausalLMEagle3`) are bundled; the hidden states it was trained on stay in
a temporary folder. The script prints step-0 accuracy on the training and validation captures.
Deterministic like make_samples.py; about 4-8 minutes on one core.

Usage: .venv/bin/python -m scripts.make_engine_pair [--out data_samples/engine_llama]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from helpers.io.checkpoint import open_checkpoint
from helpers.io.mapping import build_from_frequencies
from scripts import make_samples as ms  # the tiny pair's pipeline, reused with other head counts

TARGET_HEADS, DRAFT_HEADS, DRAFT_KV = 2, 2, 1  # head size 64 / 2 = 32
AUX_IDS = [2, 4, 5]  # vLLM's reading: the input of layer id (= make_samples.AUX_INPUTS)
# Twice the tiny target's 400 steps: a target trained longer has fewer near-ties in its greedy
# continuation, so the bf16 rounding differences between vLLM's kernels and transformers' flip fewer
# tokens (400 steps: 14 of the 16 bundled prompts token-identical in bf16; 800 steps: 16 of 16).
TARGET_STEPS = 800


def configure() -> None:
    """Point make_samples' module-level sizes at this pair's head counts (its classes read them)."""
    ms.HEADS, ms.D_HEADS, ms.D_KV = TARGET_HEADS, DRAFT_HEADS, DRAFT_KV
    assert ms.AUX_INPUTS == AUX_IDS


def draft_config() -> dict:
    cfg = ms.draft_config_dict()
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = AUX_IDS
    return cfg


def capture(target_dir: Path, prompts: Path, dest: Path) -> None:
    from helpers.model.capture import CaptureSettings, capture as run_capture
    from helpers.model.target import load_target

    tgt = load_target(target_dir, device="cpu", dtype=torch.float32)
    run_capture(tgt, prompts, dest, CaptureSettings(engine="vllm", aux_layers=AUX_IDS, regenerate=True,
                                                    max_new_tokens=ms.GEN), progress=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ms.ROOT / "data_samples" / "engine_llama"))
    ap.add_argument("--target-steps", type=int, default=TARGET_STEPS)
    ap.add_argument("--draft-epochs", type=int, default=20)
    args = ap.parse_args()
    out = Path(args.out).resolve()
    configure()
    os.chdir(ms.ROOT)
    t0 = time.time()
    torch.manual_seed(ms.SEED)
    torch.set_num_threads(ms.THREADS)
    torch.use_deterministic_algorithms(True)

    docs = ms.stdlib_docstrings()
    tok = ms.build_tokenizer(docs, ms.VOCAB, ms.SEED)
    encoded = [ms.encode(tok, d) for d in docs]
    sep = ms.encode(tok, "\n\n")
    chunks = [(d, e[s : s + ms.PROMPT]) for d, e in enumerate(encoded)
              for s in range(0, len(e) - ms.PROMPT + 1, ms.PROMPT)]
    units = torch.tensor([c + sep + c + sep for _, c in chunks], dtype=torch.int64)
    target = ms.train_target(units, args.target_steps)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        target_dir = ms.save_target(tmp, target, tok)
        diff = ms.check_conversion(target, target_dir, units[:8])
        print(f"target saved as a Hugging Face Llama (logits within {diff:.1e} of the trained model)")
        samples = tmp / "hidden_states"
        for split in ("train", "val"):  # the tiny pair's prompt files (make_samples.py writes them)
            capture(target_dir, ms.ROOT / "data_samples" / "prompts" / f"{split}.jsonl", samples / split)
        train = ms.stack_samples(samples / "train")
        gen_ids = train["input_ids"][train["loss_mask"] == 1]
        mapping = build_from_frequencies(torch.bincount(gen_ids, minlength=ms.VOCAB), ms.DRAFT_VOCAB, ms.VOCAB)
        kept = mapping.targets("offset")
        head = open_checkpoint(target_dir).tensors.get("lm_head.weight", "cpu", torch.float32)
        draft = ms.train_draft(target, head, train, kept, args.draft_epochs)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        shutil.copytree(target_dir, out / "target")
        (out / "draft").mkdir()
        (out / "draft" / "config.json").write_text(json.dumps(draft_config(), indent=2) + "\n")
        save_file({**ms.state_dict_bf16(draft, "midlayer.", True), "d2t": mapping.d2t.clone(),
                   "t2d": mapping.t2d.clone()}, str(out / "draft" / "model.safetensors"), metadata={"format": "pt"})
        for split in ("train", "val"):
            acc = ms.quick_accuracy(out / "draft", samples / split, out / "target")
            print(f"{split}: step-0 top-1 (offset reading) {acc['top1_token']:.2%} vs token t+2, "
                  f"{acc['top1_target_argmax']:.2%} vs target argmax, {acc['tokens']} tokens")
    print(f"wrote {out} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
