"""Accept length over time: per-interval figures, a fresh-server baseline and a decay flag.

vLLM#41838: under prefix caching the served accept length decays over hours and only a restart
recovers it. One pooled figure hides that; this module keeps the intervals apart.

An `Interval` is what one stretch of serving did: two consecutive `/metrics` scrapes differenced
(`metrics URL --watch`), one log line (`logs LOG`: vLLM's `SpecDecoding metrics` covers its logging
interval, SGLang's `Decode batch` its decode-log-interval, llama.cpp's `draft acceptance` one
request) or one repetition of the prompt set (`probe --repeat`). Its status:

- `ok`: accept length 1 + accepted / drafts (or the line's own figure), with a standard error;
- `no drafts`: the counters did not move (no traffic, or no draft): no figure;
- `restart`: a counter went down (`helpers.serving.metrics.difference`): the server restarted, the
  interval is left out and a NEW baseline starts at the next interval (a fresh server);
- `invalid`: out of bounds (`helpers.serving.bounds`, the same checks as `metrics --interval`),
  named and left out; `unreadable`: a counter vanished or a scrape failed.

Standard error per interval, from its drafts: the per-draft accepted count X has P(X >= j) =
accepted at position j-1 / drafts (the per-position counters, or a log's per-position rates), so
var X = sum_j (2j - 1) P(X >= j) - (E X)^2 and se = sqrt(var X / drafts). Without per-position
counts, var X <= E X (K - E X) for X in [0, K] (K: draft tokens / drafts) is used (an upper
bound). Both treat the verify steps as independent; steps of one request are not, so read the
standard error as a lower bound when few requests ran. A row that states only its accept length
(SGLang's decode lines, its gauges) has no drafts: its standard error is the spread of the
baseline's rows (their standard deviation), stated as such.

Baseline: the first K intervals with a figure (`baseline`, default 3) after the start or after a
restart, pooled (1 + sum accepted / sum drafts where counted, else their mean). A later interval is
`decayed` when it lies below the baseline by at least MIN_DROP (0.05) AND by Z_DECAYED (3)
combined standard errors: z = (baseline - interval) / sqrt(se_b^2 + se_i^2). One-sided, 3 standard
errors so that a long watch of a steady server does not flag by chance. Plain Python.
"""
from __future__ import annotations

import math
import re as _re
from dataclasses import dataclass, field

BASELINE = 3  # intervals with a figure that make the fresh-server baseline
Z_DECAYED = 3.0  # standard errors below the baseline
MIN_DROP = 0.05  # accept length below the baseline, at least


@dataclass
class Interval:
    """One stretch of serving: its accept length, standard error and status."""

    index: int  # 1, 2, ... in order
    start_s: float | None  # seconds since the first scrape / the log's first row
    end_s: float | None
    status: str = "ok"  # ok, no drafts, restart, invalid, unreadable
    accept_length: float | None = None
    stderr: float | None = None
    stderr_method: str | None = None  # per-position, bounded, baseline spread
    drafts: float | None = None
    accepted: float | None = None
    draft_tokens: float | None = None
    accepted_per_pos: list | None = None
    why: str | None = None  # for a status other than ok
    label: str | None = None  # prompt class / model, where the source carries one
    line: int | None = None  # the log line
    segment: int = 1  # 1 + restarts before it (each segment its own baseline)
    flag: str | None = None  # baseline, decayed, or None
    z: float | None = None  # standard errors below the baseline

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("index", "start_s", "end_s", "status", "accept_length", "stderr",
                                              "stderr_method", "drafts", "accepted", "draft_tokens",
                                              "accepted_per_pos", "why", "label", "line", "segment", "flag", "z")}


