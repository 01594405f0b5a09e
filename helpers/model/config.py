"""The EAGLE-3 draft's configuration: `DraftConfig` from either config style, and its RoPE.

`DraftConfig.from_dict` reads SGLang/SpecForge's flat Llama config and speculators' nested one
(`transformer_layer_config`), refusing missing or inconsistent sizes with one `BadInputError`;
`rope_inv_freq` gives the rotary inverse frequencies with linear / llama3 scaling. Plain data and
arithmetic: the model itself is in `helpers.model.draft` and `helpers.model.layer`.

The producer options (docs/producer-variants.md) are read per producer, recorded in `producer`:
a nested config (`transformer_layer_config` / `speculators_model_type`) is speculators', a flat
one with architectures `LlamaEagle3DraftModel` NeMo Automodel's, any other flat one SpecForge's
(SGLang's and EAGLE's flat configs read the same way). A config with `kv_lora_rank` is an MLA
draft (`attention == "mla"`: SGLang's kimi_k25_eagle3 and NeMo's DeepSeek draft). `norm_output` means two
things: SpecForge's switches the final norm before lm_head (`final_norm`, default true);
speculators', NeMo's and the MLA drafts' (SGLang kimi_k25_eagle3) feed the normed state back
between steps (`feed_normed`). Switches the forward
does not model are refused with one `BadInputError` when they would change it; those a
producer ignores are collected in `ignored` (load_draft warns about each).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from helpers.core.errors import BadInputError
from helpers.engines.registry import DEEPSEEK_FAMILY
from helpers.io.configs import flat_config

ROPE_TYPES = ("default", "linear", "llama3")
MLA_ROPE_TYPES = ("default", "yarn")
NEMO_ARCH = "LlamaEagle3DraftModel"  # NeMo Automodel's exported draft config (Llama and MLA drafts alike)


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
    producer: str = "specforge"  # "specforge" (flat config) or "speculators" (nested config)
    fc_norm: bool = False  # one RMSNorm per aux chunk before fc (fc_norm.{0,1,2}.weight [Ht])
    norm_before_fc: bool = False  # one RMSNorm over the 3Ht concatenation (input_norm.weight)
    final_norm: bool = True  # logits = lm_head(norm(h)); SpecForge norm_output=false: lm_head(h)
    feed_normed: bool = False  # speculators norm_output: norm(h) is fed to the next step
    layer_kind: str = "llama"  # "llama" or "qwen3" (q_norm / k_norm)
    attention_bias: bool = False  # q/k/v/o_proj biases
    sliding_window: int | None = None  # the decoder layer's window (speculators layer_types)
    tie_word_embeddings: bool = False
    attention: str = "gqa"  # "gqa" (Llama/Qwen3 q/k/v) or "mla" (DeepSeek-V3 latent attention)
    q_lora_rank: int | None = None  # MLA: q's LoRA rank (None: one q_proj)
    kv_lora_rank: int | None = None  # MLA: the kv latent's width
    qk_nope_head_dim: int | None = None  # MLA: per-head q/k part without RoPE
    qk_rope_head_dim: int | None = None  # MLA: per-head q/k part with RoPE (one shared key head)
    v_head_dim: int | None = None  # MLA: per-head value width
    rope_interleave: bool = True  # MLA: RoPE rotates adjacent pairs (DeepSeek's layout)
    yarn_scale: bool = True  # MLA + YaRN: softmax scale x mscale(factor, mscale_all_dim)^2 (NeMo: no)
    ignored: list[str] = field(default_factory=list)  # switches set but without effect on the forward

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
        mla = _mla_fields(cfg, flat, where) if is_mla(cfg) else {}
        rope_theta, scaling = _rope_from(flat, where, MLA_ROPE_TYPES if mla else ROPE_TYPES)
        if mla.get("producer") == "torchspec" and scaling and scaling["rope_type"] == "yarn":
            rope_theta = 10000.0  # TorchSpec's yarn rotary (llama3_eagle.py) keeps its default base 10000
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
            norm_before_residual=bool(flat.get("norm_before_residual", False)) and not mla,
            max_position_embeddings=int(flat.get("max_position_embeddings") or 2048),
            aux_layer_ids=list(aux) if aux else None,
            architectures=list(cfg.get("architectures") or []),
            **(_variant_fields(cfg, flat, where) | mla),
        )


def is_speculators(cfg: dict) -> bool:
    """A speculators config (nested `transformer_layer_config`), not a flat SpecForge/SGLang one."""
    return isinstance(cfg.get("transformer_layer_config"), dict) or "speculators_model_type" in cfg


def is_mla(cfg: dict) -> bool:
    """An MLA draft: the config sets kv_lora_rank (vLLM's test; SGLang's kimi_k25_eagle3 and NeMo's
    DeepSeek draft both write it with model_type kimi_k2 / deepseek_v3)."""
    flat = flat_config(cfg)
    return bool(flat.get("kv_lora_rank"))


def _mla_fields(cfg: dict, flat: dict, where) -> dict:
    """The MLA attention's sizes (DeepSeek-V3 names) and the EAGLE-3.1 flags of MLA drafts.

    SGLang's kimi_k25_eagle3 (where its `mla.norm_output` rule reads it) and NeMo Automodel both
    compute logits from the normed state; `norm_output: true` feeds that normed state to the next step (SGLang: the aux it returns;
    NeMo: the forward's output), as speculators' does. NeMo's draft (architectures
    `LlamaEagle3DraftModel`) leaves YaRN's mscale out of the softmax scale; SGLang and transformers
    apply it.
    """
    def need(key):
        v = flat.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise BadInputError(where, f"an MLA draft config needs a positive integer {key!r} (got {v!r})")
        return v

    q_lora = flat.get("q_lora_rank")
    if q_lora is not None and (not isinstance(q_lora, int) or isinstance(q_lora, bool) or q_lora <= 0):
        raise BadInputError(where, f"q_lora_rank is {q_lora!r}, expected a positive integer or null")
    kind = flat.get("model_type")
    if kind is not None and kind not in DEEPSEEK_FAMILY:
        raise BadInputError(where, f"sets kv_lora_rank (an MLA draft) but model_type is {kind!r} "
                            f"(expected one of {', '.join(DEEPSEEK_FAMILY)})")
    if flat.get("norm_before_fc"):
        raise BadInputError(where, "norm_before_fc: true on an MLA draft: neither SGLang's kimi_k25_eagle3 nor "
                            "vLLM's deepseek_eagle3 models it")
    nemo = NEMO_ARCH in (cfg.get("architectures") or [])
    producer = "nemo-automodel" if nemo else "torchspec" if "_torchspec_version" in cfg else "sglang-mla"
    return {"attention": "mla", "q_lora_rank": q_lora, "kv_lora_rank": need("kv_lora_rank"),
            "qk_nope_head_dim": need("qk_nope_head_dim"), "qk_rope_head_dim": need("qk_rope_head_dim"),
            "v_head_dim": need("v_head_dim"), "rope_interleave": bool(flat.get("rope_interleave", True)),
            "yarn_scale": not nemo, "producer": producer,
            "fc_norm": bool(flat.get("fc_norm", False)), "final_norm": True,
            "feed_normed": bool(flat.get("norm_output", False)),
            "ignored": ["norm_before_residual: true (the MLA layer's residual is the raw state in SGLang's "
                        "kimi_k25_eagle3 and NeMo's draft)"] if flat.get("norm_before_residual") else []}


def modelopt_double_norm(cfg: dict) -> bool:
    """A Model-Optimizer EAGLE-3 export with a Llama layer (its exporter's template writes
    `eagle_config.next_layer_regular`): trained with the carried state through input_layernorm and
    then hidden_norm (modelopt 0.47.0 `plugins/modeling_eagle.py`, the pre-hook on the first attention).
    TorchSpec's Kimi configs carry `use_input_layernorm_in_first_layer` too, without that template key."""
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    return ("next_layer_regular" in eagle and bool(eagle.get("use_input_layernorm_in_first_layer"))
            and eagle.get("use_aux_hidden_state") is not False and not cfg.get("kv_lora_rank"))


