"""One serving-log line -> one row: the line formats the kit reads (`helpers.serving.logs` turns
whole logs into tables).

Reads the speculative-decoding lines of three engines (formats checked against their public
source):

SGLang (scheduler, every `--decode-log-interval` decode steps), current form:
    [2026-01-05 10:00:00 TP0] Decode batch, #running-req: 1, #token: 2154, token usage: 0.01,
    accept len: 1.90, accept rate: 0.12, cuda graph: True, gen throughput (token/s): 46.70,
    #queue-req: 0
  (one line; hybrid models print `#full token:` / `full token usage:` instead of `#token:`,
  disaggregated decode adds `pre-allocated usage:` etc., `cpu graph:` / `npu graph:` / `musa graph:`
  replace `cuda graph:`, 0.5.23 may add `cap len:` / `block accept len:` and MFU figures, and
  `Decode batch [N],` carries a forward counter when enabled). Older builds:
    [2025-01-05 10:00:00] Decode batch. #running-req: 1, #token: 2154, token usage: 0.01,
    accept len: 1.90, gen throughput (token/s): 46.70, #queue-req: 0
  SGLang's `accept rate` is the accept length divided by the draft tokens per step (the bonus
  token counted in the numerator in current builds); its definition changed between versions,
  so compare accept lengths, not rates, across builds.

vLLM (V1 `SpecDecodingLogging`, every logging interval):
    INFO 01-05 10:00:00 [loggers.py:123] SpecDecoding metrics: Mean acceptance length: 2.61,
    Accepted throughput: 61.20 tokens/s, Drafted throughput: 113.40 tokens/s, Accepted: 612
    tokens, Drafted: 1134 tokens, Per-position acceptance rate: 0.745, 0.538, 0.335, Avg Draft
    acceptance rate: 54.0%
  (0.10.2 on; optionally prefixed `(APIServer pid=N) `). vLLM 0.8.5-0.10.1 print
    SpecDecoding metrics: Draft acceptance rate: 38.8%, Mean acceptance length: 2.16, Accepted:
    N tokens, Drafted: N tokens, Per-position acceptance rate: a, b, c
  (format "vllm-0.9"; 0.8.5's mean leaves the bonus token out, recognised because it then equals
  the sum of the per-position rates, and 1 is added); the oldest V1 builds print only `Draft
  acceptance rate`, `Accepted` and `Drafted` ("vllm-old"). vLLM's timestamps carry no year
  (`--year`).
  Drafts per line: Drafted / positions when that reproduces the line's own mean acceptance length
  (a fixed-length drafter, exact), else accepted / (mean - 1) from the line's own mean (a drafter
  whose length varies per step, e.g. suffix decoding: `variable` is set). An interval without
  drafts prints `nan` (`Accepted: 0 tokens, Drafted: 0 tokens`): an empty row, not garbled. Its
  `Accepted throughput` counts accepted draft tokens only; the generation rate is on the engine
  stats line logged just before (`Engine 000: Avg prompt throughput: ..., Avg generation
  throughput: X tokens/s, Running: N reqs, Waiting: M reqs, ...`), which is read as context for
  the SpecDecoding row after it.

llama.cpp (`llama-server`, `tools/server/server-context.cpp` `print_timings`, one line per finished
request, counted over that request only), in the forms its releases printed:
    slot print_timing: id  0 | task 42 | draft acceptance = 0.64479 (  167 accepted /   259 generated),
    mean acceptance length =  2.92, acceptance rate per position = (0.805, 0.632, 0.483)
  ("llamacpp", ggml-org/llama.cpp PR #24536), `..., mean len =  2.92` with the per-position rates on a
  trace-level line after it (`     acc per pos = (0.805, 0.632, 0.483)`, "llamacpp-mean-len"), and
  without a mean
  (`draft acceptance = ...` or, older, `draft acceptance rate = ...`, "llamacpp-old"). `draft
  acceptance` is accepted / generated draft tokens (the row's accept rate); the mean counts the
  bonus token (1 + accepted / verify steps) and the per-position rates are accepted at j / verify
  steps (unconditional). `generated` is the request's draft tokens (every token the drafter
  proposed), not tokens emitted. Verify steps are not printed: a row's drafts are the one whole
  number of steps that reproduces the printed mean (2 decimals) and, where printed, each per-position
  rate (3 decimals: the `acc per pos` line narrows the mean's candidates when it follows;
  `steps_exact` set); else accepted / (mean - 1), not exact (`steps_exact` False: a long request
  whose 2-decimal mean several step counts round to). A request that accepted nothing prints mean
  1.00, which any number of steps gives: its drafts are unknown (None, `steps_exact` False).
  Pooled 1 + sum accepted / sum drafts equals llama-server's /metrics counters exactly when every
  request's steps are exact. Its cumulative `statistics <impl>: #calls(b,g,a) = ...` lines are not rows.

Fields an engine fork adds (`Name: value` on vLLM's line, `name = value` on llama.cpp's, `key:
value` on SGLang's) are skipped and the known ones still read; a vLLM line whose known fields
start later (a fork's field first) reads the same.

A line is `parsed` when it is one of these and every number in it reads; `garbled` when it is
one of these but a number does not read (two dots, letters, cut before its accept length): it
is skipped and counted, never guessed; anything else is `unrecognised`, counted and skipped. A
line cut after its accept length (no `#queue-req` / no `Avg Draft acceptance rate`) keeps the
fields that end before the cut (its last, possibly cut, field dropped) with `cut` set. A
container prefix (docker compose's `svc-1  | `) is skipped when reading the time.
"""
from __future__ import annotations

