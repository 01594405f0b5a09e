"""Every acceptance figure on one scale: accept length, implied per-token rate, per position.

Engines and trainers count acceptance differently (docs/serving-metrics.md has the table):

- accept length: vLLM, SGLang and EAGLE count the target's bonus token (minimum 1.0); SpecForge's
  `simulated_acc_len` is sum_k prod_{i<=k} acc_i, without it (some forks start it at 1.0: the
  reader checks which against the `acc_i` of the same line).
- SGLang's `accept rate` (log and gauge) is accept length / num_draft_tokens in the builds whose
  logs we bundle, and (accept length - 1) / (num_draft_tokens - 1) - accepted draft tokens per
  verify over the drafted ones - in others; given both numbers and the settings, `sglang_rate_definition`
  says which one a source used.
- vLLM's per-position rate is unconditional: accepted at position j / drafts, the chance a draft
  reaches position j. The conditional rate (accepted at j given j-1 was) is u_j / u_(j-1).
- SpecForge's `acc_i` is the per-step accuracy, conditional in the sense the trainer's
  simulated accept length uses it (the product of the first k is the chance of reaching k).

Drafting settings are read by `helpers.acceptance.drafting.Drafting.from_flags` (SGLang's names,
`--draft-tokens` counting the root) for `normalise` and `rate_for` alike, so `rate-for` and
`metrics` imply the same rate under the same flags. `normalise(table, ...)` turns a `helpers.serving.metrics.MetricsTable` into an `Acceptance`: accept length
with the bonus token, the per-token rate a chain or the given tree needs to reach it (bisection
on `helpers.acceptance.chain`'s exact expectation), per-position unconditional and conditional acceptance,
and the source's own definition in words. `rate_for` is the `rate-for` command's conversion.
`compare_online_offline` compares serving with offline figures. Numpy only, no torch.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from helpers.acceptance.drafting import Drafting, fill
from helpers.core.errors import BadInputError
from helpers.engines.counting import accept_length, sglang_accept_length

DEFINITIONS = {
    "vllm-prometheus": "vLLM counters: accept length = 1 + accepted / drafts (bonus counted); per-position "
                       "rate = accepted at position j / drafts (unconditional); draft acceptance rate = accepted / "
                       "drafted tokens",
    "vllm-requests": "vLLM per-request counts, pooled: accept length = 1 + accepted / drafts; per position "
                     "accepted at j / drafts (unconditional)",
    "vllm-log": "vLLM SpecDecoding log: Mean acceptance length = 1 + accepted / drafts; Per-position acceptance "
                "rate = accepted at j / drafts (unconditional); Avg Draft acceptance rate = accepted / drafted; "
                "pooled over lines weighted by drafts (Drafted / positions for a fixed-length drafter, accepted / "
                "(mean - 1) from the line's own mean for one whose length varies per step)",
    "llamacpp-prometheus": "llama.cpp counters (llamacpp:spec_decode_*): accept length = 1 + accepted / drafts, "
                           "drafts = verify steps that carried a draft (bonus counted, its log's mean len); per-position "
                           "rate = accepted at position j / drafts (unconditional, its log's acc per pos); draft "
                           "acceptance rate = accepted / draft tokens",
    "llamacpp-log": "llama.cpp server `draft acceptance` lines, pooled: accept length = 1 + accepted / verify "
                    "steps (bonus counted; a request's verify steps from its own mean len, narrowed by acc per "
                    "pos); draft acceptance rate = accepted / generated draft tokens; per position "
                    "accepted at j / verify steps (unconditional)",
    "sglang-log": "SGLang decode log: accept len = tokens emitted per verify (bonus counted), mean over lines; "
                  "accept rate as the build defines it (see below)",
    "sglang-prometheus": "SGLang gauges: sglang:spec_accept_length (bonus counted, last logging interval); "
                         "sglang:spec_accept_rate as the build defines it (see below)",
    "sglang-server-info": "SGLang /get_server_info: internal_states[i].avg_spec_accept_length per DP rank "
                          "(bonus counted); unweighted mean over ranks",
    "sglang-requests": "SGLang meta_info, pooled: accept length = sum completion_tokens / sum spec_verify_ct "
                       "(bonus counted); histogram[i] = verify steps that accepted i draft tokens, so position j "
                       "is reached by the steps with i > j (unconditional)",
    "specforge": "SpecForge training: acc_i = per-step accuracy (conditional); simulated_acc_len = "
                 "sum_k prod_(i<=k) acc_i (bonus NOT counted unless the line says otherwise); last logged step, "
                 "eval before train",
}


@dataclass
class Acceptance:
    """One source on the common scale (None where the source does not give it)."""

    source: str
    kind: str
    definition: str
    accept_length: float | None = None  # bonus token included
    per_token_rate: float | None = None  # the single rate reaching accept_length under `drafting`
    drafting: str | None = None
    per_position_unconditional: list | None = None  # P(draft reaches position j), j = 0..
    per_position_conditional: list | None = None  # P(position j accepted | j-1 accepted)
    source_rate: float | None = None  # the source's own rate figure, as printed
    notes: list = field(default_factory=list)
    counts: dict = field(default_factory=dict)  # lines / parsed / garbled / missing of the reading
    drafting_flags: dict | None = None  # `drafting` in both engines' terms (`Drafting.engine_flags`)

    def to_dict(self) -> dict:
        return asdict(self)

    def report(self) -> str:
        def f(x, spec=".4f"):
            return "-" if x is None else format(x, spec)

        c = self.counts
        lines = [f"{self.source}: {self.kind}",
                 f"  read: {c.get('lines', 0):,} lines/records, parsed {c.get('parsed', 0):,}, garbled "
                 f"{c.get('garbled', 0):,} (skipped), unrecognised {c.get('unrecognised', 0):,}"
                 + (f"; missing: {', '.join(c['missing'])}" if c.get("missing") else ""),
                 f"  definition: {self.definition}",
                 f"  accept length (bonus token counted): {f(self.accept_length)}",
                 f"  per-token rate implied ({self.drafting or 'no drafting settings'}): {f(self.per_token_rate)}"]
        if self.per_position_unconditional:
            lines.append("  per position, unconditional: " + ", ".join(f"{x:.3f}" for x in self.per_position_unconditional))
            lines.append("  per position, conditional:   " + ", ".join(
                f"{x:.3f}" + (" (IMPOSSIBLE: above 1)" if x > 1 + 1e-9 else "") for x in self.per_position_conditional))
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  garbled {g['line']}: {g['reason']}" for g in c.get("garbled_lines", [])[:10]]
        return "\n".join(lines)


# -- per-position conversions -------------------------------------------------------------------
def conditional_from_unconditional(u) -> list[float]:
    """c_j = u_j / u_(j-1) (u_(-1) = 1); 0 where the previous position is never reached."""
    u = [float(x) for x in u]
    prev = [1.0] + u[:-1]
    return [x / p if p > 0 else 0.0 for x, p in zip(u, prev)]


def unconditional_from_conditional(c) -> list[float]:
    return [float(x) for x in np.cumprod(np.asarray(c, dtype=np.float64))] if len(c) else []


def accept_length_from_unconditional(u) -> float:
    """1 (the bonus token) + the expected number of accepted drafted tokens."""
    return 1.0 + float(sum(u))


def unconditional_from_histogram(hist) -> list[float]:
    """SGLang's histogram[i] (verify steps accepting exactly i draft tokens) -> P(reach position j)."""
    h = np.asarray(hist, dtype=np.float64)
    total = h.sum()
    if total <= 0:
        return []
    tail = np.cumsum(h[::-1])[::-1]  # tail[i] = steps accepting >= i
    return [float(x) for x in tail[1:] / total]


