"""Serving and training acceptance figures -> one table shape, from every place users read them.

Sources (field names checked against the projects' source; versions in docs/serving-metrics.md; each
engine's names for its counts, and the accept length they make, are `helpers.engines.counting`'s):

- vLLM Prometheus exposition (`/metrics`, a saved text or a live URL): counters
  `vllm:spec_decode_num_drafts`, `vllm:spec_decode_num_draft_tokens`,
  `vllm:spec_decode_num_accepted_tokens` and `vllm:spec_decode_num_accepted_tokens_per_pos`
  (label `position`), exposed with the `_total` suffix. Read with prometheus_client's text
  parser; summed over the other labels (engines, models). Two scrapes are differenced.
- llama.cpp's `llama-server --metrics` exposition: the same four counters under its own prefix,
  `llamacpp:spec_decode_num_drafts_total` (verify steps that carried a draft),
  `..._num_draft_tokens_total`, `..._num_accepted_tokens_total` and
  `..._num_accepted_tokens_per_pos_total{position="i"}` (tools/server/server-task.cpp
  `to_metrics`), read the same way (kind `llamacpp-prometheus`): accept length 1 + accepted /
  drafts, as its log's `mean len`. Two llama.cpp habits are handled: the per-position lines are
  absent until a request has been verified (read as zeros when the drafts counter is 0, and in the
  earlier of two scrapes), and the counters are printed as C++ doubles with six significant
  digits, so a counter of a million or more is printed rounded (`1.23457e+06`): such a page is
  read, and `notes` says that its ratios are not exact.
- SGLang Prometheus gauges `sglang:spec_accept_length` and `sglang:spec_accept_rate`.
- SGLang `/get_server_info`: `internal_states[i].avg_spec_accept_length` (one per DP rank), and
  the server arguments beside them (`speculative_num_steps`, ...).
- Per-request JSONL: SGLang responses' `meta_info` (`completion_tokens`, `spec_verify_ct`,
  `spec_accept_length`, `spec_accept_rate`, accepted/proposed draft counts under their several
  names, the acceptance histogram), vLLM answers saved whole (0.32+ with
  `--per-request-spec-decode-metrics`: `metrics.speculative_decoding`), or vLLM per-request counts
  under its stats' names (`num_drafts`, `num_draft_tokens`, `num_accepted_tokens`,
  `num_accepted_tokens_per_pos`).
- Serving logs (`helpers.serving.logs`): SGLang's accept len / accept rate, vLLM's counts and
  per-position rates, llama.cpp's per-request `draft acceptance` lines (kind `llamacpp-log`).
- vLLM's `/server_info` (dev mode) states no figure; it is read for what it says about the
  server (a forced-acceptance setting, `helpers.serving.startup.setup_from_server`).

A source whose server forced its acceptance (`helpers.serving.startup.Setup.forced`: a log's
start-up lines, vLLM's server info, or the launch command the caller passes) carries
`MetricsTable.forced`; callers print `forced_line` instead of any figure.
- SpecForge training logs: per-step `acc_i` (also `train/acc_i`, `eval/acc_i`) and
  `simulated_acc_len`, one JSON object or one `key: value` line per logged step.

Every reader returns a `MetricsTable`: `rows` (one per scrape interval, DP rank, request, log
line or training step; `ROW_KEYS`, from `helpers.serving.records`) plus what was skipped. A line, sample or record that is
recognised but does not read is `garbled` (counted, its reason kept, never guessed); a counter or
field the source should have but lacks is listed in `missing`. A row that reads but is out of
bounds (`helpers.serving.bounds`: an accept length below 1 or above what the drafting emits, a
rate outside [0, 1], a negative count, counters that went down between two scrapes) is left out
and named in `invalid_rows` ({line, field, value, why}); when no row is left, `read_metrics`
says so in one line. The numbers layer
(`helpers.acceptance.sources`) turns a table into the same quantities for every source.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from helpers.acceptance.drafting import SGLANG_NAMES
from helpers.core.errors import BadInputError, clip
from helpers.engines.counting import (
    LLAMACPP_PREFIX,
    SGLANG_PREFIX,
    SPEC_DECODE,
    SPEC_DECODE_COUNTERS,
    SPEC_DECODE_PER_POS,
    VLLM_PREFIX,
)
from helpers.serving import bounds
from helpers.serving.records import _row, read_records
from helpers.serving.startup import setup_from_server

# the counters (names in `helpers.engines.counting`): vLLM's, and llama.cpp's, the same names under its prefix
COUNTER_PREFIXES = {VLLM_PREFIX: "vllm-prometheus", LLAMACPP_PREFIX: "llamacpp-prometheus"}
COUNTED_KINDS = tuple(COUNTER_PREFIXES.values())  # the kinds whose scrapes are differenced
SGLANG_GAUGES = {SGLANG_PREFIX + "spec_accept_length": "accept_length", SGLANG_PREFIX + "spec_accept_rate": "accept_rate"}


@dataclass
class MetricsTable:
    """What one source said: rows in one shape, plus what could not be read."""

    source: str  # path or URL
    kind: str  # vllm-prometheus, llamacpp-prometheus, sglang-prometheus, sglang-server-info, sglang-requests,
    #            vllm-requests, sglang-log, vllm-log, llamacpp-log, specforge
    rows: list[dict]
    lines: int = 0  # lines or records read
    garbled: int = 0
    garbled_lines: list[tuple[int, str]] = field(default_factory=list)
    unrecognised: int = 0
    missing: list[str] = field(default_factory=list)  # fields / counters the source should have had
    settings: dict = field(default_factory=dict)  # steps / topk / draft_tokens the source stated
    interval: float | None = None  # seconds between two scrapes (counters differenced)
    forced: dict | None = None  # the forced-acceptance setting the source states (`Setup.forced`), None if none
    invalid_rows: list[dict] = field(default_factory=list)  # rows out of bounds ({line, field, value, why}), left out
    notes: list[str] = field(default_factory=list)  # what the reading says about its own exactness

    @property
    def engine(self) -> str:
        return self.kind.split("-")[0]

    def to_json(self) -> dict:
        return {"source": self.source, "kind": self.kind, "lines": self.lines, "parsed": len(self.rows),
                "garbled": self.garbled, "garbled_lines": [{"line": n, "reason": r} for n, r in self.garbled_lines],
                "unrecognised": self.unrecognised, "missing": list(self.missing), "settings": dict(self.settings),
                "interval_s": self.interval, "rows": [] if self.forced else [dict(r) for r in self.rows],
                "forced_acceptance": None if self.forced is None else dict(self.forced),
                "invalid": len(self.invalid_rows), "invalid_rows": [dict(r) for r in self.invalid_rows],
                "notes": list(self.notes)}

    def restrict(self, maximum: int | None = None) -> MetricsTable:
        """Move the rows out of bounds (`helpers.serving.bounds.problems`; `maximum`: the most tokens one
        verify step emits, default what the source's own settings give) to `invalid_rows`. In place."""
        if maximum is None:
            maximum = bounds.maximum_for(self.settings)
        self.rows, invalid = bounds.split(self.rows, maximum, where=lambda r: r.get("line", r.get("label")))
        def order(r):  # by line number; named places ("interval", a field) after them
            return (0, r["line"], "") if isinstance(r["line"], int) else (1, 0, str(r["line"]))

        self.invalid_rows = sorted(self.invalid_rows + invalid, key=order)
        return self


# -- Prometheus text --------------------------------------------------------------------------------
def parse_prometheus(text: str, source: str = "<text>", model: str | None = None) -> MetricsTable:
    """Prometheus exposition text -> a one-row table of vLLM counters or SGLang gauges.

    `model`: the served model whose series are read (label `model_name`; series without the label
    are kept): another model's series on the same page are left out and `notes` names them. Without
    it, series of several models are summed and `notes` says so.

    Each sample line goes through prometheus_client's parser on its own, so one bad line is one
    garbled line (counted, reason kept) and the rest still read. Comments are skipped.
    """
    from prometheus_client.parser import text_string_to_metric_families

    samples, garbled, lines = [], [], 0
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        lines += 1
        try:
            fams = list(text_string_to_metric_families(line + "\n"))
            got = [s for f in fams for s in f.samples]
            if len(got) != 1:
                raise ValueError("not one sample")
            s = got[0]
            counts = (VLLM_PREFIX + SPEC_DECODE, LLAMACPP_PREFIX + SPEC_DECODE, SGLANG_PREFIX + "spec_")
            if not math.isfinite(s.value) or (s.name.startswith(counts) and s.value < 0):
                raise ValueError(f"value {s.value!r}")
        except Exception as e:  # the parser raises ValueError, IndexError, ... on a cut line
            garbled.append((n, clip(f"{clip(line.strip(), 80)!r}: {type(e).__name__}: {e}", 200)))
            continue
        samples.append(s)
    sgl = [s for s in samples if s.name.startswith(SGLANG_PREFIX + "spec_accept")]
    for prefix, kind in COUNTER_PREFIXES.items():
        counted = [s for s in samples if s.name.startswith(prefix + SPEC_DECODE)]
        if counted:
            rounded = [n for n, line in enumerate(text.splitlines(), start=1)
                       if line.startswith(prefix + SPEC_DECODE) and "e+" in line.rsplit(" ", 1)[-1].lower()]
            counted, note = _one_model(counted, model)
            table = _counters_prom(counted, source, lines, garbled, len(samples) - len(counted) - len(sgl), prefix, kind)
            if note:
                table.notes.append(note)
            if rounded:
                table.notes.append(f"{len(rounded)} counter(s) printed in exponent form (line {rounded[0]}): "
                                   "llama.cpp prints its counters with six significant digits, so these are rounded "
                                   "and the ratios from them are not exact")
            return table
    unrecognised = len(samples) - len(sgl)
    table = MetricsTable(source, "sglang-prometheus", [], lines, len(garbled), garbled, unrecognised)
    if sgl:
        values = {}
        for s in sgl:
            key = SGLANG_GAUGES.get(s.name)
            if key:  # several label sets (DP ranks, models): one row each
                values.setdefault(_labels(s.labels), {})[key] = s.value
        for label, v in values.items():
            table.rows.append(_row("gauge", label or "all", **v))
        table.missing = [k for k, key in SGLANG_GAUGES.items() if not any(key in v for v in values.values())]
    return table


def _one_model(samples, model: str | None):
    """(the samples of `model` and those without a model_name label, a note naming the other models'
    series or None). Without `model`, every sample, and a note when several models' series are summed."""
    names = sorted({s.labels["model_name"] for s in samples if "model_name" in s.labels})
    if model is None:
        if len(names) > 1:
            return samples, (f"the page carries spec_decode series of {len(names)} models ({', '.join(names[:4])}): "
                             "they are summed here; probe reads only the probed model's")
        return samples, None
    others = [n for n in names if n != model]
    if not others:
        return samples, None
    kept = [s for s in samples if s.labels.get("model_name", model) == model]
    return kept, (f"the page also carries spec_decode series of another model ({', '.join(others[:4])}): left out, "
                  f"only model_name={model!r} is read" + ("" if model in names else
                                                          f" (and no series names {model!r})"))


def _labels(labels: dict, drop=("position",)) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in drop)


