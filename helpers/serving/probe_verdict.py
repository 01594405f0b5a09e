"""What `d2t-lab probe` concludes: the served tokens against the target's own greedy output, the
served accept length against the checkpoint run engine-free on the same token ids, the wiring
`reproduce` names, and the result (`ProbeResult`: JSON and text).

- `check_target`: the target (`helpers.model.target.load_target`) decodes each prompt greedily on
  its own (transformers' generate, KV cache) and is compared token by token with what the server
  returned; at the first differing position the target's logits say whether the served token was a
  near tie (within NEAR_TIE of the top logit, relative: bf16 rounding or another kernel can swap
  them) or not the target's choice at all (a lossy verify: a finding).
- `compare_engine_free`: the engine-free loop's per-prompt accept length, counted as the engine
  counts it (vLLM: 1 + accepted / verify steps, a step cut by max_tokens counted with all it
  verified; SGLang: completion tokens / verify steps), against the served one, prompt by prompt:
  the mean paired difference and its standard error (sd / sqrt(n)). They agree when the mean is
  within AGREE_WITHIN or within REPRODUCES_Z standard errors of zero.
- `conclude`: "the served draft behaves as the checkpoint does", "the served draft behaves like
  WIRING" (`helpers.speculate.reproduce`'s best match that reproduces the served number), or
  "neither".
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from helpers.speculate.ladder import REPRODUCES_Z

NEAR_TIE = 0.02  # a differing served token within 2 % of the top logit is a near tie, not a lossy verify
AGREE_WITHIN = 0.05  # served and engine-free accept lengths this close agree whatever their errors
PLAIN = "the served draft behaves as the checkpoint does"


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def check_target(target, prompt_ids: list[list[int]], requests) -> dict:
    """Each served output against the target's own greedy decode of the same ids (module docstring)."""
    import torch

    from helpers.measure.predict import cpu_threads

    rows, dev = [], target.input_device
    with torch.inference_mode(), cpu_threads(target.model):
        for ids, q in zip(prompt_ids, requests):
            served = q.reply.output_ids
            row = {"index": q.index, "identical": None, "first_difference": None}
            if not served:
                row["note"] = "the server returned no token ids"
                rows.append(row)
                continue
            x = torch.tensor([ids], device=dev)
            own = target.model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                                        max_new_tokens=len(served), temperature=None, top_p=None, top_k=None,
                                        pad_token_id=0)[0, len(ids):].tolist()
            k = _first_difference(served, own)
            row["identical"] = k is None
            if k is not None:
                row["first_difference"] = k
                if k < len(served) and k < len(own):
                    logits = target.model(input_ids=torch.tensor([ids + served[:k]], device=dev)).logits[0, -1].float()
                    top = float(logits.max())
                    gap = top - float(logits[served[k]])
                    rank = int((logits > logits[served[k]]).sum())
                    row.update(served_token=served[k], target_token=own[k], logit_gap=gap, served_rank=rank,
                               near_tie=rank <= 1 and gap <= NEAR_TIE * max(1.0, abs(top)))
                else:
                    row.update(near_tie=False, note=f"one output stops early ({len(served)} served, {len(own)} "
                               "from the target)")
            rows.append(row)
    compared = [r for r in rows if r["identical"] is not None]
    lossy = [r for r in compared if r["identical"] is False and not r.get("near_tie")]
    ties = [r for r in compared if r["identical"] is False and r.get("near_tie")]
    verdict = "lossy" if lossy else "near ties only" if ties else "identical" if compared else "not compared"
    return {"prompts": len(rows), "compared": len(compared), "identical": sum(bool(r["identical"]) for r in compared),
            "near_ties": len(ties), "lossy": len(lossy), "verdict": verdict, "near_tie_rule":
            f"the served token ranks second and its logit is within {NEAR_TIE:.0%} of the top logit", "per_prompt": rows}


def engine_scale(prompt_run, engine: str) -> float | None:
    """An engine-free prompt's accept length counted as `engine` counts it (module docstring)."""
    steps = len(prompt_run.accept_lengths)
    if not steps:
        return None
    if engine == "sglang":
        return len(prompt_run.output_ids) / steps
    verified = list(prompt_run.accept_lengths)
    if prompt_run.cut_from:
        verified[-1] = prompt_run.cut_from
    return 1.0 + sum(v - 1 for v in verified) / steps