def sglang_rate_definition(accept_length: float, rate: float, draft_tokens: int, tol: float = 0.011) -> str | None:
    """Which of SGLang's accept-rate definitions a (length, rate) pair fits, or None when neither.

    'length/N': accept length / num_draft_tokens; '(length-1)/(N-1)': accepted drafts per verify
    over the drafted tokens. `tol` covers the two decimals the log prints.
    """
    n = int(draft_tokens)
    a = abs(rate - accept_length / n)
    b = abs(rate - (accept_length - 1) / (n - 1)) if n > 1 else float("inf")
    if min(a, b) > tol:
        return None
    return "length/N" if a <= b else "(length-1)/(N-1)"


def _rate_has_two_definitions(engines) -> bool:
    """Whether a log of these engines prints an `accept rate` whose definition changed between its
    releases (the engine table's `log.accept_rate` rule), so which one a line uses must be told."""
    from helpers.engines.registry import ENGINE_KEYS, engine_at  # the engine table: read only for a log

    return any(engine_at(e).value("log.accept_rate") == "two-definitions" for e in engines if e in ENGINE_KEYS)


# -- drafting and the per-token rate --------------------------------------------------------------
def drafting_for(steps=None, topk=None, draft_tokens=None, positions: int | None = None) -> Drafting | None:
    """The drafting the per-token rate is implied under, from SGLang's names (draft_tokens counts
    the root; alone, a chain of draft_tokens - 1), else a chain as long as the `positions` a source
    reports; None when nothing says. ValueError (one line naming the flag) on a shape no engine runs."""
    return Drafting.from_flags(steps, topk, draft_tokens, lone="sglang", positions=positions)


