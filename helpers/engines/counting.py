"""How an engine counts a speculative run: its drafts, draft tokens and accepted tokens per position.

Each engine's own names for those counts, and the accept length they make, live here once; the serving
readers (`helpers.serving.records`, `metrics`, `probe_client`, `log_lines`, `bounds`), the common scale
(`helpers.acceptance.sources`) and `EngineCounts` below take them from here:

- vLLM: its /metrics counters `vllm:spec_decode_num_drafts` (verify steps that carried a draft),
  `..._num_draft_tokens`, `..._num_accepted_tokens` and `..._num_accepted_tokens_per_pos{position="j"}`
  (`SPEC_DECODE_COUNTERS`, `SPEC_DECODE_PER_POS`); the same counts per request under its
  `SpecDecodingStats` names (`VLLM_REQUEST_STATS`: `num_drafts`, `num_draft_tokens`,
  `num_accepted_tokens`, `num_accepted_tokens_per_pos`); its answers' `metrics.speculative_decoding`
  (`VLLM_ANSWER_*`: an acceptance histogram, `num_spec_steps`, `num_accepted_draft_tokens`, ...).
  Accept length 1 + accepted / drafts (`accept_length`).
- llama.cpp: the same counters under the prefix `llamacpp:` (tools/server/server-task.cpp `to_metrics`),
  and per request its answers' `timings` (`draft_n` draft tokens, `draft_n_accepted`; no verify steps).
  Accept length 1 + accepted / drafts.
- SGLang: its answers' `meta_info`: `completion_tokens` and `spec_verify_ct` (verify steps); accept
  length completion_tokens / spec_verify_ct (`sglang_accept_length`: the tokens each verify step
  emitted, bonus counted), and the draft counts under the names of several releases (`SGLANG_*`).

The loop (`helpers.speculate.loop`) counts verify steps: every target forward after the prefill.
An engine counts what its own scheduler did, which differs at the end of a request:

- an engine whose table rule `count.draft_cap` is "remaining-minus-one" (llama.cpp's server): a
  draft is at most `n_remaining - 1` tokens long (`n_remaining` = tokens still to generate), so the
  last tokens of a request get shorter drafts and the very last none; a step without a draft is a
  plain decode, not counted (its verify steps, `/metrics` `spec_decode_num_drafts`). Its accept
  length is 1 + accepted / drafts, its per-position counts, its `draft_n` the tokens drafted.
- every other engine: the loop's own count (each verify step drafted the whole shape).

`EngineCounts` keeps those sums beside a run's (`SpecRun.engine_counts`), so `speculate --engine
llamacpp` states the accept length the engine prints for the same tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
# numpy and the engine table are imported where used: the serving readers (and so `logs` / `metrics`) take their
# names from here and start without them

# -- each engine's names for its counts --------------------------------------------------------------------------
VLLM_PREFIX, LLAMACPP_PREFIX, SGLANG_PREFIX = "vllm:", "llamacpp:", "sglang:"  # their /metrics series' prefixes
SPEC_DECODE = "spec_decode"  # the counters' stem, vLLM's and llama.cpp's alike (a client adds `_total`)
SPEC_DECODE_COUNTERS = {"spec_decode_num_drafts": "drafts", "spec_decode_num_draft_tokens": "draft_tokens",
                        "spec_decode_num_accepted_tokens": "accepted"}  # counter (no prefix) -> the row's key
SPEC_DECODE_PER_POS = "spec_decode_num_accepted_tokens_per_pos"  # one series per label position="j"
# vLLM's per-request counts under its SpecDecodingStats names -> the row's keys
VLLM_REQUEST_DRAFTS = "num_drafts"  # the name a record of them is recognised by
VLLM_REQUEST_STATS = {VLLM_REQUEST_DRAFTS: "drafts", "num_draft_tokens": "draft_tokens", "num_accepted_tokens": "accepted",
                      "num_accepted_tokens_per_pos": "accepted_per_pos"}
# vLLM answers' `metrics.speculative_decoding` (0.32+ `--per-request-spec-decode-metrics`)
VLLM_ANSWER_HISTOGRAM = "acceptance_histogram"  # [j]: verify steps that accepted exactly j draft tokens
VLLM_ANSWER_STEPS = "num_spec_steps"
VLLM_ANSWER_ACCEPTED = "num_accepted_draft_tokens"
VLLM_ANSWER_DRAFT_TOKENS = "num_draft_tokens"
VLLM_ANSWER_SPEC_TOKENS = "num_spec_tokens"  # the chain length the server drafts
# SGLang's meta_info: tokens emitted and verify steps, then (accepted draft tokens, proposed ones, histogram)
# under the names of its several releases
SGLANG_TOKENS, SGLANG_VERIFY = "completion_tokens", "spec_verify_ct"
SGLANG_ACCEPTED = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num", "spec_accepted_tokens")
SGLANG_PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
SGLANG_HISTOGRAM = ("spec_correct_drafts_histogram", "spec_accept_histogram")
# llama.cpp answers' `timings` (both absent when nothing was drafted)
LLAMACPP_DRAFTED, LLAMACPP_ACCEPTED = "draft_n", "draft_n_accepted"


# -- the accept length the counts make ---------------------------------------------------------------------------
def accept_length(accepted, drafts):
    """vLLM's and llama.cpp's accept length (and `EngineCounts`'): 1 + accepted / drafts, the bonus token
    counted; None without drafts."""
    return 1 + accepted / drafts if drafts else None


def drafts_from(accepted, length):
    """The drafts that give `accepted` an accept length `length` (the inverse of `accept_length`): accepted /
    (length - 1.0), for a source that prints the mean but not its drafts (vLLM's and llama.cpp's log lines)."""
    return accepted / (length - 1.0)


def sglang_accept_length(completion_tokens, verify_ct):
    """SGLang's accept length: completion_tokens / spec_verify_ct, the tokens each verify step emitted (bonus
    counted); None without verify steps."""
    return completion_tokens / verify_ct if verify_ct else None


def histogram_accepted(hist) -> int:
    """Accepted draft tokens of an acceptance histogram ([j]: steps that accepted exactly j): sum j * hist[j]."""
    return sum(j * h for j, h in enumerate(hist))


def histogram_per_position(hist) -> list:
    """Accepted at each drafted position of an acceptance histogram: position j is reached by the steps that
    accepted more than j."""
    return [sum(hist[j + 1:]) for j in range(len(hist) - 1)]


# the table's `count.draft_cap` value -> the definition its counts follow (stated in JSON beside the numbers)
DEFINITIONS = {
    "remaining-minus-one": ("{name}'s counting: a draft holds at most min(K, tokens still to generate - 1) tokens, "
                            "a step without one is not a draft; accept length = 1 + accepted / drafts"),
    "loop": "the loop's counting: every verify step is a draft of the whole shape; accept length = 1 + accepted / drafts",
}


def _rule(engine: str) -> tuple[str, str, str]:
    """(table key, name, count.draft_cap value or 'loop') of an --engine value."""
    try:
        from helpers.engines.registry import engine_at

        at = engine_at(str(engine))
    except ValueError:  # an engine the table does not know counts as the loop does
        return str(engine), str(engine), "loop"
    cap = at.value("count.draft_cap", "loop")
    return at.key, at.name, cap if cap in DEFINITIONS else "loop"


@dataclass
class EngineCounts:
    """Drafts, draft tokens and accepted tokens per drafted position as `engine` counts them (a chain of `steps`)."""

    engine: str
    steps: int
    drafts: int = 0
    draft_tokens: int = 0
    accepted_per_position: np.ndarray = field(default=None)

    def __post_init__(self):
        if self.accepted_per_position is None:
            import numpy as np

            self.accepted_per_position = np.zeros(self.steps, np.int64)

    @property
    def rule(self) -> str:
        return _rule(self.engine)[2]

    def drafted(self, remaining: int) -> int:
        """Tokens the engine drafts at a step with `remaining` tokens still to generate."""
        if self.rule == "remaining-minus-one":
            return max(0, min(self.steps, remaining - 1))
        return self.steps

    def record(self, remaining: int, emitted: int) -> None:
        """One verify step of the loop: `remaining` tokens were still to generate before it, it emitted `emitted`."""
        k = self.drafted(remaining)
        if k <= 0:
            return
        self.drafts += 1
        self.draft_tokens += k
        self.accepted_per_position[: min(emitted - 1, k)] += 1

    def add(self, other: EngineCounts) -> None:
        self.drafts += other.drafts
        self.draft_tokens += other.draft_tokens
        self.accepted_per_position = self.accepted_per_position + other.accepted_per_position

    @property
    def accepted(self) -> int:
        return int(self.accepted_per_position.sum())

    @property
    def accept_length(self) -> float:
        al = accept_length(self.accepted, self.drafts)
        return float("nan") if al is None else al

    def to_dict(self) -> dict:
        al = self.accept_length
        key, name, rule = _rule(self.engine)
        return {"engine": key, "engine_name": name, "rule": rule, "definition": DEFINITIONS[rule].format(name=name),
                "drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "accepted_per_position": self.accepted_per_position.tolist(),
                "accept_length": None if al != al else float(al)}