def stderr_from_counts(drafts, accepted, per_pos=None, draft_tokens=None) -> tuple[float | None, str | None]:
    """(standard error of 1 + accepted / drafts, method) for one interval (module docstring)."""
    if not drafts or drafts <= 0 or accepted is None:
        return None, None
    mean = accepted / drafts
    if per_pos:
        ex2 = sum((2 * j - 1) * (c / drafts) for j, c in enumerate(per_pos, start=1))
        var, how = max(ex2 - mean * mean, 0.0), "per-position"
    else:
        k = (draft_tokens / drafts) if draft_tokens else None
        if not k:
            return None, None
        var, how = max(mean * (k - mean), 0.0), "bounded (no per-position counts)"
    return math.sqrt(var / drafts), how


def interval_from_row(row: dict, index: int, start_s, end_s) -> Interval:
    """A counters row (`difference`'s, or a log row with drafts / accepted) -> an Interval."""
    drafts, accepted = row.get("drafts"), row.get("accepted")
    per = row.get("accepted_per_pos")
    if per is None and row.get("per_position") and drafts:  # a log's rates -> counts
        per = [p * drafts for p in row["per_position"]]
    iv = Interval(index, start_s, end_s, drafts=drafts, accepted=accepted, draft_tokens=row.get("draft_tokens",
                  row.get("drafted")), accepted_per_pos=per, line=row.get("line")
                  if isinstance(row.get("line"), int) else None)
    if drafts == 0:
        iv.status, iv.why = "no drafts", "no drafts in this interval (no traffic, or nothing drafted): no figure"
        return iv
    if drafts and accepted is not None:
        iv.accept_length = 1.0 + accepted / drafts
        iv.stderr, iv.stderr_method = stderr_from_counts(drafts, accepted, per, iv.draft_tokens)
    elif row.get("accept_length") is not None:
        iv.accept_length = float(row["accept_length"])
    else:
        iv.status, iv.why = "unreadable", "the interval carries no accept length and no counters"
    return iv


def flag(intervals: list[Interval], baseline: int = BASELINE) -> list[dict]:
    """Mark each segment's (between restarts) first `baseline` intervals with a figure `baseline`
    and later ones `decayed` where significantly below it (module docstring). In place; returns the
    baselines [{segment, intervals, accept_length, stderr, method}], one per segment."""
    out, segment = [], 1
    for iv in intervals:
        if iv.status == "restart":
            segment += 1
        iv.segment = segment
    for seg in sorted({iv.segment for iv in intervals}):
        rows = [iv for iv in intervals if iv.segment == seg and iv.status == "ok" and iv.accept_length is not None]
        base = rows[:baseline]
        for iv in base:
            iv.flag = "baseline"
        if not base:
            continue
        b = _pooled(base)
        b["segment"] = seg
        b["complete"] = len(base) == baseline
        out.append(b)
        for iv in rows[baseline:]:
            se_i = iv.stderr if iv.stderr is not None else b["spread"]
            se_b = b["stderr"] or 0.0
            if se_i is None:
                continue
            if iv.stderr is None:
                iv.stderr, iv.stderr_method = se_i, "baseline spread (the row states no drafts)"
            se = math.sqrt(se_i ** 2 + se_b ** 2)
            drop = b["accept_length"] - iv.accept_length
            iv.z = drop / se if se > 0 else (math.inf if drop > 0 else 0.0)
            if drop >= MIN_DROP and iv.z >= Z_DECAYED:
                iv.flag = "decayed"
    return out


def _pooled(rows: list[Interval]) -> dict:
    """The baseline's figure: counts pooled where every row has them, else the mean of the rows."""
    lengths = [iv.accept_length for iv in rows]
    spread = (math.sqrt(sum((x - sum(lengths) / len(lengths)) ** 2 for x in lengths) / (len(lengths) - 1))
              if len(lengths) > 1 else None)
    if all(iv.drafts and iv.accepted is not None for iv in rows):
        d, a = sum(iv.drafts for iv in rows), sum(iv.accepted for iv in rows)
        per = None
        if all(iv.accepted_per_pos for iv in rows) and len({len(iv.accepted_per_pos) for iv in rows}) == 1:
            per = [sum(x) for x in zip(*(iv.accepted_per_pos for iv in rows))]
        tok = sum(iv.draft_tokens for iv in rows) if all(iv.draft_tokens for iv in rows) else None
        se, how = stderr_from_counts(d, a, per, tok)
        return {"intervals": [iv.index for iv in rows], "accept_length": 1 + a / d, "stderr": se,
                "method": f"pooled counts ({how or 'no standard error'})", "spread": spread}
    mean = sum(lengths) / len(lengths)
    return {"intervals": [iv.index for iv in rows], "accept_length": mean,
            "stderr": None if spread is None else spread / math.sqrt(len(lengths)),
            "method": "mean of the rows (no counts)", "spread": spread}