def compare_engine_free(run, requests, engine: str, served: float, served_se: float | None) -> dict:
    """The engine-free `SpecRun` against the served requests, prompt by prompt (module docstring)."""
    prompts = sorted(run.prompts, key=lambda p: p.index)
    ef = [engine_scale(p, engine) for p in prompts]
    steps = sum(len(p.accept_lengths) for p in prompts)
    if engine == "sglang":
        pooled = sum(len(p.output_ids) for p in prompts) / steps if steps else None
    else:
        pooled = sum(e * len(p.accept_lengths) for e, p in zip(ef, prompts) if e is not None) / steps if steps else None
    out = {"settings": run.settings, "accept_length": _fin(run.mean), "stderr": _fin(run.stderr),
           "verify_steps": run.verify_steps, "accept_length_as_served": pooled, "served_accept_length": served,
           "counted_as": engine, "paired": None}
    pairs = [(q.index, q.accept_length, e) for q, e in zip(requests, ef) if q.accept_length is not None and e is not None]
    if len(pairs) == len(requests) and pairs:
        d = [s - e for _, s, e in pairs]
        mean = statistics.fmean(d)
        se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else None
        out["paired"] = {"prompts": len(d), "mean_difference": mean, "stderr": se,
                         "per_prompt": [{"index": i, "served": s, "engine_free": e, "difference": s - e}
                                        for i, s, e in pairs]}
        err = se
    else:  # counters only: the pooled figures, the engine-free run's error
        mean, err = (None if pooled is None else served - pooled), _fin(run.stderr)
        if served_se:
            err = math.sqrt((err or 0.0) ** 2 + served_se ** 2)
    out["difference"], out["difference_stderr"] = mean, err
    out["agrees"] = mean is not None and bool(abs(mean) <= AGREE_WITHIN or (err is not None and err > 0
                                                                             and abs(mean) < REPRODUCES_Z * err))
    out["rule"] = (f"agree when the mean {'paired ' if out['paired'] else ''}difference (served - engine-free) is "
                   f"within {AGREE_WITHIN} or within {REPRODUCES_Z:g} standard errors of zero")
    return out


def _fin(x):
    return None if x is None or not math.isfinite(x) else float(x)


def _pm(x, se) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" + ("" if se is None else f" ± {se:.3f}")


def conclude(served: float, served_se, engine_free: dict | None, repro, defect=None) -> str:
    """The one conclusion line (module docstring); without an engine-free run, the served figure. A
    match of an engine's own defect (`helpers.engines.defects.DefectMatch`) decides first: the
    engine's sampler, not the draft or its wiring."""
    if defect is not None:
        ef = "" if engine_free is None or engine_free.get("accept_length_as_served") is None else \
            f", engine-free at the same temperature {engine_free['accept_length_as_served']:.3f}"
        return f"{defect.sentence} (served {_pm(served, served_se)}{ef})"
    if engine_free is None:
        return (f"served accept length {_pm(served, served_se)}; pass --target DIR --checkpoint DRAFT to compare it "
                "with the checkpoint run engine-free")
    if engine_free["difference"] is None:
        return f"served accept length {_pm(served, served_se)}; the engine-free run made no verify step to compare"
    ef = f"engine-free {engine_free['accept_length_as_served']:.3f}"
    diff = f"difference {_pm(engine_free['difference'], engine_free['difference_stderr'])}"
    if engine_free["agrees"]:
        return f"{PLAIN} (served {served:.3f}, {ef}, {diff})"
    rows = [] if repro is None else [r for r in repro.ranked if r.reproduces and r.key != "correct"]
    if rows:
        b = rows[0]
        ties = [r.label for r in rows[1:] if abs(r.mean - b.mean) < 1e-9]
        also = f", or {' or '.join(ties)}: the accept length cannot tell them apart" if ties else ""
        return (f"the served draft behaves like {b.label} (served {served:.3f}, that wiring engine-free {b.mean:.3f}"
                f"{also}; the correct wiring {ef}, {diff})")
    best = None if repro is None else repro.best
    near = "" if best is None else f"; closest emulated wiring: {best.label} ({best.mean:.3f})"
    return (f"neither: the served draft behaves neither as the checkpoint does (served {served:.3f}, {ef}, {diff}) "
            f"nor like any wiring the kit emulates{near}")


