"""The shape each EAGLE-3 draft parameter must have, as its config implies it (the MHA layer of a Llama-style
draft and the MLA layer of a DeepSeek/Kimi-style one), in the layout `torch.nn.Linear` stores ([out, in]).

`expected_shapes(cfg)` maps a canonical name (`midlayer.<param>` for the decoder layer, the plain name at the top
level, as `helpers.engines.key_names.KeyInfo.canonical` writes it) to its shape. A name whose sizes the config does
not give as positive integers is left out: the config checks speak for those. The layer's input is the token
embedding and the fused state side by side (2 x hidden), which is why q/k/v (MHA) and q_a / q / kv_a (MLA) take
2 x hidden inputs. The head, the embedding and fc are here too (lm_head [draft vocab, hidden], embed_tokens
[vocab, hidden], fc [hidden, 3 x target hidden]).
"""
from __future__ import annotations


def _ints(cfg: dict, *names) -> list[int] | None:
    vals = [cfg.get(n) for n in names]
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in vals)
    return vals if ok else None


def expected_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """canonical parameter name -> the shape `cfg` (a flat draft config) gives it."""
    out: dict[str, tuple[int, ...]] = {}
    h = _ints(cfg, "hidden_size")
    if h is None:
        return out
    h = h[0]
    for name in ("norm.weight", "midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight",
                 "midlayer.post_attention_layernorm.weight"):
        out[name] = (h,)
    if (i := _ints(cfg, "intermediate_size")) is not None:
        out |= {"midlayer.mlp.gate_proj.weight": (i[0], h), "midlayer.mlp.up_proj.weight": (i[0], h),
                "midlayer.mlp.down_proj.weight": (h, i[0])}
    v = _ints(cfg, "vocab_size")
    if v is not None:
        out["embed_tokens.weight"] = (v[0], h)
    dv = cfg.get("draft_vocab_size", cfg.get("vocab_size"))
    if isinstance(dv, int) and not isinstance(dv, bool) and dv > 0:
        out["lm_head.weight"] = (dv, h)
    ht = cfg.get("target_hidden_size") or h
    if isinstance(ht, int) and not isinstance(ht, bool) and ht > 0:
        out["fc.weight"] = (h, 3 * ht)
        out |= {f"fc_norm.{i}.weight": (ht,) for i in range(3)}  # EAGLE-3.1's norms of the three aux states
    if any(k in cfg for k in ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim")):  # an MLA layer
        out |= _mla(cfg, h)
    else:
        out |= _mha(cfg, h)
    return out


def _mha(cfg: dict, h: int) -> dict[str, tuple[int, ...]]:
    heads = _ints(cfg, "num_attention_heads")
    if heads is None:
        return {}
    nh = heads[0]
    kv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim") or (h // nh if h % nh == 0 else None)
    if not (_ints({"a": kv, "b": hd}, "a", "b")):
        return {}
    return {"midlayer.self_attn.q_proj.weight": (nh * hd, 2 * h), "midlayer.self_attn.k_proj.weight": (kv * hd, 2 * h),
            "midlayer.self_attn.v_proj.weight": (kv * hd, 2 * h), "midlayer.self_attn.o_proj.weight": (h, nh * hd)}


def _mla(cfg: dict, h: int) -> dict[str, tuple[int, ...]]:
    sizes = _ints(cfg, "num_attention_heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    if sizes is None:
        return {}
    nh, rkv, dn, dr, dv = sizes
    out = {"midlayer.self_attn.kv_a_proj_with_mqa.weight": (rkv + dr, 2 * h),
           "midlayer.self_attn.kv_a_layernorm.weight": (rkv,),
           "midlayer.self_attn.kv_b_proj.weight": (nh * (dn + dv), rkv),
           "midlayer.self_attn.o_proj.weight": (h, nh * dv)}
    rq = cfg.get("q_lora_rank")
    if rq is None:
        out["midlayer.self_attn.q_proj.weight"] = (nh * (dn + dr), 2 * h)
    elif _ints(cfg, "q_lora_rank"):
        out |= {"midlayer.self_attn.q_a_proj.weight": (rq, 2 * h), "midlayer.self_attn.q_a_layernorm.weight": (rq,),
                "midlayer.self_attn.q_b_proj.weight": (nh * (dn + dr), rq)}
    return out


# the config fields behind each parameter's shape, by its last two name parts (named in the kit's shape refusals and
# the doctor's weight-shape finding)
SIZED_BY = {
    "fc.weight": "hidden_size, 3 x target_hidden_size", "norm.weight": "hidden_size",
    "lm_head.weight": "draft_vocab_size, hidden_size", "embed_tokens.weight": "vocab_size, hidden_size",
    "hidden_norm.weight": "hidden_size", "input_layernorm.weight": "hidden_size",
    "post_attention_layernorm.weight": "hidden_size", "gate_proj.weight": "intermediate_size, hidden_size",
    "up_proj.weight": "intermediate_size, hidden_size", "down_proj.weight": "hidden_size, intermediate_size",
    "q_proj.weight": "num_attention_heads x head_dim, 2 x hidden_size",
    "k_proj.weight": "num_key_value_heads x head_dim, 2 x hidden_size",
    "v_proj.weight": "num_key_value_heads x head_dim, 2 x hidden_size",
    "o_proj.weight": "hidden_size, num_attention_heads x head_dim", "input_norm.weight": "3 x target_hidden_size",
    "q_norm.weight": "head_dim", "k_norm.weight": "head_dim",
    "q_a_proj.weight": "q_lora_rank, 2 x hidden_size", "q_a_layernorm.weight": "q_lora_rank",
    "q_b_proj.weight": "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim), q_lora_rank",
    "kv_a_proj_with_mqa.weight": "kv_lora_rank + qk_rope_head_dim, 2 x hidden_size",
    "kv_a_layernorm.weight": "kv_lora_rank",
    "kv_b_proj.weight": "num_attention_heads x (qk_nope_head_dim + v_head_dim), kv_lora_rank",
}


def sized_by(name: str) -> str:
    """The config fields a parameter's shape is made of ('' for a name not listed)."""
    return SIZED_BY.get(".".join(name.split(".")[-2:]), "")
