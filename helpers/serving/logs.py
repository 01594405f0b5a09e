"""Serving logs -> tables: accept length, acceptance rate and throughput over time.

A log is read line by line with `helpers.serving.log_lines` (the formats, with examples, are
described there); a `LogTable` holds the rows plus what was skipped (garbled or unrecognised
lines, counted, never guessed), the vLLM engine stats lines read as context, and the drafting
settings of the first start-up line that states them (`helpers.serving.startup`).
"""
from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from helpers.core.errors import BadInputError
from helpers.serving.log_lines import (
    _CONTAINER,
    _VLLM_TIME,
    COLUMNS,
    Garbled,
    parse_line,
)
from helpers.serving.startup import drafting_from_line


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
            f"  accept length: mean {f(s['mean_accept_length'], '.3f')}, last {f(s['last_accept_length'], '.2f')}"
            + (f", pooled {s['pooled_accept_length']:.4f} (1 + accepted / drafts over the lines: the engine's "
               "counters)" if s["pooled_accept_length"] is not None else ""),
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

    def pooled_accept_length(self) -> float | None:
        """1 + accepted / drafts summed over the lines that count both (vLLM's `SpecDecoding metrics`):
        the run's accept length, each interval weighted by its drafts, as the engine's own counters
        give it. `mean_accept_length` is the plain mean of the printed per-interval figures. None when
        no line counts drafts (SGLang's decode lines print only the interval's accept length)."""
        rows = [r for r in self.rows if r.get("accepted") is not None and r.get("drafts")]
        drafts = sum(r["drafts"] for r in rows)
        return 1 + sum(r["accepted"] for r in rows) / drafts if drafts else None

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
            "pooled_accept_length": self.pooled_accept_length(),
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


def pooled_measurement(tables) -> tuple[float | None, float | None, int]:
    """(mean accept length, mean generation tok/s, rows) over every parsed row of several logs,
    each row weighted alike; None where no row has the number."""
    lengths = [x for t in tables for x in t.column("accept_length")]
    tps = [x for t in tables for x in t.column("throughput")]
    mean = lambda xs: float(sum(xs) / len(xs)) if xs else None  # noqa: E731
    return mean(lengths), mean(tps), sum(t.parsed for t in tables)
