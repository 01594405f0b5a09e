"""The doctor's method checks (vLLM): drafts of a drafting method the release does not serve, options it
no longer has, the method a draft is served with, and a target quantized with packed weights.

Read in vLLM's code, not run (the rules and outcomes are in `helpers.engines.table`, looked up at the
release asked about; docs/doctor-findings.md names the files):

Each check asks the release's rule and words its finding by the rule's value; which releases do what
is the table's (and the generated rule table's), never this module's:

- `peagle-draft` (rule `peagle`): a P-EAGLE (parallel-drafting EAGLE-3) draft: a speculators config with
  `speculators_model_type: "peagle"` (its algos.update_peagle), or an architecture only P-EAGLE uses
  (`PEagleDraftModel`, SpecForge's; `Peagle{Llama,Qwen3}ForCausalLM`, the names vLLM gave speculators'
  P-EAGLE drafts); read as the EAGLE-3 model, or refused at start-up.
- `mask-hidden` (rule `mask_hidden`): P-EAGLE's `mask_hidden` weight, loaded only under
  `parallel_drafting` or skipped with a warning.
- `speculative-option` (rules `parallel_drafting`, `use_heterogeneous_vocab`, `custom_class`): those keys
  in the draft's config.json. vLLM reads them only from `--speculative-config`, never from the draft; a
  release that refuses them there for an EAGLE-3 draft is named.
- `method-mismatch` (rule `method.checkpoint`): `--algorithm` against a draft class that declares its own
  speculator (DFlash, DSpark, XPress, LiLiCorr, Gemma-4 MTP). EAGLE / EAGLE-3 classes declare none; an
  EAGLE-3 draft served as EAGLE is `eagle3-as-eagle` (helpers.doctor.checks_target).
- `packed-target` (rule `share.packed`): with the target's config, an `lm_head` / `embed_tokens` stored
  packed (GPTQ or AWQ with `lm_head: true`, a compressed-tensors pack-quantized group naming it). A draft
  without its own copy is given the target's layer; beside a draft's own copy, model runner V2 either
  compares the target's `weight` and fails, or keeps the draft's copy.
"""
from __future__ import annotations

import re

from helpers.engines.registry import EngineAt
from helpers.doctor.findings import CheckContext
from helpers.doctor.registry import NO_EFFECT
from helpers.model.fit import text_config

PEAGLE_ARCHS = ("PEagleDraftModel", "PeagleLlamaForCausalLM", "PeagleQwen3ForCausalLM")
PEAGLE_SAYS = "P-EAGLE (parallel drafting EAGLE-3) is not supported."  # vLLM's error where `peagle` refuses, verbatim
OPTIONS = ("parallel_drafting", "use_heterogeneous_vocab", "custom_class")  # speculative_config fields, not draft ones
# Draft architectures whose vLLM class declares its speculator (rule `method.checkpoint`: declared-only),
# with that speculator's method
# (model_executor/models/registry.py and each class's `speculator_config_class`).
DECLARED = {
    "DFlashDraftModel": "dflash", "MuseGlimmerAssistantModel": "dflash", "DFlashMuseGlimmerAssistantModel": "dflash",
    "DFlash2DraftModel": "dflash", "DFlash2BeamDraftModel": "dflash", "DFlashLagunaForCausalLM": "dflash",
    "Qwen3XPressModel": "dflash", "DFlashQwen3XPressModel": "dflash", "LiLiCorrDraftModel": "dflash",
    "Qwen3DSparkModel": "dspark", "Qwen3OmniDSparkModel": "dspark", "Gemma4MTPModel": "mtp",
}
# What a target layer is called, and its vLLM class, for compressed-tensors' target matching.
# The rules this module's checks read: it checks the engines whose table holds any of them.
METHOD_RULES = ("peagle", "mask_hidden", "parallel_drafting", "use_heterogeneous_vocab", "custom_class",
                "method.checkpoint", "method.rename", "share.packed")
_LAYERS = {"lm_head": ("lm_head", "ParallelLMHead"), "embed_tokens": ("model.embed_tokens", "VocabParallelEmbedding")}


