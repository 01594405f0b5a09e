"""Serving logs -> tables: accept length, acceptance rate and throughput over time.

A log is read line by line with `helpers.serving.log_lines` (the formats, with examples, are
described there); a `LogTable` holds the rows plus what was skipped (garbled or unrecognised
lines, counted, never guessed), the vLLM engine stats lines read as context, the drafting
settings of the first start-up line that states them, the rows out of bounds (`helpers.serving.bounds`:
an accept length below 1 or above what the drafting can emit, a negative count, a rate outside [0, 1];
named in `invalid_rows`, never averaged in), and what the log states about the server's
set-up (`helpers.serving.startup.Setup`: a forced-acceptance benchmark setting, the speculative
algorithm and the draft). A log whose server forced its acceptance is read but never concluded
from: its summary's accept-length figures are None and `report()` is the one line saying why.
"""
from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from helpers.core.errors import BadInputError
from helpers.serving import bounds
from helpers.serving.log_lines import (
    ANSI_COLOUR,
    _CONTAINER,
    _VLLM_TIME,
    COLUMNS,
    Garbled,
    _llamacpp_steps,
    parse_line,
)
from helpers.serving.startup import Setup, drafting_from_line, engine_version_from_line, forced_line


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
    context: int = 0  # vLLM engine stats lines (throughput onto the next row), llama.cpp per-position lines
    drafting: dict = field(default_factory=dict)  # the start-up line's settings (`drafting_from_line`), {} if none
    setup: Setup = field(default_factory=Setup)  # forced acceptance, algorithm, draft the log states
    invalid_rows: list[dict] = field(default_factory=list)  # rows out of bounds ({line, field, value, why}), left out
    starts: list[dict] = field(default_factory=list)  # each server start ({line, drafting}): a run of its own (`runs`)
    temperature: object = None  # `helpers.serving.temperature.Stated`: what the request lines say, or unknown

    def sampling(self) -> dict:
        """The temperature the requests were sampled at (or unknown, and why), the acceptance rule the
        engine applies at it, and the engine's own sampled-decoding defect where the rows show its
        signature (`helpers.engines.defects`)."""
        from helpers.engines.defects import defect_from_rows
        from helpers.serving.temperature import Stated, rule_name

        st = self.temperature if self.temperature is not None else Stated(None)
        engine = self.engines[0] if len(self.engines) == 1 else None
        release = self.release
        match = None if self.forced else defect_from_rows(self.rows, temperature=st.temperature, engine=engine,
                                                           release=release)
        return {"temperature": st.temperature, "temperature_source": st.text(), "temperatures": st.to_dict(),
                "acceptance_rule": rule_name(st.temperature, engine), "engine_release": release,
                "engine_defect": None if match is None else match.to_dict()}

    release: str | None = None  # the engine release the start-up lines state

    @property
    def forced(self) -> dict | None:
        """The forced-acceptance setting the log states ({"setting", "engine", "means", "where", "line"}), or None."""
        return self.setup.forced

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
        """The `logs --json` object: the summary plus every parsed row (times as ISO strings); a
        forced-acceptance log's rows are left out (`forced_acceptance` says why)."""
        d = self.summary()
        if self.forced:
            d["rows"] = []
            return d
        t = self.table.astype(object).where(self.table.notna(), None)
        d["rows"] = [{k: _json_value(v) for k, v in row.items()} for row in t.to_dict(orient="records")]
        return d

    def report(self) -> str:
        """The `logs` command's text: counts, means and the garbled lines; for a forced-acceptance
        log, one line naming the setting and where it was seen."""
        s = self.summary()
        if self.forced:
            return f"{s['path']}: {forced_line(self.forced)}"

        def f(x, spec):
            return "-" if x is None else format(x, spec)

        lines = [
            f"{s['path']}: {', '.join(s['formats']) or 'no'} lines",
            f"  lines {s['lines']:,}: parsed {s['parsed']:,}, garbled {s['garbled']:,} (skipped), "
            f"unrecognised {s['unrecognised']:,}" + (f", context {s['context']:,}" if s["context"] else "")
            + (f"; {s['cut']:,} cut short (kept what reads)" if s["cut"] else "")
            + (f"; {s['empty_intervals']:,} intervals without drafts" if s["empty_intervals"] else "")
            + (f"; {s['variable_length_lines']:,} variable-length drafter lines" if s["variable_length_lines"] else "")
            + (f"; {s['invalid']:,} out of bounds (not averaged)" if s["invalid"] else ""),
            f"  accept length: mean {f(s['mean_accept_length'], '.3f')}, last {f(s['last_accept_length'], '.2f')}"
            + (f", pooled {s['pooled_accept_length']:.4f} (1 + accepted / drafts over the lines: the engine's "
               "counters)" if s["pooled_accept_length"] is not None else ""),
            *_steps_lines(s["verify_steps"]),
            f"  accept rate:   mean {f(s['mean_accept_rate'], '.3f')}",
            f"  throughput:    mean {f(s['mean_throughput'], '.1f')} tok/s",
            f"  time:          {s['first_time'] or '-'} .. {s['last_time'] or '-'}",
        ]
        d = s["drafting"] if self.one_drafting() else {}  # several starts of different drafting: per run, below
        if d and d.get("block"):  # SGLang's DFlash / DSpark: one step drafts a block, verified as a chain
            lines.append(f"  drafting:      {d['algorithm']} block drafting, num_draft_tokens {d['draft_tokens']}: "
                         f"{d['draft_tokens'] - 1} tokens drafted in one step, at most {d['draft_tokens']} emitted per "
                         f"verify step (from the log's {d['source']} line)")
        elif d:
            lines.append(f"  drafting:      steps {d.get('steps', '-')}, topk {d.get('topk', '-')}, draft tokens "
                         f"{d.get('draft_tokens', '-')} (from the log's {d['source']} line)")
        lines += _runs_lines(s["runs"], self.one_drafting())
        lines.append(f"  sampling:      {s['temperature_source']}; acceptance rule "
                     f"{s['acceptance_rule'] or 'unknown (engine not stated)'}"
                     + (" if the requests were sampled" if s['temperature'] is None and s['acceptance_rule'] else ""))
        if s["engine_defect"]:
            lines.append(f"  engine defect: {s['engine_defect']['conclusion']}")
        lines += [f"  garbled line {g['line']}: {g['reason']}" for g in s["garbled_lines"][:10]]
        lines += [f"  invalid line {r['line']}: {r['why']} (not averaged)" for r in s["invalid_rows"][:10]]
        lines += [f"  finding: {f['code']} ({f['severity']}): {f['message']}; fix: {f['fix']}" for f in s["findings"]]
        return "\n".join(lines)

    def runs(self) -> list[dict]:
        """Each server start's run: {run, start_line, end_line, drafting, parsed, invalid, mean_accept_length,
        pooled_accept_length}; one run for a log with at most one start-up line."""
        starts = self.starts or [{"line": None, "drafting": self.drafting}]
        out = []
        for k, rows in enumerate(_runs(starts, self.rows) if len(starts) > 1 else [self.rows]):
            nxt = starts[k + 1]["line"] - 1 if k + 1 < len(starts) else self.total
            lo = starts[k]["line"] if k else 0
            lengths = [] if self.forced else [r["accept_length"] for r in rows if r.get("accept_length") is not None]
            out.append({"run": k + 1, "start_line": starts[k]["line"], "end_line": nxt,
                        "drafting": dict(_run_drafting(starts, k, self.drafting)), "parsed": len(rows),
                        "invalid": sum(1 for r in self.invalid_rows if isinstance(r["line"], int) and lo <= r["line"] <= nxt),
                        "mean_accept_length": float(sum(lengths) / len(lengths)) if lengths else None,
                        "pooled_accept_length": None if self.forced else _pooled(rows)})
        return out

    def serving_rows(self) -> tuple[list[dict], dict | None]:
        """The rows that describe the server as it ran last: every row when every start ran the same drafting
        (None), else the last start's rows with its run (`runs()[-1]`): a restart with other drafting ended
        the earlier runs, and rows of different drafting never pool."""
        if len(self.starts) < 2 or self.one_drafting():
            return self.rows, None
        return _runs(self.starts, self.rows)[-1], self.runs()[-1]

    def one_drafting(self) -> bool:
        """Whether every server start in the log ran the same drafting (figures may pool across them)."""
        seen = {tuple(sorted((k, str(v)) for k, v in r["drafting"].items() if k != "source")) for r in self.runs()}
        return len(seen) <= 1

    def pooled_accept_length(self) -> float | None:
        """1 + accepted / drafts summed over the lines that count both (vLLM's `SpecDecoding metrics`):
        the run's accept length, each interval weighted by its drafts, as the engine's own counters
        give it. `mean_accept_length` is the plain mean of the printed per-interval figures. None when
        no line counts drafts (SGLang's decode lines print only the interval's accept length)."""
        return _pooled(self.rows)

    def verify_steps(self) -> dict | None:
        """llama.cpp's lines: how many requests' verify steps the log gives exactly (`log_lines._llamacpp_steps`),
        how many only approximately, how many not at all (nothing accepted, or no mean printed). None for
        other engines (their lines count their steps)."""
        rows = [r for r in self.rows if "steps_exact" in r and not r.get("cut")]  # llama.cpp's rows carry it
        if not rows:
            return None
        exact = [r["line"] for r in rows if r.get("steps_exact")]
        inexact = [r["line"] for r in rows if r.get("drafts") is not None and not r.get("steps_exact")]
        unknown = [r["line"] for r in rows if r.get("drafts") is None]
        return {"exact": len(exact), "inexact": len(inexact), "unknown": len(unknown), "inexact_lines": inexact[:20],
                "unknown_lines": unknown[:20], "pooled_exact": not inexact and not unknown}

    def summary(self) -> dict:
        """Counts and the mean / last accept length, rate and throughput (JSON-ready), what the log
        states about its server (`speculative_algorithm`, `forced_acceptance`) and the findings the
        log alone shows (`eagle3-as-eagle`). A forced log's accept-length and rate figures are None."""
        def mean(col):
            if self.forced and col != "throughput":  # forced: only the system's own speed is measured
                return None
            xs = self.column(col)
            return float(sum(xs) / len(xs)) if xs else None

        times = self.column("time")
        lengths = [] if self.forced else self.column("accept_length")
        wrong = self.setup.wrong_algorithm()
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
            "invalid": len(self.invalid_rows),
            "invalid_rows": [dict(r) for r in self.invalid_rows],
            "cut": sum(1 for r in self.rows if r.get("cut")),
            "empty_intervals": sum(1 for r in self.rows if r.get("drafts") == 0),
            "variable_length_lines": sum(1 for r in self.rows if r.get("variable")),
            "verify_steps": self.verify_steps(),
            "mean_accept_length": mean("accept_length") if self.one_drafting() else None,
            "pooled_accept_length": None if self.forced or not self.one_drafting() else self.pooled_accept_length(),
            "runs": self.runs(),
            "last_accept_length": float(lengths[-1]) if lengths else None,
            "mean_accept_rate": mean("accept_rate"),
            "mean_throughput": mean("throughput"),
            "first_time": str(min(times)) if times else None,
            "last_time": str(max(times)) if times else None,
            "drafting": dict(self.drafting),
            "forced_acceptance": None if self.forced is None else dict(self.forced),
            "speculative_algorithm": {k: v for k, v in self.setup.to_dict().items() if k != "forced_acceptance"},
            "findings": [] if wrong is None else [wrong],
            **self.sampling(),
        }


