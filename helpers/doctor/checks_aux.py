"""The doctor's aux-layer check: which target layers each engine release captures for the draft's fc
(`check_aux`), from the ids the config states (or the engine's default when it states none), against
the target's layer count when a target config is given; where the captured layers stand against the
default capture (inputs of layers 2, L//2, L-3). The config-level checks of the ids (fc sized apart
from the capture, ids where a release does not look) are `helpers.doctor.checks_target.check_aux_config`.
"""
from __future__ import annotations

from helpers.engines.registry import arriving_layers, aux_convention, aux_layer_ids, aux_max_index, captured_layers
from helpers.doctor.findings import CheckContext
from helpers.doctor.registry import NO_EFFECT
from helpers.model.fit import text_config


def _ids_invalid(c: CheckContext) -> bool:
    """The config names aux ids, but not as a list of layer ids (config-invalid says so)."""
    return bool(c.invalid & {"eagle_config", "eagle_aux_hidden_state_layer_ids",
                             "eagle_config.eagle_aux_hidden_state_layer_ids"})


def check_aux(c: CheckContext, target_cfg: dict | None) -> None:
    """aux-layers: which target layers each engine release captures, checked against the target's depth."""
    ats = [at for at in c.engine_list if at.value("aux.shift") is not None]
    unread = [at for at in c.engine_list if at.value("aux.shift") is None]
    if not ats:  # no engine checked whose capture the kit has read: say so, not an empty list
        c.add("aux-layers", "info",
              f"aux layers not checked: the kit has not read {' or '.join(at.label for at in unread)}'s aux-layer "
              "capture (which target layers it feeds the draft)",
              "check the engine's own EAGLE-3 capture code against the draft's "
              "eagle_config.eagle_aux_hidden_state_layer_ids", effect=NO_EFFECT)
        return
    ids = aux_layer_ids(c.ck.config, ats)
    if target_cfg is None:
        named = {e: v for e, v in ids.items() if v is not None}
        if named:
            parts = [f"{at.label} reads {ids[at.key]}" if ids[at.key] is not None else f"{at.label} finds none "
                     "(uses its default)" for at in ats]
            where = ("the GGUF's eagle3.target_layers" if getattr(c.ck, "format", "hf") == "gguf"
                     else "config.json")
            c.add("aux-layers", "info", f"aux layer ids in {where}: " + "; ".join(parts)
                  + "; " + "; ".join(f"{at.name} captures the input of layer id{'+' + str(at.value('aux.shift')) if at.value('aux.shift') else ''}"
                                     for at in ats),
                  "pass --target-config TARGET/config.json to check them against the target")
        return
    t = text_config(target_cfg)
    n_layers = t.get("num_hidden_layers")
    if not isinstance(n_layers, int) or isinstance(n_layers, bool) or n_layers < 1:
        c.add("aux-layers", "warning", "the target config has no usable num_hidden_layers", "pass the target's config.json")
        return
    captured = {}
    ttype = t.get("model_type")
    for at in ats:
        e = at.key
        got = captured_layers(at, ids[e], n_layers, ttype)
        captured[e] = got
        name = at.label
        src = f"ids {ids[e]}" if ids[e] is not None else "no usable ids (config-invalid), the default" \
            if _ids_invalid(c) else "no ids (default)"
        if ids[e] is None and at.value("aux.from") == () and _any_ids(c.ck.config):
            src = f"no ids (this release reads none from the config: {at.change('aux.from') or 'never'})"
        top = aux_max_index(at, n_layers, ttype)  # L - 1, or L where the engine serves the last layer's output
        bad = [i for i in got if i < 0 or i > top]
        arrive = arriving_layers(at, ids[e], n_layers, ttype)  # distinct, in range, in layer order
        twice = sorted({i for i in got if got.count(i) > 1 and 0 <= i <= top})
        if ids[e] is not None and len(ids[e]) != 3 and c.shape("fc.weight") is None:  # else check_aux_config's
            c.add("aux-layers", "error", f"{name}: {len(ids[e])} aux layer ids {ids[e]}, but fc takes 3 hidden states",
                  "name exactly three aux layers", effect="aux.fc-width", engine=e)
        if bad or twice:
            default = ids[e] is None
            served = f"0..{top}" + (f", {top} its last layer's output" if top == n_layers else "")
            why = "; ".join(([f"{bad} {'is' if len(bad) == 1 else 'are'} outside the target's {n_layers} "
                              f"layer{'s' if n_layers != 1 else ''} ({served})"] if bad else [])
                            + ([f"{twice} {'is' if len(twice) == 1 else 'are'} named twice and captured once"]
                               if twice else []))
            c.add("aux-layers", "error",
                  f"{name}: {src} capture the input of target layers {got}"
                  + (f" (the default 2, L//2, L-3 for L = {n_layers})" if default else "")
                  + f"; {why}, so {len(arrive)} hidden state{'s' if len(arrive) != 1 else ''} "
                  f"arrive{'s' if len(arrive) == 1 else ''} (layers {arrive}) where fc expects 3",
                  ("write three distinct ids the target has into the draft's config (the ids the draft was "
                   "trained on)") if default else
                  f"use three distinct ids the target has ({_shift_words(at, ttype)})",
                  effect=_capture_count_effect(c, at), engine=e)
        elif ids[e] is None and not _any_ids(c.ck.config) and at.value("aux.from") and not _ids_invalid(c):
            c.add("aux-layers", "warning",
                  f"{name}: the config names no aux layer ids, so the engine falls back to the target's default "
                  f"capture: it captures the input of target layers {got} of {n_layers}, with no error (vLLM logs the layers only "
                  "at INFO). Served as trained only if the draft was trained on exactly these; a draft trained on "
                  "other layers serves at an accept length of about 1 (nvidia/Llama-3.3-70B-Instruct-Eagle3, 80 "
                  "layers: 1.036 this way against 2.77 with its ids stated; vLLM PR #50170)",
                  "write the ids the draft was trained on into config.json "
                  "(eagle_config.eagle_aux_hidden_state_layer_ids, and the top-level key for vLLM)",
                  effect="aux.unstated", engine=e)
        else:
            place = _aux_place(got, n_layers)
            c.add("aux-layers", "info",
                  f"{name}: {src} -> captures the input of target layers {got} (outputs of layers "
                  f"{[i - 1 for i in got]}) of {n_layers}" + _PLACE_WORDS[place]
                  + (f"; they reach fc in layer order {arrive}" if arrive != list(got) else ""),
                  "nothing to do if the draft was trained on these", effect=f"aux.{place}", engine=e)
    for i, a in enumerate(ats):  # each pair of engines checked together (`--engine all`)
        for b in ats[i + 1:]:
            if captured[a.key] != captured[b.key]:
                c.add("aux-layers", "warning",
                      f"{a.name} and {b.name} capture different target layers ({captured[a.key]} vs "
                      f"{captured[b.key]}): " + _why_apart(a, b, ids, ttype),
                      "serve with the engine whose capture matches the training data, or adjust the ids for the other",
                      effect=NO_EFFECT)


