"""`d2t-lab probe`: measure a running speculative-decoding server with the user's prompts.

`measure(server, prompts, ...)` sends each prompt, one request at a time, greedy (temperature 0) or at
the `temperature` asked (`probe --temperature T`),
through `helpers.serving.probe_client` (HTTP only: the answers come back raw), scraping `/metrics`
before the first request and after the last. Each answer is read by `helpers.serving.records.read_answer`,
each /metrics page by `helpers.serving.metrics.parse_prometheus`. The served accept length comes
from, in order of preference:

- **per-request** figures in the answers: vLLM 0.32+ `metrics.speculative_decoding` (accept length
  of a request = 1 + num_accepted_draft_tokens / num_spec_steps) or SGLang's `meta_info`
  (completion_tokens / spec_verify_ct, SGLang's own definition, which counts the prefill's token).
  Pooled over the requests by `helpers.acceptance.sources.normalise`, as `d2t-lab metrics` pools a
  JSONL of them: vLLM 1 + sum accepted / sum steps, SGLang sum completion_tokens / sum spec_verify_ct;
- else the **/metrics counters** differenced over the run (`helpers.serving.metrics.difference`):
  1 + accepted / drafts, per position accepted at j / drafts.

Standard error: a ratio estimator over requests. The pooled figure is R = sum x_i / sum s_i (vLLM:
x_i accepted draft tokens, s_i verify steps, accept length 1 + R; SGLang: x_i completion tokens,
s_i verify steps, accept length R), and se(R) = sqrt(n / (n - 1) * sum (x_i - R s_i)^2) / sum s_i,
the linearised (delta-method) standard error of a ratio of sums, which weights each request by
its verify steps. None with fewer than two requests, and for the counters (they have no
per-request spread).

llama.cpp (`llama-server`): its answers carry `timings.draft_n` / `draft_n_accepted` (draft tokens
and accepted ones) but not the request's verify steps, so the accept length is its /metrics
counters' (`llamacpp:spec_decode_*`) differenced over the run, 1 + accepted / drafts, exactly what
the server counted; the answers' sums are cross-checked against the counters' draft tokens and
accepted tokens (equal on a server nothing else used during the run; a disagreement is named,
never averaged).

When both the per-request figures and the counters are there, both are reported with whether they
agree: the counters moved by exactly the requests' own drafts and accepted tokens, or not (then
the server had other traffic during the run). A server that gives neither - no per-request
figures and no `spec_decode` counters, or counters that did not move - is not speculating: one line.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from helpers.acceptance.sources import normalise
from helpers.core.errors import BadInputError
from helpers.engines.counting import accept_length, sglang_accept_length
from helpers.serving.metrics import COUNTED_KINDS, MetricsTable, difference, parse_prometheus
from helpers.serving.probe_client import Server, send
from helpers.serving.records import Reply, read_answer, request_row

SETTLE_S = 3.0  # how long to wait for /metrics to catch up with the last answer


@dataclass
class Request:
    """One prompt sent and what came back."""

    index: int
    prompt_tokens: int | None
    reply: Reply

    @property
    def accept_length(self) -> float | None:
        r = self.reply
        if r.kind is None or not r.steps:  # llama.cpp's answers: no verify steps
            return None
        if r.kind == "sglang":
            return None if r.completion_tokens is None else sglang_accept_length(r.completion_tokens, r.steps)
        return accept_length(r.accepted, r.steps)

    def to_dict(self) -> dict:
        r = self.reply
        return {"index": self.index, "prompt_tokens": self.prompt_tokens, "output_ids": r.output_ids,
                "text": r.text, "completion_tokens": r.completion_tokens, "finish_reason": r.finish_reason,
                "accept_length": self.accept_length, "verify_steps": r.steps, "accepted": r.accepted,
                "drafted": r.drafted, "histogram": r.histogram}


def ratio_stderr(x: list[float], s: list[float]) -> float | None:
    """Standard error of sum(x) / sum(s) over the pairs (see the module docstring); None for n < 2."""
    n, total = len(x), float(sum(s))
    if n < 2 or total <= 0:
        return None
    r = sum(x) / total
    return math.sqrt(n / (n - 1) * sum((a - r * b) ** 2 for a, b in zip(x, s))) / total


@dataclass
class Measured:
    """What the server did with the prompts."""

    server: Server
    endpoint: str
    requests: list[Request]
    before: MetricsTable | None
    after: MetricsTable | None
    counters: MetricsTable | None  # after - before (vLLM counters), None without them
    per_request: object = None  # Acceptance of the pooled per-request figures
    from_metrics: object = None  # Acceptance of the differenced counters
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    counters_invalid: str | None = None  # why the counters' movement is out of bounds (`helpers.serving.bounds`)

    @property
    def source(self) -> str:
        return "per-request" if self.per_request is not None else "metrics"

    @property
    def accept_length(self) -> float:
        return (self.per_request or self.from_metrics).accept_length

    @property
    def stderr(self) -> float | None:
        reqs = [q.reply for q in self.requests if q.reply.kind]
        if self.per_request is None or len(reqs) != len(self.requests):
            return None
        if reqs[0].kind == "sglang":
            return ratio_stderr([r.completion_tokens for r in reqs], [r.steps for r in reqs])
        return ratio_stderr([r.accepted for r in reqs], [r.steps for r in reqs])

    @property
    def per_position(self) -> list | None:
        a = self.per_request or self.from_metrics
        return a.per_position_unconditional

    def counts(self) -> dict | None:
        """The counters' movement over the run: {drafts, draft_tokens, accepted, accepted_per_pos}."""
        if self.counters is None:
            return None
        row = self.counters.rows[0]
        return {k: row[k] for k in ("drafts", "draft_tokens", "accepted", "accepted_per_pos")}

    def agreement(self) -> dict | None:
        """Per-request sums against the counters' movement (both present only)."""
        c = self.counts()
        if c is not None and self.requests and all(q.reply.steps_unknown for q in self.requests):
            return self._llamacpp_agreement(c)
        if self.per_request is None or c is None or c["drafts"] is None or self.requests[0].reply.kind != "vllm":
            return None
        steps = sum(q.reply.steps for q in self.requests)
        accepted = sum(q.reply.accepted for q in self.requests)
        same = c["drafts"] == steps and c["accepted"] == accepted
        if same:
            why = ("the counters moved by exactly the requests' own verify steps and accepted tokens: nothing else "
                   "ran on the server during the probe")
        elif c["drafts"] > steps:
            why = (f"the counters moved by {c['drafts']} drafts and {c['accepted']} accepted tokens, the probe's "
                   f"requests account for {steps} and {accepted}: the server had other traffic during the probe "
                   "(the per-request figure is the probe's own)")
        else:
            why = (f"the counters moved by {c['drafts']} drafts, less than the requests' {steps} verify steps: "
                   "another engine behind this URL, a restart, or counters that lag the answers")
        return {"agree": same, "per_request": {"verify_steps": steps, "accepted": accepted},
                "metrics": {"drafts": c["drafts"], "accepted": c["accepted"]}, "why": why}


    def _llamacpp_agreement(self, c: dict) -> dict:
        """llama.cpp: the answers' `timings` sums against the counters' draft tokens and accepted tokens."""
        drafted = sum(q.reply.drafted or 0 for q in self.requests)
        accepted = sum(q.reply.accepted or 0 for q in self.requests)
        same = c["draft_tokens"] == drafted and c["accepted"] == accepted
        if same:
            why = ("the counters moved by exactly the answers' own draft tokens and accepted tokens (timings.draft_n, "
                   "draft_n_accepted): nothing else ran on the server during the probe")
        elif (c["draft_tokens"] or 0) >= drafted and (c["accepted"] or 0) >= accepted:
            why = (f"the counters moved by {c['draft_tokens']} draft tokens and {c['accepted']} accepted, the probe's "
                   f"answers account for {drafted} and {accepted}: the server had other traffic during the probe, so "
                   "the counters' accept length is not the probe's own")
        else:
            why = (f"the counters moved by {c['draft_tokens']} draft tokens and {c['accepted']} accepted, fewer than "
                   f"the answers' {drafted} and {accepted}: another server behind this URL, a restart, or counters that "
                   "lag the answers")
        return {"agree": same, "per_request": {"draft_tokens": drafted, "accepted": accepted},
                "metrics": {"drafts": c["drafts"], "draft_tokens": c["draft_tokens"], "accepted": c["accepted"]},
                "why": why}


