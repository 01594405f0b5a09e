"""Per-request records -> `helpers.serving.metrics.MetricsTable` rows: per-request JSONL, SpecForge
training logs, and a live server's answers (`d2t-lab probe`: `read_answer` -> `Reply`, `request_row`).

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

A live answer (the JSON object `helpers.serving.probe_client.send` hands back, read by its endpoint's
shape): output ids (where the server returns them), text, completion tokens and the request's
speculative counts - vLLM 0.32+'s `metrics.speculative_decoding` (`--per-request-spec-decode-metrics
summary|detailed`), SGLang's `meta_info` (read as a record above) or llama.cpp's `timings.draft_n` /
`draft_n_accepted` (draft tokens and accepted ones; llama.cpp gives no verify steps per request, and
leaves both out of an answer that drafted nothing). A count that is not one, or is out of
`helpers.serving.bounds`, is one `BadInputError` naming the URL and the field, never averaged in.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from helpers.core.errors import BadInputError
from helpers.engines.counting import (
    LLAMACPP_ACCEPTED,
    LLAMACPP_DRAFTED,
    SGLANG_ACCEPTED,
    SGLANG_HISTOGRAM,
    SGLANG_PROPOSED,
    SGLANG_TOKENS,
    SGLANG_VERIFY,
    VLLM_ANSWER_ACCEPTED,
    VLLM_ANSWER_DRAFT_TOKENS,
    VLLM_ANSWER_HISTOGRAM,
    VLLM_ANSWER_SPEC_TOKENS,
    VLLM_ANSWER_STEPS,
    VLLM_REQUEST_DRAFTS,
    VLLM_REQUEST_STATS,
    histogram_accepted,
    histogram_per_position,
)
from helpers.serving import bounds

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


# -- a server's answers, as `d2t-lab probe` receives them -------------------------------------------------
# `helpers.serving.probe_client.send` hands back the answer's JSON object and the endpoint it came from;
# `read_answer` reads it by that endpoint's shape into a `Reply`, its counts bounded (`helpers.serving.bounds`)
# and, as a row (`request_row`), pooled by `helpers.acceptance.sources.normalise` as a JSONL of them is.


@dataclass
class Reply:
    """One answer: what came back and the request's speculative counts (None: the server gave none)."""

    output_ids: list[int] | None
    text: str
    completion_tokens: int | None
    finish_reason: str | None
    kind: str | None = None  # "vllm" (metrics.speculative_decoding), "sglang" (meta_info) or "llamacpp"
    #                          (timings: drafted and accepted, no steps); None: no counts
    steps: int | None = None  # verify steps (vLLM num_spec_steps, SGLang spec_verify_ct)
    accepted: int | None = None  # accepted draft tokens, the bonus not counted
    drafted: int | None = None  # draft tokens proposed
    histogram: list[int] | None = None  # [j]: verify steps that accepted exactly j draft tokens
    num_spec_tokens: int | None = None  # vLLM: the chain length the server drafts
    temperature: float | None = None  # the temperature the answer says was applied (llama.cpp generation_settings)

    @property
    def steps_unknown(self) -> bool:
        """Counts without verify steps (llama.cpp's timings: draft tokens and accepted ones only)."""
        return self.kind is not None and self.steps is None


def read_answer(obj: dict, endpoint: str, url: str) -> Reply:
    """The answer `obj` from `endpoint` (at `url`) as a `Reply`: SGLang's /generate, llama-server's
    /completion, else an OpenAI-compatible /v1/completions or /v1/chat/completions answer."""
    if endpoint == "/generate":
        return sglang_reply(obj, url)
    if endpoint == "/completion":
        return llamacpp_reply(obj, url)
    return openai_reply(obj, url)


def llamacpp_reply(obj: dict, url: str) -> Reply:
    """A llama-server /completion answer: `tokens`, `content`, `tokens_predicted`, `stop_type` and the
    request's `timings` (`draft_n`, `draft_n_accepted`; both absent when nothing was drafted)."""
    if "content" not in obj and "tokens" not in obj:
        raise BadInputError(url, f"answered without content or tokens (keys {sorted(obj)[:6]}): not a llama-server "
                            "/completion answer")
    ids = obj.get("tokens")
    reply = Reply([int(t) for t in ids] if isinstance(ids, list) and ids else None, obj.get("content") or "",
                  _int(obj.get("tokens_predicted"), "tokens_predicted", url), obj.get("stop_type"))
    _llamacpp_timings(reply, obj, url)
    g = obj.get("generation_settings")
    if isinstance(g, dict) and isinstance(g.get("temperature"), (int, float)):
        reply.temperature = float(g["temperature"])
    return reply


def _llamacpp_timings(reply: Reply, obj: dict, url: str) -> None:
    """llama.cpp's per-request draft counts (`timings`, on its native and OpenAI answers alike)."""
    t = obj.get("timings")
    if not isinstance(t, dict):
        return
    reply.kind = "llamacpp"
    reply.drafted = _int(t.get(LLAMACPP_DRAFTED, 0), f"timings.{LLAMACPP_DRAFTED}", url)
    reply.accepted = _int(t.get(LLAMACPP_ACCEPTED, 0), f"timings.{LLAMACPP_ACCEPTED}", url)
    _check_bounds(reply, url, "timings")