_ID_PLACES = {"nested": "eagle_config.eagle_aux_hidden_state_layer_ids",
              "top": "the top-level eagle_aux_hidden_state_layer_ids",
              "top-alone": "the top-level eagle_aux_hidden_state_layer_ids (without an eagle_config)"}


def _shift_words(at, ttype) -> str:
    shift = aux_convention(at, ttype)
    if shift == "1-if-first-is-1":
        return f"{at.name} adds 1 to each configured id when the first is 1"
    return f"{at.name} adds {shift} to each configured id" if shift else f"{at.name} uses them as given"


def _why_apart(a, b, ids: dict, ttype) -> str:
    """Why two engines' captures differ, from the table: one finds no ids where it reads them, or
    their id conventions differ."""
    for none, some in ((a, b), (b, a)):
        if ids[none.key] is None and ids[some.key] is not None:
            where = " or ".join(_ID_PLACES[p] for p in some.value("aux.from", ()))
            return f"only {where} is set, which {none.name} does not read (it uses its default)"
    return f"{_shift_words(a, ttype)}, {_shift_words(b, ttype)}"


_PLACE_WORDS = {
    "default-layers": ": the default capture (inputs of layers 2, L//2, L-3), which SpecForge and EAGLE train on",
    "shifted": ": one layer off the default capture (2, L//2, L-3) - the other engine's id convention - so a "
               "draft trained on the default capture is fed other states",
    "places": "",
}


def _aux_place(got: list[int], n_layers: int) -> str:
    """Where captured layers stand against the default capture: `default-layers`, `shifted` by one, or other `places`."""
    default = [2, n_layers // 2, n_layers - 3]
    if list(got) == default:
        return "default-layers"
    if list(got) in ([d - 1 for d in default], [d + 1 for d in default]):
        return "shifted"
    return "places"


def _any_ids(cfg) -> bool:
    return any(v is not None for v in aux_layer_ids(cfg).values())


def _capture_count_effect(c: CheckContext, at) -> str | None:
    """The outcome row of too few captured states: with EAGLE-3.1's per-state norms switched on the first request
    fails in those norms (their own row, where the table has one), else in fc's reshape."""
    normed = bool((c.raw_config or {}).get("fc_norm"))
    if normed and at.outcome("aux.capture-count-normed"):
        return "aux.capture-count-normed"
    return "aux.capture-count" if at.outcome("aux.capture-count") else None