def line(iv: Interval, unit: str = "s") -> str:
    """One interval as a line of text."""
    when = ("" if iv.end_s is None else
            f"{iv.start_s:8.2f}-{iv.end_s:8.2f} {unit}" if iv.start_s is not None else f"{iv.end_s:8.2f} {unit}")
    where = f"line {iv.line}: " if iv.line is not None else ""
    lab = f" [{iv.label}]" if iv.label else ""
    if iv.status != "ok" or iv.accept_length is None:
        return f"  #{iv.index:<4} {when}  {where}{iv.status}: {iv.why}{lab}"
    se = "" if iv.stderr is None else f" ± {iv.stderr:.3f}"
    counts = "" if iv.drafts is None else f"  ({_n(iv.accepted)} accepted / {_n(iv.drafts)} drafts)"
    mark = ("  baseline" if iv.flag == "baseline" else
            f"  DECAYED ({iv.z:.1f} standard errors below the baseline)" if iv.flag == "decayed" else "")
    return f"  #{iv.index:<4} {when}  {where}accept length {iv.accept_length:.3f}{se}{counts}{lab}{mark}"


def _n(x) -> str:
    return "-" if x is None else (f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}")


def summary_lines(intervals: list[Interval], baselines: list[dict], baseline: int = BASELINE) -> list[str]:
    """The verdict lines: each segment's baseline, how many intervals decayed, restarts."""
    out = []
    restarts = [iv.index for iv in intervals if iv.status == "restart"]
    empty = sum(1 for iv in intervals if iv.status == "no drafts")
    for b in baselines:
        se = "" if b["stderr"] is None else f" ± {b['stderr']:.3f}"
        out.append(f"  baseline (segment {b['segment']}, intervals {', '.join(map(str, b['intervals']))}): accept length "
                   f"{b['accept_length']:.3f}{se}, {b['method']}" + ("" if b["complete"] else
                                                                      f"; fewer than {baseline} intervals"))
    decayed = [iv for iv in intervals if iv.flag == "decayed"]
    judged = [iv for iv in intervals if iv.status == "ok" and iv.flag != "baseline" and iv.accept_length is not None]
    if not baselines:
        out.append("  no interval with drafts: no baseline, nothing to judge")
    elif not judged:
        out.append("  no interval after the baseline yet: nothing judged")
    elif decayed:
        out.append(f"  decayed: {len(decayed)} of {len(judged)} intervals after the baseline are significantly below it "
                   f"(at least {MIN_DROP} and {Z_DECAYED:g} standard errors; first #{decayed[0].index}, accept length "
                   f"{decayed[0].accept_length:.3f})")
    else:
        out.append(f"  not decayed: none of {len(judged)} intervals after the baseline is significantly below it")
    if restarts:
        out.append(f"  restart: a counter went down at interval(s) {', '.join(map(str, restarts))}: each starts a new "
                   "baseline (a fresh server)")
    if empty:
        out.append(f"  {empty} interval(s) without drafts: no figure")
    return out


def to_json(intervals: list[Interval], baselines: list[dict]) -> dict:
    return {"intervals": [iv.to_dict() for iv in intervals],
            "baselines": [{k: v for k, v in b.items() if k != "spread"} | {"spread": b["spread"]} for b in baselines],
            "decayed": [iv.index for iv in intervals if iv.flag == "decayed"],
            "restarts": [iv.index for iv in intervals if iv.status == "restart"],
            "rule": {"z": Z_DECAYED, "min_drop": MIN_DROP}}


