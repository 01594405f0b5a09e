"""The doctor's capture check: aux-layer ids the config names where an engine release does not look.

An engine reads the draft's aux-layer ids from the places its `aux.from` rule names, and from none at
all where the release captures a fixed set (an empty `aux.from`: a converter that always wrote the
target layers 2, L//2, L-3). When the config names ids only where the engine does not look, the
engine captures its default layers instead of the ones named, starts, and logs nothing about it: the
draft is fed hidden states it was not trained on (TokenSpeed PR #526: accept length 1.00 before it
read the ids, 2.39 after; llama.cpp PR #27040: a nested-only list converted to the default). With
the target's config the two captures are compared, so a default that happens to equal the named ids
is only a note. The check runs for the engines whose table says so (rule `aux.unread`:
"default-capture"); SGLang's and vLLM's ids are judged by `check_aux` and `check_aux_config`.
"""
from __future__ import annotations

from helpers.engines.registry import EngineAt, aux_ids, captured_layers
from helpers.doctor.findings import CheckContext
from helpers.doctor.registry import NO_EFFECT
from helpers.model.fit import text_config

_PLACES = {"nested": "eagle_config.eagle_aux_hidden_state_layer_ids",
           "top": "the top-level eagle_aux_hidden_state_layer_ids",
           "top-alone": "the top-level eagle_aux_hidden_state_layer_ids (only in a config without eagle_config)"}


def named_ids(cfg: dict | None) -> tuple[list[int] | None, str | None]:
    """The aux-layer ids the config names (eagle_config's first, then the top level) and where."""
    cfg = cfg or {}
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    for place, ids in (("nested", eagle.get("eagle_aux_hidden_state_layer_ids")),
                       ("top", cfg.get("eagle_aux_hidden_state_layer_ids"))):
        if isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids):
            return [int(i) for i in ids], _PLACES[place]
    return None, None


def meant_layers(named: list[int]) -> dict[str, list[int]]:
    """The target layers (capture index: the input of layer i) the named ids may mean: read as given
    (vLLM's and speculators' convention) or plus one (SGLang's). The files do not say which: SpecForge
    writes SGLang's into eagle_config, yet a config made for vLLM's older runner, which read that list
    as given, holds vLLM's there too (the bundled engine pair does)."""
    return {"as given (vLLM's convention)": list(named), "plus one (SGLang's convention)": [i + 1 for i in named]}


def check_capture(c: CheckContext, target_cfg: dict | None) -> None:
    """aux-ids-unread: per engine release, ids in config.json that this release does not read."""
    named, where = named_ids(c.ck.config)
    if named is None:
        return
    n = text_config(target_cfg).get("num_hidden_layers") if target_cfg is not None else None
    for at in c.engine_list:
        if (at.value("aux.unread") != "default-capture" or at.value("aux.shift") is None
                or aux_ids(at, c.ck.config) is not None):
            continue  # the table does not say what it does without them, or it reads these ids
        _unread(c, at, named, where, n if isinstance(n, int) and n >= 4 else None)


def _unread(c: CheckContext, at: EngineAt, named: list[int], where: str, n: int | None) -> None:
    places = at.value("aux.from", ())
    later = _first_reading(at)
    how = ("reads no aux-layer ids from the config and always captures its default (the inputs of target layers "
           "2, L//2, L-3)" if not places else
           "reads aux-layer ids only from " + " or ".join(_PLACES.get(p, p) for p in places)
           + ", and captures its default (the inputs of target layers 2, L//2, L-3) without them")
    head = f"{at.label}: config.json names aux layer ids {named} in {where}, but this release {how}"
    tail = f" [{later}]" if later else ""
    fix = (f"write the ids into {_PLACES.get(places[0], places[0])} too" if places else
           "serve with a release that reads the ids from the config" + (f" ({later})" if later else ""))
    if n is None:
        c.add("aux-ids-unread", "warning",
              f"{head}; whether the two coincide needs the target's layer count{tail}",
              fix + "; pass --target-config TARGET/config.json to compare the layers",
              effect="aux.unread", engine=at.key)
        return
    got, meant = captured_layers(at, None, n), meant_layers(named)
    same = [how for how, layers in meant.items() if layers == got]
    if same:
        c.add("aux-ids-unread", "info",
              f"{head}; on this {n}-layer target the default is the layers the ids name read {same[0]} ({got}), "
              f"so a draft trained in that convention gets the states it was trained on{tail}",
              "nothing to do for this target; " + fix, effect=NO_EFFECT, engine=at.key)
        return
    c.add("aux-ids-unread", "error",
          f"{head}: it captures the inputs of target layers {got} of {n}, while the ids name "
          + " or ".join(f"{layers} read {how}" for how, layers in meant.items())
          + "; the draft is fed hidden states it was not trained on, and nothing in the engine's log says so "
          f"(TokenSpeed served such a draft at accept length 1.00, PR #526){tail}",
          fix, effect="aux.unread", engine=at.key)


def _first_reading(at: EngineAt) -> str:
    """'from <engine> <release> (<PR>) it reads ...': the first later release that reads the ids elsewhere."""
    spans = at.engine.rules.get("aux.from") or ()
    here = at.span("aux.from")
    for sp in spans[spans.index(here) + 1:] if here in spans else ():
        if sp.value and set(sp.value) != set(here.value):
            where = " or ".join(_PLACES.get(p, p) for p in sp.value)
            return f"from {at.name} {at.engine.tag}{sp.since}" + (f" ({sp.pr})" if sp.pr else "") + f" it reads {where}"
    return ""
