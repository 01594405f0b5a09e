"""Write a SOFT variant of the bundled engine pair (data_samples/engine_llama) to a folder given:
the same target and draft with their lm_head weights multiplied by a scale < 1, so both output
distributions are softer (logits * s is the model at temperature 1 / s) while every argmax, hence
every greedy output and greedy accept length, stays what it was.

Why: the bundled pair is so peaked that the temperature barely moves acceptance (greedy 1.865 +-
0.038 vs T=1 1.834 +- 0.035 on 32 prompts x 64 tokens), so the engines' acceptance rules under
sampling (docs/sampling.md) cannot be told apart on it. On the soft variant greedy vs T=1 and the
textbook rule vs the one-hot rule (vLLM's default, SGLang, llama.cpp's EAGLE-3) differ by many
standard errors (numbers in docs/sampling.md).

Deterministic (no randomness: a multiplication of two tensors), small (about 2.7 MB), made at test
time and never shipped (data_samples/ stays under its size limit):

    python -m scripts.make_soft_pair OUT [--target-scale 0.6] [--draft-scale 0.6]

OUT/target and OUT/draft are written (every other file and tensor copied as is); OUT/soft_pair.json
records the scales and the source.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "data_samples" / "engine_llama"
TARGET_SCALE = 0.6  # chosen by measurement (docs/sampling.md): soft at T 0.7 and 1, the draft still well above 1
DRAFT_SCALE = 0.6


def _scaled(src: Path, dst: Path, scale: float) -> None:
    from safetensors.torch import load_file, save_file

    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name != "model.safetensors":
            shutil.copyfile(f, dst / f.name)
    tensors = load_file(src / "model.safetensors")
    w = tensors["lm_head.weight"]
    tensors["lm_head.weight"] = (w.float() * scale).to(w.dtype).contiguous()
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})


def make_soft_pair(out, target_scale: float = TARGET_SCALE, draft_scale: float = DRAFT_SCALE,
                   source: Path = SOURCE) -> Path:
    """Write OUT/target and OUT/draft (lm_head * scale) and OUT/soft_pair.json; returns OUT."""
    out = Path(out)
    if not (0 < target_scale <= 1 and 0 < draft_scale <= 1):
        raise ValueError("scales must be in (0, 1]")
    _scaled(source / "target", out / "target", target_scale)
    _scaled(source / "draft", out / "draft", draft_scale)
    (out / "soft_pair.json").write_text(json.dumps({
        "source": str(source.relative_to(ROOT)) if source.is_relative_to(ROOT) else str(source),
        "target_lm_head_scale": target_scale, "draft_lm_head_scale": draft_scale,
        "made_by": "scripts/make_soft_pair.py"}, indent=2) + "\n")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="folder to write (target/, draft/, soft_pair.json)")
    ap.add_argument("--target-scale", type=float, default=TARGET_SCALE)
    ap.add_argument("--draft-scale", type=float, default=DRAFT_SCALE)
    a = ap.parse_args(argv)
    print(make_soft_pair(a.out, a.target_scale, a.draft_scale))
    return 0


if __name__ == "__main__":
    sys.exit(main())
