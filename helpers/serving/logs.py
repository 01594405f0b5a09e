"""Serving logs -> tables: accept length, acceptance rate and throughput over time.

Reads the periodic speculative-decoding lines of two engines (formats checked against their
public source):

SGLang (scheduler, every `--decode-log-interval` decode steps), current form:
    [2026-01-05 10:00:00 TP0] Decode batch, #running-req: 1, #token: 2154, token usage: 0.01,
    accept len: 1.90, accept rate: 0.12, cuda graph: True, gen throughput (token/s): 46.70,
    #queue-req: 0
  (one line; hybrid models print `#full token:` / `full token usage:` instead of `#token:`,
  disaggregated decode adds `pre-allocated usage:` etc., `cpu graph:` / `npu graph:` replace
  `cuda graph:`, and `Decode batch [N],` carries a forward counter when enabled). Older builds:
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

A line is `parsed` when it is one of these and every number in it reads; `garbled` when it is
one of these but a number does not read (two dots, letters, cut before its accept length): it
is skipped and counted, never guessed; anything else is `unrecognised`, counted and skipped. A
line cut after its accept length (no `#queue-req` / no `Avg Draft acceptance rate`) keeps the
fields that end before the cut (its last, possibly cut, field dropped) with `cut` set. A
container prefix (docker compose's `svc-1  | `) is skipped when reading the time.
"""
from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from helpers.core.errors import BadInputError

COLUMNS = [
    "line", "time", "seconds", "engine", "format", "accept_length", "accept_rate", "throughput",
    "running_req", "queue_req", "tokens", "token_usage", "cuda_graph", "accepted", "drafted",
    "accepted_tps", "drafted_tps", "per_position", "drafts", "variable", "cut",
]

_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
# `, ` followed by `Key: ` where a key starts with a letter or '#' and holds no ':' or ','
_FIELD_SPLIT = re.compile(r",\s+(?=[A-Za-z#][^:,]*:\s)")