def _pooled(rows) -> float | None:
    rows = [r for r in rows if r.get("accepted") is not None and r.get("drafts")]
    drafts = sum(r["drafts"] for r in rows)
    return 1 + sum(r["accepted"] for r in rows) / drafts if drafts else None


def _runs_lines(runs: list[dict], same: bool) -> list[str]:
    """The report's lines for a log with several server starts: each its own run."""
    if len(runs) < 2:
        return []
    out = [f"  {len(runs)} server starts (lines {', '.join(str(r['start_line']) for r in runs)}): each is its own run, "
           "with its own drafting and figures" + ("" if same else "; their drafting differs, so no figure pools them")]
    for r in runs:
        d = r["drafting"]
        shape = (f"{d.get('algorithm', '')} block of {d['draft_tokens'] - 1}".strip() if d.get("block") else
                 f"steps {d.get('steps', '-')}, topk {d.get('topk', '-')}, draft tokens {d.get('draft_tokens', '-')}"
                 if d else "drafting not stated")
        mean, pooled = r["mean_accept_length"], r["pooled_accept_length"]
        out.append(f"    run {r['run']} (lines {r['start_line'] or 1}-{r['end_line']}; {shape}): {r['parsed']} rows"
                   + (f", {r['invalid']} out of bounds" if r["invalid"] else "")
                   + (f", mean accept length {mean:.3f}" if mean is not None else "")
                   + (f", pooled {pooled:.4f}" if pooled is not None else ""))
    return out