def _base(name: str) -> str:
    for suffix in ("_total", "_created"):
        if name.endswith(suffix):
            return name[: -len(suffix)] if suffix == "_total" else ""
    return name


def _counters_prom(samples, source, lines, garbled, unrecognised, prefix=VLLM_PREFIX,
                   kind="vllm-prometheus") -> MetricsTable:
    """vLLM's (or, `prefix` "llamacpp:", llama.cpp's) spec_decode counters -> one row, summed over the
    other labels."""
    names = {prefix + name: key for name, key in SPEC_DECODE_COUNTERS.items()}
    per_pos_name = prefix + SPEC_DECODE_PER_POS
    sums, per_pos, engines = {}, {}, set()
    for s in samples:
        base = _base(s.name)
        if base in names:
            key = names[base]
            sums[key] = sums.get(key, 0.0) + s.value
            engines.add(_labels(s.labels))
        elif base == per_pos_name:
            pos = s.labels.get("position")
            if pos is None or not pos.isdigit():
                garbled.append((0, f"{s.name}: no numeric position label ({s.labels})"))
                continue
            per_pos[int(pos)] = per_pos.get(int(pos), 0.0) + s.value
    table = MetricsTable(source, kind, [], lines, len(garbled), garbled, unrecognised)
    table.missing = [name + "_total" for name, key in names.items() if key not in sums]
    positions = None
    if per_pos:
        k = max(per_pos) + 1
        gaps = [p for p in range(k) if p not in per_pos]
        if gaps:
            table.missing.append(f"{per_pos_name}_total position(s) {gaps}")
        else:
            positions = [_whole(per_pos[p]) for p in range(k)]
    elif not (kind == "llamacpp-prometheus" and sums.get("drafts") == 0):  # llama.cpp: none before the first draft
        table.missing.append(per_pos_name + "_total")
    table.rows.append(_row("counters", ";".join(sorted(engines)) or "all",
                           **{k: _whole(v) for k, v in sums.items()}, accepted_per_pos=positions))
    return table


