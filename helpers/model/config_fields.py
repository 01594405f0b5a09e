"""Every config.json field the kit reads, declared once: its type, its range and what it means.

The draft's config (`DRAFT_FIELDS`, read through `flat_config`: speculators' nested layer config
and the flat SpecForge / SGLang one alike, plus `eagle_config`'s fields) and the target's
(`TARGET_FIELDS`, read in its language-model part, `text_config`) are each one table of `Field`s.
`draft_problems(cfg)` / `target_problems(cfg)` list every field whose value is not what its
declaration says, as `Problem`s (the field, the value, what was expected, and one line saying so);
`check_draft_config` / `check_target_config` are the loaders' door: the first problem as one
`BadInputError` naming the config file and the field, else the config with its nulls taken out.

Null is "absent" wherever producers write it (`"eagle_config": null`, `"rope_scaling": null`,
`"q_lora_rank": null`, ...): a null field reads as a missing one, with the field's default; only
where the reader takes null as a value (transformers builds the target with `rope_theta: null` and
fails) is it refused (`null_ok=False`). An integer field refuses a float, even an integral one
(`draft_vocab_size: 800.0` is "expected a positive integer", naming the field), since engines read
these sizes as integers. A size the draft forward cannot do without (`hidden_size`,
`num_attention_heads`, `intermediate_size`, `vocab_size`) is a problem when missing too, and so is
a target without `model_type` (`loaded=True`). Names the installed transformers must know (a RoPE
type, an activation) are checked against it. The doctor reports each problem as a
`config-invalid` error (`helpers.doctor.checks_config`), so it never passes a config the loaders
refuse; `evaluate`, `speculate`, `capture` and `inspect` refuse the first in one line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from helpers.core.errors import BadInputError
from helpers.core.terms import MAX_VOCAB
from helpers.io.configs import flat_config
from helpers.model.fit import _TEXT_KEYS, text_config

# kinds of value
POSITIVE_INT = "a positive integer"
POSITIVE_NUMBER = "a positive number"
BOOL = "true or false"
TEXT = "a string"
TEXTS = "a list of strings"
OBJECT = "an object"
LAYER_IDS = "a list of layer ids (integers >= 0)"


@dataclass(frozen=True)
class Field:
    """One config field: where it is read, what type and range it must have, what it means."""

    name: str
    kind: str  # one of the kinds above
    meaning: str
    place: str = "flat"  # "flat" (flat_config / text_config), "top" (top level only), "eagle" (eagle_config)
    required: bool = False  # a missing (or null) value is a problem
    high: int | None = None  # largest plausible vocab size (the vocab fields: token ids are int32)
    below: float | None = None  # the value must be less than this (numbers)
    known: object = None  # a function giving the allowed values (strings) of the installed transformers
    modelled: tuple = ()  # values the kit's own forward takes: allowed without asking transformers (a slow import)
    null_ok: bool = True  # null reads as absent (False: the reader, e.g. transformers, takes null as a value)
    rope: bool = False  # an object naming a RoPE type transformers knows, with a positive factor unless "default"

    @property
    def label(self) -> str:
        return f"eagle_config.{self.name}" if self.place == "eagle" else self.name


@dataclass(frozen=True)
class Problem:
    """A field whose value is not what its declaration says."""

    field: str  # the field's name as it is written (eagle_config.NAME for a nested one)
    value: object
    expected: str
    meaning: str
    text: str | None = None  # the line, where the kind's wording does not fit (an implausible size)

    @property
    def missing(self) -> bool:
        """A required field absent (or null), rather than present and wrong."""
        return self.value is _MISSING

    @property
    def line(self) -> str:
        if self.text:
            return self.text
        if self.missing:
            return f"config lacks {self.expected} {self.field!r}"
        return f"{self.field} is {'null' if self.value is None else _shown(self.value)}, expected {self.expected}"


_MISSING = object()


def _shown(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


DRAFT_FIELDS: tuple[Field, ...] = (
    Field("hidden_size", POSITIVE_INT, "the draft layer's width", required=True),
    Field("num_attention_heads", POSITIVE_INT, "the draft layer's query heads", required=True),
    Field("num_key_value_heads", POSITIVE_INT, "key/value heads; they divide num_attention_heads"),
    Field("head_dim", POSITIVE_INT, "width of one attention head (default hidden_size / num_attention_heads)"),
    Field("intermediate_size", POSITIVE_INT, "the draft MLP's inner width", required=True),
    Field("vocab_size", POSITIVE_INT, "the target's vocab (rows of embed_tokens)", required=True, high=MAX_VOCAB),
    Field("draft_vocab_size", POSITIVE_INT, "rows of the draft's lm_head (default vocab_size)", high=MAX_VOCAB),
    Field("target_vocab_size", POSITIVE_INT, "the target's vocab, where stated apart from vocab_size", high=MAX_VOCAB),
    Field("target_hidden_size", POSITIVE_INT, "the target's hidden size fc expects (default hidden_size)"),
    Field("num_hidden_layers", POSITIVE_INT, "draft decoder layers (EAGLE-3: 1)"),
    Field("max_position_embeddings", POSITIVE_INT, "the context the draft's RoPE was trained for"),
    Field("rms_norm_eps", POSITIVE_NUMBER, "the RMSNorm epsilon", below=1.0),
    Field("rope_theta", POSITIVE_NUMBER, "the RoPE base"),
    Field("rope_scaling", OBJECT, "RoPE scaling (type and factor); null: plain RoPE", rope=True),
    Field("rope_parameters", OBJECT, "transformers 5's RoPE settings (rope_theta, rope_type)", rope=True),
    Field("hidden_act", TEXT, "the MLP's activation", known=lambda: activations(), modelled=("silu",)),
    Field("model_type", TEXT, "the layer's model type"),
    Field("architectures", TEXTS, "the draft's class names"),
    Field("tie_word_embeddings", BOOL, "lm_head shares embed_tokens"),
    Field("norm_before_residual", BOOL, "EAGLE-3's hidden_norm output is the residual"),
    Field("fc_norm", BOOL, "EAGLE-3.1: one RMSNorm per aux hidden state before fc"),
    Field("norm_before_fc", BOOL, "one RMSNorm over fc's input (input_norm)"),
    Field("norm_output", BOOL, "the final norm's output is used (SpecForge) or fed back (speculators)"),
    Field("attention_bias", BOOL, "q/k/v/o projections have biases"),
    Field("mlp_bias", BOOL, "the MLP has biases (not modelled: false)"),
    Field("use_sliding_window", BOOL, "the layer attends within a window"),
    Field("sliding_window", POSITIVE_INT, "the window of a sliding layer"),
    Field("layer_types", TEXTS, "each layer's attention (full_attention, sliding_attention)"),
    Field("transformer_layer_config", OBJECT, "speculators' nested layer config", place="top"),
    Field("eagle_config", OBJECT, "EAGLE's settings (aux-layer ids, use_aux_hidden_state)", place="top"),
    Field("eagle_aux_hidden_state_layer_ids", LAYER_IDS, "the target layers whose hidden states the draft takes",
          place="eagle"),
    Field("use_aux_hidden_state", BOOL, "the draft takes the target's aux hidden states (EAGLE-3)", place="eagle"),
    Field("eagle_aux_hidden_state_layer_ids", LAYER_IDS,
          "the target layers whose hidden states the draft takes (vLLM / speculators place)", place="top"),
    Field("kv_lora_rank", POSITIVE_INT, "MLA: the kv latent's width"),
    Field("q_lora_rank", POSITIVE_INT, "MLA: q's LoRA rank (null: one q_proj)"),
    Field("qk_nope_head_dim", POSITIVE_INT, "MLA: per-head q/k part without RoPE"),
    Field("qk_rope_head_dim", POSITIVE_INT, "MLA: per-head q/k part with RoPE"),
    Field("v_head_dim", POSITIVE_INT, "MLA: per-head value width"),
    Field("rope_interleave", BOOL, "MLA: RoPE rotates adjacent pairs"),
)

TARGET_FIELDS: tuple[Field, ...] = (
    Field("vocab_size", POSITIVE_INT, "the target's vocab", high=MAX_VOCAB),
    Field("hidden_size", POSITIVE_INT, "the target's hidden size (the draft's fc takes 3 x it)"),
    Field("num_hidden_layers", POSITIVE_INT, "the target's decoder layers (aux ids index them)"),
    Field("num_attention_heads", POSITIVE_INT, "the target's query heads"),
    Field("num_key_value_heads", POSITIVE_INT, "the target's key/value heads; they divide num_attention_heads"),
    Field("head_dim", POSITIVE_INT, "width of one attention head"),
    Field("intermediate_size", POSITIVE_INT, "the target MLP's inner width"),
    Field("max_position_embeddings", POSITIVE_INT, "the target's context"),
    Field("rms_norm_eps", POSITIVE_NUMBER, "the RMSNorm epsilon", below=1.0),
    Field("rope_theta", POSITIVE_NUMBER, "the RoPE base", null_ok=False),
    Field("rope_scaling", OBJECT, "RoPE scaling; null: plain RoPE", rope=True),
    Field("rope_parameters", OBJECT, "transformers 5's RoPE settings (rope_theta, rope_type)", rope=True),
    Field("sliding_window", POSITIVE_INT, "the window of sliding layers"),
    Field("layer_types", TEXTS, "each layer's attention type"),
    Field("model_type", TEXT, "the target's model type (transformers builds the target from it)", required=True),
    Field("architectures", TEXTS, "the target's class names"),
    Field("tie_word_embeddings", BOOL, "lm_head shares embed_tokens"),
    Field("quantization_config", OBJECT, "how the target's weights are quantized"),
)


def rope_types() -> tuple[str, ...]:
    """The RoPE types the installed transformers builds a target with ("default" included)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    return ("default", *ROPE_INIT_FUNCTIONS)