def check_method(c: CheckContext, target_cfg: dict | None = None, algorithm: str | None = None) -> None:
    """All of this module's findings, for each vLLM release asked about."""
    ats = [at for at in c.engine_list if any(at.has(r) for r in METHOD_RULES)]
    if not ats:
        return
    check_peagle(c, ats)
    check_options(c, ats)
    check_declared_method(c, ats, algorithm)
    if target_cfg is not None:
        check_packed_target(c, ats, target_cfg)


def _rel(at: EngineAt, rule: str, value, end: str = "since", minor: bool = False) -> str:
    """The release where `rule` starts (`end="since"`) or last has (`"until"`) `value`, from the table
    ('X.Y.Z'; with `minor`, 'X.Y')."""
    sp = at.where(rule, value)
    got = (getattr(sp, end) if sp else None) or "?"
    return ".".join(got.split(".")[:2]) if minor else got


def _tail(at: EngineAt, rule: str) -> str:
    change = at.change(rule)
    return f" [{change}]" if change else ""


# -- P-EAGLE --------------------------------------------------------------------------------------------
def peagle_form(cfg: dict | None) -> str | None:
    """'speculators' (speculators_model_type "peagle"), 'architecture' (a P-EAGLE-only name), or None."""
    cfg = cfg or {}
    if str(cfg.get("speculators_model_type", "")).lower() == "peagle":
        return "speculators"
    arch = [a for a in cfg.get("architectures") or [] if isinstance(a, str)]
    return "architecture" if any(a in PEAGLE_ARCHS for a in arch) else None


def check_peagle(c: CheckContext, ats: list[EngineAt]) -> None:
    """peagle-draft and mask-hidden, per vLLM release."""
    cfg = c.ck.config or {}
    form = peagle_form(cfg)
    mask = [k for k in c.ck.tensors.keys() if k.split(".")[-1] == "mask_hidden" or k.endswith("mask_hidden.weight")]
    for at in ats:
        if form:
            _peagle(c, at, form, cfg)
        if mask:
            _mask_hidden(c, at, mask, form)


def _peagle(c: CheckContext, at: EngineAt, form: str, cfg: dict) -> None:
    v, tail = at.value("peagle"), _tail(at, "peagle")
    arch = [a for a in cfg.get("architectures") or [] if a in PEAGLE_ARCHS]
    what = ('a P-EAGLE (parallel-drafting EAGLE-3) draft: config.json is a speculators config with '
            'speculators_model_type "peagle"' if form == "speculators" else
            f"a P-EAGLE (parallel-drafting EAGLE-3) draft: config.json names the architecture {arch[0]}")
    if v in (None, "not-read"):
        c.add("peagle-draft", "warning", f"{at.label}: {what}; the kit has not read what this release does with P-EAGLE "
              f"drafts{tail}", f"serve with vLLM {at.engine.newest} rules in mind (--engine vllm) or read this release",
              effect="peagle.not-read", engine=at.key)
        return
    if v == "refuses":
        says = (f"its speculators config reader raises \"{PEAGLE_SAYS}\"" if form == "speculators" else
                f"the architecture {arch[0]} is no longer in its model registry (\"are not supported\")")
        c.add("peagle-draft", "error",
              f"{at.label} refuses to start on {what}: P-EAGLE support was removed in {at.name} "
              f"{_rel(at, 'peagle', 'refuses')} and {says}{tail}",
              f"serve it with {at.name} {_rel(at, 'peagle', 'reads', 'until')} (method eagle3 with parallel_drafting), "
              f"or train / export an EAGLE-3 draft for {at.name} {_rel(at, 'peagle', 'refuses', minor=True)}",
              effect=f"peagle.{form}", engine=at.key)
        return
    if form == "speculators":
        c.add("peagle-draft", "warning",
              f"{at.label}: {what}. This release builds it as its EAGLE-3 model; it drafts in parallel only when vLLM "
              "makes the speculative config from the draft itself (the draft served as --model) or "
              "--speculative-config sets parallel_drafting: true, which also needs mask_hidden and mask_token_id. "
              f"With method eagle3 alone it skips mask_hidden with a warning and drafts one token at a time, which "
              f"the draft may not have been trained for{tail}",
              f"serve it with parallel_drafting: true in --speculative-config; {at.name} "
              f"{_rel(at, 'peagle', 'refuses', minor=True)} does not serve P-EAGLE",
              effect="peagle.speculators", engine=at.key)
    else:
        c.add("peagle-draft", "error",
              f"{at.label}: {what}. Its registry maps the name to the EAGLE-3 Llama model, but served with method "
              f"eagle3 vLLM first renames the architecture to Eagle3{arch[0]}, which it has no class for, and refuses "
              f"to start (\"are not supported\"){tail}",
              "export the draft as a speculators P-EAGLE config (speculators_model_type \"peagle\") for "
              f"{at.name} {_rel(at, 'peagle', 'reads', minor=True)}-{_rel(at, 'peagle', 'reads', 'until', minor=True)}",
              effect="peagle.architecture", engine=at.key)


