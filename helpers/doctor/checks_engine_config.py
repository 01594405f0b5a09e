"""The doctor's check of config.json as an engine that builds the draft's config with transformers reads it.

vLLM (rule `config.reader` "transformers") builds the draft's config with transformers' config class for its
`model_type` before anything else: a field of the wrong type, or null where the class types it, is refused
there (transformers 5 validates every field); a size the file leaves out takes the class's default (a Llama
config's hidden_size 4096, num_hidden_layers 32, ...), and the weights then do not fit it; a few fields vLLM's
EAGLE-3 code reads itself (target_hidden_size, draft_vocab_size, eagle_config) fail in its own arithmetic. The
kit's own loaders read null as absent (helpers.model.config_fields); this check says what the engine does.

`config-engine` errors (the engine refuses to start), `layers.random` (num_hidden_layers left out: the default
count of layers is built, all but the stored one at their init) and `aux.no-aux-states` (use_aux_hidden_state
null or false: the draft is fed no aux states, as an EAGLE draft) per release whose rule says so. The config's
class comes from the installed transformers, which reads these fields as the engine's does (measured against
the engine's own in the mutation runs of docs/engine-truth.md).
"""
from __future__ import annotations

from helpers.engines.key_names import parse_key
from helpers.doctor.findings import CheckContext
from helpers.model.param_shapes import expected_shapes

# the sizes the config class supplies when config.json leaves them out, read back from the built config
SIZES = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
         "num_hidden_layers", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
FIX = "write the field as the trained draft's config has it (the type and value its producer wrote)"


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return " ".join(lines[:2]) if lines else type(e).__name__


def _built(raw: dict):
    """(the config class's object, or None; what refuses it, or None)."""
    from transformers import AutoConfig

    kw = {k: v for k, v in raw.items() if k != "model_type"}
    try:
        return AutoConfig.for_model(raw["model_type"], **kw), None
    except Exception as e:  # noqa: BLE001 - whatever the config class raises is the engine's refusal
        if "Unrecognized" in str(e) or "does not recognize" in str(e):
            return None, None  # a model type the installed transformers does not know: say nothing
        return None, _first_line(e)


def _own_fields(raw: dict) -> str | None:
    """What vLLM's EAGLE-3 code fails on in the fields it reads itself."""
    th = raw.get("target_hidden_size", 0)
    if "target_hidden_size" in raw and not (isinstance(th, int) and not isinstance(th, bool) and th > 0):
        return f"target_hidden_size is {th!r}: the fc layer is sized with it (3 x target_hidden_size) and fails"
    dv = raw.get("draft_vocab_size")
    if dv is not None and not (isinstance(dv, int) and not isinstance(dv, bool)):
        return f"draft_vocab_size is {dv!r}: the draft head is sized with it and fails"
    theta = raw.get("rope_theta", 1.0)
    if "rope_theta" in raw and not (isinstance(theta, (int, float)) and not isinstance(theta, bool)):
        return f"rope_theta is {theta!r}: the rotary frequencies are computed from it and fail"
    eagle = raw.get("eagle_config")
    if eagle is not None and not isinstance(eagle, dict):
        return f"eagle_config is {type(eagle).__name__}, not an object: its fields are read with .get and fail"
    ids = (eagle or {}).get("eagle_aux_hidden_state_layer_ids", raw.get("eagle_aux_hidden_state_layer_ids"))
    if ids is not None and not (isinstance(ids, list) and all(isinstance(i, int) for i in ids)):
        return f"the aux layer ids are {ids!r}, not a list of integers: fc is sized from their count and fails"
    return None


def _mla_class(c: CheckContext, raw: dict, ats) -> str | None:
    """An MLA draft the release would build with the wrong class or the wrong q projection."""
    if "kv_lora_rank" not in raw:
        return None
    archs = raw.get("architectures") or []
    llama = {name for at in ats for name in (at.value("arch.llama-eagle3") or ())}
    if any(a in llama for a in archs):  # a name the release maps to its Llama class (an unknown one: by model_type)
        return (f"architectures {archs} names a Llama EAGLE-3 class, which has no MLA attention: the stored MLA "
                "weights (kv_a_proj_with_mqa, ...) have no parameter in it")
    q_lora = [k for k in c.ck.tensors.keys() if k.endswith("self_attn.q_a_proj.weight")]
    if "q_lora_rank" in raw and raw["q_lora_rank"] is None and q_lora:
        return ("q_lora_rank is null, so the layer is built with a plain q_proj, but the weights hold the low-rank "
                "q_a_proj / q_b_proj: they have no parameter")
    return None