def activations() -> tuple[str, ...]:
    """The activation names the installed transformers knows (`hidden_act`)."""
    from transformers.activations import ACT2FN

    return tuple(sorted(ACT2FN))


def eagle_config(cfg: dict | None) -> dict:
    """The draft config's `eagle_config` object; {} when absent, null or not an object."""
    e = (cfg or {}).get("eagle_config")
    return e if isinstance(e, dict) else {}


def _value_problem(f: Field, v) -> str | None:
    """What is wrong with `v` for field `f` (None: nothing)."""
    if f.kind == POSITIVE_INT:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            return f.kind
        if f.high is not None and v > f.high:
            return f"{f.kind} of at most {f.high:,}"  # worded by `_too_big`
    elif f.kind == POSITIVE_NUMBER:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
            return f.kind
        if f.below is not None and v >= f.below:
            return f"{f.kind} below {f.below:g}"
    elif f.kind == BOOL:
        if not isinstance(v, bool):
            return BOOL
    elif f.kind == TEXT:
        if not isinstance(v, str):
            return TEXT
        allowed = f.known() if f.known and v not in f.modelled else ()
        if allowed and v not in allowed:
            return f"one of {', '.join(allowed)}"
    elif f.kind == TEXTS:
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            return TEXTS
    elif f.kind == OBJECT:
        if not isinstance(v, dict):
            return f"{OBJECT} or null"
        if f.rope:
            kind = v.get("rope_type", v.get("type", "default"))
            known = () if kind == "default" else rope_types()  # plain RoPE: transformers need not be asked
            if kind != "default" and kind not in known:
                return f"an object whose rope_type is one of {', '.join(known)}"
            factor = v.get("factor")
            if kind != "default" and (not isinstance(factor, (int, float)) or isinstance(factor, bool)
                                      or not math.isfinite(factor) or factor <= 0):
                return f"an object with a positive factor for rope_type {kind!r}"
    elif f.kind == LAYER_IDS:
        if (not isinstance(v, list) or not v
                or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v)):
            return LAYER_IDS
    return None


