"""What SGLang's and vLLM's EAGLE-3 loaders accept: key names, layer layouts, aux layer ids.

The rules the doctor checks against and the fixer renames for, read in the engines' public
source (the list is in `helpers.doctor.diagnose`'s docstring): which stored names each engine's loader
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


# -- producer options (docs/producer-variants.md, 'Engines') -----------------------------------------
# The engine files and commits the rules below were read in.
ENGINE_FILES = {
    "sglang": "SGLang python/sglang/srt/models/llama_eagle3.py @ 03d5a777",
    "vllm": "vLLM vllm/model_executor/models/llama_eagle3.py @ 00bd1493",
}
_DROPS = "drops names it has no parameter for without a word: would serve with these weights missing"
_REFUSES = "its loader raises on names it has no parameter for: vLLM will not start"


def variant_of_key(key: str) -> str | None:
    """The producer option a stored tensor belongs to (its finding code), or None for a plain key."""
    name = parse_key(key).name
    if name.startswith("fc_norm."):
        return "variant-fc-norm"
    if name == "input_norm.weight":
        return "variant-norm-before-fc"
    if name in ("self_attn.q_norm.weight", "self_attn.k_norm.weight"):
        return "variant-qk-norm"
    if name in LAYER_OPTIONAL:
        return "variant-attention-bias"
    return None


def _speculators(cfg: dict) -> bool:
    return isinstance(cfg.get("transformer_layer_config"), dict) or "speculators_model_type" in cfg


def _layer(cfg: dict) -> dict:
    return cfg.get("transformer_layer_config") if _speculators(cfg) else cfg


def variant_rules(cfg: dict, keys: list[str]) -> list[tuple[str, dict[str, tuple[str, str]]]]:
    """[(code, {engine: (severity, what the engine does)})] for each producer option the draft uses.

    `cfg` is the draft's raw config.json (nested for speculators), `keys` its stored tensor names.
    """
    cfg = cfg or {}
    used = {variant_of_key(k) for k in keys} - {None}
    out = []
    if "variant-fc-norm" in used or cfg.get("fc_norm"):
        out.append(("variant-fc-norm", {
            "sglang": ("error", f"has no fc_norm and {_DROPS}; it runs fc(g) on un-normed aux states"),
            "vllm": ("error", f"has no fc_norm module; {_REFUSES}")}))
    if "variant-norm-before-fc" in used or cfg.get("norm_before_fc"):
        out.append(("variant-norm-before-fc", {
            "sglang": ("error", f"has no input_norm and {_DROPS}; it runs fc(g) without the norm over the aux states"),
            "vllm": ("error", f"has no input_norm module; {_REFUSES} (a later vLLM reads norm_before_fc, "
                     "release note #42143; that version was not read)")}))
    out += _norm_rules(cfg)
    if "variant-qk-norm" in used:
        out.append(("variant-qk-norm", {
            "sglang": ("error", f"maps the draft onto its Llama layer, which has no q_norm/k_norm, and {_DROPS}"),
            "vllm": ("error", f"maps the draft onto LlamaAttention, which has no q_norm/k_norm; {_REFUSES}")}))
    if "variant-attention-bias" in used:
        on = bool(_layer(cfg).get("attention_bias"))
        out.append(("variant-attention-bias", {
            "sglang": ("error", f"hard-codes q/k/v bias off and {_DROPS}"),
            "vllm": ("info", "gives q/k/v and o_proj biases from attention_bias: true; loads them") if on else
                    ("error", f"builds no biases without attention_bias: true in the config; {_REFUSES}")}))
    out += _window_rules(cfg)
    return out


def _norm_rules(cfg: dict) -> list:
    out = []
    if _speculators(cfg) and cfg.get("norm_output"):
        out.append(("variant-norm-output", {e: ("warning", "feeds the pre-norm state back between drafting steps; "
                    "this speculators draft was trained on the normed one (norm_output: true): step 0 is "
                    "unchanged, steps >= 1 differ from training") for e in ENGINES}))
    elif not _speculators(cfg) and cfg.get("norm_output") is False:
        out.append(("variant-norm-output", {e: ("error", "always applies the final norm before lm_head; this "
                    "SpecForge draft was trained without it (norm_output: false): every step's logits differ")
                    for e in ENGINES}))
    if cfg.get("norm_before_residual"):
        out.append(("variant-norm-before-residual", {
            "sglang": ("error", "does not read norm_before_residual (its residual is always the un-normed h): "
                       "every step's logits differ from training"),
            "vllm": ("info", "reads norm_before_residual from the config and applies it")}))
    return out


def _window_rules(cfg: dict) -> list:
    layer = _layer(cfg)
    types = layer.get("layer_types") or []
    if not _speculators(cfg) or "sliding_attention" not in types:
        return []
    w = layer.get("sliding_window")
    return [("variant-sliding-window", {
        "sglang": ("warning", f"applies no sliding window: the draft attends fully, while it was trained with a "
                   f"window of {w} tokens; the same only while the context stays within {w}"),
        "vllm": ("info", f"applies per-layer sliding windows (window {w}) from layer_types (read from the code's "
                 "comment and a derivative, not line by line)")})]
