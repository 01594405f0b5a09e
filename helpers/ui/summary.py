"""The report's summary: what the notebooks found, quoted, with what was not given said so.

`summary_dict` gathers the numbers each notebook of a report recorded (`numbers.json` beside its
figures) under the fields `summary.json` has always had (`inspect`, `doctor`, `accuracy`,
`replay`, `predicted_accept_length`, `skipped`, `errors`) plus `settings`, `measured`,
`throughput` and `conclusion`. `summary_markdown` renders it. Nothing here runs a model: a number
that no notebook recorded is absent, with the reason.
"""
from __future__ import annotations

import time

from helpers.ui.notebook import SPECULATE
from helpers.ui.settings import RunSettings

NOT_GIVEN = {
    "samples": "not given: pass --samples DIR (SpecForge hidden states) to score the draft and replay it",
    "logs": "not given: pass --log FILE to compare with serving logs",
    "metrics": "not given: pass --metrics FILE|URL to read serving metrics (vLLM /metrics, SGLang /get_server_info, meta_info)",
    "target_head": "not given: pass --target-head DIR to also score against the target's own argmax",
    "target_config": "not given: pass --target-config FILE for the doctor's aux-layer and size checks",
    "embed_from": "not given (needed only when the draft has no embed_tokens): --embed-from DIR",
    "baseline_tps": "not given: pass --baseline-tps to place the accept length on a tokens/s curve",
    "spec_tps": "not given: pass --spec-tps, or a log with generation throughput",
    "target": "not given: pass --target DIR --prompts FILE to run speculative decoding with the target (notebook 07)",
}
SECTION_OF = {  # which notebook computes what
    "verdict": "01_mapping_inspection",
    "accuracy": "03_accuracy_with_and_without_mapping",
    "accept length": "04_accept_length_simulation",
    "doctor": "06_checkpoint_doctor",
}


def _numbers(runs, name: str) -> dict:
    """What notebook `name` recorded; {} when it failed: a notebook that stopped part-way may have
    recorded some numbers before the failing cell, and nothing is concluded from a failed section."""
    return next((r.numbers for r in runs if r.name == name and r.ok), {})


def _failed(runs, name: str) -> str | None:
    run = next((r for r in runs if r.name == name), None)
    if run is None:
        return f"notebook {name} was not run"
    return None if run.ok else f"notebook {name} failed: {run.error}"


def summary_dict(s: RunSettings, runs, env: dict) -> dict:
    """The JSON summary of a report run on settings `s`."""
    from helpers.doctor.inspection import inspect_path

    nb03, nb04, nb06 = (_numbers(runs, SECTION_OF[k]) for k in ("accuracy", "accept length", "doctor"))
    skipped = {k: why for k, why in NOT_GIVEN.items() if not getattr(s, k)}
    errors = {what: why for what, name in SECTION_OF.items() if (why := _failed(runs, name))}
    numbers: dict = {"skipped": skipped, "errors": errors, "inspect": inspect_path(s.checkpoint)}
    if "findings" in nb06:
        numbers["doctor"] = nb06["findings"]
    if "accuracy" in nb03:
        numbers["accuracy"] = {**nb03["accuracy"], "conclusion": nb03.get("conclusion"),
                               "diagnosis": nb03.get("diagnosis")}
    if nb04.get("replay"):
        numbers["replay"] = nb04["replay"]
    if nb04.get("predicted") is not None:
        d = nb04["drafting"]
        numbers["predicted_accept_length"] = {
            "accept_rate": nb04["accept_rate"], "accept_rate_from": nb04["accept_rate_from"],
            "draft_tokens": d["draft_tokens"], "steps": d["steps"], "topk": d["topk"], "drafting": d["label"],
            "expected": nb04["predicted"], "expected_chain": nb04["predicted_chain"],
        }
        pred = nb04.get("prediction") or {}  # the rank table's prediction (helpers.acceptance.prediction)
        numbers["predicted_accept_length"].update({k: pred[k] for k in (
            "expected_one_rate", "rank_table", "source", "sglang", "vllm", "flags", "notes", "assumptions") if k in pred})
    if nb04.get("serving_figure"):
        numbers["serving_figure"] = nb04["serving_figure"]
    if nb04.get("serving_metrics"):
        numbers["serving_metrics"] = nb04["serving_metrics"]
    for key, name in (("measured", "measured"), ("measured_tps", "measured_tps"), ("throughput", "throughput"),
                      ("conclusion", "accept_length_conclusion"), ("status", "accept_length_status")):
        if nb04.get(key) is not None:
            numbers[name] = nb04[key]
    if s.target:
        nb07 = _numbers(runs, SPECULATE)
        if nb07.get("speculate"):
            numbers["speculate"] = {k.removeprefix("speculate_"): v for k, v in nb07.items() if k.startswith("speculate")}
        elif (why := _failed(runs, SPECULATE)):
            errors["speculative decoding"] = why
    if s.logs or s.metrics:
        numbers["serving_sampling"] = serving_sampling_of(s, numbers)
    settings = s.to_dict()
    if nb04.get("drafting"):
        settings["drafting"] = nb04["drafting"]["label"]
    return {
        "checkpoint": s.checkpoint, "samples": s.samples, "engine": s.engine, "settings": settings,
        "numbers": numbers, "environment": env, "conclusion": conclusion(numbers, s.samples),
        "ladder": ladder(numbers, s.samples).to_dict(),
    }