def _whole(x: float):
    return int(x) if float(x).is_integer() else float(x)


def difference(before: MetricsTable, after: MetricsTable, seconds: float | None = None) -> MetricsTable:
    """The counters accumulated between two scrapes of a vLLM or llama.cpp /metrics (after - before).

    llama.cpp prints no per-position line before its first verified draft: an earlier scrape without
    them counts zeros at the later scrape's positions. A counter that went down (a server restart between scrapes) is reported in `missing` and in
    `invalid_rows` (`{line: "interval", field, value, why}`), and the interval's row is left out:
    after a restart no difference means anything. SGLang's gauges are already rates: the later
    scrape is returned.
    """
    if after.kind not in COUNTED_KINDS or before.kind != after.kind:
        after.interval = seconds
        return after
    a, b = after.rows[0], dict(before.rows[0])
    if after.kind == "llamacpp-prometheus" and b["accepted_per_pos"] is None and a["accepted_per_pos"]:
        b["accepted_per_pos"] = [0] * len(a["accepted_per_pos"])
    out, missing, invalid = {}, list(after.missing), []
    for key in ("drafts", "draft_tokens", "accepted"):
        if a[key] is None or b[key] is None:
            if b[key] is not None:  # there at the first scrape, gone at the second
                missing.append(f"{key}: the counter vanished between scrapes (present before, absent after)")
            continue
        if a[key] < b[key]:
            missing.append(f"{key}: the counter went down between scrapes ({b[key]} -> {a[key]}): a restart")
            invalid.append({"line": "interval", "field": key, "value": a[key] - b[key],
                            "why": f"counter {key} went down between the two scrapes ({b[key]:g} -> {a[key]:g}): "
                                   "the server restarted in between (its counters start again from zero), so no "
                                   "difference spans the interval; scrape again"})
            continue
        out[key] = _whole(a[key] - b[key])
    pos = None
    if a["accepted_per_pos"] and b["accepted_per_pos"] and len(a["accepted_per_pos"]) == len(b["accepted_per_pos"]):
        d = [x - y for x, y in zip(a["accepted_per_pos"], b["accepted_per_pos"])]
        if min(d) < 0:
            missing.append("accepted_per_pos: a counter went down between scrapes")
            invalid.append({"line": "interval", "field": "accepted_per_pos", "value": d,
                            "why": "counter accepted_per_pos went down between the two scrapes: a restart?"})
        else:
            pos = [_whole(x) for x in d]
    row = _row("interval", a["label"], **out, accepted_per_pos=pos)
    # a counter that went down means the server restarted in between: every difference spans the restart,
    # so the interval is named (invalid_rows) and left out, none of its counters used
    return MetricsTable(after.source, after.kind, [] if invalid else [row], before.lines + after.lines,
                        before.garbled + after.garbled, before.garbled_lines + after.garbled_lines,
                        before.unrecognised + after.unrecognised, missing, interval=seconds, invalid_rows=invalid,
                        notes=list(dict.fromkeys(before.notes + after.notes)))


