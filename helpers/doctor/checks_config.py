"""The doctor's config check: every config.json field the loaders would refuse, as a finding.

The fields the kit reads are declared once, with their types and ranges, in
`helpers.model.config_fields`; `evaluate`, `speculate` and `capture` refuse the first wrong one
(one line naming the field), and this check reports each of them as a `config-invalid` error
naming the field and what it should be, in the draft's config.json and, with `--target` /
`--target-config`, the target's. The doctor therefore never passes a config the loaders then
refuse. Null is absent (`"eagle_config": null`, as real exports carry it, is no finding).
"""
from __future__ import annotations

from pathlib import Path

from helpers.doctor.findings import CheckContext, has_error
from helpers.doctor.registry import NO_EFFECT
from helpers.model.config_fields import Problem
from helpers.model.draft import ShapeMismatch, loading_refusal

CODE = "config-invalid"


def _fix(p: Problem, whose: str) -> str:
    if isinstance(p.value, float) and p.value.is_integer() and "integer" in p.expected:
        return f"write {p.field} as the integer {int(p.value)} in {whose} config.json"
    if p.missing:
        return f"add {p.field} ({p.expected}) to {whose} config.json"
    if p.field == "num_key_value_heads" and "divisor" in p.expected:
        return f"set num_key_value_heads in {whose} config.json to the value the weights were trained with"
    return (f"set {p.field} in {whose} config.json to {p.expected} ({p.meaning}), or remove it (or write null) "
            "where the default applies")


def check_loadable(c: CheckContext) -> None:
    """Last, when no other error has said why the draft cannot be used: what `load_draft` (as `evaluate`
    and `speculate` build the draft) refuses in a draft whose fields are each well typed, judged from
    config.json and tensor headers. A tensor whose shape the config contradicts is `config-invalid` (an
    engine sizes its parameters from the same fields); a valid option the kit's forward does not model
    (a RoPE type, an activation, a tensor it does not take) is `kit-unmodelled`, a note: the engines may
    serve it, `evaluate` and `speculate` cannot run it."""
    if has_error(c.findings) or c.ck.config is None or c.key("fc.weight") is None:
        return
    e = loading_refusal(c.ck)
    if isinstance(e, ShapeMismatch):
        c.add(CODE, "error", f"{Path(e.path).name}: {e.problem}: the config and the weights disagree, so evaluate, "
              "speculate and an engine's loader refuse them", "correct config.json (the fields named) to match the "
              "weights the draft was trained with, or re-export the checkpoint", effect="config-invalid.kit")
    elif e is not None:
        c.add("kit-unmodelled", "info", f"{Path(e.path).name if e.path else 'config.json'}: {e.problem}: evaluate and "
              "speculate refuse this draft (the kit's forward does not model it); the engines' verdicts above stand",
              "measure it served (d2t-lab probe, logs or metrics) instead", effect=NO_EFFECT)


def check_config(c: CheckContext, draft: list[Problem], target: list[Problem],
                 target_refusal: str | None = None) -> None:
    """config-invalid: each draft (`draft_problems`) and target (`target_problems`) config field whose
    value the loaders refuse, one error per field naming it and what it should be; `target_refusal`:
    what transformers refuses in the target's (`helpers.model.target.transformers_refusal`)."""
    for p in draft:
        # what each engine makes of the field is its own finding where the table models its reader (config-engine)
        c.add(CODE, "error", f"config.json: {p.line} ({p.meaning}): evaluate and speculate refuse it, "
              "and an engine's loader may fail on it", _fix(p, "the draft's"), effect="config-invalid.kit")
    for p in target:
        c.add(CODE, "error", f"the target's config.json: {p.line} ({p.meaning}): speculate and capture refuse "
              "to load the target with it", _fix(p, "the target's"))
    if target_refusal:
        c.add(CODE, "error", f"the target's config.json: {target_refusal}: speculate and capture refuse to load the "
              "target with it", "correct the field it names in the target's config.json (or use a transformers "
              "release that knows this model)")