import datetime as _dt
import re

from helpers.engines.counting import accept_length, drafts_from

COLUMNS = [
    "line", "time", "seconds", "engine", "format", "accept_length", "accept_rate", "throughput",
    "running_req", "queue_req", "tokens", "token_usage", "cuda_graph", "accepted", "drafted",
    "accepted_tps", "drafted_tps", "per_position", "drafts", "variable", "cut", "steps_exact",
]

ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # terminal colour codes (vLLM colours its log when it thinks a terminal reads it)
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
# `, ` followed by `Key: ` where a key starts with a letter or '#' and holds no ':' or ','
_FIELD_SPLIT = re.compile(r",\s+(?=[A-Za-z#][^:,]*:\s)")

_SGL_HEAD = re.compile(r"Decode batch(?: \[\d+\])?([.,]) ")
_VLLM_HEAD = re.compile(r"SpecDecoding metrics: ")
_VLLM_STATS = re.compile(r"(?:Engine \d+: )?(?=Avg prompt throughput: )")
_LLAMA_HEAD = re.compile(r"draft acceptance(?: rate)? = ")
_LLAMA_BODY = re.compile(r"(?P<ratio>\S+) \(\s*(?P<acc>\S+) accepted /\s*(?P<gen>\S+) generated\)(?P<rest>.*)$")
_LLAMA_SPLIT = re.compile(r",\s+(?=[A-Za-z#][^=,]*=)")  # `, name = ` starts a field
_LLAMA_POS = re.compile(r"\bacc per pos = \((?P<v>[^)]*)\)")
_SGL_TIME = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:[.,](\d+))?(?: [^\]]*)?\]")
_VLLM_TIME = re.compile(r"^(?:\([^)]*\)\s+)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(\d+))?\s")
_CONTAINER = re.compile(r"^[A-Za-z0-9][\w.-]*\s*\|\s?")  # docker compose: `svc-1  | `
_ISO_TIME = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(?:[.,](\d+))?")


class Garbled(ValueError):
    """A recognised line with a number that does not read."""


def _num(text: str, what: str, unit: str = "") -> float:
    t = text.strip()
    if unit and t.endswith(unit):
        t = t[: -len(unit)].strip()
    if not _NUMBER.fullmatch(t):
        raise Garbled(f"{what}: {text.strip()!r} is not a number")
    return float(t)


def _int(text: str, what: str, unit: str = "") -> int:
    v = _num(text, what, unit)
    if v != int(v) or "." in text:
        raise Garbled(f"{what}: {text.strip()!r} is not a whole number")
    return int(v)


def _fields(body: str, cut_ok: bool = False) -> dict[str, str]:
    """`Key: value, Key: value` -> dict in order. `cut_ok`: a last part without ':' (a line cut
    inside a key) is dropped and the dict gets the marker key `...` instead of raising; a body
    ending in ',' gets the marker key `,` (its last value is complete)."""
    out = {}
    body = body.strip()
    comma = body.endswith(",")
    body = body.rstrip(",").strip()
    parts = _FIELD_SPLIT.split(body)
    for i, part in enumerate(parts):
        key, sep, value = part.partition(":")
        if not sep:
            if cut_ok and i == len(parts) - 1 and i > 0:
                out["..."] = part
                break
            raise Garbled(f"field without a value: {part!r}")
        out[key.strip()] = value.strip()
    if cut_ok and comma and "..." not in out:
        out[","] = ""
    return out