def _steps_lines(v: dict | None) -> list[str]:
    """The report's line on llama.cpp's verify steps, which its log does not print."""
    if not v:
        return []
    if v["pooled_exact"]:
        return [f"  verify steps:  exact for all {v['exact']} requests (from each line's mean len, narrowed by acc "
                "per pos where printed): the pooled figure is llama-server's /metrics counters' 1 + accepted / drafts"]
    parts = [f"{v['exact']} exact"]
    if v["inexact"]:
        parts.append(f"{v['inexact']} approximate (accepted / (mean len - 1); line {v['inexact_lines'][0]}...)")
    if v["unknown"]:
        parts.append(f"{v['unknown']} unknown (nothing accepted or no mean printed; line {v['unknown_lines'][0]}..., "
                     "left out)")
    return [f"  verify steps:  {', '.join(parts)}: the pooled figure is NOT exactly llama-server's counters"]


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
    drafting, setup = {}, Setup()
    starts = []  # server starts: a start-up line after rows begins a new run with its own drafting
    requests, release = [], None  # request lines stating their sampling; the engine's release
    for n, line in enumerate(lines, start=1):
        total += 1
        if "\x1b" in line:
            line = ANSI_COLOUR.sub("", line)
        if "ampling" in line:
            requests.append((n, line))
        try:
            row = parse_line(line, year=year)
        except Garbled as e:
            garbled.append((n, str(e)))
            continue
        if row is None:
            unrecognised += 1
            stated = drafting_from_line(line)
            if _is_start(line, stated):
                if not starts or any(r["line"] > starts[-1]["line"] for r in rows):  # rows since the last start
                    starts.append({"line": n, "drafting": {}})
                if stated and not starts[-1]["drafting"]:
                    starts[-1]["drafting"] = stated
            if not drafting:
                drafting = stated
            if release is None:
                ev = engine_version_from_line(line)
                release = ev[1] if ev else None
            setup.feed(line, n, path)
            continue
        kind = row.pop("kind", None)
        if kind == "stats":
            context += 1
            pending = row
            continue
        if kind == "llamacpp-pos":  # per position of the llama.cpp line before it (trace verbosity)
            context += 1
            last = rows[-1] if rows else None
            if last is not None and last["engine"] == "llamacpp" and not last.get("per_position"):
                before = {k: last.get(k) for k in ("per_position", "drafts", "steps_exact")}
                last["per_position"] = row["per_position"]
                try:  # the rates narrow the verify steps the mean allows (`log_lines._llamacpp_steps`)
                    _llamacpp_steps(last)
                except Garbled as e:  # rates that cannot belong to the line's mean: the line is not read
                    garbled.append((last["line"], f"{e} (acc per pos on line {n})"))
                    rows.pop()
                    continue
                if last.get("drafts") is None and before["drafts"] is not None:
                    last.update(before)
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
    # bounds last, run by run: each server start's rows under its own drafting (a start-up line stating the
    # drafting after rows of the same start still bounds them)
    if len(starts) > 1 or (starts and any(r["line"] < starts[0]["line"] for r in rows)):
        kept, invalid = [], []
        for k, run in enumerate(_runs(starts, rows)):
            got, bad = bounds.split(run, bounds.maximum_for(_run_drafting(starts, k, drafting)))
            kept += got
            invalid += bad
        rows = kept
    else:
        rows, invalid = bounds.split(rows, bounds.maximum_for(drafting))
    return LogTable(path=path, rows=rows, total=total, unrecognised=unrecognised, garbled=len(garbled),
                    garbled_lines=garbled, context=context, drafting=drafting, setup=setup, invalid_rows=invalid,
                    starts=starts,
                    temperature=_stated_temperature(requests, path), release=release)


