"""Bounds on the serving numbers read: a row outside them is named and left out, never averaged in.

Every row a serving reader makes (a log line, a request record, a scrape, a DP rank, a gauge, a
training step) is checked here before any figure is computed from it:

- accept length (bonus token counted): finite, at least 1 (every verify step emits the target's
  own token), and at most the most one verify step can emit when the drafting is known, by the
  algorithm and its shape: a chain of K drafted tokens K + 1, SGLang's tree of S steps (depth S)
  S + 1 (one path of the tree is accepted, at most S deep; fewer when num_draft_tokens - 1 < S),
  block drafting (SGLang's DFlash / DSpark: num_draft_tokens - 1 tokens drafted in one step, the
  settings carrying `block`) num_draft_tokens. A line printed with two decimals gets 0.005 slack;
  a vLLM or llama.cpp line's own per-position list (K values) bounds it by K + 1 as well. When
  nothing states the drafting, only the plausible ceiling applies: PLAUSIBLE = MAX_DRAFT_TOKENS + 1
  (257, `helpers.acceptance.montecarlo`: no engine drafts more than a few dozen tokens a step);
- rates (accept rate, per-position rates, SpecForge's acc_i): finite, in [0, 1];
- counts (accepted, drafted, drafts, verify steps, tokens, requests) and speeds: not negative,
  accepted drafts no more than drafted ones, accepted at one position no more than the drafts,
  and the accept length the counts imply (1 + accepted / drafts, or SGLang's completion_tokens /
  spec_verify_ct) within the accept-length bounds;
- per position (unconditional: accepted at j / drafts, or the rate a log prints): never more at
  position j than at j - 1 (a draft reaches j only through j - 1; a conditional rate above 1 is
  impossible: counters summed over servers or models, a restart between positions, or positions
  mislabelled);
- one record's own figures agree: a vLLM answer's verify steps no more than the tokens it generated
  (each step emits at least one), its verify steps and accepted tokens those of its own acceptance
  histogram (sum h, sum j h[j]);
- counters scraped twice only grow (`helpers.serving.metrics.difference` names one that went
  down: a restart between the scrapes).

`problems(row, maximum)` lists what is wrong with one row (empty: within bounds); `split(rows,
maximum, where)` keeps the rows within bounds and describes the others as `{line, field, value, why}`
(the `invalid_rows` of `logs --json` and `metrics --json`). `maximum_for(settings)` is the bound
the drafting settings give. Plain Python.
"""
from __future__ import annotations

import math

from helpers.acceptance.montecarlo import MAX_DRAFT_TOKENS
from helpers.engines.counting import accept_length, histogram_accepted, sglang_accept_length

SLACK = 0.005  # engines print accept lengths and rates with two decimals
PLAUSIBLE = MAX_DRAFT_TOKENS + 1  # the most one verify step can emit under any drafting worth running
RATES = ("accept_rate",)
RATE_LISTS = ("per_position", "acc")
COUNTS = ("accepted", "drafted", "drafts", "draft_tokens", "completion_tokens", "verify_ct", "running_req",
          "queue_req", "tokens")
SPEEDS = ("throughput", "accepted_tps", "drafted_tps", "token_usage", "simulated_acc_len")


def maximum_for(settings: dict | None, positions: int | None = None) -> int | None:
    """The most tokens one verify step emits under drafting settings in the kit's names (steps /
    topk / draft_tokens, SGLang's count with the root): a chain of K drafted tokens K + 1, a tree
    of S steps S + 1 (at most num_draft_tokens); else `positions` + 1 (a source reporting K
    per-position rates drafts K); None when nothing says."""
    s = settings or {}
    steps, n = _whole(s.get("steps")), _whole(s.get("draft_tokens"))
    if s.get("block") and n and n > 1:  # a block of n - 1 drafted in one step: all accepted emits n
        return n
    if steps and steps > 0:
        return (min(steps, n - 1) if n and n > 1 else steps) + 1
    if n and n > 1:
        return n
    if positions:
        return int(positions) + 1
    return None


def _whole(v):
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _bad(v) -> bool:
    return isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)


def _length(v: float, maximum, what: str) -> str | None:
    if _bad(v):
        return f"{what} {v!r} is not a finite number"
    if v < 1 - SLACK:
        return f"{what} {v:g} is below 1 (every verify step emits at least the target's own token)"
    if maximum is not None and v > maximum + SLACK:
        return f"{what} {v:g} is above {maximum:g}, the most one verify step emits under this drafting"
    if v > PLAUSIBLE + SLACK:
        return (f"{what} {v:g} is above {PLAUSIBLE}, more than one verify step emits under any drafting an engine "
                "runs (no drafting settings stated)")
    return None


