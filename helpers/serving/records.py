"""Per-request JSONL and SpecForge training logs -> `helpers.serving.metrics.MetricsTable` rows.

SGLang responses' `meta_info` (field names of several releases, `helpers.engines.counting`'s `SGLANG_*`), vLLM's
per-request figures as its answers carry them (0.32+ `--per-request-spec-decode-metrics`:
`metrics.speculative_decoding` = {acceptance_histogram, num_spec_steps, num_accepted_draft_tokens,
num_draft_tokens, num_spec_tokens, ...}, `vllm/entrypoints/generate/base/protocol.py`
`SpeculativeDecodingMetrics` in 0.34.0; a whole answer per line, or that object alone), vLLM
per-request counts under its `SpecDecodingStats` names, and SpecForge's per-step `acc_i` /
`simulated_acc_len` (one JSON object or one `key: value` line per logged step). A record that is
recognised but does not read is garbled (counted, reason kept); one without any speculative field
is unrecognised. Fields a release or fork adds beside the ones read are ignored.
`helpers.serving.metrics.read_metrics` picks this reader by content.
"""
from __future__ import annotations

import json
import math
import re

from helpers.engines.counting import (
    SGLANG_ACCEPTED,
    SGLANG_HISTOGRAM,
    SGLANG_PROPOSED,
    SGLANG_TOKENS,
    SGLANG_VERIFY,
    VLLM_ANSWER_ACCEPTED,
    VLLM_ANSWER_DRAFT_TOKENS,
    VLLM_ANSWER_HISTOGRAM,
    VLLM_ANSWER_STEPS,
    VLLM_REQUEST_DRAFTS,
    VLLM_REQUEST_STATS,
    histogram_accepted,
    histogram_per_position,
)

# a row: kind, label, and whichever of these the source has (None elsewhere); `helpers.serving.metrics` uses it too
ROW_KEYS = ("drafts", "draft_tokens", "accepted", "accepted_per_pos", "accept_length", "accept_rate",
            "completion_tokens", "verify_ct", "histogram", "per_position", "acc", "simulated_acc_len")


def _row(kind: str, label, **values) -> dict:
    row = {"kind": kind, "label": label}
    row.update({k: values.get(k) for k in ROW_KEYS})
    return row



def _first(d: dict, names):
    for n in names:
        if n in d:
            return d[n]
    return None


def _number(v, what: str, whole: bool = False):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{what} = {v!r} is not a non-negative number")
    if whole and not float(v).is_integer():
        raise ValueError(f"{what} = {v!r} is not a whole number")
    return int(v) if whole else float(v)


def _vllm_answer_row(spec: dict, label) -> dict:
    """vLLM's `metrics.speculative_decoding` -> a vllm-requests row: drafts = verify steps (the
    histogram's sum when `num_spec_steps` is absent), accepted = sum j * histogram[j], position j
    reached by the steps that accepted more than j drafts."""
    hist = spec.get(VLLM_ANSWER_HISTOGRAM)
    if not isinstance(hist, list) or not hist:
        raise ValueError(f"{VLLM_ANSWER_HISTOGRAM} {hist!r} is not a list of counts")
    hist = [_number(h, VLLM_ANSWER_HISTOGRAM, whole=True) for h in hist]
    steps = spec.get(VLLM_ANSWER_STEPS)
    steps = sum(hist) if steps is None else _number(steps, VLLM_ANSWER_STEPS, whole=True)
    accepted = spec.get(VLLM_ANSWER_ACCEPTED)
    accepted = histogram_accepted(hist) if accepted is None else _number(accepted, VLLM_ANSWER_ACCEPTED, whole=True)
    if steps != sum(hist):
        raise ValueError(f"{VLLM_ANSWER_STEPS} = {steps} but the {VLLM_ANSWER_HISTOGRAM} counts {sum(hist)} "
                         "verify steps")
    tokens = spec.get(VLLM_ANSWER_DRAFT_TOKENS)
    return _row("request", label, drafts=steps, accepted=accepted,
                draft_tokens=None if tokens is None else _number(tokens, VLLM_ANSWER_DRAFT_TOKENS, whole=True),
                accepted_per_pos=histogram_per_position(hist), histogram=hist)


