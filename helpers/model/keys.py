"""Which stored tensors the kit's draft forward takes, and which it must refuse or may skip.

`canonical_keys` names every stored tensor canonically (`midlayer.*` for `layers.0.*` and
prefixed layer keys, the plain top-level name otherwise; an unrecognised key keeps its stored
name). `expected_shapes` lists what the forward needs for a `DraftConfig` (the producer options
add `fc_norm.{0,1,2}.weight`, `input_norm.weight`, `q_norm`/`k_norm` and the attention biases).
`check_keys` compares the two: a tensor the forward would need but the config does not switch on,
or one it cannot place, is refused with one `BadInputError` naming the key and the file (loading
it would give wrong logits, ignoring it too); tensors that cannot change the forward (rotary
caches, speculators' verifier head) are skipped with a `warnings.warn` naming them.
"""
from __future__ import annotations

import warnings

from helpers.core.errors import BadInputError
from helpers.io.checkpoint import Checkpoint
from helpers.model.config import DraftConfig
from helpers.model.param_shapes import sized_by

_TOP = ("fc.weight", "norm.weight", "lm_head.weight", "embed_tokens.weight", "input_norm.weight")
# stored tensors the draft's forward never reads: RoPE caches (recomputed) and speculators'
# frozen verifier head/norm (used for its training targets only)
_HARMLESS = ("inv_freq", "cos_cached", "sin_cached", "verifier_lm_head.weight", "verifier_norm.weight")


def _layer_canon(k: str, parts: list[str], i: int, ck: Checkpoint) -> str:
    if parts[i + 1] != "0":
        raise BadInputError(
            ck.tensors.file_of(k), f"holds {k!r}: a draft with more than one decoder layer is not supported")
    return "midlayer." + ".".join(parts[i + 2:])


def _canon(k: str, ck: Checkpoint) -> str | None:
    parts = k.split(".")
    for i, p in enumerate(parts):
        if p == "midlayer":
            return "midlayer." + ".".join(parts[i + 1:])
        if p == "layers" and i + 1 < len(parts) and parts[i + 1].isdigit():
            return _layer_canon(k, parts, i, ck)
    if ".".join(parts[-2:]) in _TOP:
        return ".".join(parts[-2:])
    if len(parts) >= 3 and parts[-3] == "fc_norm" and parts[-2].isdigit() and parts[-1] == "weight":
        return ".".join(parts[-3:])
    return None


def canonical_keys(ck: Checkpoint) -> dict[str, str]:
    """canonical name -> key in the file, for every tensor but d2t/t2d (unknown ones keep their name)."""
    where = ck.tensors.files[0] if ck.tensors.files else ck.path
    out: dict[str, str] = {}
    for k in ck.tensors.keys():
        if k.split(".")[-1] in ("d2t", "t2d"):
            continue
        canon = _canon(k, ck) or k
        if canon in out:
            raise BadInputError(where, f"holds both {out[canon]!r} and {k!r} for {canon}")
        out[canon] = k
    return out


