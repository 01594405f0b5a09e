"""Write drifted copies of a target: the target changed after the draft was trained.

    python -m scripts.make_drifted_targets OUT [--target DIR] [--bits 3] [--seed 0]

OUT/quantized: every decoder-layer Linear weight (q/k/v/o, gate/up/down) round-tripped through
symmetric per-output-channel int-N (`--bits`, default 3) - what a weight-only quantized serving
build (W4A16, W8A16, ...) does to the states the draft reads; embeddings, norms and lm_head kept.
OUT/rotated: the residual stream rotated by one random orthogonal Q (QuaRot / SpinQuant style):
every RMSNorm weight folded into the Linear layers that read its output (and set to 1, so the
norm commutes with Q), the embedding's rows and every Linear reading the stream multiplied by Q
on the right, every Linear writing into it (o_proj, down_proj) by Q^T on the left, lm_head by Q.
The rotated target's logits are its original logits (to float error), every hidden state is
h @ Q: the aux states a draft trained on the original see are rotated (vllm-ascend#5974).

OUT/draft_target_embedding: the draft (`--draft`, default the bundled tiny one) without its own
embed_tokens, so the kit's loop gives it the target's embedding (`speculate ... --embed-from
TARGET`), as SGLang's EAGLE-3 worker does whatever the draft stores (`set_embed(embed)`,
sglang/srt/speculative/eagle_worker_v2.py:363 in 0.5.23): with the rotated target, the draft
then sees the rotated embedding as SGLang would serve it.

Weights are written in float32 (a bf16 rounding would itself drift the rotated copy). Also
OUT/drifted.json: each copy, how it was made. The tests run this into a temporary folder; nothing
is written into data_samples/ (tiny copies: ~4 MB each).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

SAMPLES = Path(__file__).resolve().parents[1] / "data_samples"
TARGET, DRAFT = SAMPLES / "tiny_target", SAMPLES / "tiny_draft_sglang"
READS_STREAM = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
WRITES_STREAM = ("self_attn.o_proj", "mlp.down_proj")
NORM_OF = {"input_layernorm": READS_STREAM[:3], "post_attention_layernorm": READS_STREAM[3:]}


def _layers(w: dict) -> list[str]:
    """The decoder layers' key prefixes (`model.layers.{i}.`), in order."""
    ids = sorted({int(k.split(".")[2]) for k in w if k.startswith("model.layers.")})
    return [f"model.layers.{i}." for i in ids]


def _copy_folder(src: Path, dst: Path, weights: dict, note: str) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and f.suffix != ".safetensors" and f.name != "model.safetensors.index.json":
            shutil.copy(f, dst / f.name)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["torch_dtype"] = "float32"
    cfg["d2t_lab_drift"] = note
    (dst / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    save_file({k: v.to(torch.float32).contiguous() for k, v in weights.items()}, str(dst / "model.safetensors"))
    return dst


def fake_quantize(w: torch.Tensor, bits: int) -> torch.Tensor:
    """Symmetric per-output-channel (per-row) int-`bits` round trip of a Linear weight [out, in]."""
    q = 2 ** (bits - 1) - 1
    scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / q
    return (w / scale).round().clamp(-q - 1, q) * scale


def quantized(w: dict, bits: int) -> dict:
    out = dict(w)
    for pre in _layers(w):
        for name in READS_STREAM + WRITES_STREAM:
            k = pre + name + ".weight"
            out[k] = fake_quantize(w[k].double(), bits)
    return out


def random_orthogonal(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    return q * torch.sign(torch.diagonal(r))  # Haar-distributed


def rotated(w: dict, seed: int) -> dict:
    out = {k: v.double() for k, v in w.items()}
    H = out["model.embed_tokens.weight"].shape[1]
    Q = random_orthogonal(H, seed)
    for pre in _layers(out):
        for norm, readers in NORM_OF.items():  # fold the norm's weight into its readers, norm -> 1
            g = out[pre + norm + ".weight"]
            for r in readers:
                out[pre + r + ".weight"] = out[pre + r + ".weight"] * g[None, :]
            out[pre + norm + ".weight"] = torch.ones_like(g)
        for r in READS_STREAM:
            out[pre + r + ".weight"] = out[pre + r + ".weight"] @ Q
        for r in WRITES_STREAM:
            out[pre + r + ".weight"] = Q.T @ out[pre + r + ".weight"]
    g = out["model.norm.weight"]
    head = out.get("lm_head.weight", out["model.embed_tokens.weight"]) * g[None, :]
    out["lm_head.weight"] = head @ Q
    out["model.norm.weight"] = torch.ones_like(g)
    out["model.embed_tokens.weight"] = out["model.embed_tokens.weight"] @ Q
    return out


def draft_without_embedding(draft: Path, dst: Path) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for f in draft.iterdir():
        if f.is_file() and f.suffix != ".safetensors":
            shutil.copy(f, dst / f.name)
    w = load_file(str(draft / "model.safetensors"))
    save_file({k: v.contiguous() for k, v in w.items() if not k.endswith("embed_tokens.weight")},
              str(dst / "model.safetensors"))
    return dst


def make(out: Path, target: Path = TARGET, bits: int = 3, seed: int = 0, draft: Path | None = DRAFT) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    w = load_file(str(target / "model.safetensors"))
    if any(k.startswith("model.layers.") and "experts" in k for k in w):
        raise SystemExit(f"{target}: MoE targets are not handled by this script")
    cases = {
        "quantized": (quantized(w, bits), f"decoder Linear weights round-tripped through symmetric per-channel int{bits}"),
        "rotated": (rotated(w, seed), f"residual stream rotated by a random orthogonal Q (seed {seed}), norms folded"),
    }
    made = {}
    for name, (weights, note) in cases.items():
        _copy_folder(target, out / name, weights, note)
        made[name] = {"path": str(out / name), "how": note}
    manifest = {"source": str(target), "bits": bits, "seed": seed, "targets": made}
    if draft is not None:
        manifest["draft_target_embedding"] = str(draft_without_embedding(draft, out / "draft_target_embedding"))
    (out / "drifted.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--target", type=Path, default=TARGET)
    p.add_argument("--bits", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--draft", type=Path, default=DRAFT, help="the draft whose embedding-less copy is written")
    a = p.parse_args(argv)
    if not 2 <= a.bits <= 8:
        p.error("--bits must be in 2..8")
    m = make(a.out, a.target, a.bits, a.seed, a.draft)
    for name, t in m["targets"].items():
        print(f"{name}: {t['path']} ({t['how']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
