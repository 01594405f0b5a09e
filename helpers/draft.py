"""The EAGLE-3 draft model in plain PyTorch: forward, k-step drafting, loading.

One Llama decoder layer over the target's hidden states (docs/eagle3-facts.md, 'Draft model'):

    aux [B,T,3Ht] --fc--> h [B,T,H]          (step 0 only; later steps reuse the layer's output)
    x = cat(input_layernorm(embed(next_ids)), hidden_norm(h))        # [B, T, 2H]
    h = residual + o_proj(attention(q/k/v over 2H inputs, RoPE))     # residual = h (or normed h)
    h = h + mlp(post_attention_layernorm(h))                         # SwiGLU
    logits = lm_head(norm(h))                                        # [B, T, draft_vocab]

Alignment: at position t the draft takes the aux hidden states of position t and the embedding
of token t+1 (a target-vocab id), and predicts token t+2. Step k >= 1 of `draft_steps` takes the
layer's own output as h and the embedding of the token drafted at step k-1 (mapped to a target
id through `d2t` under a reading, as the engines do), and predicts token t+2+k. Its query at
position t attends to the step-0 keys/values of positions <= t and to the keys/values of its own
chain's steps 1..k, with RoPE position t+k - the pattern SpecForge trains with.

`load_draft` reads SGLang/SpecForge (`midlayer.*`, flat config) and speculators (`layers.0.*`,
nested `transformer_layer_config`) checkpoints straight onto the device in the target dtype.
The config (`DraftConfig`, RoPE frequencies) is in `helpers.draft_config`, devices and dtypes in
`helpers.devices`; both are re-exported here.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .checkpoint import Checkpoint, load_mapping, open_checkpoint, read_mapping_tensors
from .devices import (  # noqa: F401  (get_device re-exported: callers import it from here)
    available_bytes,
    default_dtype,
    get_device,
    resolve_device,
)
from .draft_config import ROPE_TYPES, DraftConfig, rope_inv_freq  # noqa: F401  (re-exported)
from .errors import BadInputError
from .mapping import READINGS, VocabMapping, to_target_ids


# -- model ------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rotate_half(x):
    """RoPE's rotation: the last dimension's halves (a, b) -> (-b, a)."""
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: DraftConfig):
        super().__init__()
        H, d = cfg.hidden_size, cfg.head_dim
        self.nh, self.nkv, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, d
        self.q_proj = nn.Linear(2 * H, self.nh * d, bias=False)
        self.k_proj = nn.Linear(2 * H, self.nkv * d, bias=False)
        self.v_proj = nn.Linear(2 * H, self.nkv * d, bias=False)
        self.o_proj = nn.Linear(self.nh * d, H, bias=False)

    def forward(self, x, cos, sin, cache: list, key_mask):
        """x [B,T,2H]; cos/sin [T,d]; cache: list of (k, v) from earlier steps, appended to.

        Step 0 (empty cache): causal attention over positions. Step k: the query at t sees the
        step-0 keys of positions <= t plus the keys of its own chain's steps 1..k (diagonal).
        """
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.d).transpose(1, 2)  # [B, nh, T, d]
        k = self.k_proj(x).view(B, T, self.nkv, self.d).transpose(1, 2)  # [B, nkv, T, d]
        v = self.v_proj(x).view(B, T, self.nkv, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)  # [B, nh, T, d]
        cache.append((k, v))
        k0, v0 = cache[0]
        scale = 1.0 / math.sqrt(self.d)
        s0 = (q @ k0.transpose(-1, -2)).float() * scale  # [B, nh, T, T]
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        allowed = causal if key_mask is None else causal & key_mask[:, None, None, :].bool()
        s0 = s0.masked_fill(~allowed, torch.finfo(torch.float32).min)
        if len(cache) == 1:
            p = torch.softmax(s0, dim=-1).to(v0.dtype)
            out = p @ v0
        else:
            diag = torch.stack([(q * kj).sum(-1) for kj, _ in cache[1:]], dim=-1).float() * scale  # [B,nh,T,k]
            p = torch.softmax(torch.cat([s0, diag], dim=-1), dim=-1).to(v0.dtype)
            out = p[..., :T] @ v0
            for j, (_, vj) in enumerate(cache[1:]):
                out = out + p[..., T + j, None] * vj
        out = out.transpose(1, 2).reshape(B, T, self.nh * self.d)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, cfg: DraftConfig):
        super().__init__()
        H, I = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """The draft's one Llama layer (`midlayer`), q/k/v over cat(embed, hidden) = 2H."""

    def __init__(self, cfg: DraftConfig):
        super().__init__()
        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.norm_before_residual = cfg.norm_before_residual
        self.hidden_norm = RMSNorm(H, eps)
        self.input_layernorm = RMSNorm(H, eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.mlp = MLP(cfg)

    def forward(self, h, emb, cos, sin, cache, key_mask):
        hn = self.hidden_norm(h)
        residual = hn if self.norm_before_residual else h
        x = torch.cat([self.input_layernorm(emb), hn], dim=-1)  # [B, T, 2H]
        h = residual + self.self_attn(x, cos, sin, cache, key_mask)
        return h + self.mlp(self.post_attention_layernorm(h))  # [B, T, H], pre-norm output


class Eagle3Draft(nn.Module):
    def __init__(self, cfg: DraftConfig):
        super().__init__()
        self.config = cfg
        H = cfg.hidden_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, H)
        self.fc = nn.Linear(3 * cfg.target_hidden_size, H, bias=False)
        self.midlayer = DecoderLayer(cfg)
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(H, cfg.draft_vocab_size, bias=False)
        self.mapping: VocabMapping | None = None
        self.d2t: torch.Tensor | None = None  # [draft_vocab] int64 on the model's device
        self.source: str | None = None

    def set_mapping(self, mapping: VocabMapping | None) -> None:
        self.mapping = mapping
        self.d2t = None if mapping is None else mapping.d2t.to(self.lm_head.weight.device)

    def _rope(self, positions, dtype):
        inv = rope_inv_freq(self.config).to(positions.device)
        ang = positions.float()[:, None] * inv[None, :]  # [T, d/2]
        emb = torch.cat([ang, ang], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def _check(self, aux_hidden, next_ids):
        Ht3 = 3 * self.config.target_hidden_size
        if aux_hidden.dim() != 3 or aux_hidden.shape[-1] != Ht3:
            raise ValueError(f"aux_hidden has shape {list(aux_hidden.shape)}, expected [B, T, {Ht3}]")
        if next_ids.shape != aux_hidden.shape[:2]:
            raise ValueError(f"next_ids has shape {list(next_ids.shape)}, expected {list(aux_hidden.shape[:2])}")

    def forward(self, aux_hidden, next_ids, attention_mask=None):
        """aux_hidden [B,T,3Ht], next_ids [B,T] (target id of token t+1) -> logits [B,T,draft_vocab]."""
        return self.draft_steps(aux_hidden, next_ids, steps=1, attention_mask=attention_mask)[0]

    def draft_steps(self, aux_hidden, next_ids, steps=1, reading="offset", attention_mask=None,
                    teacher_forcing=False):
        """k drafting steps for every position at once -> list of `steps` logits [B,T,draft_vocab].

        Step j at position t predicts token t+2+j. Step j >= 1 feeds back the argmax of step j-1
        mapped to a target id under `reading` ('offset'/'absolute'/'none'; 'none' also when the
        model has no d2t). With `teacher_forcing`, step j feeds the real token t+1+j instead
        (next_ids shifted left by j; how SpecForge trains), for training only.
        """
        if reading not in READINGS:
            raise ValueError(f"unknown reading {reading!r}; expected one of {READINGS}")
        self._check(aux_hidden, next_ids)
        B, T = next_ids.shape
        dt = self.fc.weight.dtype
        h = self.fc(aux_hidden.to(dt))  # [B, T, H]
        ids = next_ids
        pos = torch.arange(T, device=h.device)
        cache: list = []
        out = []
        for j in range(steps):
            cos, sin = self._rope(pos + j, dt)
            h = self.midlayer(h, self.embed_tokens(ids), cos, sin, cache, attention_mask)
            logits = self.lm_head(self.norm(h))  # [B, T, draft_vocab]
            out.append(logits)
            if j + 1 < steps:
                if teacher_forcing:
                    ids = F.pad(next_ids[:, j + 1:], (0, j + 1))
                else:
                    ids = to_target_ids(logits.argmax(-1), self.d2t, reading if self.d2t is not None else "none")
                    # a misread d2t can send a draft past the target vocab (e.g. absolute ids read
                    # as offsets); feed the last id there instead of failing: the chain is wrong anyway
                    ids = ids.clamp(0, self.config.vocab_size - 1)
        return out


# -- loading ----------------------------------------------------------------------------------------
_TOP = ("fc.weight", "norm.weight", "lm_head.weight", "embed_tokens.weight")


def _canonical_keys(ck: Checkpoint) -> dict[str, str]:
    """canonical name (`midlayer.*`, `fc.weight`, ...) -> key in the file; prefixes stripped."""
    where = ck.tensors.files[0] if ck.tensors.files else ck.path
    out: dict[str, str] = {}
    for k in ck.tensors.keys():
        parts = k.split(".")
        canon = None
        for i, p in enumerate(parts):
            if p == "midlayer":
                canon = "midlayer." + ".".join(parts[i + 1:])
                break
            if p == "layers" and i + 1 < len(parts) and parts[i + 1].isdigit():
                if parts[i + 1] != "0":
                    raise BadInputError(
                        ck.tensors.file_of(k),
                        f"holds {k!r}: a draft with more than one decoder layer is not supported",
                    )
                canon = "midlayer." + ".".join(parts[i + 2:])
                break
        if canon is None and ".".join(parts[-2:]) in _TOP:
            canon = ".".join(parts[-2:])
        if canon is not None:
            if canon in out:
                raise BadInputError(where, f"holds both {out[canon]!r} and {k!r} for {canon}")
            out[canon] = k
    return out


def _open(path) -> tuple[Checkpoint, DraftConfig, dict[str, str]]:
    ck = open_checkpoint(path)
    if ck.config is None:
        raise BadInputError(path, "has no config.json next to the weights: the draft's shapes are needed")
    cfg = DraftConfig.from_dict(ck.config, source=ck.config_path)
    return ck, cfg, _canonical_keys(ck)


def _embed_source(embed_from) -> tuple[Checkpoint, str]:
    ck = open_checkpoint(embed_from)
    for name in ("embed_tokens.weight", "model.embed_tokens.weight"):
        k = ck.tensors.find(name)
        if k is not None:
            return ck, k
    raise BadInputError(embed_from, "holds no embed_tokens.weight or model.embed_tokens.weight")


def estimate_load_bytes(path, dtype=None, embed_from=None) -> int:
    """Bytes the loaded draft takes on the device in `dtype` (from tensor shapes, nothing read)."""
    dtype = dtype or torch.float32
    ck, cfg, keys = _open(path)
    n = 0
    for canon, k in keys.items():
        numel = math.prod(ck.tensors.shape(k))
        n += numel * dtype.itemsize
    if "embed_tokens.weight" not in keys:
        if embed_from is not None:
            eck, ek = _embed_source(embed_from)
            n += math.prod(eck.tensors.shape(ek)) * dtype.itemsize
        else:
            n += cfg.vocab_size * cfg.hidden_size * dtype.itemsize
    return n + cfg.draft_vocab_size * 8


def _expected_shapes(cfg: DraftConfig) -> dict[str, tuple[int, ...]]:
    H, d, I = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    m = "midlayer."
    return {
        "fc.weight": (H, 3 * cfg.target_hidden_size),
        "norm.weight": (H,),
        "lm_head.weight": (cfg.draft_vocab_size, H),
        "embed_tokens.weight": (cfg.vocab_size, H),
        m + "hidden_norm.weight": (H,),
        m + "input_layernorm.weight": (H,),
        m + "post_attention_layernorm.weight": (H,),
        m + "self_attn.q_proj.weight": (cfg.num_attention_heads * d, 2 * H),
        m + "self_attn.k_proj.weight": (cfg.num_key_value_heads * d, 2 * H),
        m + "self_attn.v_proj.weight": (cfg.num_key_value_heads * d, 2 * H),
        m + "self_attn.o_proj.weight": (H, cfg.num_attention_heads * d),
        m + "mlp.gate_proj.weight": (I, H),
        m + "mlp.up_proj.weight": (I, H),
        m + "mlp.down_proj.weight": (H, I),
    }


def load_draft(path, device=None, dtype=None, embed_from=None) -> Eagle3Draft:
    """Load an EAGLE-3 draft (SGLang/SpecForge or speculators layout) onto `device` in `dtype`.

    Tensors are read one at a time straight to the device in `dtype`. `embed_from` names a
    folder/file holding the target's `embed_tokens.weight` when the draft has none.
    """
    device = resolve_device(device)
    embed_from = embed_from or None  # "" (an empty notebook parameter or CLI value) means none
    dtype = dtype or default_dtype(device)
    ck, cfg, keys = _open(path)
    wfile = ck.tensors.files[0] if ck.tensors.files else ck.path
    for name, what in (("fc.weight", "fc (the 3*H_target -> H projection)"), ("lm_head.weight", "lm_head")):
        if name not in keys:
            raise BadInputError(wfile, f"has no {what} weight: not a complete EAGLE-3 draft checkpoint")
    sources = {k: (ck, v) for k, v in keys.items()}
    if "embed_tokens.weight" not in keys:
        if embed_from is None:
            raise BadInputError(
                wfile,
                "has no embed_tokens.weight: the draft borrows the target's embedding; pass "
                "embed_from=<target folder or file holding embed_tokens.weight> (CLI: --embed-from)",
            )
        sources["embed_tokens.weight"] = _embed_source(embed_from)
    expected = _expected_shapes(cfg)
    for name, shape in expected.items():
        if name not in sources:
            raise BadInputError(wfile, f"has no {name} (layout {ck.key_layout}): not a complete EAGLE-3 draft")
        src, k = sources[name]
        got = tuple(src.tensors.shape(k))
        if got != shape:
            raise BadInputError(
                src.tensors.file_of(k), f"{k} has shape {list(got)} but the config implies {list(shape)}"
            )
    need = estimate_load_bytes(path, dtype, embed_from)
    free = available_bytes(device)
    if free is not None and need > free:
        raise BadInputError(
            path, f"loading needs about {need / 2**30:.2f} GiB on {device} in {dtype} but only "
            f"{free / 2**30:.2f} GiB is free",
        )
    with torch.device("meta"):
        model = Eagle3Draft(cfg)
    state = {name: src.tensors.get(k, device, dtype) for name, (src, k) in sources.items()}
    model.load_state_dict(state, assign=True, strict=True)
    model.eval()
    d2t, _, _ = read_mapping_tensors(ck)
    mapping = None
    if d2t is not None:
        mapping = load_mapping(ck)
        if mapping.draft_vocab_size != cfg.draft_vocab_size:
            raise BadInputError(
                mapping.sources[0] if mapping.sources else path,
                f"d2t has {mapping.draft_vocab_size:,} entries but lm_head has {cfg.draft_vocab_size:,} rows",
            )
    model.set_mapping(mapping)
    model.source = os.fspath(Path(path))
    return model