def serving_sampling_of(s: RunSettings, numbers: dict) -> dict:
    """The serving figures' temperature (the logs' request lines, else --temperature when above 0: the
    default 0 states nothing), the engine's acceptance rule at it, and the engine's own sampled-decoding
    defect where the serving numbers show its signature (`helpers.serving.measured.serving_sampling`),
    with the engine-free figure (notebook 07) as what the draft is known to accept. A metrics URL is not
    scraped again: only files are read here."""
    from helpers.serving.measured import serving_sampling

    runs = (numbers.get("speculate") or {}).get("speculate") or {}
    ref = "offset" if "offset" in runs else next(iter(runs), None)
    known = runs[ref].get("mean_accept_length") if ref else None
    stated = s.temperature if s.temperature and s.temperature > 0 else None
    try:
        if s.logs:
            return serving_sampling(s.logs, temperature=stated, known_accepts=known,
                                    known_source="engine-free (notebook 07)")
        if s.metrics and "://" not in str(s.metrics):
            from helpers.acceptance.sources import normalise_for
            from helpers.serving.metrics import read_metrics

            table = read_metrics(s.metrics)
            acc = None if table.forced else normalise_for(table, s)
            return serving_sampling(acceptance=acc, table=table, temperature=stated, known_accepts=known,
                                    known_source="engine-free (notebook 07)")
    except Exception as e:  # noqa: BLE001 - the summary states why, it does not stop
        return {"temperature": stated, "temperature_source": f"not read: {e}", "acceptance_rule": None,
                "engine_defect": None}
    return serving_sampling(temperature=stated)


SOUND_VERDICTS = ("offset", "identity", "ambiguous")  # what the engines can serve as stored
SOUND_DIAGNOSES = (None, "healthy", "coverage", "generalisation")  # `EvalResult.diagnosis()` that are no bug


def broken(numbers: dict) -> list[str]:
    """What is wrong with the checkpoint itself (verdict, doctor errors, accuracy diagnosis); [] if nothing."""
    verdict = (numbers.get("inspect") or {}).get("verdict")
    errs = sorted({f["code"] for f in numbers.get("doctor") or [] if f["severity"] == "error"})
    diagnosis = (numbers.get("accuracy") or {}).get("diagnosis")
    problems = []
    if verdict not in SOUND_VERDICTS:
        problems.append(f"d2t verdict {verdict}")
    if errs:
        problems.append(f"doctor errors {', '.join(errs)}")
    if diagnosis not in SOUND_DIAGNOSES:
        problems.append(f"accuracy diagnosis '{diagnosis}'")
    return problems