def _int(v, what: str, url: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or not float(v).is_integer():
        raise BadInputError(url, f"{what} = {v!r} in the answer is not a count")
    return int(v)


def openai_reply(obj: dict, url: str) -> Reply:
    """A /v1/completions or /v1/chat/completions answer (vLLM's per-request metrics read when present)."""
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BadInputError(url, f"answered without choices (keys {sorted(obj)[:6]}): not an OpenAI completion")
    c = choices[0]
    text = c.get("text")
    if text is None and isinstance(c.get("message"), dict):
        text = c["message"].get("content")
    ids = c.get("token_ids")
    ids = [int(t) for t in ids] if isinstance(ids, list) else None
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
    reply = Reply(ids, text or "", _int(usage.get("completion_tokens"), "usage.completion_tokens", url),
                  c.get("finish_reason"))
    if isinstance(obj.get("timings"), dict):  # llama-server's OpenAI answers carry its timings
        _llamacpp_timings(reply, obj, url)
    metrics = obj.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if isinstance(spec, dict):
        hist = spec.get(VLLM_ANSWER_HISTOGRAM)
        if not isinstance(hist, list):
            raise BadInputError(url, f"metrics.speculative_decoding.{VLLM_ANSWER_HISTOGRAM} = {hist!r}: not a list")
        hist = [_int(h, VLLM_ANSWER_HISTOGRAM, url) for h in hist]
        steps = _int(spec.get(VLLM_ANSWER_STEPS), VLLM_ANSWER_STEPS, url)
        accepted = _int(spec.get(VLLM_ANSWER_ACCEPTED), VLLM_ANSWER_ACCEPTED, url)
        reply.kind, reply.histogram = "vllm", hist
        reply.steps = sum(hist) if steps is None else steps
        reply.accepted = histogram_accepted(hist) if accepted is None else accepted
        reply.drafted = _int(spec.get(VLLM_ANSWER_DRAFT_TOKENS), VLLM_ANSWER_DRAFT_TOKENS, url)
        reply.num_spec_tokens = _int(spec.get(VLLM_ANSWER_SPEC_TOKENS), VLLM_ANSWER_SPEC_TOKENS, url)
        _check_bounds(reply, url, "metrics.speculative_decoding")
    return reply


def _check_bounds(reply: Reply, url: str, where: str) -> None:
    """An answer's counts within `helpers.serving.bounds` (accept length in [1, num_spec_tokens + 1],
    accepted no more than drafted): else one line naming the URL and the field, never averaged in."""
    maximum = reply.num_spec_tokens + 1 if reply.num_spec_tokens else None
    found = bounds.problems(request_row(reply, 0), maximum)
    if found:
        field, _, why = found[0]
        raise BadInputError(url, f"{where}.{field} in the answer is out of bounds: {why}")


def sglang_reply(obj: dict, url: str) -> Reply:
    """An SGLang /generate answer: `meta_info` read by `read_records`, as a JSONL of them is."""
    if not isinstance(obj.get("meta_info"), dict):
        raise BadInputError(url, f"answered without meta_info (keys {sorted(obj)[:6]}): not an SGLang /generate answer")
    got = read_records([json.dumps({"meta_info": obj["meta_info"]})])
    if got["garbled_lines"]:
        raise BadInputError(url, f"meta_info does not read: {got['garbled_lines'][0][1]}")
    meta = obj["meta_info"]
    ids = obj.get("output_ids")
    reply = Reply([int(t) for t in ids] if isinstance(ids, list) else None, obj.get("text") or "",
                  _int(meta.get(SGLANG_TOKENS), f"meta_info.{SGLANG_TOKENS}", url),
                  (meta.get("finish_reason") or {}).get("type") if isinstance(meta.get("finish_reason"), dict)
                  else meta.get("finish_reason"))
    row = got["rows"][0] if got["rows"] else None
    if row is not None and row.get("verify_ct"):
        reply.kind, reply.steps = "sglang", row["verify_ct"]
        reply.accepted, reply.drafted, reply.histogram = row["accepted"], row["draft_tokens"], row["histogram"]
        _check_bounds(reply, url, "meta_info")
    return reply


def request_row(reply: Reply, index: int) -> dict:
    """A reply's counts as a `helpers.serving.metrics.MetricsTable` row (kind vllm-requests or
    sglang-requests), so `helpers.acceptance.sources.normalise` pools them as it pools a JSONL."""
    if reply.kind == "sglang":
        return _row("request", index, verify_ct=reply.steps, completion_tokens=reply.completion_tokens,
                    accepted=reply.accepted, draft_tokens=reply.drafted, histogram=reply.histogram)
    if reply.steps_unknown:  # llama.cpp: no verify steps per request
        return _row("request", index, accepted=reply.accepted, draft_tokens=reply.drafted)
    per_pos = None
    if reply.histogram:  # position j is reached by the steps that accepted more than j
        per_pos = histogram_per_position(reply.histogram)
    return _row("request", index, drafts=reply.steps, accepted=reply.accepted, draft_tokens=reply.drafted,
                accepted_per_pos=per_pos, histogram=reply.histogram, completion_tokens=reply.completion_tokens)