_SGL_HEAD = re.compile(r"Decode batch(?: \[\d+\])?([.,]) ")
_VLLM_HEAD = re.compile(r"SpecDecoding metrics: ")
_VLLM_STATS = re.compile(r"(?:Engine \d+: )?(?=Avg prompt throughput: )")
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
    for key in ("cuda graph", "cpu graph", "npu graph"):
        if key in f:
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
    elif next(iter(f), None) == "Draft acceptance rate":  # 0.8.5-0.10.1 (with a mean), older V1 (without)
        row["format"] = "vllm-0.9" if "Mean acceptance length" in f else "vllm-old"
        rate_key = "Draft acceptance rate"
        last = "Per-position acceptance rate" if row["format"] == "vllm-0.9" else "Drafted"
        complete = "..." not in f and last in f and (last != "Drafted" or f[last].endswith("tokens"))
    elif next(iter(f), None) == "Mean acceptance length":
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
    if fixed and (mean is None or abs(1 + accepted / fixed - mean) <= 0.0051):
        row["drafts"] = fixed
    elif mean is not None and mean > 1 and accepted > 0:
        row["drafts"], row["variable"] = accepted / (mean - 1.0), True
    elif fixed:
        row["drafts"] = fixed


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
    the SpecDecoding row that follows it.
    """
    line = line.rstrip("\r\n")
    m = _SGL_HEAD.search(line)
    v = None if m else _VLLM_HEAD.search(line)
    st = None if m or v or "Avg generation throughput: " not in line else _VLLM_STATS.search(line)
    if not m and not v and not st:
        return None
    year = _dt.date.today().year if year is None else int(year)
    t, _ = _timestamp(line, year)
    if st:
        row = _vllm_stats(line[st.end():])
    else:
        row = _sglang(line[m.end():], m.group(1)) if m else _vllm(line[v.end():])
    row["time"] = t
    return row


@dataclass
class LogTable:
    """A parsed log: its rows over time plus what was skipped.

    `rows` are plain dicts (`COLUMNS` keys); `table` builds the pandas DataFrame on first use,
    so reading and summarising a log needs no pandas (the `logs` command starts fast).
    """

    path: str | None
    rows: list[dict]
    total: int  # lines read
    unrecognised: int  # lines that are not decode / SpecDecoding lines
    garbled: int  # recognised lines with a number that does not read (skipped)
    garbled_lines: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)
    context: int = 0  # vLLM engine stats lines whose throughput went onto the next row
    drafting: dict = field(default_factory=dict)  # the start-up line's settings (`drafting_from_line`), {} if none

    @property
    def parsed(self) -> int:
        return len(self.rows)

    @property
    def engines(self) -> list[str]:
        return sorted({r["engine"] for r in self.rows})

    def column(self, name: str) -> list:
        """The non-missing values of one column, in order."""
        return [r[name] for r in self.rows if r.get(name) is not None]

    @cached_property
    def table(self):
        """The rows as a pandas DataFrame (floats, nullable integers, datetimes, `seconds` since the first)."""
        import numpy as np
        import pandas as pd

        table = pd.DataFrame(self.rows, columns=COLUMNS)
        table["time"] = pd.to_datetime(table["time"])
        if len(table) and table["time"].notna().any():
            table["seconds"] = (table["time"] - table["time"].min()).dt.total_seconds()
        else:
            table["seconds"] = np.nan
        for col in ("accept_length", "accept_rate", "throughput", "token_usage", "accepted_tps", "drafted_tps", "seconds",
                    "drafts"):
            table[col] = table[col].astype(float)
        for col in ("running_req", "queue_req", "tokens", "accepted", "drafted", "line"):
            table[col] = table[col].astype("Int64")
        return table

    def to_json(self) -> dict:
        """The `logs --json` object: the summary plus every parsed row (times as ISO strings)."""
        d = self.summary()
        t = self.table.astype(object).where(self.table.notna(), None)
        d["rows"] = [{k: _json_value(v) for k, v in row.items()} for row in t.to_dict(orient="records")]
        return d

    def report(self) -> str:
        """The `logs` command's text: counts, means and the garbled lines."""
        s = self.summary()

        def f(x, spec):
            return "-" if x is None else format(x, spec)

        lines = [
            f"{s['path']}: {', '.join(s['formats']) or 'no'} lines",
            f"  lines {s['lines']:,}: parsed {s['parsed']:,}, garbled {s['garbled']:,} (skipped), "
            f"unrecognised {s['unrecognised']:,}" + (f", engine stats {s['context']:,}" if s["context"] else "")
            + (f"; {s['cut']:,} cut short (kept what reads)" if s["cut"] else "")
            + (f"; {s['empty_intervals']:,} intervals without drafts" if s["empty_intervals"] else "")
            + (f"; {s['variable_length_lines']:,} variable-length drafter lines" if s["variable_length_lines"] else ""),
            f"  accept length: mean {f(s['mean_accept_length'], '.3f')}, last {f(s['last_accept_length'], '.2f')}",
            f"  accept rate:   mean {f(s['mean_accept_rate'], '.3f')}",
            f"  throughput:    mean {f(s['mean_throughput'], '.1f')} tok/s",
            f"  time:          {s['first_time'] or '-'} .. {s['last_time'] or '-'}",
        ]
        d = s["drafting"]
        if d:
            lines.append(f"  drafting:      steps {d.get('steps', '-')}, topk {d.get('topk', '-')}, draft tokens "
                         f"{d.get('draft_tokens', '-')} (from the log's {d['source']} line)")
        lines += [f"  garbled line {g['line']}: {g['reason']}" for g in s["garbled_lines"][:10]]
        return "\n".join(lines)

    def summary(self) -> dict:
        """Counts and the mean / last accept length, rate and throughput (JSON-ready)."""
        def mean(col):
            xs = self.column(col)
            return float(sum(xs) / len(xs)) if xs else None

        times = self.column("time")
        lengths = self.column("accept_length")
        return {
            "path": self.path,
            "engines": self.engines,
            "formats": sorted({r["format"] for r in self.rows}),
            "lines": self.total,
            "parsed": self.parsed,
            "unrecognised": self.unrecognised,
            "context": self.context,
            "garbled": self.garbled,
            "garbled_lines": [{"line": n, "reason": r} for n, r in self.garbled_lines],
            "cut": sum(1 for r in self.rows if r.get("cut")),
            "empty_intervals": sum(1 for r in self.rows if r.get("drafts") == 0),
            "variable_length_lines": sum(1 for r in self.rows if r.get("variable")),
            "mean_accept_length": mean("accept_length"),
            "last_accept_length": float(lengths[-1]) if lengths else None,
            "mean_accept_rate": mean("accept_rate"),
            "mean_throughput": mean("throughput"),
            "first_time": str(min(times)) if times else None,
            "last_time": str(max(times)) if times else None,
            "drafting": dict(self.drafting),
        }