def _problems(fields, values: dict, eagle: dict, top: dict) -> list[Problem]:
    out = []
    for f in fields:
        src = {"flat": values, "top": top, "eagle": eagle}[f.place]
        v = src.get(f.name)
        if v is None and f.name in src and not f.null_ok:
            out.append(Problem(f.label, None, f.kind, f.meaning))
            continue
        if v is None:
            if f.required:
                out.append(Problem(f.label, _MISSING, f.kind, f.meaning))
            continue
        expected = _value_problem(f, v)
        if expected is not None:
            big = f.high is not None and isinstance(v, int) and not isinstance(v, bool) and v > f.high
            out.append(Problem(f.label, v, expected, f.meaning,
                               f"{f.label} = {v:,} is not a plausible vocab size (more than {f.high:,}: token ids "
                               "are int32)" if big else None))
    bad = {p.field for p in out}
    heads, kv = values.get("num_attention_heads"), values.get("num_key_value_heads")
    if not bad & {"num_attention_heads", "num_key_value_heads"} and isinstance(heads, int) and isinstance(kv, int) \
            and heads % kv:
        out.append(Problem("num_key_value_heads", kv, f"a divisor of num_attention_heads ({heads})",
                           "key/value heads; they divide num_attention_heads"))
    return out


def draft_problems(cfg: dict | None, *, sizes: bool = True) -> list[Problem]:
    """Every declared field of a draft's config.json whose value is wrong (missing required sizes included).

    Block-diffusion drafts (DFlash, DSpark, XPress) are judged by `helpers.doctor.checks_dflash`:
    only their field types are checked here, not the EAGLE-3 sizes they may leave out."""
    if not cfg:
        return []
    found = _problems(DRAFT_FIELDS, flat_config(cfg), eagle_config(cfg), cfg)
    return found if sizes else [p for p in found if not p.missing]