def _mask_hidden(c: CheckContext, at: EngineAt, keys: list[str], form: str | None) -> None:
    v, tail = at.value("mask_hidden"), _tail(at, "mask_hidden")
    head = f"{at.label}: the weights hold {keys[0]}, P-EAGLE's hidden state for the masked (parallel) positions"
    if v == "warns":
        c.add("mask-hidden", "warning",
              f"{head}; this release skips it with a warning (\"parallel drafting is not supported for EAGLE-3\") and "
              f"drafts one token at a time{tail}",
              f"expect sequential drafting; serve with {at.name} "
              f"{_rel(at, 'mask_hidden', 'loads-if-parallel', 'until')} and parallel_drafting: true to draft in "
              "parallel",
              effect="mask-hidden.skipped", engine=at.key)
    elif v == "loads-if-parallel":
        c.add("mask-hidden", "info",
              f"{head}; this release loads it only when drafting in parallel (parallel_drafting: true, set by vLLM "
              f"itself for a speculators P-EAGLE draft served as --model), and otherwise skips it with a warning"
              f"{tail}", "nothing to do if the draft is served with parallel drafting",
              effect="mask-hidden.skipped", engine=at.key)


# -- speculative_config options in the draft's config ----------------------------------------------------
def check_options(c: CheckContext, ats: list[EngineAt]) -> None:
    """speculative-option: a vLLM serving option written into the draft's config.json."""
    cfg = c.ck.config or {}
    found = {k: cfg[k] for k in OPTIONS if k in cfg}
    spec = cfg.get("speculators_config") if isinstance(cfg.get("speculators_config"), dict) else {}
    found.update({k: spec[k] for k in OPTIONS if k in spec and k not in found})
    for key, value in found.items():
        for at in ats:
            v, tail = at.value(key), _tail(at, key)
            refused = v == "refuses"
            there = {"parallel_drafting": "for every method but dflash / dspark (false is a deprecated no-op)",
                     "use_heterogeneous_vocab": "as a field it no longer has (its configs forbid unknown fields)",
                     "custom_class": "as method \"custom_class\", which it no longer has"}[key]
            now = (f"this release refuses it in --speculative-config {there}" if refused else
                   "this release takes it from --speculative-config only"
                   + (" (method \"custom_class\" with a dotted proposer path as model)" if key == "custom_class" else "")
                   if v == "reads" else "the kit has not read this release's speculative_config for it")
            sev = "warning" if refused and value not in (False, None, "", 0) else "info"
            c.add("speculative-option", sev,
                  f"{at.label}: config.json sets {key} = {value!r}, a vLLM serving option: vLLM builds the draft from "
                  f"config.json and never reads this key there, so it changes nothing by itself; {now}{tail}",
                  f"remove {key} from config.json" + (" and from --speculative-config" if refused else ""),
                  effect="config-key.ignored", engine=at.key)


# -- the method served with ------------------------------------------------------------------------------
def check_declared_method(c: CheckContext, ats: list[EngineAt], algorithm: str | None) -> None:
    """method-mismatch: `--algorithm` against a draft class that declares its own speculator."""
    if not algorithm:
        return
    arch = [a for a in (c.ck.config or {}).get("architectures") or [] if isinstance(a, str)]
    declared = next(((a, DECLARED[a]) for a in arch if a in DECLARED), None)
    if declared is None or declared[1] == algorithm.lower():
        return
    name, method = declared
    for at in ats:
        if at.value("method.checkpoint") == "declared-only":
            says = (f"speculative_config requested method={algorithm.lower()!r}, but the draft model ... is a "
                    f"{method!r} checkpoint")
            why = f"its new check of the method against the checkpoint raises \"{says}\""
        else:
            why = (f"it renames the architecture for method {algorithm.lower()} to one it has no class for, and "
                   "refuses (\"are not supported\")")
        c.add("method-mismatch", "error",
              f"{at.label}: config.json names {name}, a {method} draft, but it is served with method "
              f"{algorithm.lower()}: {why}{_tail(at, 'method.checkpoint')}",
              f"serve it with method \"{method}\"", effect="method.declared", engine=at.key)


