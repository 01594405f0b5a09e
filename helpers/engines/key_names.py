"""How a stored EAGLE-3 draft tensor name reads: its `model.` prefix, its decoder-layer layout
(`midlayer.` / `layers.0.`) and its parameter name (`parse_key`), and whether the name is one an
EAGLE-3 draft has (`is_known_param`; the MHA and MLA layer's parameter names) or a d2t / t2d mapping
(`is_mapping_key`). What each engine's loader does with a name is `helpers.engines.registry.key_fate`.
Plain names: no tensors are read here.
"""
from __future__ import annotations

from dataclasses import dataclass

# The names one EAGLE-3 draft layer holds (after `midlayer.` / `layers.0.`).
LAYER_PARAMS = (
    "input_layernorm.weight",
    "hidden_norm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)
LAYER_OPTIONAL = tuple(f"self_attn.{p}_proj.bias" for p in "qkvo")
# An MLA (DeepSeek-style) draft layer: the low-rank q (or a plain q_proj when q_lora_rank is unset) and kv.
MLA_LAYER_PARAMS = (
    "input_layernorm.weight",
    "hidden_norm.weight",
    "post_attention_layernorm.weight",
    "self_attn.kv_a_proj_with_mqa.weight",
    "self_attn.kv_a_layernorm.weight",
    "self_attn.kv_b_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)
MLA_Q_PARAMS = ("self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight",
                "self_attn.q_proj.weight")
TOP_PARAMS = ("embed_tokens.weight", "fc.weight", "norm.weight")


@dataclass(frozen=True)
class KeyInfo:
    """One stored tensor name, parsed."""

    key: str  # as stored
    prefixed: bool  # stored with a leading "model."
    layout: str | None  # "midlayer" / "layers.0" for decoder-layer keys, else None
    name: str  # without "model." and without the layer prefix for layer keys

    @property
    def canonical(self) -> str:
        """`midlayer.X` for layer keys, else the plain top-level name."""
        return f"midlayer.{self.name}" if self.layout else self.name


def parse_key(key: str) -> KeyInfo:
    """A stored key split into its `model.` prefix, layer layout and parameter name."""
    rest, prefixed = (key[len("model."):], True) if key.startswith("model.") else (key, False)
    for layout in ("midlayer", "layers.0"):
        if rest.startswith(layout + "."):
            return KeyInfo(key, prefixed, layout, rest[len(layout) + 1:])
    return KeyInfo(key, prefixed, None, rest)


def is_mapping_key(key: str) -> bool:
    """A d2t or t2d tensor (with any prefix)."""
    return key.split(".")[-1] in ("d2t", "t2d")


def is_known_param(info: KeyInfo, mla: bool = False) -> bool:
    """A parameter an EAGLE-3 draft has (decoder layer or top level), whatever its prefix."""
    if info.layout:
        if mla:
            return info.name in MLA_LAYER_PARAMS or info.name in MLA_Q_PARAMS
        return info.name in LAYER_PARAMS or info.name in LAYER_OPTIONAL
    return info.name in TOP_PARAMS or info.name in ("lm_head.weight", "fc.bias")