def ladder(numbers: dict, samples=None):
    """The evidence ladder (`helpers.speculate.ladder`) over the numbers the notebooks recorded:
    serving (notebook 04's figure, else notebook 07's), engine-free (notebook 07, the engines'
    reading), the prediction (notebook 04), coverage (notebook 03), per-position acceptance
    (notebook 07), whether the samples were regenerated and how long their answers are (their
    capture.json), the same prediction on the loop's own text (notebook 07's capture), and the
    wiring `reproduce` ranked first (notebook 07)."""
    from helpers.speculate.ladder import (
        Figure,
        SamplesCheck,
        evidence_ladder,
        figure_from_run,
        samples_answer_tokens,
        samples_regenerated,
    )

    spec = numbers.get("speculate") or {}
    fig = numbers.get("serving_figure") or spec.get("serving")
    sampling = numbers.get("serving_sampling") or {}
    t = fig.get("temperature") if fig else None
    t = sampling.get("temperature") if t is None else t
    serving = None if not fig else Figure(fig["value"], fig.get("stderr"), fig.get("source", ""),
                                          tuple(fig["shape"]) if fig.get("shape") else None,
                                          temperature=t, rule=fig.get("rule") or sampling.get("acceptance_rule"))
    engine_free, per_position, same_text = None, None, None
    runs = spec.get("speculate") or {}
    if runs:
        ref = "offset" if "offset" in runs else next(iter(runs))
        n = spec.get("prompts")
        engine_free = figure_from_run(runs[ref], f"engine-free, {n} prompts, {ref} reading, notebook 07")
        per_position = runs[ref].get("per_position_conditional")
        c = (spec.get("comparison") or {}).get(ref) or {}
        if c.get("prediction"):  # the rank table measured on notebook 07's capture of the prompts it speculated
            same_text = Figure(c["predicted_from_accuracy"], None, "the rank table of notebook 07's capture of its "
                               "prompts", engine_free.shape, tuple(c["prediction"].get("assumptions") or ()))
    pred = numbers.get("predicted_accept_length")
    predicted = None if not pred else Figure(
        pred["expected"], None, "the rank table measured on the samples, notebook 04",
        (pred["steps"], pred["topk"] or 1, pred["draft_tokens"]), tuple(pred.get("assumptions") or ()))
    acc = numbers.get("accuracy") or {}
    best = (spec.get("reproduce") or {}).get("best")
    curve = [Figure(c["mean_accept_length"], c.get("stderr"), f"engine-free at T = {c['temperature']:g}, notebook 07",
                    engine_free.shape if engine_free else None, temperature=c["temperature"], rule=c.get("acceptance_rule"))
             for c in spec.get("temperature_curve") or [] if c.get("mean_accept_length") is not None]
    return evidence_ladder(serving=serving, engine_free=engine_free, predicted=predicted,
                           engine_free_curve=curve, engine_defect=sampling.get("engine_defect"),
                           regenerated=samples_regenerated(samples), per_position=per_position,
                           coverage=acc.get("coverage"), reproduced=best,
                           samples_check=SamplesCheck(same_text, samples_answer_tokens(samples),
                                                      (spec.get("settings") or {}).get("max_new_tokens")))


def _failures(numbers: dict) -> str:
    """The sections whose notebook failed (or was not run), with why, as one clause ('' when none)."""
    return "; ".join(f"{what}: {why}" for what, why in (numbers.get("errors") or {}).items())


def overall(numbers: dict, samples=None) -> str:
    """One sentence that reconciles the sections: is the checkpoint broken, or the deployment? A
    section whose notebook failed is missing, and nothing is concluded from it: with no problem found
    in the sections that ran, the sentence says the run is incomplete instead of healthy."""
    problems = broken(numbers)
    failed = _failures(numbers)
    if problems:
        return (f"The checkpoint itself is broken ({'; '.join(problems)}): fix it before looking at serving."
                + (f" (Incomplete: {failed}.)" if failed else ""))
    if failed:
        return (f"No conclusion: {failed}. Nothing is concluded from a section whose notebook failed; fix the "
                "cause and run the report again.")
    lad = ladder(numbers, samples)
    if lad.verdict in ("a deployment bug", "no deployment bug", "the samples overstate the draft",
                       "the engine's sampler"):
        return lad.conclusion
    if (numbers.get("accuracy") or {}).get("diagnosis") is None and not numbers.get("speculate"):
        return "No accuracy was measured (no samples given): the verdict and the doctor's findings are all there is."
    tail = f" The draft itself: {lad.rungs[1].text}" if lad.rungs[1].decided else ""
    return "Healthy offline; no serving measurement was given to compare with (pass --log)." + tail