def _scrape(server: Server, model: str | None = None) -> MetricsTable | None:
    """/metrics read for the probed model's series only (`parse_prometheus(model=...)`: another model's
    series on the same page are left out and named in the table's notes)."""
    status, body = server.call("/metrics")
    if status != 200:
        return None
    return parse_prometheus(body.decode("utf-8", errors="replace"), server.url + "/metrics", model=model)


def _has_counters(table: MetricsTable | None) -> bool:
    return table is not None and table.kind in COUNTED_KINDS and table.rows[0].get("drafts") is not None


def _not_speculating(server: Server, what: str) -> BadInputError:
    if server.completion_path:  # llama-server
        return BadInputError(server.url, f"is not speculating: {what}; start llama-server with a draft (-md DRAFT.gguf "
                             "--spec-type draft-eagle3) and --metrics")
    return BadInputError(server.url, f"is not speculating: {what}; start it with speculative decoding (vLLM "
                         "--speculative-config, SGLang --speculative-algorithm) and, for per-request figures, vLLM "
                         "--per-request-spec-decode-metrics summary")


def measure(server: Server, prompts, *, max_new_tokens: int, model: str | None, progress: bool = False,
            temperature: float = 0.0, seed: int | None = None) -> Measured:
    """Send each prompt (`(index, ids or None, messages)`) one at a time, at `temperature` (0: greedy;
    prompt i seeded with `seed` + i where a seed is given); see the module docstring."""
    from tqdm.auto import tqdm

    if server.server_info is not None and "speculative_algorithm" in server.server_info \
            and not server.speculative_algorithm:
        raise _not_speculating(server, "/get_server_info says speculative_algorithm is None")
    before = _scrape(server, model)
    m_model = model
    requests, endpoint, t0 = [], None, time.monotonic()
    for index, ids, messages in tqdm(prompts, desc="probe", unit="request", disable=not progress):
        endpoint, answer = send(server, ids=ids, messages=None if ids is not None else messages,
                                max_new_tokens=max_new_tokens, model=model, temperature=temperature,
                                seed=None if seed is None else seed + index)
        reply = read_answer(answer, endpoint, server.url + endpoint)
        requests.append(Request(index, None if ids is None else len(ids), reply))
        if server.completion_path and len(requests) == 1 and not _has_counters(before):
            raise BadInputError(server.url, "llama-server's /metrics has no spec_decode counters (started without "
                                "--metrics?): its answers carry no verify steps, so the probe needs the counters; "
                                "start it with --metrics")
        if len(requests) == 1 and reply.kind is None and not _has_counters(before):
            if server.engine == "sglang" and endpoint != "/generate" and server.speculative_algorithm:
                raise BadInputError(server.url, "SGLang gives acceptance per request only in /generate's meta_info, "
                                    "and has no counters to difference: pass --target DIR so the probe sends "
                                    "token ids to /generate")
            raise _not_speculating(server, f"the answer from {endpoint} carries no per-request speculative figures "
                                   "and /metrics has no spec_decode counters")
    seconds = time.monotonic() - t0
    m = Measured(server, endpoint, requests, before, None, None, seconds=seconds)
    with_counts = [q for q in requests if q.reply.kind and not q.reply.steps_unknown]  # llama.cpp's: no steps
    if server.completion_path:
        no_timings = [q.index for q in requests if not q.reply.steps_unknown]
        if no_timings:
            m.notes.append(f"{len(no_timings)} of {len(requests)} answers carry no timings (prompt {no_timings[0]}...): "
                           "the cross-check of the answers against the counters is left out")
    elif with_counts and len(with_counts) != len(requests):
        m.notes.append(f"{len(requests) - len(with_counts)} of {len(requests)} answers carry no per-request "
                       "figures: the per-request figure is left out, the counters decide")
    if with_counts and len(with_counts) == len(requests) and sum(q.reply.steps for q in requests):
        kind = f"{requests[0].reply.kind}-requests"
        table = MetricsTable(server.url + endpoint, kind, [request_row(q.reply, q.index) for q in requests],
                             lines=len(requests))
        m.per_request = normalise(table)
    if _has_counters(before):
        m.notes += [f"/metrics: {n}" for n in before.notes if "another model" in n]
        m.after, m.counters = _settle(server, before, m, m_model)
        _bound_counters(m)
        c = m.counts()
        if c and c["drafts"] and m.counters_invalid is None:
            m.from_metrics = normalise(m.counters)
    if m.per_request is None and m.from_metrics is None:
        trouble = [n for n in m.notes if n.startswith("/metrics") and ("went down" in n or "stopped reading" in n
                                                                        or "lost its" in n)]
        if m.counters_invalid:
            raise BadInputError(server.url, f"the answers carry no per-request figures and its /metrics counters over "
                                f"the run are out of bounds ({m.counters_invalid}): not used; nothing else measures "
                                "the run")
        if _has_counters(before) and trouble:
            raise BadInputError(server.url, f"the answers carry no per-request figures and {trouble[0]}: nothing "
                                "measures the run; probe again (after a restart the counters count from zero)")
        what = ("its /metrics spec_decode counters did not move during the run" if _has_counters(before)
                else "no answer carries per-request speculative figures and /metrics has no spec_decode counters")
        raise _not_speculating(server, f"{what} ({len(requests)} requests to {endpoint})")
    return m