def expected_shapes(cfg: DraftConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the forward takes for `cfg`, with its shape."""
    H, d, I, Ht = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size, cfg.target_hidden_size
    q, kv = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
    m = "midlayer."
    out = {
        "fc.weight": (H, 3 * Ht), "norm.weight": (H,), "lm_head.weight": (cfg.draft_vocab_size, H),
        "embed_tokens.weight": (cfg.vocab_size, H),
        m + "hidden_norm.weight": (H,), m + "input_layernorm.weight": (H,),
        m + "post_attention_layernorm.weight": (H,),
        m + "mlp.gate_proj.weight": (I, H), m + "mlp.up_proj.weight": (I, H), m + "mlp.down_proj.weight": (H, I),
    }
    out.update(_mla_shapes(cfg) if cfg.attention == "mla" else {
        m + "self_attn.q_proj.weight": (q, 2 * H), m + "self_attn.k_proj.weight": (kv, 2 * H),
        m + "self_attn.v_proj.weight": (kv, 2 * H), m + "self_attn.o_proj.weight": (H, q)})
    if cfg.fc_norm:
        out.update({f"fc_norm.{i}.weight": (Ht,) for i in range(3)})
    if cfg.norm_before_fc:
        out["input_norm.weight"] = (3 * Ht,)
    if cfg.layer_kind == "qwen3":
        out.update({m + "self_attn.q_norm.weight": (d,), m + "self_attn.k_norm.weight": (d,)})
    if cfg.attention_bias and cfg.attention != "mla":
        out.update({m + f"self_attn.{p}_proj.bias": (n,) for p, n in (("q", q), ("k", kv), ("v", kv), ("o", H))})
    return out




def shape_words(name: str, cfg: DraftConfig) -> str:
    """The config fields a tensor's expected shape comes from, e.g. 'draft_vocab_size, hidden_size'."""
    if cfg.attention == "mla" and ".self_attn." in name:
        return "the MLA sizes: num_attention_heads, kv_lora_rank, q_lora_rank, qk_nope_head_dim, qk_rope_head_dim, " \
               "v_head_dim, hidden_size"
    if name.startswith("fc_norm."):
        return "target_hidden_size"
    return sized_by(name)


def _mla_shapes(cfg: DraftConfig) -> dict[str, tuple[int, ...]]:
    """DeepSeek-V3 MLA's tensors (transformers' / SGLang's names) over the 2H input."""
    H, nh = cfg.hidden_size, cfg.num_attention_heads
    qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    a = "midlayer.self_attn."
    out = {a + "kv_a_proj_with_mqa.weight": (cfg.kv_lora_rank + cfg.qk_rope_head_dim, 2 * H),
           a + "kv_a_layernorm.weight": (cfg.kv_lora_rank,),
           a + "kv_b_proj.weight": (nh * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank),
           a + "o_proj.weight": (H, nh * cfg.v_head_dim)}
    if cfg.q_lora_rank is None:
        out[a + "q_proj.weight"] = (nh * qk, 2 * H)
    else:
        out.update({a + "q_a_proj.weight": (cfg.q_lora_rank, 2 * H), a + "q_a_layernorm.weight": (cfg.q_lora_rank,),
                    a + "q_b_proj.weight": (nh * qk, cfg.q_lora_rank)})
    if cfg.attention_bias:
        out.update({a + "kv_a_proj_with_mqa.bias": (cfg.kv_lora_rank + cfg.qk_rope_head_dim,), a + "o_proj.bias": (H,)})
        if cfg.q_lora_rank is not None:
            out[a + "q_a_proj.bias"] = (cfg.q_lora_rank,)
    return out


def _why_refused(canon: str, cfg: DraftConfig) -> str:
    """Why a stored tensor the forward does not take would make the kit's logits wrong."""
    cfgname = "the speculators config" if cfg.producer == "speculators" else "config.json"
    if canon.startswith("fc_norm."):
        return f"per-chunk norms before fc, but {cfgname} does not set fc_norm: true"
    if canon == "input_norm.weight":
        return f"a norm over the aux states before fc, but {cfgname} does not set norm_before_fc: true"
    if canon.endswith(("q_norm.weight", "k_norm.weight")):
        return "a Qwen3-style q/k norm, but the layer is not a qwen3 one (transformer_layer_config.model_type)"
    if canon.endswith("_proj.bias") and cfg.producer == "specforge":
        return "an attention bias, which SpecForge's draft never has (its q/k/v/o bias is hard-coded off)"
    if canon.endswith("_proj.bias"):
        return "an attention bias, but transformer_layer_config.attention_bias is not true"
    return "a tensor the kit's EAGLE-3 forward does not model"


def check_keys(ck: Checkpoint, cfg: DraftConfig, keys: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """(the keys to load, names to fill with ones); refuses or warns about the others, by name."""
    expected = expected_shapes(cfg)
    load = {}
    for canon, k in keys.items():
        if canon in expected:
            load[canon] = k
        elif k.split(".")[-1] in _HARMLESS or ".".join(k.split(".")[-2:]) in _HARMLESS:
            warnings.warn(f"{ck.tensors.file_of(k)}: skipping {k!r}: the draft's forward does not use it",
                          stacklevel=3)
        else:
            raise BadInputError(ck.tensors.file_of(k), f"holds {k!r}: {_why_refused(canon, cfg)}; refusing "
                                "to load rather than compute logits the producer never did")
    ones = []
    if cfg.norm_before_fc and "input_norm.weight" not in load:
        ones.append("input_norm.weight")  # speculators: in _keys_to_ignore_on_load_missing, left at ones
        warnings.warn(f"{ck.path}: norm_before_fc is set but there is no input_norm.weight; using ones, "
                      "as speculators does when loading", stacklevel=3)
    for note in cfg.ignored:
        warnings.warn(f"{ck.config_path or ck.path}: {note}; ignored, as the producer does", stacklevel=3)
    if cfg.tie_word_embeddings and "lm_head.weight" in load:
        warnings.warn(f"{ck.config_path or ck.path}: tie_word_embeddings is set but lm_head.weight is stored; "
                      "using the stored draft-vocab lm_head (neither SpecForge nor speculators ties it)", stacklevel=3)
    return load, ones