def _stated_temperature(lines, path):
    from helpers.serving.temperature import from_log_lines

    st = from_log_lines(lines, path)
    if not st.values:
        st.source = (f"{path or 'the log'}: no request line states it (vLLM logs it with --enable-log-requests, "
                     "SGLang with --log-requests)")
    return st


_LISTENING = ("server is listening on", "Starting vLLM API server", "The server is fired up", "Uvicorn running on")


def _is_start(line: str, stated: dict) -> bool:
    """Whether an unrecognised line is a server's start-up line: one stating the drafting settings
    (SGLang's server_args, vLLM's non-default args), the engine's release (vLLM's version line) or
    that the server is up (llama-server's `server is listening`)."""
    from helpers.serving.startup import engine_version_from_line

    return bool(stated) or engine_version_from_line(line) is not None or any(x in line for x in _LISTENING)


def _runs(starts: list[dict], rows: list[dict]) -> list[list[dict]]:
    """The rows of each run: run k holds the rows from start k's line to start k + 1's (rows before the
    first start line belong to the first run: a log whose head was cut)."""
    bounds_at = [s["line"] for s in starts[1:]] + [float("inf")]
    out, k = [[] for _ in starts], 0
    for r in rows:
        while r["line"] > bounds_at[k]:
            k += 1
        out[k].append(r)
    return out