def conclusion(numbers: dict, samples=None) -> list[str]:
    """The bundle's findings in a few lines, each quoting the notebook that computed it."""
    lines = [f"**{overall(numbers, samples)}**"]
    for what, why in (numbers.get("errors") or {}).items():
        lines.append(f"{what[:1].upper() + what[1:]}: not concluded ({why}).")
    ins = numbers.get("inspect") or {}
    if ins:
        lines.append(f"d2t verdict: {ins['verdict'].upper()} (notebook 01).")
    doctor = numbers.get("doctor")
    if doctor is not None:
        errs = sorted({f["code"] for f in doctor if f["severity"] == "error"})
        lines.append(f"Doctor: {'errors ' + ', '.join(errs) if errs else 'no error'} (notebook 06).")
    acc = numbers.get("accuracy")
    if acc and acc.get("conclusion"):
        lines.append(f"Accuracy: {acc['conclusion']} (notebook 03)")
    if numbers.get("accept_length_conclusion"):
        lines.append(f"Accept length from the prediction alone: {numbers['accept_length_conclusion']} (notebook 04; "
                     "the evidence ladder below weighs it against the stronger measurements)")
    spec = numbers.get("speculate")
    if spec:
        lines.append("With the target in the loop: " + "; ".join(
            f"{r} reading accept length {d['mean_accept_length']:.2f}" for r, d in spec["speculate"].items())
            + " (notebook 07).")
    rep = (numbers.get("speculate") or {}).get("reproduce")
    defect = (numbers.get("serving_sampling") or {}).get("engine_defect")
    if rep and defect:
        lines.append(f"Which wiring reproduces the serving number: none is the cause: the serving number is the "
                     f"engine's own sampler defect ({defect['key']}), which no emulated wiring models (notebook 07 "
                     f"ranked: {rep['verdict']}).")
    elif rep:
        lines.append(f"Which wiring reproduces the serving number: {rep['verdict']} (notebook 07).")
    sampling = numbers.get("serving_sampling")
    if sampling:
        lines.append(f"Serving temperature: {sampling['temperature_source']}; acceptance rule "
                     f"{sampling.get('acceptance_rule') or 'unknown'}.")
    return lines


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _inputs_section(s: RunSettings, summary: dict) -> list[str]:
    skipped = summary["numbers"]["skipped"]
    src = s.sources
    rows = [("checkpoint", f"`{s.checkpoint}`"),
            ("engine", f"{s.engine} ({src['engine']})" if src.get("engine") else s.engine)]
    for key, label in (("samples", "samples"), ("target_head", "target head"), ("target_config", "target config"),
                       ("embed_from", "embed_tokens from")):
        rows.append((label, f"`{getattr(s, key)}`" if getattr(s, key) else skipped[key]))
    rows.append(("serving logs", ", ".join(f"`{p}`" for p in s.logs) if s.logs else skipped["logs"]))
    rows.append(("serving metrics", f"`{s.metrics}`" if s.metrics else skipped["metrics"]))
    rows.append(("target in the loop", f"`{s.target}` on prompts `{s.prompts}`" if s.target
                 else skipped.get("target", NOT_GIVEN["target"])))
    drafting = summary["settings"]["drafting"]
    rows.append(("drafting", f"{drafting} - steps {s.steps} ({src.get('steps', 'given')}), top-k {s.topk} "
                 f"({src.get('topk', 'given')}), draft tokens {s.num_draft_tokens} ({src.get('draft_tokens', 'given')})"))
    rows.append(("baseline tok/s", f"{s.baseline_tps} (--baseline-tps)" if s.baseline_tps is not None
                 else skipped["baseline_tps"]))
    measured_tps = summary["numbers"].get("measured_tps")
    rows.append(("speculative tok/s", f"{s.spec_tps} (--spec-tps)" if s.spec_tps is not None else
                 f"{measured_tps:.1f} (mean generation throughput of the logs)" if measured_tps is not None
                 else skipped["spec_tps"]))
    rows.append(("device / dtype", f"{s.device or 'default: the best device present'} / {s.dtype or 'default'}"))
    rows.append(("samples per split", str(s.max_samples) if s.max_samples else "all"))
    return ["## Inputs", "", "| input | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]


def _accuracy_section(acc: dict | None) -> list[str]:
    if not acc:
        return []
    L = ["| split | reading | top-1 | top-k | per step top-1 | tokens |", "|---|---|---|---|---|---|"]
    splits = acc.get("splits") or {"all": acc}
    for split, res in splits.items():
        for reading, r in (res.get("readings") or {}).items():
            steps = ", ".join(_pct(x) for x in r.get("step_top1", []))
            L.append(f"| {split} | {reading} | {_pct(r.get('top1'))} | {_pct(r.get('topk'))} | {steps} | {r.get('tokens', '-')} |")
    return L


def _accept_section(n: dict) -> list[str]:
    L = []
    pred = n.get("predicted_accept_length")
    if pred:
        L.append(f"- per-token acceptance **{pred['accept_rate']:.4f}** ({pred['accept_rate_from']})")
        L.append(f"- predicted accept length, {pred['drafting']}: **{pred['expected']:.2f}**")
        if pred.get("rank_table") is not None:
            old = pred.get("expected_one_rate")
            if pred.get("flags"):
                L.append(f"  - as the engines' flags: {pred['flags']}")
            L.append(f"  - the exact expectation of the rank table measured on the samples ({pred.get('source')})"
                     + ("" if old is None else f"; one rate for every depth would say {old:.2f}"))
            L += [f"  - ! {note}" for note in pred.get("notes") or ()]
            L.append("  - it assumes " + "; ".join(f"{k}: {v}" for k, v in (pred.get("assumptions") or {}).items()))
        if pred["expected_chain"] is not None and pred["steps"] and f"chain, {pred['steps']} tokens" != pred["drafting"]:
            L.append(f"- predicted accept length, chain of {pred['steps']} tokens (what the replay drafts): "
                     f"{pred['expected_chain']:.2f}")
    for reading, r in (n.get("replay") or {}).items():
        per = "; ".join(f"{k} {v['mean']:.2f}" for k, v in (r.get("splits") or {}).items())
        L.append(f"- replayed accept length, {reading} reading, chain of {r['steps']}: {r['mean']:.2f} ± {r['stderr']:.2f} "
                 f"over {r['positions']:,} positions" + (f" ({per})" if per else ""))
    if n.get("measured") is not None:
        L.append(f"- measured accept length (serving logs): **{n['measured']:.2f}**")
    sm = n.get("serving_metrics")
    if sm and sm.get("accept_length") is not None:
        rate = "" if sm.get("per_token_rate") is None else f", per-token rate {sm['per_token_rate']:.3f} under {sm['drafting']}"
        L.append(f"- serving metrics ({sm['kind']}): accept length **{sm['accept_length']:.2f}**{rate}")
        if sm.get("per_position_unconditional"):
            L.append("  - per position (unconditional): " + ", ".join(f"{x:.3f}" for x in sm["per_position_unconditional"]))
        if sm.get("diagnosis"):
            L.append(f"  - online against offline: {sm['diagnosis']}")
        if sm.get("reference_placement"):
            L.append(f"  - published reference values (not your data): {sm['reference_placement']}")
    tp = n.get("throughput")
    if tp:
        L.append(f"- throughput: step cost {tp['step_cost']:.2f} decode steps, break-even accept length "
                 f"{tp['break_even_accept_length']:.2f}, {tp['spec_tps']:.1f} tok/s measured")
    if n.get("accept_length_conclusion"):
        L += ["", f"**Conclusion (notebook 04, serving against the prediction alone):** {n['accept_length_conclusion']}"]
        if n.get("speculate"):
            L.append("(The engine-free measurement of notebook 07 is stronger evidence: see the evidence ladder above.)")
    return L


def _speculate_section(n: dict, s: RunSettings) -> list[str]:
    spec = n.get("speculate")
    if not spec:
        return [f"- {n['skipped']['target']}"] if "target" in n["skipped"] else ["- no numbers recorded (see errors above)"]
    st = spec.get("settings") or {}
    L = [f"target {s.target}, {spec.get('prompts')} prompts from {s.prompts}; {st.get('drafting')} (steps "
         f"{st.get('steps')}, topk {st.get('topk')}), temperature {st.get('temperature')}; same text under every "
         f"reading: {spec.get('same_text')}", "",
         "| reading | accept length | ± stderr | verify steps | target forwards / token | predicted from accuracy "
         "| replay | replay, walked |", "|---|---|---|---|---|---|---|---|"]
    f = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    for r, d in spec["speculate"].items():
        c = (spec.get("comparison") or {}).get(r, {})
        L.append(f"| {r} | **{f(d['mean_accept_length'])}** | {f(d['stderr'])} | {d['verify_steps']} | "
                 f"{f(d['target_forwards_per_token'])} | {f(c.get('predicted_from_accuracy'))} | {f(c.get('replay'))} | "
                 f"{f(c.get('replay_walked'))} |")
    tp = spec.get("throughput")
    if tp:
        L += ["", f"- tokens/s on the report's machine: target alone {tp['baseline_tps']:.1f}, step cost "
              f"{tp['step_cost']:.2f}, break-even accept length {tp['break_even_accept_length']:.2f}"]
    return L


def _reproduce_section(rep: dict) -> list[str]:
    f = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    se = "" if rep.get("stderr") is None else f" ± {rep['stderr']:.2f}"
    L = [f"measured (serving) accept length **{rep['accept_length']:.2f}**{se}; engine-free on {rep['prompts']} "
         "prompts under each wiring, ranked by |z|", "",
         "| rank | wiring | accept length (engine-free) | z | who makes that mistake |", "|---|---|---|---|---|"]
    rank = 0
    for r in rep["rows"]:
        if r["skipped"]:
            L.append(f"| - | {r['label']} | not run: {r['skipped']} | | {r['engines']} |")
            continue
        rank += 1
        z = "inf" if r["z"] is None else f"{r['z']:+.1f}"
        L.append(f"| {rank} | {r['label']}{' (reproduces)' if r['reproduces'] else ''} | {f(r['mean'])} ± "
                 f"{f(r['stderr'])} | {z} | {r['engines']} |")
    return L + ["", f"**{rep['verdict']}.**"]


def summary_markdown(s: RunSettings, runs, summary: dict, env: dict) -> str:
    n = summary["numbers"]
    L = [f"# d2t-lab report: `{s.checkpoint}`", "", f"made {time.strftime('%Y-%m-%d %H:%M')} with d2t-lab "
         f"{env.get('d2t_lab')}; every number below comes from the inputs listed, computed by the notebook named.", ""]
    L += ["## Conclusion", ""] + [f"- {line}" for line in summary["conclusion"]] + [""]
    L += ["## Evidence ladder", "", "Strongest evidence first: serving against the engine-free measurement decides a "
          "deployment bug; the engine-free measurement against the teacher-forced prediction asks whether the "
          "samples overstate the draft, and blames a gap on the samples or on the prediction's assumptions only on "
          "evidence; coverage and per-position acceptance say where it loses.", ""]
    L += ladder(n, s.samples).markdown() + [""]
    L += _inputs_section(s, summary) + ["", "## Verdict (notebook 01)", ""]
    ins = n["inspect"]
    tv = ins["target_vocab_size"]
    L.append(f"**{ins['verdict'].upper()}** — draft vocab {ins['draft_vocab_size']:,}, target vocab "
             f"{tv if tv is None else format(tv, ',')}, key layout {ins['key_layout']}")
    L += [""] + [f"- {e}" for e in ins["evidence"]] + [f"- **{r}**" for r in ins["reasons"]]
    L += ["", "## Doctor findings (notebook 06)", ""]
    if "doctor" in n:
        if not n["doctor"]:
            L.append("no findings")
        else:
            L += ["| severity | code | what is wrong | how to fix |", "|---|---|---|---|"]
            L += [f"| {f['severity']} | `{f['code']}` | {f['message']} | {f['fix']} |" for f in n["doctor"]]
    L += ["", "## Accuracy per reading (notebook 03)", ""] + _accuracy_section(n.get("accuracy"))
    if n.get("accuracy", {}).get("conclusion"):
        L += ["", f"**Conclusion:** {n['accuracy']['conclusion']}"]
    L += ["", "## Accept length (notebook 04)", ""] + _accept_section(n)
    L += [f"- {what.replace('_', ' ')}: {n['skipped'][what]}" for what in ("samples", "logs", "metrics", "baseline_tps")
          if what in n["skipped"]]
    for what, err in n["errors"].items():
        L.append(f"- **{what}** unavailable: {err}")
    L += ["", "## Speculative decoding with the target (notebook 07)", ""] + _speculate_section(n, s)
    rep = (n.get("speculate") or {}).get("reproduce")
    if rep:
        L += ["", "## Which wiring reproduces the serving number (notebook 07)", ""] + _reproduce_section(rep)
    L += ["", "## Notebooks", "", "| notebook | result | seconds | figures |", "|---|---|---|---|"]
    for r in runs:
        res = "ok" if r.ok else f"FAILED: {r.error}"
        L.append(f"| {r.name} | {res} | {r.seconds:.1f} | {len(r.figures)} |")
    L += ["", "## Environment", ""] + [f"- {k}: {v}" for k, v in env.items()]
    return "\n".join(L) + "\n"