def _bound_counters(m: Measured) -> None:
    """The counters' movement over the run through `helpers.serving.bounds`, as `metrics` bounds a page
    (accepted no more than drafted, 1 + accepted / drafts within what the drafting emits, per position
    never rising, no counter missing): out of bounds, `counters_invalid` says why and they are not used."""
    from helpers.serving import bounds

    if m.counters is None or not m.counters.rows:
        return
    row = m.counters.rows[0]
    ks = {q.reply.num_spec_tokens for q in m.requests if q.reply.num_spec_tokens}
    maximum = ks.pop() + 1 if len(ks) == 1 else None
    found = bounds.problems(row, maximum)
    gone = [k for k in ("drafts", "draft_tokens", "accepted") if row.get(k) is None]
    if found:
        m.counters_invalid = "; ".join(w for _, _, w in found)
    elif gone and row.get("drafts"):
        m.counters_invalid = f"counter(s) {', '.join(gone)} did not read at both scrapes ({'; '.join(m.counters.missing)})"
    if m.counters_invalid:
        m.notes.append(f"/metrics counters over the run are out of bounds, not used: {m.counters_invalid}")


def _settle(server: Server, before: MetricsTable, m: Measured,
            model: str | None = None) -> tuple[MetricsTable | None, MetricsTable | None]:
    """Scrape after the run until the counters stop moving (and, with per-request figures, reach the
    requests' own verify steps), at most SETTLE_S seconds."""
    want = sum(q.reply.steps or 0 for q in m.requests) if all(q.reply.kind == "vllm" for q in m.requests) else None
    key = "drafts"
    if m.requests and all(q.reply.steps_unknown for q in m.requests):  # llama.cpp: its answers count draft tokens
        want, key = sum(q.reply.drafted or 0 for q in m.requests), "draft_tokens"
    deadline, last = time.monotonic() + SETTLE_S, None
    while True:
        after = _scrape(server, model)
        if not _has_counters(after):
            bad = [r for _, r in (after.garbled_lines if after is not None else []) if "spec_decode" in r]
            m.notes.append(f"/metrics: a spec_decode counter stopped reading during the run ({bad[0]})" if bad else
                           "/metrics lost its spec_decode counters during the run")
            return after, None
        diff = difference(before, after)
        if not diff.rows:  # a counter went down: the interval is left out (`difference`)
            m.notes += [f"/metrics: {x}" for x in diff.missing if "went down" in x]
            return after, None
        drafts = diff.rows[0].get(key)
        done = (drafts == last) if want is None else (drafts is not None and drafts >= want)
        if done or time.monotonic() > deadline:
            if diff.missing:
                m.notes += [f"/metrics: {x}" for x in diff.missing if "went down" in x]
            return after, diff
        last = drafts
        time.sleep(0.25)