def problems(row: dict, maximum: int | None = None) -> list[tuple[str, object, str]]:
    """What is out of bounds in one row: [(field, value, why)], empty when every number is within
    its bounds. `maximum`: the most tokens one verify step emits (None: unknown, only >= 1 checked)."""
    out = []
    per = row.get("per_position") or row.get("accepted_per_pos")
    if isinstance(per, list) and per:  # K per-position figures: a drafter of K tokens
        maximum = len(per) + 1 if maximum is None else min(maximum, len(per) + 1)
    v = row.get("accept_length")
    if v is not None:
        why = _length(v, maximum, "accept length")
        if why:
            out.append(("accept_length", v, why))
    for key in RATES:
        v = row.get(key)
        if v is not None and (_bad(v) or not -SLACK <= v <= 1 + SLACK):
            out.append((key, v, f"{key.replace('_', ' ')} {v!r} is not a rate in [0, 1]"))
    for key in RATE_LISTS:
        vs = row.get(key)
        for j, v in enumerate(vs or []):
            if v is not None and (_bad(v) or not -SLACK <= v <= 1 + SLACK):
                out.append((key, v, f"{key.replace('_', ' ')}[{j}] = {v!r} is not a rate in [0, 1]"))
                break
    for key in COUNTS + SPEEDS:
        v = row.get(key)
        if v is not None and (_bad(v) or v < 0):
            out.append((key, v, f"{key.replace('_', ' ')} {v!r} is negative or not finite"))
    if out:
        return out
    acc, drafts = row.get("accepted"), row.get("drafts")
    drafted = row.get("drafted", row.get("draft_tokens"))
    if acc is not None and drafted is not None and acc > drafted:
        out.append(("accepted", acc, f"accepted {acc:g} is more than the {drafted:g} drafted tokens"))
    if acc is not None and drafts and not row.get("variable"):
        why = _length(accept_length(acc, drafts), maximum, f"1 + accepted / drafts = 1 + {acc:g} / {drafts:g} =")
        if why:
            out.append(("accepted", acc, why))
    for key in ("per_position", "accepted_per_pos"):
        why = _rising(row.get(key), key)
        if why:
            out.append((key, row.get(key), why))
    hist = row.get("histogram")
    if isinstance(hist, list) and hist and all(isinstance(h, (int, float)) and not _bad(h) for h in hist):
        steps = row.get("drafts") if row.get("drafts") is not None else row.get("verify_ct")
        if steps is not None and sum(hist) != steps:
            out.append(("histogram", hist, f"the record's verify steps ({steps:g}) are not its own acceptance "
                                          f"histogram's ({sum(hist):g} = sum of the histogram): the two counts disagree"))
        elif acc is not None and histogram_accepted(hist) != acc:
            out.append(("histogram", hist, f"the record's accepted tokens ({acc:g}) are not its own acceptance "
                                          f"histogram's ({histogram_accepted(hist):g} = sum j h[j]): the "
                                          "two counts disagree"))
    comp = row.get("completion_tokens")
    if comp is not None and drafts and row.get("verify_ct") is None and comp < drafts and not row.get("variable"):
        out.append(("drafts", drafts, f"{drafts:g} verify steps for {comp:g} tokens generated: each verify step "
                                      "emits at least one token, so the record cannot be measured"))
    pos = row.get("accepted_per_pos")
    if pos:
        if any(_bad(x) or x < 0 for x in pos):
            out.append(("accepted_per_pos", pos, "accepted per position holds a negative or non-finite count"))
        elif drafts is not None and max(pos) > drafts:
            out.append(("accepted_per_pos", pos, f"accepted at one position ({max(pos):g}) is more than the "
                                                 f"{drafts:g} drafts"))
    comp, verify = row.get("completion_tokens"), row.get("verify_ct")
    if comp is not None and verify:
        if comp < verify:
            out.append(("completion_tokens", comp, f"completion_tokens {comp:g} over spec_verify_ct {verify:g} is "
                                                   f"{sglang_accept_length(comp, verify):.3g} tokens per verify step, below 1 (each step "
                                                   "emits at least one)"))
        elif comp > verify * (maximum or PLAUSIBLE) + 1:  # + 1: the token prefill emits before any verify step
            out.append(("completion_tokens", comp, f"completion_tokens {comp:g} over spec_verify_ct {verify:g} is "
                                                   f"{sglang_accept_length(comp, verify):.3g} tokens per verify step, above "
                                                   f"{maximum or PLAUSIBLE:g}, the most one step emits under "
                                                   + ("this drafting" if maximum else "any drafting an engine runs")))
    return out


def _rising(values, key: str) -> str | None:
    """Why an unconditional per-position list is impossible (a later position above an earlier one), or None."""
    if not isinstance(values, list) or len(values) < 2 or any(v is None or _bad(v) for v in values):
        return None
    slack = SLACK if key == "per_position" else 0  # printed rates are rounded; counts are exact
    for j in range(1, len(values)):
        if values[j] > values[j - 1] + slack:
            return (f"{key.replace('_', ' ')}[{j}] = {values[j]:g} is above position {j - 1}'s {values[j - 1]:g}: a "
                    f"conditional rate of {values[j] / values[j - 1] if values[j - 1] else float('inf'):.3g} > 1 is "
                    "impossible (a draft reaches position j only through j - 1): counters summed over servers or "
                    "models, a restart between positions, or positions mislabelled")
    return None


def split(rows, maximum: int | None = None, where=None) -> tuple[list[dict], list[dict]]:
    """(rows within bounds, the others as {line, field, value, why}). `where(row)` names a row's
    line (default: its `line`, else its `label`)."""
    keep, invalid = [], []
    for row in rows:
        found = problems(row, maximum)
        if not found:
            keep.append(row)
            continue
        key, value, _ = found[0]
        line = where(row) if where else row.get("line", row.get("label"))
        invalid.append({"line": line, "field": key, "value": _plain(value), "why": "; ".join(w for _, _, w in found)})
    return keep, invalid


def _plain(v):
    """A value as JSON can hold it: non-finite floats as their text ("inf", "nan")."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def summary_line(invalid: list[dict], limit: int = 3) -> str:
    """The first few invalid rows on one line: `line 2: accept length 9.5 is above 4, ...; line 3: ...`."""
    parts = [f"{_where(r['line'])}: {r['why']}" for r in invalid[:limit]]
    more = len(invalid) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _where(line) -> str:
    return f"line {line}" if isinstance(line, int) else str(line)