def _variant_fields(cfg: dict, flat: dict, where) -> dict:
    """The producer and its options, as `DraftConfig` fields; unmodelled switches refused by name."""
    act = flat.get("hidden_act", "silu")
    if act not in ("silu", None):
        raise BadInputError(where, f"hidden_act {act!r} is not modelled (the draft's MLP is SwiGLU with silu)")
    if flat.get("mlp_bias"):
        raise BadInputError(where, "mlp_bias: true is not modelled (the draft's MLP has no biases)")
    tie = bool(cfg.get("tie_word_embeddings", False))
    if is_speculators(cfg):
        return _speculators_fields(cfg, flat, where) | {"tie_word_embeddings": tie}
    if modelopt_double_norm(cfg):
        raise BadInputError(where, "eagle_config.use_input_layernorm_in_first_layer: true in a Model-Optimizer export "
                            "(eagle_config.next_layer_regular; its draft runs the carried state through input_layernorm "
                            "and then hidden_norm) is not modelled")
    if NEMO_ARCH in (cfg.get("architectures") or []):
        # NeMo Automodel (draft_llama.py): logits always from norm(h); norm_output feeds norm(h) on
        return {"producer": "nemo-automodel", "fc_norm": bool(flat.get("fc_norm", False)), "final_norm": True,
                "feed_normed": bool(flat.get("norm_output", False)), "tie_word_embeddings": tie, "ignored": []}
    ignored = []
    for key in ("norm_before_fc", "attention_bias", "use_sliding_window"):
        if flat.get(key):
            ignored.append(f"{key}: true (SpecForge's LlamaForCausalLMEagle3 does not read it)")
    if any(t != "full_attention" for t in flat.get("layer_types") or []):
        ignored.append("layer_types with sliding layers (SpecForge's draft always attends fully)")
    return {"producer": "specforge", "fc_norm": bool(flat.get("fc_norm", False)),
            "final_norm": bool(flat.get("norm_output", True)), "tie_word_embeddings": tie, "ignored": ignored}