def engine_defect(result, release: str | None):
    """The engine's own sampled-decoding defect, where the probe's numbers show its signature
    (`helpers.engines.defects`): per position from the answers or the counters, the engine-free
    figure at the same temperature as what the draft is known to accept. `release`: the engine
    release the start-up log states, or None."""
    from helpers.engines.defects import match_defect

    m, temperature = result.measured, result.temperature
    reqs = [q.reply for q in m.requests if q.reply.kind]
    c = m.counts() or {}
    drafts = c.get("drafts") or (sum(r.steps or 0 for r in reqs) or None)
    drafted = c.get("draft_tokens") or (sum(r.drafted or 0 for r in reqs) or None)
    accepted = c.get("accepted") if c.get("accepted") is not None else (sum(r.accepted or 0 for r in reqs) if reqs else None)
    ef = result.engine_free or {}
    return match_defect(per_position=m.per_position, accepted=accepted, drafted=drafted, drafts=drafts,
                        temperature=temperature, engine=m.server.engine, release=release,
                        known_accepts=ef.get("accept_length_as_served"),
                        known_source=f"engine-free at T = {temperature:g}" if ef else "")


@dataclass
class ProbeResult:
    """Everything one probe found (`to_dict` is the --json object, `report` the text)."""

    measured: object  # helpers.serving.probe.Measured
    model: str | None
    drafting: object  # Drafting or None
    drafting_source: str | None
    prompts_path: str
    bundled_default: bool
    max_new_tokens: int
    target_check: dict | None = None
    engine_free: dict | None = None
    reproduce: object = None  # Reproduction
    conclusion: str = ""
    notes: list[str] = field(default_factory=list)
    setup: object = None  # helpers.serving.startup.Setup: what the server, --log and --launch-command state
    serving_findings: list = field(default_factory=list)  # eagle3-as-eagle (`helpers.doctor.served_algorithm.algorithm_findings`)
    temperature: float = 0.0  # what the probe sent
    seed: int | None = None
    engine_defect: object = None  # helpers.engines.defects.DefectMatch, or None

    def sampling(self) -> dict:
        """The temperature sent, what the answers say was applied (llama.cpp), the engine's rule at it."""
        from helpers.serving.temperature import rule_name

        applied = sorted({q.reply.temperature for q in self.measured.requests if q.reply.temperature is not None})
        src = f"sent by the probe (--temperature {self.temperature:g})"
        if applied:
            src += ("; the answers' generation_settings say " + ", ".join(f"{x:g}" for x in applied)
                    + (" (as sent)" if applied == [float(self.temperature)] else " (NOT what was sent)"))
        return {"temperature": self.temperature, "temperature_source": src, "seed": self.seed,
                "acceptance_rule": rule_name(self.temperature, self.measured.server.engine),
                "engine_defect": None if self.engine_defect is None else self.engine_defect.to_dict()}
    served_mismatch: str | None = None  # --target is not the served model (`probe_client.served_mismatch`)

    @property
    def findings(self) -> list[str]:
        out = []
        tc = self.target_check
        if self.served_mismatch and tc and (tc["lossy"] or tc["near_ties"]):  # another model's tokens: no verdict
            out.append(f"target mismatch: {self.served_mismatch} (the tokens differ at "
                       f"{tc['lossy'] + tc['near_ties']} prompt(s); no conclusion about a lossy verify is drawn)")
        elif tc and tc["lossy"]:
            bad = [r for r in tc["per_prompt"] if r["identical"] is False and not r.get("near_tie")]
            out.append(f"lossy verify: at {len(bad)} prompt(s) the served text is not the target's greedy output "
                       "(first at prompt " + ", ".join(f"{r['index']} position {r['first_difference']}" for r in bad[:3])
                       + "): the server does not verify exactly")
        agree = self.measured.agreement()
        if agree and not agree["agree"]:
            out.append(agree["why"])
        out += [f"{f['code']}: {f['message']}; fix: {f['fix']}" for f in self.serving_findings]
        return out

    def to_dict(self) -> dict:
        m = self.measured
        d = self.drafting
        fm = m.from_metrics
        return {
            "url": m.server.url, "engine": m.server.engine, "model": self.model, "endpoint": m.endpoint,
            "max_new_tokens": self.max_new_tokens, **self.sampling(),
            "drafting": None if d is None else {"shape": d.label, "steps": d.steps, "topk": d.topk,
                                                "num_draft_tokens": d.num_draft_tokens, "source": self.drafting_source,
                                                **d.engine_flags()},
            "prompts_source": {"path": self.prompts_path, "bundled_default": self.bundled_default,
                               "requests": len(m.requests)},
            "requests": [q.to_dict() for q in m.requests],
            "accept_length": m.accept_length, "stderr": m.stderr, "source": m.source,
            "accept_length_definition": (m.per_request or fm).definition,
            "stderr_method": "ratio estimator over requests (delta method, weighted by verify steps)",
            "metrics_accept_length": None if fm is None else fm.accept_length, "counters": m.counts(),
            "agreement": m.agreement(), "per_position": m.per_position,
            "per_position_conditional": (m.per_request or fm).per_position_conditional,
            "target_check": self.target_check, "engine_free": self.engine_free,
            "reproduce": None if self.reproduce is None else self.reproduce.to_dict(),
            "conclusion": self.conclusion, "findings": self.findings, "served_mismatch": self.served_mismatch,
            "notes": list(m.notes) + self.notes,
            "seconds": m.seconds, "forced_acceptance": None,
            "speculative_algorithm": None if self.setup is None else {
                k: v for k, v in self.setup.to_dict().items() if k != "forced_acceptance"},
            "serving_findings": [dict(f) for f in self.serving_findings]}

    def report(self) -> str:
        m, d = self.measured, self.to_dict()
        src = f"{self.prompts_path}" + (" (the bundled default prompts: pass --prompts FILE for your own traffic)"
                                        if self.bundled_default else "")
        lines = [f"probe: {m.server.url} ({m.server.engine}, model {self.model or '-'})",
                 f"  prompts: {len(m.requests)} from {src}; {self.max_new_tokens} new tokens each, "
                 + ("greedy, " if not self.temperature else f"sampled at T = {self.temperature:g} (acceptance rule "
                                                              f"{d['acceptance_rule']}), ") +
                 f"one request at a time to {m.endpoint} in {m.seconds:.1f} s",
                 "  drafting: " + (f"{d['drafting']['shape']} ({d['drafting']['source']})" if d["drafting"] else "unknown"),
                 f"  accept length {_pm(m.accept_length, m.stderr)} ({m.source}: {d['accept_length_definition']})"]
        if d["metrics_accept_length"] is not None:
            c = d["counters"]
            lines.append(f"  /metrics counters over the run: {d['metrics_accept_length']:.3f} ({c['drafts']} drafts, "
                         f"{c['accepted']} accepted)" + (f"; {'agree' if d['agreement']['agree'] else 'DIFFER'}: "
                                                         f"{d['agreement']['why']}" if d["agreement"] else ""))
        if d["per_position"]:
            lines.append("  per position (unconditional): " + " ".join(f"{x:.3f}" for x in d["per_position"]))
        tc = self.target_check
        if tc is not None:
            diffs = [r for r in tc["per_prompt"] if r["identical"] is False]
            lines.append(f"  tokens: {tc['identical']} of {tc['compared']} prompts are token for token the target's "
                         f"greedy output ({tc['verdict']})")
            for r in diffs[:8]:
                how = "a near tie" if r.get("near_tie") else "NOT the target's choice"
                gap = f", logit gap {r['logit_gap']:.3f}" if r.get("logit_gap") is not None else ""
                lines.append(f"    prompt {r['index']}: first differs at {r['first_difference']} ({how}{gap})")
        ef = self.engine_free
        if ef is not None:
            s = ef["settings"]
            lines.append(f"  engine-free ({s['engine']} convention, reading {s['reading']}, {s['drafting']} of "
                         f"{s['draft_tokens']}): {_pm(ef['accept_length_as_served'], None)} as {ef['counted_as']} counts it "
                         f"({_pm(ef['accept_length'], ef['stderr'])} as the kit counts it, tokens emitted per verify "
                         f"step, over {ef['verify_steps']} verify steps)")
            p = ef["paired"]
            what = f"per prompt over {p['prompts']} prompts" if p else "pooled (no per-request figures to pair)"
            if ef["difference"] is not None:
                lines.append(f"  served - engine-free: {_pm(ef['difference'], ef['difference_stderr'])} {what}")
        if self.reproduce is not None:
            lines.append(f"  reproduce: {self.reproduce.verdict()}")
        lines += [f"  finding: {f}" for f in d["findings"]]
        lines += [f"  note: {n}" for n in d["notes"]]
        lines.append(f"  conclusion: {self.conclusion}")
        return "\n".join(lines)
