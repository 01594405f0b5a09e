"""How an engine counts a speculative run: its drafts, draft tokens and accepted tokens per position.

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

import numpy as np

from helpers.engines.registry import engine_at

# the table's `count.draft_cap` value -> the definition its counts follow (stated in JSON beside the numbers)
DEFINITIONS = {
    "remaining-minus-one": ("{name}'s counting: a draft holds at most min(K, tokens still to generate - 1) tokens, "
                            "a step without one is not a draft; accept length = 1 + accepted / drafts"),
    "loop": "the loop's counting: every verify step is a draft of the whole shape; accept length = 1 + accepted / drafts",
}


def _rule(engine: str) -> tuple[str, str, str]:
    """(table key, name, count.draft_cap value or 'loop') of an --engine value."""
    try:
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
        return 1 + self.accepted / self.drafts if self.drafts else float("nan")

    def to_dict(self) -> dict:
        al = self.accept_length
        key, name, rule = _rule(self.engine)
        return {"engine": key, "engine_name": name, "rule": rule, "definition": DEFINITIONS[rule].format(name=name),
                "drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "accepted_per_position": self.accepted_per_position.tolist(),
                "accept_length": None if al != al else float(al)}