# -- a target quantized with packed weights --------------------------------------------------------------
def packed_layers(target_cfg: dict | None) -> dict[str, str]:
    """{'lm_head' / 'embed_tokens': how it is packed} for the target's layers that vLLM loads without
    a `weight` tensor: GPTQ or AWQ with `lm_head: true`, or a compressed-tensors `pack-quantized` group that
    names the layer (by name, `re:` pattern, or its vLLM class) and is not in `ignore`."""
    if not isinstance(target_cfg, dict):
        return {}
    qc = target_cfg.get("quantization_config") or text_config(target_cfg).get("quantization_config")
    if not isinstance(qc, dict):
        return {}
    method = str(qc.get("quant_method", "")).lower()
    if method in ("gptq", "awq"):
        return {"lm_head": f"{method} (lm_head: true)"} if qc.get("lm_head") is True else {}
    if method != "compressed-tensors":
        return {}
    out = {}
    ignore = [i for i in qc.get("ignore") or [] if isinstance(i, str)]
    for group in (qc.get("config_groups") or {}).values():
        if not isinstance(group, dict) or (group.get("format") or qc.get("format")) != "pack-quantized":
            continue
        targets = [t for t in group.get("targets") or [] if isinstance(t, str)]
        for layer, (name, cls) in _LAYERS.items():
            if any(_matches(name, i) for i in ignore):
                continue
            if any(_matches(name, t) or (not t.startswith("re:") and t.lower() in cls.lower()) for t in targets):
                out[layer] = "compressed-tensors (pack-quantized)"
    return out


def _matches(value: str, target: str) -> bool:
    """compressed-tensors' match: equal, or `re:` + a pattern matched at the start."""
    if target.startswith("re:"):
        try:
            return re.match(target[3:], value) is not None
        except re.error:
            return False
    return target == value


def check_packed_target(c: CheckContext, ats: list[EngineAt], target_cfg: dict) -> None:
    """packed-target: what vLLM gives a draft for a target head / embedding stored packed."""
    for layer, how in packed_layers(target_cfg).items():
        own = c.key(f"{layer}.weight") is not None if c.ck.tensors.keys() else None
        for at in ats:
            v, tail = at.value("share.packed"), _tail(at, "share.packed")
            head = f"{at.label}: the target's {layer} is stored packed ({how}), so it has no weight tensor to compare"
            if own is None:
                c.add("packed-target", "info", f"{head}; whether the draft ships its own {layer} needs its weights",
                      "run the doctor on the folder with the weights", effect=NO_EFFECT, engine=at.key)
            elif not own:
                c.add("packed-target", "warning",
                      f"{head}. This draft ships no {layer}, so vLLM gives it the target's packed one (every release "
                      f"read does; the packed-weight guard only decides for a draft with its own copy): the draft's "
                      f"{'logits' if layer == 'lm_head' else 'input embeddings'} come from the quantized layer, not "
                      "the full-precision one it was trained against",
                      f"expect an accept length at or below the one measured against the unquantized target; export "
                      f"the draft's own {layer} to keep it", effect="packed-target.shared", engine=at.key)
            elif v == "fails":
                c.add("packed-target", "error",
                      f"{head}. This draft ships its own {layer}: model runner V2 (this release's default on GPU) "
                      f"compares it with the target's weight and stops with an AttributeError at start-up (the V1 "
                      f"runner keeps the draft's copy){tail}",
                      f"serve with {at.name} {_rel(at, 'share.packed', 'keeps')} or later, or with "
                      "VLLM_USE_V2_MODEL_RUNNER=0",
                      effect="packed-target.own-copy", engine=at.key)
            elif v == "keeps":
                c.add("packed-target", "info",
                      f"{head}. This draft ships its own {layer}, and this release keeps it rather than sharing the "
                      f"target's{tail}", "nothing to do", effect="packed-target.own-copy", engine=at.key)