# -- JSON sources -------------------------------------------------------------------------------------
_SETTINGS = SGLANG_NAMES  # SGLang's server-argument names -> the kit's


def parse_server_info(data: dict, source: str = "<json>") -> MetricsTable:
    """SGLang `/get_server_info` -> one row per DP rank (`internal_states[i]`) with its average
    accept length; the speculative server arguments found beside them become `settings`."""
    table = MetricsTable(source, "sglang-server-info", [], lines=1)
    table.settings = {v: int(data[k]) for k, v in _SETTINGS.items() if isinstance(data.get(k), int)}
    states = data.get("internal_states")
    if not isinstance(states, list):
        table.missing.append("internal_states")
        return table
    for i, st in enumerate(states):
        value = st.get("avg_spec_accept_length") if isinstance(st, dict) else None
        if value is None:
            table.missing.append(f"internal_states[{i}].avg_spec_accept_length")
        elif not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            table.garbled += 1
            table.garbled_lines.append((i, f"internal_states[{i}].avg_spec_accept_length = {value!r}"))
        else:
            table.rows.append({**_row("dp-rank", f"dp rank {i}", accept_length=float(value)),
                               "line": f"internal_states[{i}].avg_spec_accept_length"})
    return table


# -- logs -----------------------------------------------------------------------------------------------
def from_log(path, year: int | None = None) -> MetricsTable:
    """A serving log (`helpers.serving.logs`) -> rows of the same shape, with the start-up line's settings.

    A vLLM line's drafts are the log reader's (Drafted / positions for a fixed-length drafter,
    accepted / (mean - 1) from the line's own mean for a variable-length one); a line cut short
    keeps its accept length but no counters."""
    from helpers.serving.logs import read_log
    from helpers.serving.startup import read_drafting

    log = read_log(path, year=year)
    runs = log.runs()
    if len(runs) > 1 and not log.forced and not log.one_drafting():  # each start its own run: no one figure
        raise BadInputError(path, f"holds {len(runs)} server starts (lines "
                            f"{', '.join(str(r['start_line']) for r in runs)}) with different drafting settings: no "
                            "one figure pools them; `d2t-lab logs FILE` gives each run's own, or split the log at a "
                            "start")
    engine = log.engines[0] if len(log.engines) == 1 else "mixed"
    rows = []
    for r in log.rows:
        if r["engine"] in ("vllm", "llamacpp"):  # both count accepted / drafted / verify steps
            drafts = r.get("drafts")
            row = _row("log-line", f"line {r['line']}", accept_length=r.get("accept_length"),
                       accept_rate=r.get("accept_rate"), accepted=None if drafts is None else r.get("accepted"),
                       draft_tokens=None if drafts is None else r.get("drafted"),
                       drafts=None if drafts is None else _whole(drafts), per_position=r.get("per_position"))
            row.update(variable=bool(r.get("variable")), cut=bool(r.get("cut")),
                       mean_without_bonus=bool(r.get("mean_without_bonus")), line=r["line"])
            if r["engine"] == "llamacpp":
                row.update(steps_exact=bool(r.get("steps_exact")), steps_unknown=drafts is None and
                           r.get("accepted") is not None and r.get("accept_length") is not None)
            rows.append(row)
        else:
            rows.append({**_row("log-line", f"line {r['line']}", accept_length=r.get("accept_length"),
                                accept_rate=r.get("accept_rate")), "line": r["line"]})
    drafting = read_drafting(path)
    notes = [f"{len(runs)} server starts with the same drafting (lines {', '.join(str(r['start_line']) for r in runs)}): "
             "their rows are pooled"] if len(runs) > 1 else []
    return MetricsTable(str(path), f"{engine}-log", rows, log.total, log.garbled, list(log.garbled_lines),
                        log.unrecognised, settings={k: drafting[k] for k in ("steps", "topk", "draft_tokens") if k in drafting},
                        forced=log.forced, invalid_rows=list(log.invalid_rows), notes=notes)


