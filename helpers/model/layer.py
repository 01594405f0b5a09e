"""The draft's one decoder layer in plain PyTorch, with its KV cache: the ONE draft forward.

Both `Eagle3Draft.draft_steps` (evaluate: every position at once) and `Drafter` (speculate: one
sequence, a cache kept across verify steps, chains and trees) call `DecoderLayer.forward` with a
`DraftKV`; nothing else computes attention, norms or the MLP.

    layer(h, emb, positions, kv)                  # extend: queries are new context positions
    layer(h, emb, positions, kv, anchor=anchor)   # a drafting step (k >= 1)

- extend (step 0): the new keys/values are appended to the context (`kv.k`, `kv.v`); the query at
  position p sees the context keys `context_allowed(p, ...)` lets it see (causal, window).
- drafting step: the query is a drafted token whose chain starts after context position `anchor`
  (its step-0 position t); it sees the context keys `context_allowed(anchor, ...)` allows plus
  the keys of its own chain's earlier steps and itself (`kv.chain`: one [B, heads, m, d] entry per
  step, row r = row r's ancestor). `kv.reorder(rows)` follows a beam (a tree's parents); without
  it each row is its own chain (draft_steps). This is the pattern SpecForge, speculators and NeMo
  train with and SGLang/vLLM serve (a drafted token sees the context and its ancestors).

Layers (the producer options, docs/producer-variants.md, read from `DraftConfig`):

- Llama (GQA) attention; `layer_kind == "qwen3"`: per-head `q_norm` / `k_norm` before RoPE;
  `attention_bias`: q/k/v/o biases; `head_dim` may differ from hidden_size / heads.
- `attention == "mla"`: DeepSeek-V3 multi-head latent attention (SGLang `kimi_k25_eagle3`,
  NeMo Automodel's DeepSeek draft), built from transformers' `DeepseekV3Attention` (its
  projections, `expand_kv`, interleaved RoPE, YaRN rotary and softmax scale) with the q/kv
  down-projections widened to the 2H EAGLE-3 input.
- `sliding_window`: `context_allowed` below (the one rule, with what each engine does).
- `norm_before_residual`: the residual is hidden_norm(h) instead of h.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.model.config import DraftConfig, rope_inv_freq


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


# -- the sliding-window rule ------------------------------------------------------------------------
def context_allowed(anchor: torch.Tensor, n_keys: int, window: int | None) -> torch.Tensor:
    """[m, n_keys] bool: which context keys s a query anchored at context position `anchor[i]` sees.

    Causal: s <= anchor. With a window W: also s > anchor - W. The anchor of a step-0 query is
    its own position; the anchor of a drafted token (step k >= 1 at position t + k) is t, its
    chain's step-0 position, so the window does not move while drafting: every step sees the
    same W context keys (plus its own chain's keys, never windowed).

    Why t and not t + k: this is how speculators (the one producer that trains windowed EAGLE-3
    layers) trains them: `create_combined_mask_mod` (speculators 0.9.0,
    models/eagle3/attention.py) compares key and query indices within the step-0 sequence, and
    `extend_mask_for_draft_tokens` / `extend_dense_mask_for_draft_tokens` reuse that block for
    every later step, adding only the diagonal; the kit's fixture
    data_samples/producers/speculators_sliding_window checks this. Engines may window by each
    query's real position instead (fewer context keys at steps >= 1) or not at all: the engine
    table's `sliding_window` rule says which, per release (docs/doctor-findings.md, the rule table).

    The kit models the draft as trained (this rule, in evaluate and speculate alike), so its
    acceptance is the draft's own; an engine that windows differently can only score lower at
    steps >= 1 once the context is longer than W (docs/eagle3-facts.md, 'Sliding window').
    """
    s = torch.arange(n_keys, device=anchor.device)
    allowed = s[None, :] <= anchor[:, None]
    if window is not None:
        allowed = allowed & (s[None, :] > anchor[:, None] - window)
    return allowed


NO_POSITION = 2 ** 62  # a slot's position that no query reaches (a padded or rejected row)


class DraftKV:
    """The keys/values the draft layer attends to, for one batch of sequences.

    `k`, `v` [B, heads, N, d]: the context (step-0 keys of positions 0..N-1); `key_mask` [B, N]
    (1 = a real token) or None; `chain`: per drafting step, the keys/values [B, heads, m, d] of
    each query row's chain at that step.
    """

    def __init__(self, key_mask: torch.Tensor | None = None):
        self.k = self.v = None
        self.key_mask = key_mask
        self.chain: list[tuple[torch.Tensor, torch.Tensor]] = []
        # [B, N] the position of each context slot (rows with holes: a batch of sequences whose
        # slots are not their positions, `BatchDrafter`); None: slot s is position s. The caller
        # sets it to cover the keys a call appends; a slot no query may see holds `NO_POSITION`.
        self.pos: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else int(self.k.shape[2])

    def reorder(self, rows: torch.Tensor) -> None:
        """Row i of every chain entry becomes row rows[i] (a beam following its parents); rows [m]
        for every sequence alike, or [B, m] per sequence (a batch of beams, `BatchDrafter`)."""
        if rows.dim() == 1:
            self.chain = [(k[:, :, rows], v[:, :, rows]) for k, v in self.chain]
            return

        def take(t):  # t [B, heads, m, d] -> row i of sequence b becomes its row rows[b, i]
            idx = rows.to(t.device)[:, None, :, None].expand(t.shape[0], t.shape[1], rows.shape[1], t.shape[3])
            return t.gather(2, idx)

        self.chain = [(take(k), take(v)) for k, v in self.chain]

    def end_chain(self) -> None:
        self.chain = []


def attend(q, k, v, kv: DraftKV, positions, anchor, window: int | None, scale: float) -> torch.Tensor:
    """q [B,nh,m,dq], this call's k [B,nh,m,dq] / v [B,nh,m,dv] -> [B, m, nh*dv] (see the module doc)."""
    B, nh, m, _ = q.shape
    if anchor is None:  # extend: the new keys join the context
        kv.k = k if kv.k is None else torch.cat([kv.k, k], dim=2)
        kv.v = v if kv.v is None else torch.cat([kv.v, v], dim=2)
        anchor = positions
    else:
        kv.chain.append((k, v))
    k0, v0 = kv.k, kv.v
    N = k0.shape[2]
    s0 = (q @ k0.transpose(-1, -2)).float() * scale  # [B, nh, m, N]
    if kv.pos is not None or anchor.dim() == 2:  # per-row positions: [B, m] anchors over [B, N] slot positions
        kpos = kv.pos if kv.pos is not None else torch.arange(N, device=q.device)[None]
        a = anchor.to(q.device)
        a = a if a.dim() == 2 else a[None]
        allowed = kpos[:, None, :] <= a[:, :, None]  # [B, m, N] the rule of `context_allowed`, by position
        if window is not None:
            allowed = allowed & (kpos[:, None, :] > a[:, :, None] - window)
        allowed = allowed[:, None]  # [B, 1, m, N]
    else:
        allowed = context_allowed(anchor.to(q.device), N, window)  # [m, N]
    if kv.key_mask is not None:
        allowed = allowed & kv.key_mask[:, None, None, :].bool()
    s0 = s0.masked_fill(~allowed, torch.finfo(torch.float32).min)
    if not kv.chain:
        out = torch.softmax(s0, dim=-1).to(v0.dtype) @ v0
    else:
        diag = torch.stack([(q * kj).sum(-1) for kj, _ in kv.chain], dim=-1).float() * scale  # [B,nh,m,k]
        p = torch.softmax(torch.cat([s0, diag], dim=-1), dim=-1).to(v0.dtype)
        out = p[..., :N] @ v0
        for j, (_, vj) in enumerate(kv.chain):
            out = out + p[..., N + j, None] * vj
    return out.transpose(1, 2).reshape(B, m, -1)


# -- attention --------------------------------------------------------------------------------------
class Attention(nn.Module):
    """Llama / Qwen3 attention over the 2H input (GQA, rotate-half RoPE)."""

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
        self.cfg = cfg
        self._inv_freq: dict = {}  # device -> rope_inv_freq(cfg) there

    def rope(self, positions, dtype):
        inv = self._inv_freq.get(positions.device)
        if inv is None:  # computed once per device: every draft step needs it
            inv = self._inv_freq[positions.device] = rope_inv_freq(self.cfg).to(positions.device)
        ang = positions.float()[..., None] * inv  # [m, d/2] ([B, m, d/2] for per-row positions)
        emb = torch.cat([ang, ang], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, x, positions, kv: DraftKV, anchor=None):
        """x [B, m, 2H] at RoPE `positions` [m] (or per row [B, m]) -> [B, m, H]."""
        B, T, _ = x.shape
        cos, sin = self.rope(positions, x.dtype)
        if cos.dim() == 3:  # per-row positions [B, m]: [B, 1, m, d] over the heads
            cos, sin = cos[:, None], sin[:, None]
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
        out = attend(q, k, v, kv, positions, anchor, self.window, 1.0 / math.sqrt(self.d))
        return self.o_proj(out)


def deepseek_config(cfg: DraftConfig):
    """The transformers `DeepseekV3Config` whose attention is the draft's (input width 2H)."""
    from transformers import DeepseekV3Config

    rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling:
        rope = {**cfg.rope_scaling, "rope_theta": cfg.rope_theta}
    return DeepseekV3Config(
        hidden_size=2 * cfg.hidden_size, num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_attention_heads, q_lora_rank=cfg.q_lora_rank, kv_lora_rank=cfg.kv_lora_rank,
        qk_nope_head_dim=cfg.qk_nope_head_dim, qk_rope_head_dim=cfg.qk_rope_head_dim, v_head_dim=cfg.v_head_dim,
        rope_parameters=rope, rope_interleave=cfg.rope_interleave, attention_bias=cfg.attention_bias,
        max_position_embeddings=cfg.max_position_embeddings, rms_norm_eps=cfg.rms_norm_eps,
        vocab_size=cfg.vocab_size, num_hidden_layers=1)


class MLAttention(nn.Module):
    """DeepSeek-V3 multi-head latent attention over the 2H input, from transformers' own parts.

    q = q_b_proj(q_a_layernorm(q_a_proj(x))) (or q_proj(x) when q_lora_rank is null), per head
    [nope | rope]; kv_a_proj_with_mqa(x) -> latent | one shared rope key; kv_b_proj(kv_a_layernorm(
    latent)) -> per head k_nope | v; RoPE on the rope parts (interleaved pairs when
    rope_interleave, YaRN frequencies and cos/sin factor from transformers' rope functions); softmax
    scale qk_head_dim^-0.5, times YaRN's mscale(factor, mscale_all_dim)^2 unless the producer
    leaves it out (`cfg.yarn_scale`: NeMo Automodel does).
    """

    def __init__(self, cfg: DraftConfig):
        super().__init__()
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
            DeepseekV3Attention,
            DeepseekV3RotaryEmbedding,
        )

        dcfg = deepseek_config(cfg)
        inner = DeepseekV3Attention(dcfg, layer_idx=0)
        inner.o_proj = nn.Linear(cfg.num_attention_heads * cfg.v_head_dim, cfg.hidden_size, bias=cfg.attention_bias)
        for name in ("q_a_layernorm", "kv_a_layernorm"):  # transformers builds them with eps 1e-6
            if getattr(inner, name) is not None:
                getattr(inner, name).variance_epsilon = cfg.rms_norm_eps
        # its modules are this module's (the checkpoint's key names); its code runs on the same objects
        for name, child in inner.named_children():
            setattr(self, name, child)
        object.__setattr__(self, "inner", inner)  # not a submodule: no second copy of the keys
        with torch.device("cpu"):
            self.rotary = DeepseekV3RotaryEmbedding(dcfg)  # non-persistent buffers: computed, never loaded
        head = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        self.scale = inner.scaling if cfg.yarn_scale else head ** -0.5
        self.interleave = cfg.rope_interleave

    def forward(self, x, positions, kv: DraftKV, anchor=None):
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
            apply_rotary_pos_emb,
            apply_rotary_pos_emb_interleave,
        )

        a = self.inner
        B, T, _ = x.shape
        q = a.q_proj(x) if a.q_lora_rank is None else a.q_b_proj(a.q_a_layernorm(a.q_a_proj(x)))
        q = q.view(B, T, -1, a.qk_head_dim).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [a.qk_nope_head_dim, a.qk_rope_head_dim], dim=-1)
        latent, k_rot = torch.split(a.kv_a_proj_with_mqa(x), [a.kv_lora_rank, a.qk_rope_head_dim], dim=-1)
        latent = a.kv_a_layernorm(latent).view(B, 1, T, a.kv_lora_rank)
        k_rot = k_rot.view(B, 1, T, a.qk_rope_head_dim)
        cos, sin = self.rotary(x, (positions if positions.dim() == 2 else positions[None]).to(x.device))
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        rot = apply_rotary_pos_emb_interleave if self.interleave else apply_rotary_pos_emb
        q_rot, k_rot = rot(q_rot, k_rot, cos, sin)
        k, v = a.expand_kv(latent, k_rot)  # [B, nh, T, qk_head_dim], [B, nh, T, v_head_dim]
        out = attend(torch.cat([q_pass, q_rot], dim=-1), k, v, kv, positions, anchor, None, self.scale)
        return a.o_proj(out)


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
    """The draft's one layer (`midlayer`): attention over cat(embed, hidden) = 2H, then the MLP."""

    def __init__(self, cfg: DraftConfig):
        super().__init__()
        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.norm_before_residual = cfg.norm_before_residual
        self.hidden_norm = RMSNorm(H, eps)
        self.input_layernorm = RMSNorm(H, eps)
        self.self_attn = MLAttention(cfg) if cfg.attention == "mla" else Attention(cfg)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.mlp = MLP(cfg)

    def forward(self, h, emb, positions, kv: DraftKV, anchor=None):
        """h, emb [B, m, H]; RoPE `positions` [m] or [B, m]; `anchor` likewise for a drafting step -> [B, m, H] (pre-norm)."""
        hn = self.hidden_norm(h)
        residual = hn if self.norm_before_residual else h
        x = torch.cat([self.input_layernorm(emb), hn], dim=-1)  # [B, m, 2H]
        h = residual + self.self_attn(x, positions, kv, anchor)
        return h + self.mlp(self.post_attention_layernorm(h))
