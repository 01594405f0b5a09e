"""The serving accept length as one figure for the evidence ladder: mean, standard error, drafting.

`serving_figure(logs, settings, metrics=...)` reads the logs (every parsed row of every log, each row
one logging interval, weighted alike: the mean notebook 04 reports) or, without logs, the metrics
source, and returns a `helpers.speculate.ladder.Figure` whose drafting shape is the one the logs'
start-up line states (what the server ran), else the settings' (`helpers.ui.settings.RunSettings`). The
standard error of a log's mean is the spread of its interval means over sqrt(rows); a metrics
source states none (None). A log or metrics source whose server forced its acceptance
(`helpers.serving.startup.Setup.forced`) gives no figure: it is left out.
"""
from __future__ import annotations

from helpers.speculate.ladder import Figure, mean_stderr


def stated_shape(logs) -> tuple | None:
    """(steps, topk, draft tokens) the first log stating its drafting at start-up ran with (a log restarted
    with other drafting: its last start's), or None: a log's figure was measured with what its server ran,
    whatever flags the caller was given."""
    from helpers.serving.logs import read_log
    from helpers.serving.startup import read_drafting

    for p in logs:
        _, run = read_log(p).serving_rows()
        d = run["drafting"] if run is not None else read_drafting(p)
        if d.get("steps") is not None:
            return _run_shape({"drafting": d})
    return None


def _run_shape(run: dict) -> tuple | None:
    """(steps, topk, draft tokens) of one server start's run (`LogTable.runs`), or None when it states none."""
    from helpers.acceptance.drafting import Drafting

    d = run.get("drafting") or {}
    if d.get("steps") is None:
        return None
    try:
        topk = d.get("topk") or 1  # a chain: SGLang sets its draft tokens to steps + 1
        k = Drafting.from_flags(d["steps"], topk, None if topk == 1 else d.get("draft_tokens"), lone="sglang")
    except ValueError:
        return None
    return (k.steps, k.topk, k.num_draft_tokens)


def serving_figure(logs=(), settings=None, *, metrics=None, acceptance=None, temperature=None) -> Figure | None:
    """The serving accept length (see the module docstring), or None when no source is given.

    `acceptance`: a metrics source already read and normalised (`helpers.acceptance.sources`), so a
    URL is not scraped twice; used when there are no logs, as `metrics` is. The figure's temperature:
    what the logs' request lines state (`helpers.serving.temperature`), else `temperature` (the one the
    user states), else None (unknown)."""
    shape = None
    if settings is not None:
        shape = (int(settings.steps), int(settings.topk or 1), int(settings.num_draft_tokens))
    logs = list(logs or [])
    if logs:
        from helpers.serving.logs import read_log

        tables = [read_log(p) for p in logs]
        values, lasts = [], []
        for tb in tables:
            if tb.forced:
                continue
            rows, run = tb.serving_rows()  # a log restarted with other drafting: its last run only
            values += [r["accept_length"] for r in rows if r.get("accept_length") is not None]
            if run is not None:
                lasts.append(run)
        mean, se = mean_stderr(values)
        if mean is not None:
            t, _ = serving_temperature(tables, temperature)
            source = f"serving logs, mean of {len(values):,} logged intervals"
            if lasts:
                source += (f" (the last server start's run, from line {lasts[-1]['start_line']}: the earlier starts ran "
                           "other drafting)")
            return Figure(mean, se, source, _run_shape(lasts[-1]) if lasts else (stated_shape(logs) or shape),
                          temperature=t, rule=_rule(t, tables))
    acc = acceptance
    if acc is None and metrics and settings is not None:
        from helpers.acceptance.sources import normalise_for
        from helpers.serving.metrics import read_metrics

        table = read_metrics(metrics)
        acc = None if table.forced else normalise_for(table, settings)
    if acc is not None and acc.accept_length is not None:
        return Figure(float(acc.accept_length), None, f"serving metrics ({acc.kind})", shape,
                      temperature=temperature, rule=_rule(temperature, [], acc.kind))
    return None


def serving_temperature(tables, temperature=None) -> tuple[float | None, str]:
    """(the temperature, where it came from): the logs' request lines when they state one value, else
    `temperature` as given, else (None, why it is unknown)."""
    stated = [t.temperature for t in tables if getattr(t, "temperature", None) is not None and t.temperature.values]
    vals = sorted({v for st in stated for v in st.values})
    if len(vals) == 1:
        return vals[0], stated[0].text()
    if len(vals) > 1:
        return None, "the logs state mixed temperatures " + ", ".join(f"{v:g}" for v in vals)
    if temperature is not None:
        return float(temperature), f"T = {float(temperature):g} (stated by the user: --temperature)"
    return None, "not stated by the logs or metrics (pass --temperature T, or log requests: vLLM --enable-log-requests)"


def _rule(t, tables, kind: str | None = None) -> str | None:
    from helpers.engines.defects import engine_of_kind
    from helpers.serving.temperature import rule_name

    engines = {e for tb in tables for e in tb.engines}
    engine = engines.pop() if len(engines) == 1 else engine_of_kind(kind)
    return rule_name(t, engine)


def serving_sampling(logs=(), *, acceptance=None, table=None, temperature=None, known_accepts=None,
                     known_source: str = "") -> dict:
    """What the serving source says about sampling, for the notebooks and the summary: {temperature,
    temperature_source, acceptance_rule, engine_defect (`helpers.engines.defects`, or None)}."""
    from helpers.engines.defects import defect_from_acceptance, defect_from_rows

    logs = list(logs or [])
    match, rule = None, None
    if logs:
        from helpers.serving.logs import read_log

        tables = [read_log(p) for p in logs]
        t, source = serving_temperature(tables, temperature)
        rows = [r for tb in tables if not tb.forced for r in tb.rows]
        release = next((tb.release for tb in tables if tb.release), None)
        match = defect_from_rows(rows, temperature=t, release=release, known_accepts=known_accepts,
                                 known_source=known_source)
        rule = _rule(t, tables)
    else:
        t, source = serving_temperature([], temperature)
        if acceptance is not None:
            match = defect_from_acceptance(acceptance, table, temperature=t, known_accepts=known_accepts,
                                           known_source=known_source)
            rule = _rule(t, [], acceptance.kind)
    return {"temperature": t, "temperature_source": source, "acceptance_rule": rule,
            "engine_defect": None if match is None else match.to_dict()}
