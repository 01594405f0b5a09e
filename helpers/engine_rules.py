"""What SGLang's and vLLM's EAGLE-3 loaders accept: key names, layer layouts, aux layer ids.

The rules the doctor checks against and the fixer renames for, read in the engines' public
source (the list is in `helpers.doctor`'s docstring): which stored names each engine's loader
puts into a parameter (`engine_accepts`), how a key splits into prefix, layout and name
(`parse_key`), where each engine reads the aux layer ids from (`aux_layer_ids`) and which
target layers those capture (`captured_layers`). Plain data: no tensors are read here.
"""
from __future__ import annotations

from dataclasses import dataclass

ENGINES = ("sglang", "vllm")
ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM"}


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
TOP_PARAMS = ("embed_tokens.weight", "fc.weight", "norm.weight")


def engines_for(engine: str) -> tuple[str, ...]:
    """The engines `engine` names: ('sglang',), ('vllm',) or both for 'all'; else a ValueError."""
    if engine == "all":
        return ENGINES
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of sglang, vllm, all; got {engine!r}")
    return (engine,)


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


def is_known_param(info: KeyInfo) -> bool:
    """A parameter an EAGLE-3 draft has (decoder layer or top level), whatever its prefix."""
    if info.layout:
        return info.name in LAYER_PARAMS or info.name in LAYER_OPTIONAL
    return info.name in TOP_PARAMS or info.name in ("lm_head.weight", "fc.bias")


def engine_accepts(engine: str, key: str) -> bool:
    """Would `engine`'s EAGLE-3 loader put this checkpoint tensor into a parameter?"""
    if is_mapping_key(key) or ".rotary_emb." in key:  # both skip rotary buffers by design
        return True
    info = parse_key(key)
    if engine == "sglang":
        # Looked up as NAME or model.NAME; its parameters are model.{embed_tokens,fc,midlayer.*,norm}, lm_head.
        if key == "lm_head.weight":
            return True
        return is_known_param(info) and info.name != "lm_head.weight" and info.layout != "layers.0"
    # vLLM: "model." is prefixed to every name without "lm_head"; midlayer. -> layers.0.; fc has no bias.
    if "lm_head" in key:
        return key == "lm_head.weight"
    return not info.prefixed and is_known_param(info) and info.name != "fc.bias"


def text_config(cfg: dict) -> dict:
    """A target config's language-model part (multimodal configs nest it under text_config)."""
    for k in ("text_config", "language_config", "llm_config"):
        if isinstance(cfg.get(k), dict) and "num_hidden_layers" in cfg[k]:
            return cfg[k]
    return cfg


def aux_layer_ids(cfg: dict | None) -> dict[str, list[int] | None]:
    """The aux layer ids each engine reads from a draft config (None: not set, engine default).

    SGLang reads only `eagle_config.eagle_aux_hidden_state_layer_ids`. vLLM reads the top-level
    `eagle_aux_hidden_state_layer_ids` (speculators configs) and, in newer versions, falls back
    to the `eagle_config` one (older versions read only the top level).
    """
    cfg = cfg or {}
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    nested = eagle.get("eagle_aux_hidden_state_layer_ids")
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    nested = [int(i) for i in nested] if isinstance(nested, list) and nested else None
    top = [int(i) for i in top] if isinstance(top, list) and top else None
    return {"sglang": nested, "vllm": top or nested}


def captured_layers(engine: str, ids: list[int] | None, num_layers: int) -> list[int]:
    """Target layers whose INPUT (= output of the layer before) the engine captures."""
    if ids is None:
        return [2, num_layers // 2, num_layers - 3]
    if engine == "sglang":
        return [i + 1 for i in ids]
    return list(ids)