def _defaults_misfit(c: CheckContext, raw: dict, built) -> tuple[str | None, bool]:
    """(a size left out whose class default the weights do not fit, whether num_hidden_layers was left out with a
    default above the one stored layer)."""
    eff = dict(c.cfg)
    filled = []
    for name in SIZES:
        if name not in raw and hasattr(built, name) and getattr(built, name) is not None:
            eff[name] = getattr(built, name)
            filled.append(name)
    if not filled:
        return None, False
    want, base = expected_shapes(eff), expected_shapes(c.cfg)
    for k in c.ck.tensors.keys():
        name = parse_key(k).canonical
        got = tuple(c.ck.tensors.shape(k))
        if name in want and got != want[name] and want[name] != base.get(name):  # a shape the defaults changed
            return (f"config.json has no {', '.join(filled)}: the config class's default "
                    f"({', '.join(f'{n} {eff[n]}' for n in filled)}) sizes {k} as {list(want[name])}, the weights "
                    f"hold {list(got)}"), False
    layers = "num_hidden_layers" in filled and isinstance(eff["num_hidden_layers"], int) and eff["num_hidden_layers"] > 1
    return None, layers


def _converter_refusal(raw: dict, needs: dict) -> str | None:
    """What an engine that converts the draft first (rule `config.converter`) refuses in config.json."""
    for name in needs.get("absent", ()):
        if name not in raw:
            return f"config.json has no {name}, which the converter writes into the converted file"
    for name in needs.get("null", ()):
        if name in raw and raw[name] is None:
            return f"{name} is null, where the converter needs a value"
    for name in needs.get("typed", ()):
        v = raw.get(name)
        if v is None:
            continue
        ok = {"architectures": lambda x: isinstance(x, list) and all(isinstance(a, str) for a in x),
              "rope_scaling": lambda x: isinstance(x, dict),
              "rms_norm_eps": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool),
              "rope_theta": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)}.get(
            name, lambda x: isinstance(x, int) and not isinstance(x, bool))
        if not ok(v):
            return f"{name} is {v!r}, of a type the converter cannot write"
    return None


def check_engine_config(c: CheckContext) -> None:
    raw = c.raw_config
    if not isinstance(raw, dict) or "speculators_model_type" in raw:  # speculators' nested config: its own reader
        return
    for at in c.engine_list:
        if at.value("config.reader") == "converter" and (why := _converter_refusal(raw, at.value("config.converter"))):
            c.add("config-engine", "error", f"{at.label}: {why}: it refuses to convert or to load the draft", FIX,
                  engine=at.key)
    ats = [at for at in c.engine_list if at.value("config.reader") == "transformers"]
    if not ats:
        return
    why, layers, no_aux = None, False, False
    if not isinstance(raw.get("model_type"), str):
        why = f"model_type is {raw.get('model_type')!r}" if "model_type" in raw else "config.json has no model_type"
        why += ": the config class cannot be chosen"
    elif not (isinstance(raw.get("architectures"), list) and all(isinstance(a, str) for a in raw["architectures"])):
        why = (f"architectures is {raw.get('architectures')!r}" if "architectures" in raw else
               "config.json has no architectures") + ": no EAGLE-3 draft class is named"
    else:
        built, why = _built(raw)
        why = why and f"transformers refuses the config: {why}"
        why = why or _own_fields(raw)
        if why is None and built is not None:
            why, layers = _defaults_misfit(c, raw, built)
        why = why or _mla_class(c, raw, ats)
        eagle = raw.get("eagle_config")
        no_aux = isinstance(eagle, dict) and "use_aux_hidden_state" in eagle and not eagle["use_aux_hidden_state"]
    for at in ats:
        if why:
            c.add("config-engine", "error", f"{at.label}: {why}: it refuses to start", FIX, engine=at.key)
        elif layers:
            c.add("config-engine", "error", f"{at.label}: config.json has no num_hidden_layers: the config class's "
                  "default builds more layers than the one stored, and the others keep their random init",
                  "write num_hidden_layers: 1 (the layers the weights hold) in config.json", effect="layers.random",
                  engine=at.key)
        if no_aux:
            c.add("config-engine", "error", f"{at.label}: eagle_config.use_aux_hidden_state is "
                  f"{raw['eagle_config']['use_aux_hidden_state']!r}: the draft is fed no aux hidden states (read as "
                  "an EAGLE draft), below what it was trained for", "write use_aux_hidden_state: true (or leave it "
                  "out) for an EAGLE-3 draft", engine=at.key,
                  # with EAGLE-3.1's per-state norms the one state meets three norms' shapes: the first request fails
                  effect="aux.no-aux-states-normed" if raw.get("fc_norm") else "aux.no-aux-states")