def target_problems(cfg: dict | None, *, loaded: bool = True) -> list[Problem]:
    """Every declared field of a target's config.json (its language-model part) whose value is wrong.
    `loaded=False`: a config read for its sizes alone (`--target-config`), where a field transformers
    needs to build the target (model_type) may be missing."""
    if not cfg:
        return []
    values = text_config(cfg) | ({"model_type": cfg["model_type"]} if cfg.get("model_type") else {})
    found = _problems(TARGET_FIELDS, values, {}, cfg)
    return found if loaded else [p for p in found if not p.missing]


def _without_nulls(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def typed(cfg: dict) -> dict:
    """A copy of a config with null fields taken out (null is absent), in the nested configs too."""
    out = _without_nulls(cfg)
    for k in ("transformer_layer_config", "eagle_config"):
        if isinstance(out.get(k), dict):
            out[k] = _without_nulls(out[k])
    return out


def without_problems(cfg: dict, problems) -> dict:
    """`typed(cfg)` with every field named in `problems` taken out, wherever it sits (top level,
    `transformer_layer_config`, `eagle_config`, a target's `text_config`): what the doctor's other
    checks read once `config-invalid` has named those fields, so none of them trips on a wrong type."""
    out = typed(cfg)
    for p in problems:
        if p.missing:
            continue
        if p.field.startswith("eagle_config."):
            if isinstance(out.get("eagle_config"), dict):
                out["eagle_config"] = {k: v for k, v in out["eagle_config"].items() if k != p.field.split(".", 1)[1]}
            continue
        out.pop(p.field, None)
        for k in ("transformer_layer_config", *_TEXT_KEYS):
            if isinstance(out.get(k), dict) and p.field in out[k]:
                out[k] = {n: v for n, v in out[k].items() if n != p.field}
    return out


def check_draft_config(cfg: dict, where, *, sizes: bool = True) -> dict:
    """The draft's config as the loaders read it: the first wrong field as one `BadInputError` naming
    `where` (the config file) and the field, else the config without its nulls. `sizes=False`: the
    sizes a draft forward needs may be missing (a config read for what it says, not to build a draft)."""
    for p in draft_problems(cfg, sizes=sizes):
        raise BadInputError(where, p.line)
    return typed(cfg)


def check_target_config(cfg: dict, where) -> dict:
    """The target's config as the loaders read it: the first wrong field as one `BadInputError` naming
    `where` and the field, else the config as given."""
    for p in target_problems(cfg):
        raise BadInputError(where, p.line)
    return cfg