# -- a live /metrics, scraped every S seconds -----------------------------------------------------------
@dataclass
class Watch:
    """What `watch` measured: the intervals, the scrapes made, and why it stopped."""

    source: str
    kind: str | None = None
    intervals: list[Interval] = field(default_factory=list)
    scrapes: int = 0
    seconds: float = 0.0
    stopped: str = "count"  # count, time (--max-seconds), interrupted (Ctrl-C)
    notes: list[str] = field(default_factory=list)


def watch(url: str, *, interval: float, count: int, max_seconds: float, maximum: int | None = None,
          model: str | None = None, on_interval=None, clock=None, sleep=None, scrape=None) -> Watch:
    """Scrape `url` (a vLLM / llama.cpp / SGLang `/metrics`) every `interval` seconds, at most `count`
    scrapes and at most `max_seconds` in all; each pair of consecutive scrapes is one Interval
    (`difference`, then the bounds `metrics --interval` applies: `MetricsTable.restrict(maximum)`).
    `on_interval(iv)` is called as each arrives (the command prints it). Ctrl-C stops the watch
    with what was measured so far (`Watch.stopped` "interrupted"). The first scrape failing raises
    BadInputError; a later one is an `unreadable` interval and the watch goes on from the last good scrape.
    `clock`, `sleep`, `scrape`: injectable (tests); default time.monotonic, time.sleep and
    `metrics.fetch` + `parse_prometheus`."""
    import time

    from helpers.core.errors import BadInputError
    from helpers.serving.metrics import COUNTED_KINDS, fetch, parse_prometheus

    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    scrape = scrape or (lambda: parse_prometheus(fetch(url), url, model=model))
    w = Watch(url)
    t0 = clock()
    deadline = t0 + max_seconds
    try:
        base, base_t = scrape(), 0.0
        w.scrapes, w.kind = 1, base.kind
        if base.kind not in COUNTED_KINDS and not base.rows:
            raise BadInputError(url, "carries no spec_decode counters (vllm:, llamacpp:) and no SGLang "
                                "spec_accept gauges: nothing to watch")
        w.notes += base.notes
        while w.scrapes < count:
            wake = t0 + w.scrapes * interval
            if wake > deadline:
                w.stopped = "time"
                break
            if wake > clock():
                sleep(wake - clock())
            try:
                now = scrape()
            except BadInputError as e:
                w.scrapes += 1
                iv = Interval(len(w.intervals) + 1, base_t, clock() - t0, status="unreadable", why=str(e))
                _add(w, iv, on_interval)
                continue
            w.scrapes += 1
            t = clock() - t0
            iv = _interval(base, now, len(w.intervals) + 1, base_t, t, maximum)
            _add(w, iv, on_interval)
            if iv.status != "unreadable":  # a restart's scrape is the new server's first
                base, base_t = now, t
    except KeyboardInterrupt:
        w.stopped = "interrupted"
    w.seconds = clock() - t0
    return w


def _add(w: Watch, iv: Interval, on_interval) -> None:
    w.intervals.append(iv)
    if on_interval is not None:
        on_interval(iv)


