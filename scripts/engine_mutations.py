"""Mutated copies of the bundled engine pairs' drafts: every tensor, every config field an engine reads and the
vocabulary mapping, each changed one way, so that what the engines do is measured on defects nobody chose.

`mutations(pair)` returns name -> (what was changed, tensors change, config change, folder change, class), the
same shape as scripts/engine_truth.py's CASES plus the mutation class the docs summarise by. Classes:

- tensor x {absent, renamed, dtype-<other>, row-more, row-less, transposed, nan, inf, zeros}
  (each float tensor gets the two float dtypes it does not have; d2t int32 and float32; t2d uint8 and int64;
  transposed only for 2-D tensors that are not square: a square matrix transposed has the shape and statistics of
  a trained one, which no check of the files can tell apart; NaN/Inf one element, for float tensors);
- config field x {absent, null, wrong-type (the value as a string), off-by-one (numbers), spelling (another
  producer's spelling or nesting, where one exists)};
- mapping x {absolute, off-by-one, stale, zeros, arange, full-vocab-zero-d2t, full-vocab-no-d2t, side-files}.

Names: `m-<subject>-<kind>` for the llama pair (data_samples/engine_llama) and `kimi-m-<subject>-<kind>` for the
Kimi-shaped pair (data_samples/engine_kimi), so `engine_truth.pair_of` finds each copy's pair.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from scripts import make_broken_drafts as mb  # the copy-and-change helpers the engine-truth cases use too

ROOT = Path(__file__).resolve().parents[1]
PAIRS = {"llama": ROOT / "data_samples" / "engine_llama", "kimi": ROOT / "data_samples" / "engine_kimi"}
FLOATS = (torch.bfloat16, torch.float16, torch.float32)
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32", torch.int32: "i32",
               torch.int64: "i64", torch.uint8: "u8", torch.bool: "bool"}
OTHER_DTYPES = {"d2t": (torch.int32, torch.float32), "t2d": (torch.uint8, torch.int64)}

# config fields each engine reads, per pair (the Kimi-shaped draft adds its MLA fields)
FIELDS = ["architectures", "model_type", "hidden_size", "intermediate_size", "num_attention_heads",
          "num_key_value_heads", "num_hidden_layers", "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling",
          "max_position_embeddings", "vocab_size", "draft_vocab_size", "target_hidden_size", "tie_word_embeddings",
          "torch_dtype", "eagle_config", "eagle_config.eagle_aux_hidden_state_layer_ids",
          "eagle_config.use_aux_hidden_state"]
LLAMA_FIELDS = FIELDS + ["head_dim"]
KIMI_FIELDS = FIELDS + ["q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                        "rope_interleave", "fc_norm", "norm_output"]
# another producer's spelling or nesting of a field (what SpecForge, speculators, EAGLE or NeMo write)
SPELLINGS = {
    "architectures": ("SpecForge's class name", lambda c: c.__setitem__("architectures", ["LlamaForCausalLMEagle3"])
                      if c["architectures"] != ["LlamaForCausalLMEagle3"] else
                      c.__setitem__("architectures", ["Eagle3LlamaForCausalLM"])),
    "eagle_config.eagle_aux_hidden_state_layer_ids": (
        "the aux ids at the top level (speculators' and SpecForge's flat spelling), no eagle_config",
        lambda c: c.__setitem__("eagle_aux_hidden_state_layer_ids", c.pop("eagle_config")["eagle_aux_hidden_state_layer_ids"])),
    "draft_vocab_size": ("the draft vocab as `draft_vocab` (no draft_vocab_size)",
                         lambda c: c.__setitem__("draft_vocab", c.pop("draft_vocab_size"))),
    "target_hidden_size": ("the target width nested as eagle_config.target_hidden_size",
                           lambda c: c.setdefault("eagle_config", {}).__setitem__("target_hidden_size",
                                                                                  c.pop("target_hidden_size"))),
    "torch_dtype": ("`dtype` instead of `torch_dtype` (transformers 5)", lambda c: c.__setitem__("dtype", c.pop("torch_dtype"))),
    "rms_norm_eps": ("`layer_norm_eps` instead of `rms_norm_eps`",
                     lambda c: c.__setitem__("layer_norm_eps", c.pop("rms_norm_eps"))),
    "num_hidden_layers": ("`num_layers` instead of `num_hidden_layers`",
                          lambda c: c.__setitem__("num_layers", c.pop("num_hidden_layers"))),
}


def _tensor_specs(pair: str) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    with safe_open(str(PAIRS[pair] / "draft" / "model.safetensors"), "pt") as f:
        return {k: (tuple(f.get_slice(k).get_shape()), f.get_tensor(k).dtype) for k in f.keys()}


def _renamed(name: str) -> str:
    parts = name.split(".")
    i = len(parts) - 2 if parts[-1] in ("weight", "bias") and len(parts) > 1 else len(parts) - 1
    parts[i] += "_x"
    return ".".join(parts)


def _t(name: str, kind: str, arg=None):
    """The tensors change: `kind` applied to tensor `name`."""
    def f(t):
        v = t[name]
        if kind == "absent":
            del t[name]
        elif kind == "renamed":
            t[_renamed(name)] = t.pop(name)
        elif kind == "dtype":
            t[name] = v.to(arg)
        elif kind == "row-more":
            t[name] = torch.cat([v, v[-1:]], 0)
        elif kind == "row-less":
            t[name] = v[:-1].clone()
        elif kind == "transposed":
            t[name] = v.t().contiguous()
        elif kind in ("nan", "inf"):
            w = v.clone()
            w.view(-1)[w.numel() // 2] = float("nan") if kind == "nan" else float("inf")
            t[name] = w
        elif kind == "zeros":
            t[name] = torch.zeros_like(v)
        return t
    return f


def tensor_mutations(pair: str) -> dict[str, tuple]:
    out = {}
    prefix = "kimi-m-" if pair == "kimi" else "m-"
    for name, (shape, dtype) in _tensor_specs(pair).items():
        kinds = [("absent", None), ("renamed", None)]
        others = OTHER_DTYPES.get(name) or tuple(d for d in FLOATS if d != dtype)
        kinds += [("dtype", d) for d in others]
        kinds += [("row-more", None), ("row-less", None)]
        if len(shape) == 2 and shape[0] != shape[1]:  # a square one transposed is another matrix of the same
            kinds.append(("transposed", None))       # shape: no file-level check can tell it from a trained one
        if dtype.is_floating_point:
            kinds += [("nan", None), ("inf", None)]
        kinds.append(("zeros", None))
        for kind, arg in kinds:
            label = f"dtype-{DTYPE_NAMES[arg]}" if kind == "dtype" else kind
            what = {"absent": f"{name} left out", "renamed": f"{name} renamed {_renamed(name)}",
                    "dtype": f"{name} stored as {DTYPE_NAMES.get(arg, arg)} (was {DTYPE_NAMES[dtype]})",
                    "row-more": f"{name} with one row more ({shape[0] + 1} x ...)",
                    "row-less": f"{name} with one row less ({shape[0] - 1} x ...)",
                    "transposed": f"{name} transposed ({shape[1]} x {shape[0]})" if len(shape) == 2 else "",
                    "nan": f"one element of {name} NaN", "inf": f"one element of {name} +Inf",
                    "zeros": f"{name} all zeros"}[kind]
            out[f"{prefix}{name}-{label}"] = (what, _t(name, kind, arg), None, None, f"tensor {label}")
    return out


def _get(cfg: dict, path: str):
    cur = cfg
    for p in path.split("."):
        if not isinstance(cur, dict) or p not in cur:
            return None, False
        cur = cur[p]
    return cur, True


def _c(path: str, kind: str):
    """The config change: `kind` applied to field `path` (dotted: nested)."""
    def f(cfg):
        *up, last = path.split(".")
        holder = cfg
        for p in up:
            holder = holder[p]
        v = holder[last]
        if kind == "absent":
            del holder[last]
        elif kind == "null":
            holder[last] = None
        elif kind == "wrong-type":
            holder[last] = json.dumps(v) if not isinstance(v, str) else 7
        elif kind == "off-by-one":
            holder[last] = (not v) if isinstance(v, bool) else v + 1 if isinstance(v, int) else v * 1.5 if \
                isinstance(v, float) else [x + 1 for x in v]
        elif kind == "spelling":
            SPELLINGS[path][1](cfg)
        return cfg
    return f


def config_mutations(pair: str) -> dict[str, tuple]:
    cfg = json.loads((PAIRS[pair] / "draft" / "config.json").read_text())
    prefix = "kimi-m-" if pair == "kimi" else "m-"
    out = {}
    for path in (KIMI_FIELDS if pair == "kimi" else LLAMA_FIELDS):
        v, present = _get(cfg, path)
        if not present:
            continue
        kinds = ["absent", "null", "wrong-type"]
        numeric = (isinstance(v, (int, float)) and not isinstance(v, bool)) or isinstance(v, bool) or (
            isinstance(v, list) and v and all(isinstance(x, int) for x in v))
        if numeric:
            kinds.append("off-by-one")
        if path in SPELLINGS:
            kinds.append("spelling")
        for kind in kinds:
            words = {"absent": f"config {path} left out", "null": f"config {path}: null",
                     "wrong-type": f"config {path} of the wrong type ({'a string' if not isinstance(v, str) else 'a number'})",
                     "off-by-one": f"config {path} off by one" + (" (negated)" if isinstance(v, bool) else
                                                                 " (x 1.5)" if isinstance(v, float) else ""),
                     "spelling": f"config: {SPELLINGS[path][0]}" if path in SPELLINGS else ""}[kind]
            out[f"{prefix}cfg-{path}-{kind}"] = (words, None, _c(path, kind), None, f"config {kind}")
    return out


# -- the mapping ------------------------------------------------------------------------------------------------
def _kept(t):
    return t["d2t"] + torch.arange(t["d2t"].numel())


def _m_off_by_one(t):
    t["d2t"] = t["d2t"] + 1


def _m_stale(t):
    new, d2t = mb.rebuilt_mapping(t, swap=100)
    t["d2t"] = d2t
    t2d = torch.zeros_like(t["t2d"])
    t2d[new] = True
    t["t2d"] = t2d


def _full_vocab(keep_d2t: bool):
    """lm_head scattered to the whole target vocab (each draft row at its target id, the rest zero), d2t zeros of
    the full size (SpecForge registers the buffer for every draft) or no d2t/t2d at all."""
    def f(t):
        kept = _kept(t)
        head = t["lm_head.weight"]
        vocab = t["t2d"].numel()
        full = torch.zeros(vocab, head.shape[1], dtype=head.dtype)
        full[kept] = head
        t["lm_head.weight"] = full
        if keep_d2t:
            t["d2t"] = torch.zeros(vocab, dtype=t["d2t"].dtype)
            t["t2d"] = torch.ones(vocab, dtype=torch.bool)
        else:
            del t["d2t"], t["t2d"]
        return t
    return f


def _full_vocab_config(cfg):
    cfg["draft_vocab_size"] = cfg["vocab_size"]


def mapping_mutations(pair: str) -> dict[str, tuple]:
    prefix = "kimi-m-" if pair == "kimi" else "m-"
    cases = {
        "absolute": ("d2t stores absolute target ids", mb.d2t_absolute, None, None),
        "off-by-one": ("every d2t offset one too large", _m_off_by_one, None, None),
        "stale": ("d2t/t2d regenerated (100 draft tokens swapped), lm_head carried over", _m_stale, None, None),
        "zeros": ("d2t all zeros with the reduced draft vocab", mb.d2t_zeros, None, None),
        "arange": ("d2t = arange(N)", mb.d2t_arange, None, None),
        "full-vocab-zero-d2t": ("a full-vocab draft (draft_vocab_size = vocab_size, lm_head over the whole vocab) "
                                "that ships a zero d2t", _full_vocab(True), _full_vocab_config, None),
        "full-vocab-no-d2t": ("a full-vocab draft without d2t/t2d", _full_vocab(False), _full_vocab_config, None),
        "side-files": ("d2t/t2d only in d2t.npy / t2d.npy beside the weights", None, None, mb.side_files),
    }
    return {f"{prefix}map-{k}": v + (f"mapping {k}",) for k, v in cases.items()}


def mutations(pairs=("llama", "kimi")) -> dict[str, tuple]:
    out = {}
    for pair in pairs:
        out |= tensor_mutations(pair) | config_mutations(pair) | mapping_mutations(pair)
    return out


if __name__ == "__main__":
    from collections import Counter

    m = mutations()
    print(len(m), Counter(v[4] for v in m.values()))