# -- any source -------------------------------------------------------------------------------------------
def is_url(source: str) -> bool:
    return str(source).startswith(("http://", "https://"))


def fetch(url: str, timeout: float | None = None) -> str:
    """GET a URL's text; a bare host:port gets `/metrics`. BadInputError when it cannot be read.
    `timeout`: seconds to connect, between reads and for the whole answer (default: `--timeout`, as
    every remote read); a wait over PROGRESS_EVERY_S prints a "waiting for" line on stderr."""
    from urllib.error import URLError
    from urllib.parse import urlsplit
    from urllib.request import urlopen

    from helpers.io import remote_access

    timeout = remote_access.timeout() if timeout is None else timeout
    if urlsplit(url).path in ("", "/"):
        url = url.rstrip("/") + "/metrics"
    def get() -> str:
        with urlopen(url, timeout=timeout) as r:  # noqa: S310 (a URL the user gave)
            return r.read().decode("utf-8", errors="replace")

    try:  # the deadline: a server trickling a byte at a time never trips the per-read timeout
        return remote_access.within_deadline(timeout, get, progress=url)
    except TimeoutError:
        raise BadInputError(url, f"the server did not answer within {timeout:g} s (--timeout SECONDS)") from None
    except (URLError, OSError, ValueError) as e:
        if isinstance(getattr(e, "reason", None), TimeoutError):
            raise BadInputError(url, f"the server did not answer within {timeout:g} s (--timeout SECONDS)") from None
        raise BadInputError(url, f"cannot fetch: {getattr(e, 'reason', None) or e}") from None