def _run_drafting(starts: list[dict], k: int, first: dict) -> dict:
    """Run k's drafting: its own start-up line's; the first run, without one, the log's first stated."""
    return starts[k]["drafting"] or (first if k == 0 and len(starts) == 1 else {})


def read_log(path: str | os.PathLike, year: int | None = None) -> LogTable:
    """Read an SGLang, vLLM or llama.cpp server log file into a `LogTable`.

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
    if result.parsed == 0 and result.invalid_rows:
        raise BadInputError(p, f"no line within bounds: {len(result.invalid_rows)} out of bounds, not averaged ("
                            f"{bounds.summary_line(result.invalid_rows)})")
    if result.parsed == 0:
        raise BadInputError(
            p, "no SGLang 'Decode batch' or vLLM 'SpecDecoding metrics' line (nor llama.cpp 'draft acceptance' line) "
            f"with readable numbers among {result.total} lines ({result.garbled} garbled)",
        )
    return result


def pooled_measurement(tables) -> tuple[float | None, float | None, int]:
    """(mean accept length, mean generation tok/s, rows) over every parsed row of several logs,
    each row weighted alike; None where no row has the number. A log made with acceptance forced
    (`LogTable.forced`) is refused with its one line: its numbers are the setting's, not the draft's."""
    for t in tables:
        if t.forced:
            raise BadInputError(t.path, forced_line(t.forced))
    lengths = [x for t in tables for x in t.column("accept_length")]
    tps = [x for t in tables for x in t.column("throughput")]
    mean = lambda xs: float(sum(xs) / len(xs)) if xs else None  # noqa: E731
    return mean(lengths), mean(tps), sum(t.parsed for t in tables)