def _request_row(obj: dict, n: int) -> dict | None:
    """One JSONL record -> a row; None when it holds no speculative field; ValueError when one does not read."""
    if isinstance(obj, dict):  # a vLLM answer saved whole, or its speculative_decoding object alone
        metrics = obj.get("metrics")
        spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
        if spec is None and VLLM_ANSWER_HISTOGRAM in obj and VLLM_ANSWER_STEPS in obj:
            spec = obj
        if isinstance(spec, dict):
            row = _vllm_answer_row(spec, obj.get("id", n))
            usage = obj.get("usage")
            comp = usage.get("completion_tokens") if isinstance(usage, dict) else None
            if comp is not None:  # the answer's tokens: no fewer than its verify steps (helpers.serving.bounds)
                row["completion_tokens"] = _number(comp, "usage.completion_tokens", whole=True)
            return row
    meta = obj.get("meta_info", obj) if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return None
    if SGLANG_VERIFY in meta:
        verify = _number(meta[SGLANG_VERIFY], SGLANG_VERIFY, whole=True)
        comp = meta.get(SGLANG_TOKENS)
        acc, prop, hist = _first(meta, SGLANG_ACCEPTED), _first(meta, SGLANG_PROPOSED), _first(meta, SGLANG_HISTOGRAM)
        if hist is not None and (not isinstance(hist, list) or not hist):
            raise ValueError(f"histogram {hist!r} is not a list of counts")
        return _row("request", meta.get("id", n),
                    verify_ct=verify,
                    completion_tokens=None if comp is None else _number(comp, SGLANG_TOKENS, whole=True),
                    accept_length=None if meta.get("spec_accept_length") is None
                    else _number(meta["spec_accept_length"], "spec_accept_length"),
                    accept_rate=None if meta.get("spec_accept_rate") is None
                    else _number(meta["spec_accept_rate"], "spec_accept_rate"),
                    accepted=None if acc is None else _number(acc, "accepted drafts", whole=True),
                    draft_tokens=None if prop is None else _number(prop, "proposed drafts", whole=True),
                    histogram=None if hist is None else [_number(h, "histogram", whole=True) for h in hist])
    if VLLM_REQUEST_DRAFTS in meta:  # a dump without num_accepted_tokens still reads (its accept length is then missing)
        vals = {}
        for name, key in VLLM_REQUEST_STATS.items():
            if name in meta:
                v = meta[name]
                vals[key] = [_number(x, name, whole=True) for x in v] if isinstance(v, list) else _number(v, name, whole=True)
        return _row("request", meta.get("request_id", meta.get("id", n)), **vals)
    return None


_ACC = re.compile(r"""['"]?(?:(train|eval)/)?acc_(\d+)['"]?\s*[:=]\s*([^\s,}'"]+)""")
_SIM = re.compile(r"""['"]?(?:(train|eval)/)?simulated_acc_len['"]?\s*[:=]\s*([^\s,}'"]+)""")
_STEP = re.compile(r"""['"]?(?:global_)?step['"]?\s*[:=]\s*(\d+)""")


def _specforge_row(line: str, n: int) -> dict | None:
    """One SpecForge log line (a JSON object or `key: value` text) -> a row per mode (eval first)."""
    accs = _ACC.findall(line)
    sims = _SIM.findall(line)
    if not accs and not sims:
        return None
    modes = {}
    for mode, i, v in accs:
        modes.setdefault(mode or "train", {}).setdefault("acc", {})[int(i)] = _number(_float(v, f"acc_{i}"), f"acc_{i}")
    for mode, v in sims:
        modes.setdefault(mode or "train", {})["sim"] = _number(_float(v, "simulated_acc_len"), "simulated_acc_len")
    mode = "eval" if "eval" in modes else next(iter(modes))
    m = modes[mode]
    acc = m.get("acc", {})
    if acc and sorted(acc) != list(range(len(acc))):
        raise ValueError(f"acc_i positions {sorted(acc)} are not 0..{len(acc) - 1}")
    step = _STEP.search(line)
    return _row("step", f"{mode} step {step.group(1) if step else n}",
                acc=[acc[i] for i in range(len(acc))] or None, simulated_acc_len=m.get("sim"))


def _float(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a number") from None


def read_records(lines) -> dict:
    """Per-request JSONL (SGLang meta_info or vLLM counts) or a SpecForge log -> rows and counts:
    {rows, lines, garbled_lines, unrecognised, kinds} (`helpers.serving.metrics.parse_records` makes the table)."""
    rows, garbled, unrecognised, total, kinds = [], [], 0, 0, set()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        total += 1
        try:
            row, specforge = None, "acc_" in line
            if line.lstrip().startswith("{"):
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    if not specforge:
                        raise ValueError(f"not JSON ({e.msg} at column {e.colno})") from None
                    obj = None
                row = None if obj is None else _request_row(obj, n)
                if row is not None:  # an answer first: its generated text may hold "acc_"
                    kinds.add("sglang-requests" if row["verify_ct"] is not None else "vllm-requests")
                    specforge = False
            if specforge:
                row = _specforge_row(line, n)
                if row is not None:
                    kinds.add("specforge")
        except ValueError as e:
            garbled.append((n, str(e)))
            continue
        if row is None:
            unrecognised += 1
        else:
            row["line"] = n  # where a row out of bounds is named (`helpers.serving.bounds`)
            rows.append(row)
    return {"rows": rows, "lines": total, "garbled_lines": garbled, "unrecognised": unrecognised, "kinds": kinds}