def _cut(f: dict) -> dict:
    """The fields of a line cut short that surely end before the cut: a dangling key is dropped
    already, else the last value may be cut and is dropped."""
    f = dict(f)
    complete = f.pop("...", None) is not None
    complete = f.pop(",", None) is not None or complete
    if not complete and f:
        f.pop(next(reversed(f)))
    return f


def _timestamp(line: str, year: int) -> tuple[_dt.datetime | None, str]:
    """(time or None, engine hint) from the line's prefix; Garbled on an impossible date."""
    line = _CONTAINER.sub("", line, count=1)
    try:
        m = _SGL_TIME.match(line)
        if m:
            t = _dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
            return t + _dt.timedelta(seconds=_frac(m.group(2))), "sglang"
        m = _VLLM_TIME.match(line)
        if m:
            t = _dt.datetime.strptime(f"{year}-{m.group(1)}", "%Y-%m-%d %H:%M:%S")
            return t + _dt.timedelta(seconds=_frac(m.group(2))), "vllm"
        m = _ISO_TIME.search(line)
        if m:
            t = _dt.datetime.strptime(m.group(1).replace("T", " "), "%Y-%m-%d %H:%M:%S")
            return t + _dt.timedelta(seconds=_frac(m.group(2))), ""
    except ValueError as e:
        raise Garbled(f"timestamp: {e}") from None
    return None, ""


def _frac(digits: str | None) -> float:
    return float("0." + digits) if digits else 0.0


def _sglang(body: str, sep: str) -> dict:
    f = _fields(body, cut_ok=True)
    row = {"engine": "sglang", "format": "sglang" if sep == "," else "sglang-old"}
    if "#queue-req" not in f:  # always printed after the throughput: its absence means a cut line
        f = _cut(f)
        if "accept len" not in f:
            raise Garbled("line ends before #queue-req (truncated) with no complete accept len")
        row["cut"] = True
    elif "..." in f:
        raise Garbled(f"field without a value: {f['...']!r}")
    f.pop(",", None)
    if "accept rate" in f:
        row["format"] = "sglang"
    if "#running-req" not in f:
        raise Garbled("no #running-req")
    row["running_req"] = _int(f["#running-req"], "#running-req")
    for key in ("#token", "#full token"):
        if key in f:
            row["tokens"] = _int(f[key], key)
            break
    for key in ("token usage", "full token usage"):
        if key in f:
            row["token_usage"] = _num(f[key], key)
            break
    if "accept len" in f:
        row["accept_length"] = _num(f["accept len"], "accept len")
    if "accept rate" in f:
        row["accept_rate"] = _num(f["accept rate"], "accept rate")
    for key in [k for k in f if k.endswith(" graph")]:  # cuda, cpu, npu, musa graph: one per line
        if f[key] not in ("True", "False"):
            raise Garbled(f"{key}: {f[key]!r}")
        row["cuda_graph"] = f[key] == "True"
    if "gen throughput (token/s)" in f:
        row["throughput"] = _num(f["gen throughput (token/s)"], "gen throughput")
    elif not row.get("cut"):
        raise Garbled("no gen throughput")
    if "#queue-req" in f:
        row["queue_req"] = _int(f["#queue-req"], "#queue-req")
    return row


def _nan(text: str) -> bool:
    return text.strip().rstrip("%").strip().lower() == "nan"


def _vllm(body: str) -> dict:
    f = _fields(body, cut_ok=True)
    row = {"engine": "vllm", "format": "vllm"}
    if "Avg Draft acceptance rate" in f:  # 0.10.2 on: it ends the line
        rate_key, complete = "Avg Draft acceptance rate", "..." not in f
    elif "Draft acceptance rate" in f:  # 0.8.5-0.10.1 (with a mean), older V1 (without)
        row["format"] = "vllm-0.9" if "Mean acceptance length" in f else "vllm-old"
        rate_key = "Draft acceptance rate"
        last = "Per-position acceptance rate" if row["format"] == "vllm-0.9" else "Drafted"
        complete = "..." not in f and last in f and (last != "Drafted" or f[last].endswith("tokens"))
    elif "Mean acceptance length" in f:  # the current form cut before its last field
        rate_key, complete = "Avg Draft acceptance rate", False
    else:
        raise Garbled("no Avg Draft acceptance rate (truncated)")
    if complete:
        f.pop(",", None)
    else:
        f = _cut(f)
        if "Mean acceptance length" not in f:
            raise Garbled(f"no {rate_key} (truncated) and no complete Mean acceptance length")
        row["cut"] = True
    drafted = _int(f["Drafted"], "Drafted", "tokens") if "Drafted" in f else None
    empty = drafted == 0  # an interval without drafts: vLLM prints nan for its ratios
    if "Mean acceptance length" in f and not (empty and _nan(f["Mean acceptance length"])):
        row["accept_length"] = _num(f["Mean acceptance length"], "Mean acceptance length")
    if rate_key in f and not (empty and _nan(f[rate_key])):
        row["accept_rate"] = _num(f[rate_key], rate_key, "%") / 100.0
    if "Accepted throughput" in f:  # accepted draft tokens/s, not the generation rate
        row["accepted_tps"] = _num(f["Accepted throughput"], "Accepted throughput", "tokens/s")
    if "Drafted throughput" in f:
        row["drafted_tps"] = _num(f["Drafted throughput"], "Drafted throughput", "tokens/s")
    if "Accepted" in f:
        row["accepted"] = _int(f["Accepted"], "Accepted", "tokens")
    if drafted is not None:
        row["drafted"] = drafted
    if "Per-position acceptance rate" in f:
        parts = f["Per-position acceptance rate"].split(",")
        if not (empty and all(_nan(p) for p in parts)):
            row["per_position"] = [_num(p, "Per-position acceptance rate") for p in parts]
    if empty:
        row["drafts"] = 0
    elif not row.get("cut"):
        _vllm_drafts(row)
    return row