def rate_for(accept_length: float, drafting: Drafting, given: dict | None = None) -> dict:
    """The `rate-for` conversion: the per-token rate whose exact expectation under `drafting` is
    `accept_length` (`Drafting.rate_for`, as `normalise` uses it). Also what SGLang's log would
    print as its accept rate under each definition. `given`: the flags as typed, echoed in the JSON."""
    given = given or {}
    rate = drafting.rate_for(float(accept_length))
    n = drafting.num_draft_tokens
    return {"accept_length": float(accept_length),
            "draft_tokens": given.get("draft_tokens") if given.get("draft_tokens") is not None else n,
            "topk": given.get("topk"), "steps": given.get("steps"), "num_draft_tokens": n,
            "drafting": drafting.label, "per_token_rate": rate, "expected_at_rate": drafting.expected(rate),
            "max_accept_length": drafting.expected(1.0),
            "sglang_accept_rate": drafting.sglang_accept_rate(float(accept_length))}


def rate_for_report(r: dict) -> str:
    s = r["sglang_accept_rate"]
    return "\n".join([
        f"accept length {r['accept_length']:.4g} (bonus token counted), {r['drafting']}",
        f"  per-token acceptance rate: {r['per_token_rate']:.4f}   (its exact expectation: {r['expected_at_rate']:.4f}; "
        f"the most this drafting reaches is {r['max_accept_length']:.4g})",
        f"  SGLang would log accept rate {s['length/N']:.3f} (accept length / num_draft_tokens) or "
        + ("-" if s["(length-1)/(N-1)"] is None else f"{s['(length-1)/(N-1)']:.3f}")
        + " (accepted drafts / (num_draft_tokens - 1)), depending on the build: neither is the per-token rate.",
    ])


def log_conversion(summary: dict) -> dict:
    """What a `LogTable.summary()` means on the common scale, under the log's own drafting line:
    the per-token rate its mean accept length implies and the definition its accept rate fits."""
    d = summary.get("drafting") or {}
    out = {"drafting": None, "per_token_rate": None, "accept_rate_definition": None}
    try:
        drafting = drafting_for(d.get("steps"), d.get("topk"), d.get("draft_tokens"))
    except ValueError as e:
        drafting, out["note"] = None, f"the log's drafting settings are not a shape SGLang runs: {e}"
    length, rate = summary.get("mean_accept_length"), summary.get("mean_accept_rate")
    out["drafting"] = None if drafting is None else drafting.label
    out["drafting_flags"] = None if drafting is None else drafting.engine_flags()  # both engines' terms
    if drafting is not None and length is not None:
        try:
            out["per_token_rate"] = drafting.rate_for(length)
        except ValueError:
            pass
    n = d.get("draft_tokens")
    if _rate_has_two_definitions(summary.get("engines", [])) and length is not None and rate is not None and n:
        out["accept_rate_definition"] = sglang_rate_definition(length, rate, n)
    return out