def _json_value(v):
    """A table cell as JSON: None for missing, ISO text for times, Python numbers."""
    if v is None or (isinstance(v, float) and v != v):
        return None
    if hasattr(v, "isoformat"):
        return None if str(v) == "NaT" else v.isoformat()
    return v.item() if hasattr(v, "item") else v


def parse_lines(lines, path: str | None = None, year: int | None = None) -> LogTable:
    """Iterable of lines -> `LogTable`. vLLM's year-less times get `year` (default: this year),
    and a year is added when the month goes backwards (a log across New Year)."""
    year = _dt.date.today().year if year is None else int(year)
    rows, garbled, unrecognised, total, context = [], [], 0, 0, 0
    last_vllm_month = None
    pending = None  # the last vLLM engine stats line, waiting for its SpecDecoding line
    drafting = {}
    for n, line in enumerate(lines, start=1):
        total += 1
        try:
            row = parse_line(line, year=year)
        except Garbled as e:
            garbled.append((n, str(e)))
            continue
        if row is None:
            unrecognised += 1
            if not drafting:
                drafting = drafting_from_line(line)
            continue
        if row.pop("kind", None) == "stats":
            context += 1
            pending = row
            continue
        if row["engine"] == "vllm" and pending is not None:
            for key in ("throughput", "running_req", "queue_req"):
                if key in pending:
                    row[key] = pending[key]
        pending = None
        if row["engine"] == "vllm" and row["time"] is not None and _VLLM_TIME.match(_CONTAINER.sub("", line, count=1)):
            month = row["time"].month
            if last_vllm_month is not None and month < last_vllm_month:
                year += 1
                row["time"] = row["time"].replace(year=year)
            last_vllm_month = month
        row["line"] = n
        rows.append(row)
    return LogTable(path=path, rows=rows, total=total, unrecognised=unrecognised,
                    garbled=len(garbled), garbled_lines=garbled, context=context, drafting=drafting)


def read_log(path: str | os.PathLike, year: int | None = None) -> LogTable:
    """Read an SGLang or vLLM server log file into a `LogTable`.

    Raises BadInputError when the file cannot be read or holds no line this module reads.
    """
    p = Path(path)
    if not p.is_file():
        raise BadInputError(p, "no such log file" if not p.exists() else "not a file")
    try:
        with open(p, encoding="utf-8", errors="replace") as fh:
            result = parse_lines(fh, path=str(p), year=year)
    except OSError as e:
        raise BadInputError(p, f"cannot read: {e.strerror or e}") from None
    if result.parsed == 0:
        raise BadInputError(
            p, f"no SGLang 'Decode batch' or vLLM 'SpecDecoding metrics' line with readable numbers "
            f"among {result.total} lines ({result.garbled} garbled)",
        )
    return result


# -- drafting settings from a log's start-up lines ----------------------------------------------
_SGL_ARG = re.compile(r"(?<![\w])['\"]?(speculative_num_steps|speculative_eagle_topk|speculative_num_draft_tokens)"
                      r"['\"]?\s*[:=]\s*(\d+)\b")
_VLLM_TOKENS = re.compile(r"['\"]?(?:num_speculative_tokens|num_spec_tokens)['\"]?\s*[:=]\s*(\d+)")
_SGL_NAMES = {"speculative_num_steps": "steps", "speculative_eagle_topk": "topk",
              "speculative_num_draft_tokens": "draft_tokens"}