def _vllm_drafts(row: dict) -> None:
    """Drafts on one vLLM line from its own counters (see the module docstring); 0.8.5's mean
    without the bonus token gets it added. Garbled when the per-position rates cannot belong to
    the line's mean (a list cut short)."""
    per, mean, accepted, drafted = row.get("per_position"), row.get("accept_length"), row.get("accepted"), row.get("drafted")
    if accepted is None or drafted is None:
        return
    k = len(per) if per else None
    tol = 0.0051 + (0.0005 * k if k else 0.0)  # the line prints 2 decimals for the mean, 3 per position
    if per and mean is not None:
        gain = sum(per)
        if abs(1 + gain - mean) <= tol:
            pass
        elif row["format"] == "vllm-0.9" and abs(gain - mean) <= tol and abs(1 + gain - mean) > tol:
            row["accept_length"] = mean = mean + 1.0  # vLLM 0.8.5: accepted / drafts, the bonus left out
            row["mean_without_bonus"] = True
        else:
            raise Garbled(f"Per-position acceptance rate sums to {gain:.3f}, not Mean acceptance length - 1 = "
                          f"{mean - 1:.3f} (a list cut short?)")
    fixed = drafted // k if k and drafted % k == 0 else None
    if fixed and (mean is None or abs(accept_length(accepted, fixed) - mean) <= 0.0051):
        row["drafts"] = fixed
    elif mean is not None and mean > 1 and accepted > 0:
        row["drafts"], row["variable"] = drafts_from(accepted, mean), True
    elif fixed:
        row["drafts"] = fixed


def _llamacpp(body: str) -> dict:
    """llama.cpp's per-request `draft acceptance = R (A accepted / G generated)[, name = value ...]`."""
    m = _LLAMA_BODY.match(body.strip())
    if not m:
        raise Garbled("draft acceptance without '(N accepted / M generated)'")
    ratio = _num(m["ratio"], "draft acceptance")
    accepted, generated = _int(m["acc"], "accepted"), _int(m["gen"], "generated")
    decimals = len(m["ratio"].partition(".")[2])  # 5 (%0.5f) in every release read
    if generated and abs(ratio - accepted / generated) > 0.5 * 10.0 ** -decimals + 1e-6:
        raise Garbled(f"draft acceptance {ratio} is not accepted / generated = {accepted / generated:.5f}")
    row = {"engine": "llamacpp", "format": "llamacpp-old", "accept_rate": ratio, "accepted": accepted,
           "drafted": generated, "steps_exact": False}  # verify steps: `_llamacpp_steps`
    rest = m["rest"].strip()
    fields = {}
    if rest:
        if not rest.startswith(","):
            raise Garbled(f"text after the counts: {rest[:40]!r}")
        for part in _LLAMA_SPLIT.split(rest[1:].strip()):
            key, sep, value = part.partition("=")
            if sep:  # a fork's field without ' = ' is not one of ours: skipped
                fields[key.strip()] = value.strip()
    for key, fmt in (("mean acceptance length", "llamacpp"), ("mean len", "llamacpp-mean-len")):
        if key in fields:
            row["accept_length"], row["format"] = _num(fields[key], key), fmt
            break
    pos = fields.get("acceptance rate per position")
    if pos is not None:
        if not (pos.startswith("(") and pos.endswith(")")):
            row["cut"] = True  # the list was cut: the rates are not read
        elif pos[1:-1].strip():
            row["per_position"] = [_num(x, "acceptance rate per position") for x in pos[1:-1].split(",")]
    _llamacpp_steps(row)
    return row