def drafting_of(server: Server, m: Measured, *, num_speculative_tokens: int | None = None, log=None):
    """(Drafting or None, where it came from, notes): SGLang's server info; vLLM's num_spec_tokens in
    the answers; --num-speculative-tokens; a start-up log (`helpers.serving.startup.read_drafting`);
    the positions /metrics counts."""
    from helpers.acceptance.drafting import Drafting

    notes = []
    info = server.server_info or {}
    if isinstance(info.get("speculative_num_steps"), int):
        try:
            d = Drafting.from_sglang(info)
            return d, "/get_server_info", notes
        except ValueError as e:
            notes.append(f"/get_server_info's drafting settings do not read: {e}")
    ks = {q.reply.num_spec_tokens for q in m.requests if q.reply.num_spec_tokens}
    if len(ks) == 1:
        k = ks.pop()
        if num_speculative_tokens and num_speculative_tokens != k:
            notes.append(f"--num-speculative-tokens {num_speculative_tokens} differs from the server's own "
                         f"num_spec_tokens {k}: the server's is used")
        return Drafting.chain(k), "num_spec_tokens in the answers", notes
    if num_speculative_tokens:
        return Drafting.chain(num_speculative_tokens), "--num-speculative-tokens", notes
    if log is not None:
        from helpers.serving.startup import read_drafting

        found = read_drafting(log)
        if found.get("steps"):
            try:
                d = Drafting(found["steps"], found.get("topk", 1), found.get("draft_tokens")).check()
                return d, f"--log {log} ({found.get('source')})", notes
            except ValueError as e:
                notes.append(f"--log {log}: the drafting settings do not read: {e}")
        else:
            notes.append(f"--log {log}: no start-up line states the drafting settings")
    pos = (m.counts() or {}).get("accepted_per_pos")
    if pos:
        return Drafting.chain(len(pos)), "the positions /metrics counts", notes
    return None, None, notes
