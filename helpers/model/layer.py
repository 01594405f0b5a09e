"""The draft's one decoder layer in plain PyTorch: RMSNorm, attention, SwiGLU MLP.

Llama layer by default; the producer options that change it (docs/producer-variants.md) are
read from `DraftConfig`:

- `layer_kind == "qwen3"`: Qwen3's per-head RMSNorms `q_norm` / `k_norm` over head_dim on q and
  k before RoPE (speculators `draft_arch qwen3`, transformers' `Qwen3Attention`).
- `attention_bias`: q/k/v and o_proj biases (speculators `attention_bias`).
- `sliding_window`: the step-0 keys a query at t sees are t-W < s <= t; the diagonal keys of the
  later drafting steps are always seen (speculators `create_combined_mask_mod`).
- `norm_before_residual`: the residual is hidden_norm(h) instead of h.
- `head_dim` may differ from hidden_size / heads.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.model.config import DraftConfig


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


def step0_allowed(T: int, window: int | None, key_mask, device) -> torch.Tensor:
    """[T, T] (or [B, 1, T, T]) bool: which step-0 keys s each query t sees (causal, window, padding)."""
    t = torch.arange(T, device=device)
    allowed = t[None, :] <= t[:, None]
    if window is not None:
        allowed = allowed & (t[None, :] > t[:, None] - window)
    return allowed if key_mask is None else allowed & key_mask[:, None, None, :].bool()


class Attention(nn.Module):
    def __init__(self, cfg: DraftConfig):
        super().__init__()
        H, d = cfg.hidden_size, cfg.head_dim
        self.nh, self.nkv, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, d
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(2 * H, self.nh * d, bias=bias)
        self.k_proj = nn.Linear(2 * H, self.nkv * d, bias=bias)
        self.v_proj = nn.Linear(2 * H, self.nkv * d, bias=bias)
        self.o_proj = nn.Linear(self.nh * d, H, bias=bias)
        if cfg.layer_kind == "qwen3":
            self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(d, cfg.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.window = cfg.sliding_window

    def _qkv(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.d)
        k = self.k_proj(x).view(B, T, self.nkv, self.d)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # [B, nh|nkv, T, d]
        v = self.v_proj(x).view(B, T, self.nkv, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)  # [B, nh, T, d]
        return q, k, v

    def forward(self, x, cos, sin, cache: list, key_mask):
        """x [B,T,2H]; cos/sin [T,d]; cache: list of (k, v) from earlier steps, appended to.

        Step 0 (empty cache): causal attention over positions (within the sliding window, if
        any). Step k: the query at t sees the step-0 keys of positions <= t plus the keys of its
        own chain's steps 1..k (diagonal).
        """
        B, T, _ = x.shape
        q, k, v = self._qkv(x, cos, sin)
        cache.append((k, v))
        k0, v0 = cache[0]
        scale = 1.0 / math.sqrt(self.d)
        s0 = (q @ k0.transpose(-1, -2)).float() * scale  # [B, nh, T, T]
        allowed = step0_allowed(T, self.window, key_mask, x.device)
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
    """The draft's one layer (`midlayer`), q/k/v over cat(embed, hidden) = 2H."""

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