def _llamacpp_steps(row: dict) -> None:
    """Verify steps of a llama.cpp line (module docstring): the one whole number that reproduces its
    printed mean (2 decimals) and each per-position rate (3 decimals), `steps_exact`; else accepted /
    (mean - 1), not exact; None where the mean says nothing (1.00: nothing accepted)."""
    mean, acc, per = row.get("accept_length"), row["accepted"], row.get("per_position")
    row.pop("drafts", None)
    if per is not None and mean is not None and abs(1 + sum(per) - mean) > 0.0051 + 0.0005 * len(per):
        raise Garbled(f"acceptance rate per position sums to {sum(per):.3f}, not mean - 1 = {mean - 1:.3f}")
    if mean is None or row.get("cut"):
        return
    row["steps_exact"] = False
    if acc == 0 or mean <= 1.0:
        return
    lo, hi = acc / (mean - 1 + 0.005), (acc / (mean - 1 - 0.005) if mean - 1 > 0.005 else float("inf"))
    steps = [s for s in range(max(1, int(lo)), int(min(hi, lo + 1000)) + 1)
             if abs(accept_length(acc, s) - mean) <= 0.005 + 1e-9]
    if per:
        # each rate is a count at that position / steps, printed with 3 decimals; the counts are whole
        # and fall from position to position, at most `acc` in all
        # (below 1000 steps each printed rate names one count; above, only their sum is checked)
        def fits(s):
            if s >= 1000:
                return abs(acc / s - sum(per)) <= 0.0005 * len(per) + 1e-9
            counts = [round(p * s) for p in per]
            return (sum(counts) == acc and all(abs(c / s - p) <= 0.0005 + 1e-9 for c, p in zip(counts, per))
                    and all(a >= b for a, b in zip(counts, counts[1:])))
        steps = [s for s in steps if fits(s)]
    if len(steps) == 1:
        row["drafts"], row["steps_exact"] = steps[0], True
    else:
        row["drafts"] = drafts_from(acc, mean)


def _vllm_stats(body: str) -> dict:
    """vLLM's engine stats line, printed just before its SpecDecoding line: generation tok/s,
    running and waiting requests. Returned as a context row (kind "stats")."""
    f = _fields(body.rstrip(". "))
    if "Avg generation throughput" not in f:
        raise Garbled("no Avg generation throughput")
    row = {"kind": "stats", "engine": "vllm",
           "throughput": _num(f["Avg generation throughput"], "Avg generation throughput", "tokens/s")}
    if "Running" in f:
        row["running_req"] = _int(f["Running"], "Running", "reqs")
    for key in ("Waiting", "Pending"):
        if key in f:
            row["queue_req"] = _int(f[key], key, "reqs")
            break
    return row


def parse_line(line: str, year: int | None = None) -> dict | None:
    """One log line -> a row dict, or None when it is not a line this module reads.

    Raises `Garbled` when the line is an SGLang decode line or a vLLM SpecDecoding line but a
    number in it does not read. vLLM's engine stats line (`Avg generation throughput: ...`)
    comes back with kind "stats": `parse_lines` puts its generation tok/s and request counts on
    the SpecDecoding row that follows it; llama.cpp's trace-level `acc per pos = (...)` line
    comes back with kind "llamacpp-pos", for the llama.cpp row before it.
    """
    line = line.rstrip("\r\n")
    m = _SGL_HEAD.search(line)
    v = None if m else _VLLM_HEAD.search(line)
    st = None if m or v or "Avg generation throughput: " not in line else _VLLM_STATS.search(line)
    ll = None if m or v or st or "draft acceptance" not in line else _LLAMA_HEAD.search(line)
    if not m and not v and not st and not ll:
        pos = _LLAMA_POS.search(line) if "acc per pos = (" in line else None
        if pos:  # llama.cpp's trace-level per-position line after its `mean len` line
            return {"kind": "llamacpp-pos", "per_position": [_num(x, "acc per pos") for x in pos["v"].split(",")
                                                              if x.strip()]}
        return None
    year = _dt.date.today().year if year is None else int(year)
    t, _ = _timestamp(line, year)
    if st:
        row = _vllm_stats(line[st.end():])
    elif ll:
        row = _llamacpp(line[ll.end():])
    else:
        row = _sglang(line[m.end():], m.group(1)) if m else _vllm(line[v.end():])
    row["time"] = t
    return row