def parse_records(lines, source: str = "<jsonl>") -> MetricsTable:
    """Per-request JSONL (SGLang meta_info or vLLM counts) or a SpecForge log: `helpers.serving.records`."""
    r = read_records(lines)
    if len(r["kinds"]) > 1:
        raise BadInputError(source, f"mixes record kinds {sorted(r['kinds'])}: give one source per file")
    kind = r["kinds"].pop() if r["kinds"] else "records"
    return MetricsTable(source, kind, r["rows"], r["lines"], len(r["garbled_lines"]), r["garbled_lines"], r["unrecognised"])


def parse_text(text: str, source: str) -> MetricsTable:
    """Text of any source except a log file: JSON server info, JSONL records or Prometheus text."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and "vllm_config" in data:  # vLLM /server_info: settings, no figure
            table = MetricsTable(source, "vllm-server-info", [], lines=1)
            table.forced = setup_from_server(data, source).forced
            return table
        if isinstance(data, dict) and ("internal_states" in data or any(k in data for k in _SETTINGS)):
            return parse_server_info(data, source)
        if isinstance(data, dict) and not any(k in text for k in ("acc_", "simulated_acc_len")):
            return parse_records([text.replace("\n", " ")], source)
        return parse_records(text.splitlines(), source)
    if any(p in text for p in (VLLM_PREFIX, SGLANG_PREFIX, LLAMACPP_PREFIX)) or "# TYPE" in text:
        return parse_prometheus(text, source)
    return parse_records(text.splitlines(), source)


def read_metrics(source: str, interval: float | None = None, year: int | None = None) -> MetricsTable:
    """A URL or a file -> `MetricsTable`. `interval` (URL only): two scrapes, counters differenced.
    `year`: the year of a vLLM log's year-less times (default: this year).

    Files: a serving log (`helpers.serving.logs` recognises it), a saved /metrics text, a
    /get_server_info JSON, per-request JSONL, or a SpecForge training log. Raises BadInputError
    when nothing in it reads, unless the source states forced acceptance (`MetricsTable.forced`).
    """
    import time

    source = str(source)
    if is_url(source):
        first = parse_text(fetch(source), source)
        if interval:
            t0 = time.monotonic()
            time.sleep(float(interval))
            second = parse_text(fetch(source), source)
            table = difference(first, second, time.monotonic() - t0)
        else:
            table = first
    else:
        p = Path(source)
        if source.lower().startswith("hf:"):  # Path would print hf://o/r as hf:/o/r
            raise BadInputError(source, "metrics are read from a file or an http(s):// URL, not from the Hub")
        if not p.is_file():
            raise BadInputError(source, "no such metrics file" if not p.exists() else
                                "is a folder, not a metrics file" if p.is_dir() else "not a file")
        if interval:
            raise BadInputError(p, "--interval needs a URL to scrape twice (a file is one scrape)")
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise BadInputError(p, f"cannot read: {e.strerror or e}") from None
        table = _from_log_if_log(p, text, year) or parse_text(text, str(p))
    table.restrict()
    if table.kind == "vllm-server-info" and not table.forced:
        raise BadInputError(source, "is vLLM's /server_info: it states the server's settings, no acceptance figure "
                            "(read its /metrics)")
    if not table.rows and not table.forced and table.invalid_rows:
        raise BadInputError(source, f"no figure within bounds: {len(table.invalid_rows)} out of bounds, not counted "
                            f"({bounds.summary_line(table.invalid_rows)})")
    if not table.rows and not table.forced:
        why = f"{table.garbled} garbled" + (f"; missing {', '.join(table.missing)}" if table.missing else "")
        raise BadInputError(source, f"no speculative-decoding figure reads among {table.lines} lines/records ({why})")
    return table


def _from_log_if_log(p: Path, text: str, year: int | None = None) -> MetricsTable | None:
    from helpers.serving.logs import parse_lines

    head = parse_lines(text.splitlines()[:5000], year=year)
    if head.parsed or head.garbled or head.invalid_rows:
        return from_log(p, year=year)
    return None
