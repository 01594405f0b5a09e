"""The predicted accept length, once: a draft's measured rank table through the exact chain or tree
expectation, with the assumptions it makes said.

Without a target in the loop, a draft's only accept-length figure is this prediction. Its input is
what `evaluate` measures on hidden-state samples (`helpers.measure.scores`): per drafting depth d,
the share q[d, r] of labels that are the draft's rank-r candidate (r = 0 .. k-1), the rest being
"not in the top k" (labels outside the draft vocab included: no rank can ever catch those).
`predict` feeds that table, cut or padded to the drafting shape, to the exact expectation of a
chain (`helpers.acceptance.chain.chain_expected` on q[:, 0]) or of SGLang's tree
(`helpers.acceptance.tree.tree_expected` on q), and says which assumptions it made (`ASSUMPTIONS`).

The older figure (`Prediction.one_rate_value`) took one number, step-0 top-1 a, for every depth
and, for a tree, q[d, r] = a (1 - a)^r: rank r catching a share a of what the ranks above it
missed. A draft whose misses are mostly tokens outside its vocab (the bundled one: top-1 78.5 %,
top-4 78.6 %) has no such siblings, and that figure then overshoots trees (4.63 against 3.55 for
SGLang's 5/4/16 on the bundled pair); docs/prediction-calibration.md has the measured table
against the engine-free loop.

Every front end calls `predict` (through `helpers.measure.evaluate.EvalResult.prediction`):
notebook 04, the report's summary and evidence ladder, the dashboard, `evaluate --json`. Numpy only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from helpers.acceptance.chain import chain_expected
from helpers.acceptance.drafting import Drafting
from helpers.acceptance.tree import rank_probabilities, tree_expected

# name -> what the prediction takes for granted (each can make it miss the engine-free loop)
ASSUMPTIONS = {
    "teacher forcing": "the ranks are measured on the samples' text: each depth drafts after the real "
                       "context and the draft's own rank-0 guesses, and the text is the samples', not what "
                       "the target generates in the loop (nor past the samples' length)",
    "independence across depths": "the rank law at each depth is the same whatever happened at the depths "
                                  "before, so path probabilities multiply",
    "positions weighted equally": "every counted position of the samples weighs the same; a decoding loop "
                                  "verifies from the positions it reaches, so stretches where the draft fails "
                                  "weigh more in its mean",
    "sibling paths ranked alike": "after a rank-r sibling is accepted the next depth ranks as it does after the rank-0 draft",
}


@dataclass(frozen=True)
class Prediction:
    """The expected accept length of one drafting shape from a measured rank table."""

    drafting: Drafting
    value: float  # expected accept length, bonus token counted
    q: tuple  # the rank table used: [steps][topk] (topk 1 for a chain)
    source: str = ""  # where the table was measured
    one_rate: float | None = None  # step-0 top-1, the older single-rate figure's input
    one_rate_value: float | None = None  # that older figure: one rate for every depth, q[d, r] = a (1 - a)^r
    notes: tuple = ()  # what the table lacked for this shape (depths or ranks not scored)
    assumptions: tuple = field(default_factory=lambda: tuple(ASSUMPTIONS))

    def rates(self):
        """What `Drafting.expected` / `Drafting.simulate` take for this shape: a chain's per-position
        rates (rank 0 of each depth), a tree's rank table [steps][topk]."""
        return [row[0] for row in self.q] if self.drafting.is_chain else [list(row) for row in self.q]

    def engines(self) -> dict:
        """The shape in the engines' own flag names (vLLM drafts chains: None for a tree)."""
        return self.drafting.engine_flags()

    def assumption_text(self) -> list[str]:
        return [f"{name}: {ASSUMPTIONS[name]}" for name in self.assumptions]

    def flags(self) -> str:
        """The shape as the engines' own flags: SGLang's, and vLLM's for a chain."""
        return self.drafting.launch_flags()

    def text(self) -> str:
        """One line: the value, the shape (and its engine flags), what it rests on, what it lacked."""
        old = "" if self.one_rate_value is None else (
            f"; one rate for every depth ({self.one_rate:.3f}) would say {self.one_rate_value:.2f}")
        lacks = "".join(f"; {n}" for n in self.notes)
        return (f"predicted accept length, {self.drafting.label}: {self.value:.2f} ({self.flags()}; exact "
                f"expectation of the measured rank table, {self.source or 'as given'}{old}{lacks})")

    def to_dict(self) -> dict:
        return {**self.drafting.to_dict(), **self.engines(), "flags": self.flags(), "expected": self.value,
                "rank_table": [list(r) for r in self.q],
                "source": self.source, "one_rate": self.one_rate, "expected_one_rate": self.one_rate_value,
                "notes": list(self.notes), "assumptions": {a: ASSUMPTIONS[a] for a in self.assumptions}}


def table_for(rank_table, drafting: Drafting) -> tuple[np.ndarray, list[str]]:
    """q [steps, topk] for a drafting shape from a measured table [depths][ranks], and notes.

    Depths past the table's reuse its last depth; ranks past its width count as never holding the
    target's token (a lower bound). Both say so in the notes.
    """
    q = np.asarray(rank_table, dtype=np.float64)
    if q.ndim != 2 or q.shape[0] < 1 or q.shape[1] < 1:
        raise ValueError(f"a rank table is [depths][ranks] with at least one of each, got shape {tuple(q.shape)}")
    steps, topk = drafting.steps, drafting.topk
    notes = []
    if q.shape[0] < steps:
        notes.append(f"depths {q.shape[0]}..{steps - 1} were not scored: they reuse depth {q.shape[0] - 1}'s ranks "
                     f"(score with steps >= {steps})")
        q = np.concatenate([q, np.repeat(q[-1:], steps - q.shape[0], axis=0)])
    if q.shape[1] < topk:
        notes.append(f"ranks {q.shape[1]}..{topk - 1} were not scored: counted as never holding the target's token, "
                     f"a lower bound (score with topk >= {topk})")
        q = np.concatenate([q, np.zeros((q.shape[0], topk - q.shape[1]))], axis=1)
    q = q[:steps, :topk]
    return rank_probabilities(q, steps, topk), notes


def predict(rank_table, drafting: Drafting, *, source: str = "", one_rate: float | None = None) -> Prediction:
    """The expected accept length of `drafting` from a measured rank table (see the module docstring).

    `rank_table[d][r]`: P(the target's token at depth d is the draft's rank-r candidate), ranks
    exclusive. `one_rate`: step-0 top-1, to state the older single-rate figure beside it.
    """
    drafting = drafting.check()
    q, notes = table_for(rank_table, drafting)
    if drafting.is_chain:
        value = chain_expected(q[:, 0], drafting.steps)
    else:
        value = tree_expected(q, drafting.steps, drafting.topk, drafting.num_draft_tokens)
    old = None if one_rate is None else float(drafting.expected(float(one_rate)))
    return Prediction(drafting, float(value), tuple(tuple(float(x) for x in row) for row in q), source,
                      None if one_rate is None else float(one_rate), old, tuple(notes))
