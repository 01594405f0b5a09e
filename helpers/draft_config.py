"""The EAGLE-3 draft's configuration: `DraftConfig` from either config style, and its RoPE.

`DraftConfig.from_dict` reads SGLang/SpecForge's flat Llama config and speculators' nested one
(`transformer_layer_config`), refusing missing or inconsistent sizes with one `BadInputError`;
`rope_inv_freq` gives the rotary inverse frequencies with linear / llama3 scaling. Plain data and
arithmetic: the model itself is in `helpers.draft`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .checkpoint import flat_config
from .errors import BadInputError

ROPE_TYPES = ("default", "linear", "llama3")


@dataclass
class DraftConfig:
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    draft_vocab_size: int
    vocab_size: int  # target vocab (rows of embed_tokens)
    target_hidden_size: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    norm_before_residual: bool = False
    max_position_embeddings: int = 2048
    aux_layer_ids: list[int] | None = None
    architectures: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, cfg: dict, source=None) -> DraftConfig:
        """Flat SGLang/SpecForge Llama config or speculators' nested one -> DraftConfig."""
        flat = flat_config(cfg)
        where = source if source is not None else "draft config"

        def need(key):
            v = flat.get(key)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise BadInputError(where, f"config lacks a positive integer {key!r} (got {v!r})")
            return v

        H = need("hidden_size")
        heads = need("num_attention_heads")
        kv = flat.get("num_key_value_heads") or heads
        if not isinstance(kv, int) or kv <= 0 or heads % kv:
            raise BadInputError(where, f"num_key_value_heads={kv!r} does not divide num_attention_heads={heads}")
        head_dim = flat.get("head_dim") or H // heads
        vocab = need("vocab_size")
        draft_vocab = flat.get("draft_vocab_size") or vocab
        rope_theta, scaling = _rope_from(flat, where)
        eagle = flat.get("eagle_config") or {}
        aux = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None
        aux = aux or flat.get("eagle_aux_hidden_state_layer_ids")  # speculators keeps it at the top
        return cls(
            hidden_size=H,
            num_attention_heads=heads,
            num_key_value_heads=int(kv),
            intermediate_size=need("intermediate_size"),
            draft_vocab_size=int(draft_vocab),
            vocab_size=vocab,
            target_hidden_size=int(flat.get("target_hidden_size") or H),
            head_dim=int(head_dim),
            rms_norm_eps=float(flat.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=scaling,
            norm_before_residual=bool(flat.get("norm_before_residual", False)),
            max_position_embeddings=int(flat.get("max_position_embeddings") or 2048),
            aux_layer_ids=list(aux) if aux else None,
            architectures=list(cfg.get("architectures") or []),
        )


def _rope_from(flat: dict, where) -> tuple[float, dict | None]:
    """rope_theta and the scaling dict (None for plain RoPE); unknown types refused by name."""
    params = flat.get("rope_parameters") if isinstance(flat.get("rope_parameters"), dict) else {}
    theta = float(flat.get("rope_theta") or params.get("rope_theta") or 10000.0)
    scaling = flat.get("rope_scaling") or (params if params.get("rope_type", "default") != "default" else None)
    if not scaling:
        return theta, None
    if not isinstance(scaling, dict):
        raise BadInputError(where, f"rope_scaling is {scaling!r}, expected a dict")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise BadInputError(where, f"rope_scaling type {kind!r} is not supported (supported: {', '.join(ROPE_TYPES)})")
    if kind == "default":
        return theta, None
    if not isinstance(scaling.get("factor"), (int, float)) or scaling["factor"] <= 0:
        raise BadInputError(where, f"rope_scaling type {kind!r} needs a positive 'factor' (got {scaling.get('factor')!r})")
    return theta, {**scaling, "rope_type": kind}


def rope_inv_freq(cfg: DraftConfig) -> torch.Tensor:
    """[head_dim/2] fp32 inverse frequencies, with linear / llama3 scaling applied."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    s = cfg.rope_scaling
    if s is None:
        return inv
    factor = float(s["factor"])
    if s["rope_type"] == "linear":
        return inv / factor
    # llama3: long wavelengths divided by factor, short ones kept, the band between interpolated
    low, high = float(s.get("low_freq_factor", 1.0)), float(s.get("high_freq_factor", 4.0))
    old_ctx = float(s.get("original_max_position_embeddings", 8192))
    wavelen = 2 * math.pi / inv
    out = torch.where(wavelen > old_ctx / low, inv / factor, inv)
    smooth = (old_ctx / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
    return torch.where(medium, smoothed, out)