def drafting_from_line(line: str) -> dict:
    """Drafting settings stated on one start-up line, in the kit's names (see `helpers.ui.settings`).

    SGLang's `server_args=ServerArgs(... speculative_num_steps=5, speculative_eagle_topk=4,
    speculative_num_draft_tokens=16 ...)` (0.5.18 and before) or the dict form of later builds,
    `server_args={... 'speculative_num_steps': 5, ...}`, gives steps / topk / draft_tokens as the server ran
    them; vLLM's `non-default args: {... 'num_speculative_tokens': 3 ...}` (or a
    `SpeculativeConfig(... num_spec_tokens=3 ...)`) is a chain: steps 3, topk 1, draft_tokens 4.
    Returns {} for any other line; `source` names the line's kind.
    """
    if "server_args=" in line:
        found = {_SGL_NAMES[k]: int(v) for k, v in _SGL_ARG.findall(line)}
        return {**found, "source": "server_args"} if found else {}
    if "speculative" in line.lower() or "num_spec_tokens" in line:
        m = _VLLM_TOKENS.search(line)
        if m:
            k = int(m.group(1))
            return {"steps": k, "topk": 1, "draft_tokens": k + 1, "source": "num_speculative_tokens"}
    return {}


# -- the engine's release from a log's start-up lines ----------------------------------------------
# vLLM prints its version at start-up ("vLLM API server version X" up to 0.14, "vLLM server version
# X, serving model M" and "Initializing a V1 LLM engine (vX) with config" later). SGLang prints none
# in any release read (0.4.6-0.5.23): its version is read from `python -m sglang.check_env` output
# ("sglang: X") or a `pip freeze` line ("sglang==X") kept at the top of the log.
_VERSION = r"v?(\d+(?:\.\d+)+(?:[.+-]?[A-Za-z0-9]+)*)"
_ENGINE_VERSION = (
    ("vllm", re.compile(r"vLLM (?:API )?server version " + _VERSION)),
    ("vllm", re.compile(r"Initializing an? (?:V1 )?LLM engine \(" + _VERSION + r"\)")),
    ("sglang", re.compile(r"^\s*sglang\s*:\s*" + _VERSION + r"\s*$")),
    ("sglang", re.compile(r"^\s*sglang==" + _VERSION + r"\s*$")),
    ("vllm", re.compile(r"^\s*vllm\s*:\s*" + _VERSION + r"\s*$")),
    ("vllm", re.compile(r"^\s*vllm==" + _VERSION + r"\s*$")),
)


def engine_version_from_line(line: str) -> tuple[str, str] | None:
    """(engine, version) when one start-up line states the serving engine's release, else None."""
    for engine, pattern in _ENGINE_VERSION:
        m = pattern.search(line)
        if m:
            return engine, m.group(1).rstrip(".,")
    return None


def read_engine_version(path, max_lines: int = 5000) -> tuple[str, str] | None:
    """(engine, version) from the first line within `max_lines` that states one, or None."""
    p = Path(path)
    if not p.is_file():
        raise BadInputError(p, "no such log file" if not p.exists() else "not a file")
    try:
        with open(p, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh):
                if n >= max_lines:
                    break
                found = engine_version_from_line(line)
                if found:
                    return found
    except OSError as e:
        raise BadInputError(p, f"cannot read: {e.strerror or e}") from None
    return None


def pooled_measurement(tables) -> tuple[float | None, float | None, int]:
    """(mean accept length, mean generation tok/s, rows) over every parsed row of several logs,
    each row weighted alike; None where no row has the number."""
    lengths = [x for t in tables for x in t.column("accept_length")]
    tps = [x for t in tables for x in t.column("throughput")]
    mean = lambda xs: float(sum(xs) / len(xs)) if xs else None  # noqa: E731
    return mean(lengths), mean(tps), sum(t.parsed for t in tables)


def read_drafting(path, max_lines: int = 5000) -> dict:
    """The drafting settings a log states at start-up (first such line within `max_lines`), or {}."""
    p = Path(path)
    if not p.is_file():
        raise BadInputError(p, "no such log file" if not p.exists() else "not a file")
    try:
        with open(p, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh):
                if n >= max_lines:
                    break
                found = drafting_from_line(line)
                if found:
                    return found
    except OSError as e:
        raise BadInputError(p, f"cannot read: {e.strerror or e}") from None
    return {}