def _speculators_fields(cfg: dict, flat: dict, where) -> dict:
    """speculators' Eagle3DraftModel options (models/eagle3/core.py, model_definitions.py)."""
    layer = cfg.get("transformer_layer_config") or {}
    kind = layer.get("model_type", "llama")
    if kind not in ("llama", "qwen3"):
        raise BadInputError(where, f"transformer_layer_config.model_type {kind!r} is not modelled (llama, qwen3)")
    fc_norm, before_fc = bool(cfg.get("fc_norm", False)), bool(cfg.get("norm_before_fc", False))
    if fc_norm and before_fc:
        raise BadInputError(where, "sets both fc_norm and norm_before_fc, which speculators refuses")
    types = layer.get("layer_types")
    if types is None and layer.get("use_sliding_window"):
        raise BadInputError(where, "use_sliding_window: true without layer_types: which layers slide is unknown")
    types = list(types or ["full_attention"])
    bad = [t for t in types if t not in ("full_attention", "sliding_attention")]
    if bad:
        raise BadInputError(where, f"layer_types entry {bad[0]!r} is not modelled (full_attention, sliding_attention)")
    window = None
    if types[0] == "sliding_attention":
        window = layer.get("sliding_window")
        if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
            raise BadInputError(where, f"layer 0 is sliding_attention but sliding_window is {window!r}")
    return {"producer": "speculators", "fc_norm": fc_norm, "norm_before_fc": before_fc, "final_norm": True,
            "feed_normed": bool(cfg.get("norm_output", False)), "layer_kind": kind,
            "attention_bias": bool(layer.get("attention_bias", False)), "sliding_window": window}


def _rope_from(flat: dict, where, types=ROPE_TYPES) -> tuple[float, dict | None]:
    """rope_theta and the scaling dict (None for plain RoPE); unknown types refused by name."""
    params = flat.get("rope_parameters") if isinstance(flat.get("rope_parameters"), dict) else {}
    theta = float(flat.get("rope_theta") or params.get("rope_theta") or 10000.0)
    scaling = flat.get("rope_scaling") or (params if params.get("rope_type", "default") != "default" else None)
    if not scaling:
        return theta, None
    if not isinstance(scaling, dict):
        raise BadInputError(where, f"rope_scaling is {scaling!r}, expected a dict")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in types:
        raise BadInputError(where, f"rope_scaling type {kind!r} is not supported (supported: {', '.join(types)})")
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
