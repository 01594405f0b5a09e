"""How an engine counts a speculative run: its drafts, draft tokens and accepted tokens per position.

The loop (`helpers.speculate.loop`) counts verify steps: every target forward after the prefill.
An engine counts what its own scheduler did, which differs at the end of a request:

- llama.cpp (b11434, tools/server/server-context.cpp `get_n_draft_max`): a draft is at most
  `n_remaining - 1` tokens long (`n_remaining` = tokens still to generate), so the last tokens of a
  request get shorter drafts and the very last none; a step without a draft is a plain decode, not
  counted (`n_draft_verif_steps`, `/metrics` `spec_decode_num_drafts`). Its accept length is
  1 + accepted / drafts, its per-position counts `n_accepted_per_pos`, its `draft_n` the tokens drafted.
- every other engine: the loop's own count (each verify step drafted the whole shape).

`EngineCounts` keeps those sums beside a run's (`SpecRun.engine_counts`), so `speculate --engine
llamacpp` states the accept length the engine prints for the same tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from helpers.core.engines import engine_key

# engine -> the definition its counts follow (stated in JSON beside the numbers)
DEFINITIONS = {
    "llamacpp": ("llama.cpp's counting (tools/server/server-context.cpp): a draft holds at most min(K, tokens still "
                 "to generate - 1) tokens, a step without one is not a draft; accept length = 1 + accepted / drafts"),
}
LOOP_DEFINITION = "the loop's counting: every verify step is a draft of the whole shape; accept length = 1 + accepted / drafts"


def _key(engine: str) -> str:
    try:
        return engine_key(str(engine).split("==")[0].split(">")[0].split("<")[0])
    except ValueError:  # an engine the table does not know counts as the loop does
        return str(engine)


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
        return _key(self.engine) if _key(self.engine) in DEFINITIONS else "loop"

    def drafted(self, remaining: int) -> int:
        """Tokens the engine drafts at a step with `remaining` tokens still to generate."""
        if self.rule == "llamacpp":
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
        return {"engine": _key(self.engine), "definition": DEFINITIONS.get(self.rule, LOOP_DEFINITION),
                "drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "accepted_per_position": self.accepted_per_position.tolist(),
                "accept_length": None if al != al else float(al)}
