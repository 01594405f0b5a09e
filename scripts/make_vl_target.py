"""Write a tiny vision-language target: transformers' own Qwen2.5-VL (or Qwen2-VL / Qwen3-VL) class
with the bundled tiny target's language weights inside.

    python -m scripts.make_vl_target OUT [--family qwen2_5_vl|qwen2_vl|qwen3_vl] [--target DIR]

The config is a VL wrapper as the Hub ships them (`architectures: [...ForConditionalGeneration]`,
the language model's fields under `text_config`, a tiny `vision_config`); the language model's
weights are data_samples/tiny_target's (embedding, every decoder layer, final norm, lm_head; the
Qwen2 q/k/v biases zero), so on text-only prompts a Qwen2-VL / Qwen2.5-VL target computes what
the tiny target computes (multimodal RoPE with one position for all three sections is plain RoPE)
and the bundled draft (data_samples/tiny_draft_sglang) drafts for it as for the tiny target. A
Qwen3-VL target also has Qwen3's per-head q/k norms, which the Llama target lacks (left at their
initial weight 1): it computes otherwise, and serves as a VL wrapper of another language model. The vision tower is
random (text-only prompts never reach it); the image/video token ids are set past the text vocab
so no text token is read as one. Tokenizer files are copied. The tests run this into a temporary
folder; nothing is written into data_samples/ (the copy is ~5 MB in float32).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

SAMPLES = Path(__file__).resolve().parents[1] / "data_samples"
TARGET = SAMPLES / "tiny_target"
FAMILIES = ("qwen2_5_vl", "qwen2_vl", "qwen3_vl")


def _classes(family: str):
    import transformers as T

    return {
        "qwen2_5_vl": (T.Qwen2_5_VLConfig, T.Qwen2_5_VLForConditionalGeneration),
        "qwen2_vl": (T.Qwen2VLConfig, T.Qwen2VLForConditionalGeneration),
        "qwen3_vl": (T.Qwen3VLConfig, T.Qwen3VLForConditionalGeneration),
    }[family]


def vl_config(family: str, text: dict):
    """The VL config with `text` (the tiny target's config.json) as its language model."""
    cfg_cls, _ = _classes(family)
    V = int(text["vocab_size"])
    half = int(text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]) // 2
    section = [half - 2 * (half // 3), half // 3, half // 3]  # temporal, height, width: sums to head_dim / 2
    tc = {k: text[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                               "num_hidden_layers", "hidden_act", "rms_norm_eps", "max_position_embeddings",
                               "vocab_size")}
    tc.update(head_dim=text.get("head_dim"), tie_word_embeddings=False, bos_token_id=text.get("bos_token_id"),
              eos_token_id=text.get("eos_token_id"), pad_token_id=text.get("pad_token_id"))
    rope = {"rope_type": "default", "rope_theta": float(text.get("rope_theta", 10000.0)), "mrope_section": section}
    if family == "qwen3_vl":
        rope["mrope_interleaved"] = True
    tc["rope_parameters"] = rope
    H = int(text["hidden_size"])
    if family == "qwen3_vl":
        vc = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": H,
              "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 16,
              "deepstack_visual_indexes": []}
    elif family == "qwen2_5_vl":
        vc = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": H,
              "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 56,
              "fullatt_block_indexes": [0]}
    else:
        vc = {"depth": 1, "embed_dim": 32, "hidden_size": H, "num_heads": 2, "mlp_ratio": 2, "patch_size": 14,
              "spatial_merge_size": 2, "temporal_patch_size": 2}
    ids = {"image_token_id": V, "video_token_id": V + 1, "vision_start_token_id": V + 2, "vision_end_token_id": V + 3}
    return cfg_cls(text_config=tc, vision_config=vc, tie_word_embeddings=False, **ids)


def _language_model(model):
    inner = model.model
    return getattr(inner, "language_model", inner)


@torch.no_grad()
def make(out: Path, family: str = "qwen2_5_vl", target: Path = TARGET) -> Path:
    from safetensors.torch import load_file

    if family not in FAMILIES:
        raise SystemExit(f"--family must be one of {', '.join(FAMILIES)}")
    text = json.loads((target / "config.json").read_text())
    cfg = vl_config(family, text)
    _, cls = _classes(family)
    torch.manual_seed(0)
    model = cls(cfg).to(torch.float32).eval()
    lm = _language_model(model)
    w = {k: v.float() for k, v in load_file(str(target / "model.safetensors")).items()}
    own = dict(lm.named_parameters())
    done = set()
    for k, v in w.items():
        if k == "lm_head.weight":
            model.lm_head.weight.copy_(v)
            done.add(k)
            continue
        name = k.removeprefix("model.")
        if name in own and tuple(own[name].shape) == tuple(v.shape):
            own[name].copy_(v)
            done.add(k)
    missing = sorted(set(w) - done)
    if missing:
        raise SystemExit(f"{target}: tensors with no place in the {family} language model: {missing[:5]}")
    for name, p in own.items():  # Qwen2's q/k/v biases: zero, as the Llama target has none
        if name.endswith(".bias"):
            p.zero_()
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out, safe_serialization=True)
    for f in target.iterdir():
        if f.is_file() and f.name not in ("config.json", "model.safetensors", "generation_config.json"):
            shutil.copy(f, out / f.name)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--family", choices=FAMILIES, default="qwen2_5_vl")
    p.add_argument("--target", type=Path, default=TARGET)
    a = p.parse_args(argv)
    print(make(a.out, a.family, a.target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