def _interval(before, after, index: int, start_s: float, end_s: float, maximum) -> Interval:
    """Two scrapes -> one Interval, through `difference` and the bounds."""
    from helpers.serving.metrics import COUNTED_KINDS, difference

    if after.kind not in COUNTED_KINDS:  # SGLang's gauges: already a rate over its own window
        rows = [r for r in after.rows if r.get("accept_length") is not None]
        if not rows:
            return Interval(index, start_s, end_s, status="unreadable", why="no spec_accept_length gauge in this scrape")
        return Interval(index, start_s, end_s, accept_length=float(rows[0]["accept_length"]),
                        label=None if len(rows) == 1 else f"{len(rows)} gauges: the first")
    diff = difference(before, after, end_s - start_s)
    went_down = [r for r in diff.invalid_rows if "went down" in str(r.get("why"))]
    if went_down:
        return Interval(index, start_s, end_s, status="restart",
                        why=f"counter {went_down[0]['field']} went down: the server restarted; a new baseline starts")
    if not diff.rows:
        return Interval(index, start_s, end_s, status="unreadable", why="; ".join(diff.missing) or "no counters")
    vanished = [m for m in diff.missing if "vanished" in m]
    if vanished:
        return Interval(index, start_s, end_s, status="unreadable", why=vanished[0])
    diff.restrict(maximum)
    if not diff.rows:
        from helpers.serving import bounds

        return Interval(index, start_s, end_s, status="invalid",
                        why="out of bounds, not counted: " + bounds.summary_line(diff.invalid_rows))
    return interval_from_row(diff.rows[0], index, start_s, end_s)


# -- a serving log's rows ------------------------------------------------------------------------------

_REQUEST = ("Received request", "Receive: obj=", "Finish: obj=", "Added request", "Generate request")
_CLASS = _re.compile(r"""\b(prompt_class|class|category|model_name|served_model_name|lora_name|model)\s*[=:]\s*['"]?"""
                     r"""([A-Za-z0-9_][\w./:-]*)""")


def request_labels(lines) -> tuple[list[tuple[int, str]], int]:
    """([(line number, class or model name)], request lines seen) from a log's request lines (vLLM
    `--enable-log-requests`, SGLang `--log-requests`): the first `prompt_class=`, `class=`,
    `category=`, `model_name=`, `lora_name=` or `model=` on the line (vLLM's request lines carry a
    LoRA adapter's `lora_name`, SGLang's may carry a model; neither carries a prompt class unless the
    client put one in the request's id or metadata)."""
    out, seen = [], 0
    for n, text in enumerate(lines, start=1):
        if not any(x in text for x in _REQUEST):
            continue
        seen += 1
        m = _CLASS.search(text)
        if m and m.group(2) not in ("None", "null"):
            out.append((n, m.group(2)))
    return out, seen


def from_log(log, lines=None) -> tuple[list[Interval], str]:
    """A `LogTable`'s rows -> Intervals (one per row: vLLM's logging interval, SGLang's decode-log
    interval, llama.cpp's request), seconds since the first row's time; each server start after the
    first a `restart` (a new baseline). Labels from the request lines (`request_labels`) logged since
    the row before: one label, that label; several, "mixed: a, b". Returns (intervals, what the labels
    are: a line saying which request lines carried one, or that none is present)."""
    times = [r["time"] for r in log.rows if r.get("time") is not None]
    t0 = min(times) if times else None
    sec = lambda r: None if t0 is None or r.get("time") is None else (r["time"] - t0).total_seconds()  # noqa: E731
    labels, seen = request_labels(lines) if lines is not None else ([], 0)
    starts = [s["line"] for s in (log.starts or [])[1:] if s.get("line")]
    out, prev, prev_line = [], None, 0
    for r in log.rows:
        while starts and r["line"] > starts[0]:
            out.append(Interval(len(out) + 1, None, None, status="restart", line=starts[0],
                                why=f"a server start at line {starts[0]}: a new baseline starts"))
            starts.pop(0)
        iv = interval_from_row(r, len(out) + 1, prev, sec(r))
        iv.line = r["line"]
        if r.get("drafts") is None and r.get("accept_length") is not None:  # SGLang: the line's own figure
            iv.accept_length, iv.status, iv.why = float(r["accept_length"]), "ok", None
        got = sorted({lab for n, lab in labels if prev_line < n <= r["line"]})
        iv.label = None if not got else got[0] if len(got) == 1 else "mixed: " + ", ".join(got[:4])
        out.append(iv)
        prev, prev_line = sec(r), r["line"]
    if labels:
        what = (f"prompt class / model from {len(labels)} of {seen} request lines "
                f"({', '.join(sorted({lab for _, lab in labels})[:6])}); each interval labelled by the requests "
                "logged since the interval before, its own baseline per label")
    elif seen:
        what = (f"no prompt class or model name is present: {seen} request lines, none carries a class, "
                "category, model or lora_name")
    else:
        what = ("no prompt class or model name is present: the log has no request lines (vLLM "
                "--enable-log-requests, SGLang --log-requests)")
    return out, what


