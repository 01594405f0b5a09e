"""Write a Kimi-K2.5-shaped EAGLE-3 draft checkpoint (bf16, ~4.3 GB) without holding it in memory.

Shapes of the draft in docs/eagle3-facts.md ('Investigation'): hidden 7168 (target hidden 7168, so
`fc` is 21504 -> 7168), target vocab 163,840 (`embed_tokens`), draft vocab 32,000 (`lm_head`), one
Llama decoder layer (`midlayer.*`, 64 heads of 128, 8 KV heads, MLP 18432), with the real Kimi
`d2t`/`t2d` from `data_samples/kimi_k25_mapping`. Weights are random-looking (seeded per tensor,
so both formats hold the same values) and written in row chunks: the safetensors file is streamed
(header, then each tensor's bytes), the `.bin` is saved by `torch.save` from per-tensor files
mapped with `torch.from_file`, so no step needs more than a chunk of anonymous memory.

    from benchmarks.kimi_checkpoint import write_kimi_checkpoint
    folder = write_kimi_checkpoint("/tmp/kimi_draft_st", "safetensors")   # or "bin"
"""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import torch

from helpers.io.tensor_files import torch_load

ROOT = Path(__file__).resolve().parents[1]
MAPPING = ROOT / "data_samples" / "kimi_k25_mapping"

H = 7168  # draft hidden size = target hidden size
TARGET_VOCAB = 163_840
DRAFT_VOCAB = 32_000
HEADS, KV_HEADS, HEAD_DIM = 64, 8, 128
INTERMEDIATE = 18_432
CHUNK_ELEMS = 1 << 24  # 32 MB of bf16 per generated chunk

CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": H,
    "target_hidden_size": H,
    "vocab_size": TARGET_VOCAB,
    "draft_vocab_size": DRAFT_VOCAB,
    "num_hidden_layers": 1,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "head_dim": HEAD_DIM,
    "intermediate_size": INTERMEDIATE,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 50000.0,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]},
}


def weight_shapes() -> dict[str, tuple[int, ...]]:
    """Every bf16 weight of the draft and its shape."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    return {
        "embed_tokens.weight": (TARGET_VOCAB, H),
        "fc.weight": (H, 3 * H),
        "midlayer.hidden_norm.weight": (H,),
        "midlayer.input_layernorm.weight": (H,),
        "midlayer.post_attention_layernorm.weight": (H,),
        "midlayer.self_attn.q_proj.weight": (q, 2 * H),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * H),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * H),
        "midlayer.self_attn.o_proj.weight": (H, q),
        "midlayer.mlp.gate_proj.weight": (INTERMEDIATE, H),
        "midlayer.mlp.up_proj.weight": (INTERMEDIATE, H),
        "midlayer.mlp.down_proj.weight": (H, INTERMEDIATE),
        "norm.weight": (H,),
        "lm_head.weight": (DRAFT_VOCAB, H),
    }


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _chunks(name: str, shape):
    """The tensor's values as flat bf16 chunks (norms are ones, matrices small random values).

    One random chunk per tensor, rotated by a different amount for each chunk: random-looking
    data at disk speed, the same on every run.
    """
    n = _numel(shape)
    if len(shape) == 1:
        yield torch.ones(n, dtype=torch.bfloat16)
        return
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    base = (torch.randn(min(CHUNK_ELEMS, n), generator=g) * 0.02).to(torch.bfloat16)
    for i, a in enumerate(range(0, n, CHUNK_ELEMS)):
        yield torch.roll(base, 7919 * i)[: min(CHUNK_ELEMS, n - a)]


def _mapping() -> dict[str, torch.Tensor]:
    d2t = torch_load(MAPPING / "d2t.pt", mmap=False)
    t2d = torch_load(MAPPING / "t2d.pt", mmap=False)
    return {"d2t": d2t.to(torch.int64).contiguous(), "t2d": t2d.to(torch.bool).contiguous()}


def _write_safetensors(path: Path) -> None:
    shapes = weight_shapes()
    extra = _mapping()
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        nbytes = _numel(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    for name, t in extra.items():
        nbytes = t.numel() * t.element_size()
        header[name] = {"dtype": "I64" if t.dtype == torch.int64 else "BOOL", "shape": list(t.shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, shape in shapes.items():
            for chunk in _chunks(name, shape):
                f.write(chunk.view(torch.int16).numpy().tobytes())
        for t in extra.values():
            f.write(t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bool else t.numpy().tobytes())


def _write_bin(path: Path) -> None:
    raw_dir = path.parent / ".raw"
    raw_dir.mkdir(exist_ok=True)
    try:
        state: dict[str, torch.Tensor] = {}
        for name, shape in weight_shapes().items():
            raw = raw_dir / name
            with open(raw, "wb") as f:
                for chunk in _chunks(name, shape):
                    f.write(chunk.view(torch.int16).numpy().tobytes())
            # mapped from disk (private mmap), so torch.save streams it without an in-memory copy
            state[name] = torch.from_file(str(raw), shared=False, size=_numel(shape), dtype=torch.bfloat16).view(shape)
        state.update(_mapping())
        torch.save(state, path)
        del state
    finally:
        shutil.rmtree(raw_dir, ignore_errors=True)


def write_kimi_checkpoint(folder, fmt: str = "safetensors") -> Path:
    """Write the checkpoint into `folder` (created; must not hold one already); return the folder."""
    if fmt not in ("safetensors", "bin"):
        raise ValueError("fmt must be 'safetensors' or 'bin'")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    if fmt == "safetensors":
        _write_safetensors(folder / "model.safetensors")
    else:
        _write_bin(folder / "pytorch_model.bin")
    return folder
