"""Shared, producer-independent pieces of the producer fixtures (plain torch only).

Imported by gen_specforge.py and gen_speculators.py, each running in its producer's own venv.
Everything is seeded, so the same inputs and the same token counts feed both producers.
"""
from __future__ import annotations

import json
import math
import os

import torch

# sizes shared by every fixture
H = 32            # draft hidden size (small: data_samples/producers/ stays under 3 MB)
HT = 32           # target hidden size (speculators' fc takes 3*hidden_size, so keep HT == H)
HEADS = 4
KV_HEADS = 2
INTER = 64
VOCAB = 512       # target vocab
DRAFT_VOCAB = 128
TARGET_LAYERS = 8  # the tiny target's layer count (aux ids default to [2, 4, 5] in speculators)
T = 16            # raw sequence length of the fixed inputs
STEPS = 3         # drafting steps recorded (0, 1, 2)
EPS = 1e-6
ROPE_THETA = 10000.0
AUX_SCALES = (1.0, 4.0, 16.0)  # per-aux-layer scale: makes fc_norm / input_norm matter


def token_counts() -> dict[int, int]:
    """Zipf-like counts over a shuffled target vocab (ids 0..3 rare), so kept draft ids are
    spread over the target vocab and d2t holds real, growing offsets."""
    g = torch.Generator().manual_seed(1234)
    perm = torch.randperm(VOCAB, generator=g).tolist()
    counts = {}
    for rank, tid in enumerate(perm):
        counts[int(tid)] = int(100000 / (rank + 1) ** 1.1) + 1
    return counts


def fixed_inputs() -> dict[str, torch.Tensor]:
    """Raw token sequence x_0..x_{T-1} (target ids, drawn from the count distribution) and raw
    aux hidden states g_0..g_{T-1} ([1, T, 3*HT], fp32, chunk i scaled by AUX_SCALES[i])."""
    g = torch.Generator().manual_seed(4321)
    counts = token_counts()
    ids = torch.tensor(sorted(counts))
    p = torch.tensor([counts[int(i)] for i in ids], dtype=torch.float64)
    input_ids = ids[torch.multinomial(p, T, replacement=True, generator=g)].unsqueeze(0)
    chunks = [torch.randn(1, T, HT, generator=g) * s for s in AUX_SCALES]
    aux = torch.cat(chunks, dim=-1)
    return {"input_ids": input_ids.long(), "aux_hidden_states": aux.float()}


@torch.no_grad()
def randomize_(model: torch.nn.Module, seed: int, skip=()) -> None:
    """Seeded random weights that make every piece observable: linear weights ~ N(0, 1/fan_in),
    biases ~ N(0, 0.1), RMSNorm weights ~ 1 + N(0, 0.3) (never all ones), embeddings ~ N(0, 1).
    Buffers (d2t/t2d) are left alone; names containing any of `skip` too."""
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        if any(s in name for s in skip):
            continue
        if "norm" in name:
            new = 1.0 + 0.3 * torch.randn(p.shape, generator=g)
        elif name.endswith("bias"):
            new = 0.1 * torch.randn(p.shape, generator=g)
        elif "embed" in name:
            new = torch.randn(p.shape, generator=g)
        else:
            fan_in = p.shape[-1] if p.dim() > 1 else 1
            new = torch.randn(p.shape, generator=g) / math.sqrt(fan_in)
        p.copy_(new.to(p.dtype))


def write_json(path, obj) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")


def check_weights_only(path) -> None:
    torch.load(path, weights_only=True)


def rel(path, root) -> str:
    return os.path.relpath(path, root)