# -- normalise a table ------------------------------------------------------------------------------
def _sum(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return (sum(vals), len(vals)) if vals else (None, 0)


def normalise(table, steps=None, topk=None, draft_tokens=None) -> Acceptance:
    """A `MetricsTable` on the common scale; drafting settings: given (SGLang's names, checked:
    a shape no engine runs is a BadInputError naming the flag), else the source's own.

    Drafting settings are merged by `helpers.acceptance.drafting.fill` and read by
    `Drafting.from_flags` (the code path `rate-for` uses)."""
    kind = table.kind
    values, origin = fill({"steps": steps, "topk": topk, "draft_tokens": draft_tokens}, dict(table.settings))
    steps, topk, draft_tokens = values.get("steps"), values.get("topk"), values.get("draft_tokens")
    acc = Acceptance(str(table.source), kind, DEFINITIONS.get(kind, kind))
    rows = table.rows
    u = None
    if kind in ("vllm-prometheus", "llamacpp-prometheus", "vllm-requests", "vllm-log", "llamacpp-log"):  # same counters
        u = _vllm(acc, rows, kind)
    elif kind in ("sglang-log", "sglang-prometheus", "sglang-server-info"):
        _sglang_means(acc, rows, draft_tokens or (steps + 1 if steps else None))  # SGLang's N counts the root
    elif kind == "sglang-requests":
        u = _sglang_requests(acc, rows)
    elif kind == "specforge":
        u = _specforge(acc, rows)
    if u:
        acc.per_position_unconditional = u
        acc.per_position_conditional = conditional_from_unconditional(u)
        high = [j for j, c in enumerate(acc.per_position_conditional) if c > 1 + 1e-9]
        if high:  # rows are bounded (helpers.serving.bounds); a pooled figure can still rise: flagged
            acc.notes.append(f"IMPOSSIBLE: the conditional rate at position {high[0]} is "
                             f"{acc.per_position_conditional[high[0]]:.3f} > 1 (a draft reaches position j only through "
                             "j - 1): the per-position counts come from different runs, servers or models, or their "
                             "positions are mislabelled; the per-position figures are not evidence")
    try:
        d = drafting_for(steps, topk, draft_tokens, positions=len(u) if u else None)
    except ValueError as e:
        if "given" in origin.values():
            raise BadInputError(None, str(e)) from None
        d = None
        acc.notes.append(f"the source's drafting settings are not a shape SGLang runs ({e}): no per-token rate")
    if d is not None and u and d.is_chain and d.steps != len(u):
        how = "--steps" if origin.get("steps") == "given" else "the source's settings"
        acc.notes.append(f"warning: {how} give a chain of {d.steps} but the source reports acceptance at {len(u)} "
                         f"positions: is --steps right? (the per-token rate is implied under {d.steps})")
    if d is not None:
        acc.drafting, acc.drafting_flags = d.label, d.engine_flags()
        if acc.accept_length is not None:
            try:
                acc.per_token_rate = d.rate_for(acc.accept_length)
            except ValueError as e:
                acc.notes.append(f"no per-token rate: {e}")
    elif acc.accept_length is not None and not any("not a shape" in n for n in acc.notes):
        acc.notes.append("no drafting settings (steps / topk / draft tokens): no per-token rate implied")
    acc.notes += [n for n in getattr(table, "notes", []) if n not in acc.notes]
    acc.counts = {k: v for k, v in table.to_json().items() if k in ("lines", "parsed", "garbled", "garbled_lines",
                                                                   "unrecognised", "missing", "interval_s")}
    return acc


def normalise_for(table, settings) -> Acceptance:
    """`normalise` with a `RunSettings`' drafting where the user or a log gave it; where it is only
    the default, the source's own settings (SGLang's server info, a log's start-up line) win."""
    src = settings.sources or {}
    given = {name: value for name, value in (("steps", settings.steps), ("topk", settings.topk),
                                             ("draft_tokens", settings.draft_tokens))
             if value is not None and name in src and not src[name].startswith(("default", "steps + 1"))}
    return normalise(table, **given)


def _vllm(acc: Acceptance, rows, kind) -> list | None:
    if kind == "vllm-log":
        return _vllm_log(acc, rows)
    if kind == "llamacpp-log":
        return _llamacpp_log(acc, rows)
    drafts, _ = _sum(rows, "drafts")
    accepted, _ = _sum(rows, "accepted")
    tokens, _ = _sum(rows, "draft_tokens")
    if drafts is None:
        acc.notes.append("no drafts counter (vllm:spec_decode_num_drafts / num_drafts): no accept length")
        return None
    if accepted is None:
        acc.notes.append(f"no accepted-tokens counter (vllm:spec_decode_num_accepted_tokens / num_accepted_tokens), "
                         f"although {drafts:g} drafts were counted: no accept length")
        return None
    if not drafts:
        acc.notes.append("no drafts counted (the drafts counter is 0): no accept length")
        return None
    acc.accept_length = accept_length(accepted, drafts)
    if tokens:
        acc.source_rate = accepted / tokens
    pos = [r["accepted_per_pos"] for r in rows if r.get("accepted_per_pos")]
    if not pos or len({len(p) for p in pos}) != 1:
        return None
    per = [sum(p[j] for p in pos) / drafts for j in range(len(pos[0]))]
    if abs(sum(per) + 1.0 - acc.accept_length) > 1e-9:
        acc.notes.append(f"per-position counts sum to {sum(per) * drafts:g}, not the accepted {accepted:g}")
    return per


def _without_bonus() -> str:
    """'vLLM X.Y.Z': the releases whose log line's mean leaves the bonus token out (the engine table's rule)."""
    from helpers.engines.registry import engine_at  # the engine table: read only for a vLLM log that needs it

    at = engine_at("vllm")
    sp = at.where("log.mean_bonus", "leaves-out")
    first = sp.since or at.engine.releases[0]
    return f"{at.name} {first}" + ("+" if sp.until is None else "" if sp.until == first else f"-{sp.until}")


def _vllm_log(acc: Acceptance, rows) -> list | None:
    """vLLM log lines pooled by their drafts (the log reader's count per line); lines cut short
    or without counters only when no line has them (their mean, unweighted)."""
    counted = [r for r in rows if r.get("drafts")]
    empty = sum(1 for r in rows if r.get("drafts") == 0)
    if empty:
        acc.notes.append(f"{empty} interval(s) without drafts (vLLM printed nan): counted as empty")
    cut = sum(1 for r in rows if r.get("cut"))
    if cut:
        acc.notes.append(f"{cut} line(s) cut short: their accept length is read, their counters are not pooled")
    variable = sum(1 for r in counted if r.get("variable"))
    if variable:
        acc.notes.append(f"{variable} line(s) from a drafter whose length varies per step: drafts = accepted / "
                         "(Mean acceptance length - 1) from each line's own mean, not Drafted / positions")
    if any(r.get("mean_without_bonus") for r in rows):
        acc.notes.append(f"Mean acceptance length printed without the bonus token ({_without_bonus()}): 1 added")
    if not counted:
        lengths = [r["accept_length"] for r in rows if r.get("accept_length") is not None]
        if lengths:
            acc.accept_length = float(np.mean(lengths))
            acc.notes.append("no line with complete counters: mean of the lines' accept lengths, unweighted")
        return None
    drafts = sum(r["drafts"] for r in counted)
    accepted = sum(r["accepted"] for r in counted)
    acc.accept_length = accept_length(accepted, drafts)
    acc.source_rate = accepted / sum(r["draft_tokens"] for r in counted)
    with_pos = [r for r in counted if r.get("per_position")]
    widths = {len(r["per_position"]) for r in with_pos}
    if not with_pos or len(widths) != 1:
        return None
    w = sum(r["drafts"] for r in with_pos)
    return [sum(r["per_position"][j] * r["drafts"] for r in with_pos) / w for j in range(widths.pop())]


def _llamacpp_log(acc: Acceptance, rows) -> list | None:
    """llama.cpp's per-request lines pooled as its counters pool them: 1 + sum accepted / sum verify
    steps, per position sum (rate x steps) / sum steps. Exact where every request's steps are
    (`helpers.serving.log_lines._llamacpp_steps`); the requests whose steps are not are named."""
    counted = [r for r in rows if r.get("drafts")]
    inexact = [r for r in counted if not r.get("steps_exact")]
    unknown = [r for r in rows if r.get("steps_unknown")]
    without = [r for r in rows if r.get("accept_length") is None and not r.get("cut")]
    if inexact:
        acc.notes.append(f"{len(inexact)} request(s) whose verify steps no whole number reproduces uniquely (line "
                         f"{inexact[0]['line']}...): their steps are accepted / (mean len - 1), so the pooled accept "
                         "length is close to llama.cpp's counters, not exact")
    if unknown:
        acc.notes.append(f"{len(unknown)} request(s) accepted no draft token (mean len 1.00, line {unknown[0]['line']}"
                         "...): their verify steps are not in the log, so they are left out of the pooled accept "
                         "length, which is therefore above llama.cpp's counters")
    if without:
        acc.notes.append(f"{len(without)} line(s) print no mean (an older llama.cpp): their verify steps are unknown, "
                         "left out of the pooled accept length")
    if not counted:
        return None
    drafts = sum(r["drafts"] for r in counted)
    accepted = sum(r["accepted"] for r in counted)
    acc.accept_length = accept_length(accepted, drafts)
    acc.source_rate = accepted / sum(r["draft_tokens"] for r in counted)
    with_pos = [r for r in counted if r.get("per_position")]
    widths = {len(r["per_position"]) for r in with_pos}
    if len(with_pos) != len(counted) or len(widths) != 1:
        return None
    def count(r, j):  # below 1000 steps a 3-decimal rate names its whole count
        c = r["per_position"][j] * r["drafts"]
        return round(c) if r.get("steps_exact") and r["drafts"] < 1000 else c
    return [sum(count(r, j) for r in with_pos) / drafts for j in range(widths.pop())]


def _sglang_means(acc: Acceptance, rows, n) -> None:
    lengths = [r["accept_length"] for r in rows if r.get("accept_length") is not None]
    rates = [r["accept_rate"] for r in rows if r.get("accept_rate") is not None]
    if lengths:
        acc.accept_length = float(np.mean(lengths))
    if rates:
        acc.source_rate = float(np.mean(rates))
    if lengths and rates and n:
        pairs = [(r["accept_length"], r["accept_rate"]) for r in rows
                 if r.get("accept_length") is not None and r.get("accept_rate") is not None]
        defs = {sglang_rate_definition(length, rate, n) for length, rate in pairs}
        if len(defs) == 1 and None not in defs:
            d = defs.pop()
            acc.notes.append(f"this build's accept rate is {'accept length / num_draft_tokens' if d == 'length/N' else 'accepted drafts per verify / (num_draft_tokens - 1)'} "
                             f"(N = {n}); mean {acc.source_rate:.3f} is not a per-token rate")
        else:
            acc.notes.append(f"accept rate fits no known definition for num_draft_tokens {n}: reported as printed")
    elif rates and not lengths and n:
        acc.notes.append("only an accept rate: its definition differs between SGLang builds, so no accept length is guessed")


def _sglang_requests(acc: Acceptance, rows) -> list | None:
    comp, nc = _sum(rows, "completion_tokens")
    verify, nv = _sum(rows, "verify_ct")
    if comp is not None and verify and nc == nv == len(rows):
        acc.accept_length = sglang_accept_length(comp, verify)
    else:
        lengths = [r["accept_length"] for r in rows if r.get("accept_length") is not None]
        if lengths:
            acc.accept_length = float(np.mean(lengths))
            acc.notes.append("completion_tokens missing: mean of the requests' spec_accept_length, unweighted")
    accepted, _ = _sum(rows, "accepted")
    proposed, _ = _sum(rows, "draft_tokens")
    if accepted is not None and proposed:
        acc.source_rate = accepted / proposed
    hists = [r["histogram"] for r in rows if r.get("histogram")]
    if not hists:
        return None
    width = max(len(h) for h in hists)
    total = [sum(h[i] for h in hists if i < len(h)) for i in range(width)]
    return unconditional_from_histogram(total) or None


def _specforge(acc: Acceptance, rows) -> list | None:
    rows = [r for r in rows if r.get("acc") or r.get("simulated_acc_len") is not None]
    if not rows:
        return None
    evals = [r for r in rows if str(r["label"]).startswith("eval")]
    r = (evals or rows)[-1]
    acc.notes.append(f"from {r['label']}")
    u = unconditional_from_conditional(r["acc"]) if r.get("acc") else None
    sim = r.get("simulated_acc_len")
    if u:
        acc.accept_length = accept_length_from_unconditional(u)
        if sim is not None:
            if abs(sim - sum(u)) < 1e-3:
                acc.notes.append(f"simulated_acc_len {sim:.4f} leaves the bonus token out: + 1 = {sim + 1:.4f}")
            elif abs(sim - 1 - sum(u)) < 1e-3:
                acc.notes.append(f"simulated_acc_len {sim:.4f} already counts the bonus token (a fork starting at 1.0)")
            else:
                acc.notes.append(f"simulated_acc_len {sim:.4f} fits neither sum of prod(acc_i) nor 1 + it: the acc_i are used")
    elif sim is not None:
        acc.accept_length = sim + 1.0
        acc.notes.append(f"simulated_acc_len {sim:.4f} without acc_i: the bonus token added (SpecForge's convention)")
    return u


# -- online against offline -------------------------------------------------------------------------
def compare_online_offline(online, offline_step_accuracy=None, measured=None, near_zero: float = 0.05,
             tolerance: float = 0.2) -> str:
    """One paragraph: serving's per-position acceptance (unconditional) against the offline figures.

    `offline_step_accuracy`: evaluate's per-step top-1 (its product is the chance of reaching each
    position, as the chain model assumes); `measured`: the unconditional per-position acceptance
    `speculate` measured with the real target. The offline reference is `measured` when given.
    """
    if not online:
        return "No per-position acceptance from serving: nothing to compare (give vLLM metrics, a vLLM log, or SGLang meta_info with a histogram)."
    online = [float(x) for x in online]
    ref, ref_name = None, None
    if measured:
        ref, ref_name = [float(x) for x in measured], "measured offline (speculate)"
    elif offline_step_accuracy:
        ref, ref_name = unconditional_from_conditional(offline_step_accuracy), "offline (evaluate, product of per-step top-1)"
    if online[0] < near_zero:
        if ref is not None and ref[0] >= near_zero:
            return (f"Position 0 is near zero in serving ({online[0]:.3f}) while {ref_name} reaches {ref[0]:.3f}: the "
                    "draft is fine offline but serving breaks it from the first token - a serving mismatch (aux layer "
                    "ids, chat template, the EAGLE vs EAGLE3 algorithm flag) or a mapping/head the engine reads differently.")
        return (f"Position 0 is near zero in serving ({online[0]:.3f})" + ("" if ref is None else f" and offline ({ref[0]:.3f})")
                + ": the first drafted token is almost never right - the mapping (d2t) or the head (lm_head) is wrong or misread.")
    if ref is None:
        c = conditional_from_unconditional(online)
        return (f"Serving accepts position 0 at {online[0]:.3f}; conditional acceptance per position "
                + ", ".join(f"{x:.2f}" for x in c) + ". No offline figure was given to compare with.")
    k = min(len(online), len(ref))
    if online[0] < (1 - tolerance) * ref[0]:
        return (f"Offline is good but serving is low from position 0 ({online[0]:.3f} against {ref[0]:.3f}, {ref_name}): "
                "a serving mismatch - aux layer ids, chat template, algorithm flag - not the draft's quality.")
    c_on, c_ref = conditional_from_unconditional(online[:k]), conditional_from_unconditional(ref[:k])
    late = [(a, b) for a, b in zip(c_on[1:], c_ref[1:]) if b > 0]
    if late and np.mean([a / b for a, b in late]) < 1 - tolerance:
        return (f"Position 0 agrees ({online[0]:.3f} against {ref[0]:.3f}) but serving decays faster: conditional "
                f"acceptance at later positions is {np.mean([a / b for a, b in late]):.0%} of {ref_name} - position or "
                "context effects (longer served context than trained, positions, batch traffic unlike the samples).")
    return (f"Serving agrees with {ref_name} within {tolerance:.0%} at every position compared ({k}): "
            f"position 0 {online[0]:.3f} against {ref[0]:.3f}.")