def flag_by_label(intervals: list[Interval], baseline: int = BASELINE) -> list[dict]:
    """`flag` per label (prompt class), each with its own baseline; unlabelled intervals together.
    Restarts belong to every label's sequence. Returns the baselines, each with its `label`."""
    labels = list(dict.fromkeys(iv.label for iv in intervals if iv.status != "restart"))
    if len(labels) <= 1:
        return flag(intervals, baseline)
    out = []
    for lab in labels:
        group = [iv for iv in intervals if iv.status == "restart" or iv.label == lab]
        seg = [iv.segment for iv in intervals]
        got = flag(group, baseline)
        for iv, s in zip(intervals, seg):  # segments count restarts over the whole log
            iv.segment = s
        out += [{**b, "label": lab} for b in got]
    seg = 1
    for iv in intervals:
        seg += iv.status == "restart"
        iv.segment = seg
    return out



def of_log(log, baseline: int | None = None):
    """(intervals, baselines, what the labels are) of a `LogTable`'s rows (`from_log`, with the request
    lines read from its file; `flag_by_label` with `baseline` rows, default `BASELINE`)."""
    from pathlib import Path

    lines = None
    if log.path:
        try:
            lines = Path(log.path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            lines = None
    intervals, labels = from_log(log, lines)
    baselines = flag_by_label(intervals, BASELINE if baseline is None else baseline)
    return intervals, baselines, labels


def interval_lines(intervals, baselines, labels: str, baseline: int, limit: int = 40) -> list[str]:
    """`logs`' per-interval section: every row (the first and last, and every decayed one, when
    more than `limit`), then the baseline and the verdict."""
    out = [f"  per interval:  {len(intervals)} intervals (one per row); {labels}"]
    if len(intervals) <= limit:
        shown = intervals
    else:
        keep = {iv.index for iv in intervals[:10] + intervals[-5:]} | {iv.index for iv in intervals
                                                                       if iv.flag == "decayed" or iv.status == "restart"}
        shown = [iv for iv in intervals if iv.index in keep][:limit]
    last = 0
    for iv in shown:
        if iv.index > last + 1:
            out.append(f"    ... {iv.index - last - 1} more (--json: over_time.intervals)")
        out.append("  " + line(iv))
        last = iv.index
    out += [("  " + x[2:] if x.startswith("  ") else x) for x in summary_lines(intervals, baselines, baseline)]
    return out

# -- probe --repeat: the prompt set sent R times in a row ---------------------------------------------------
def from_repetitions(measured: list) -> list[Interval]:
    """Each repetition of the prompt set (`helpers.serving.probe.Measured`) -> an Interval: from the
    /metrics counters differenced over it (1 + accepted / drafts, standard error from its drafts), else
    the answers' pooled per-request figure with its ratio-estimator standard error. Times: seconds since
    the first repetition began (back to back, the counters' settling left out)."""
    out, t = [], 0.0
    for k, m in enumerate(measured, start=1):
        start, t = t, t + (m.seconds or 0.0)
        c = m.counts() if m.counters_invalid is None else None
        if c and c.get("drafts") is not None:
            iv = interval_from_row(dict(c), k, start, t)
        elif m.per_request is not None:
            iv = Interval(k, start, t, accept_length=m.accept_length, stderr=m.stderr,
                          stderr_method="ratio estimator over requests")
        else:
            iv = Interval(k, start, t, status="unreadable", why=m.counters_invalid or "no counters and no per-request figure")
        out.append(iv)
    return out
