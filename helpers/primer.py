"""The toy vocabulary and exercise checkers behind notebooks/00_offset_encoding_primer.ipynb.

A dozen-token target vocab with made-up assistant-token counts, a draft vocab of six, and four
exercises: the kept ids, d2t, decoding one draft id as an engine does, and the "distinct values"
red herring. `check_exercise(n, answer)` returns a one-paragraph verdict (it never raises, and
a placeholder `None` gets a hint). `engine_propose` mimics, in our own words, how SGLang, vLLM
and TensorRT-LLM turn draft logits into target ids; all three read `d2t` as offsets.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .mapping import VocabMapping, build_from_frequencies


@dataclass(frozen=True)
class ToyVocab:
    """A target vocab of 12 tokens, counts of how often each appeared in assistant turns."""

    tokens: tuple[str, ...] = ("<s>", "</s>", "<pad>", "the", "cat", "sat", "on", "mat", "a", "dog", "ran", ".")
    counts: tuple[int, ...] = (9, 8, 0, 40, 12, 3, 7, 2, 25, 11, 1, 30)
    draft_vocab_size: int = 6
    exercise_4_d2t: tuple[int, ...] = field(default=(0, 0, 0, 2, 2, 5, 5, 5, 9, 9))

    @property
    def target_vocab_size(self) -> int:
        return len(self.tokens)

    def names(self, ids) -> list[str]:
        """Token strings of target ids (`?` for an id outside the vocab)."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return [self.tokens[i] if 0 <= i < len(self.tokens) else f"?{i}" for i in ids]

    def mapping(self) -> VocabMapping:
        """The reference d2t/t2d, built as SpecForge and speculators build it."""
        return build_from_frequencies(torch.tensor(self.counts), self.draft_vocab_size, self.target_vocab_size)


TOY = ToyVocab()
EXERCISES = {
    1: "the kept target ids (the draft vocab), ascending, as a list of ints",
    2: "d2t for the toy, as a list of ints",
    3: "the draft model's argmax is draft id 4: the target id an engine proposes (an int)",
    4: f"d2t = {list(TOY.exercise_4_d2t)} has {len(set(TOY.exercise_4_d2t))} distinct values: "
       "how many distinct target ids does it map its draft ids to (an int)?",
}


def solution(n: int):
    """The correct answer to exercise n (computed from the library, not typed in)."""
    m = TOY.mapping()
    if n == 1:
        return torch.nonzero(m.t2d).flatten().tolist()
    if n == 2:
        return m.d2t.tolist()
    if n == 3:
        return int(m.targets("offset")[4])
    if n == 4:
        return int(VocabMapping(torch.tensor(TOY.exercise_4_d2t)).reading("offset").distinct_targets)
    raise ValueError(f"there is no exercise {n}; exercises are {sorted(EXERCISES)}")


def _as_int_list(answer) -> list[int] | None:
    if isinstance(answer, torch.Tensor):
        answer = answer.tolist()
    try:
        out = [int(x) for x in answer]
    except (TypeError, ValueError):
        return None
    return out if all(float(x) == int(float(x)) for x in answer) else None


def check_exercise(n: int, answer) -> str:
    """Say whether `answer` to exercise n is right and, if not, what is wrong. Never raises."""
    if n not in EXERCISES:
        return f"✗ there is no exercise {n}; exercises are {sorted(EXERCISES)}"
    ok = solution(n)
    if answer is None:
        q = EXERCISES[n] if EXERCISES[n].endswith("?") else EXERCISES[n] + "."
        return f"✗ not answered yet (answer_{n} is None). Exercise {n}: {q} " + _HINTS[n]
    if n in (1, 2):
        got = _as_int_list(answer)
        if got is None:
            return f"✗ expected {EXERCISES[n]}, got {type(answer).__name__} {answer!r}"
        if len(got) != len(ok):
            return f"✗ expected {len(ok)} numbers (one per draft id), got {len(got)}. " + _HINTS[n]
        if got == ok:
            return f"✓ correct: {got}" + (f" = {TOY.names(got)}" if n == 1 else
                                          f": target id of draft id i is i + d2t[i] = {solution(1)}")
        return _what_is_wrong(n, got, ok)
    try:
        got = int(answer) if not isinstance(answer, str) else TOY.tokens.index(answer.strip()) if n == 3 else int(answer)
    except (TypeError, ValueError):
        return f"✗ expected {EXERCISES[n]}, got {answer!r}"
    if got == ok:
        if n == 3:
            return f"✓ correct: draft id 4 -> 4 + d2t[4] = 4 + {solution(2)[4]} = {ok} ({TOY.tokens[ok]!r})"
        return (f"✓ correct: {ok} distinct target ids from only {len(set(TOY.exercise_4_d2t))} distinct offsets: "
                "every repeated offset is a run of consecutive kept target ids")
    return _what_is_wrong(n, got, ok)


_HINTS = {
    1: "Hint: take the 6 tokens with the largest counts, then sort their ids ascending.",
    2: "Hint: d2t stores offsets: d2t[i] = (i-th kept target id) - i.",
    3: "Hint: SGLang, vLLM and TensorRT-LLM all compute target = draft_id + d2t[draft_id].",
    4: "Hint: read each entry as an offset (target = i + d2t[i]) and count the distinct results.",
}


def _what_is_wrong(n: int, got, ok) -> str:
    d2t = solution(2)
    kept = solution(1)
    if n == 1:
        if sorted(got) == ok:
            return "✗ the right ids in the wrong order: sort ascending (draft id i is the i-th smallest kept id)."
        extra = sorted(set(got) - set(ok))
        missing = sorted(set(ok) - set(got))
        return (f"✗ {extra} = {TOY.names(extra)} {'is' if len(extra) == 1 else 'are'} not among the 6 most frequent; "
                f"missing {missing} = {TOY.names(missing)}. " + _HINTS[1])
    if n == 2:
        if got == kept:
            return ("✗ these are the kept target ids themselves (absolute ids): d2t stores offsets, "
                    "target id minus draft id. This is exactly the bug of the investigation.")
        if got == [i - k for i, k in enumerate(kept)]:
            return "✗ sign flipped: d2t[i] = target id - draft id, not draft id - target id."
        bad = [i for i, (a, b) in enumerate(zip(got, ok)) if a != b]
        return f"✗ wrong at draft id(s) {bad}: e.g. d2t[{bad[0]}] should be {kept[bad[0]]} - {bad[0]}. " + _HINTS[2]
    if n == 3:
        if got == d2t[4]:
            return (f"✗ {got} ({TOY.names([got])[0]!r}) is d2t[4] read as an absolute id: the engines add the draft "
                    f"id, target = 4 + d2t[4].")
        if got == 4:
            return "✗ 4 is the draft id itself: without the mapping it points at the wrong token. " + _HINTS[3]
        return f"✗ {got} is not it. " + _HINTS[3]
    if n == 4:
        if got == len(set(TOY.exercise_4_d2t)):
            return ("✗ that is the number of distinct offsets, the red herring: consecutive kept target ids share "
                    "an offset. " + _HINTS[4])
        return f"✗ {got} is not it. " + _HINTS[4]
    return "✗ wrong"


# -- the red herring ---------------------------------------------------------------------------
def offset_runs(m: VocabMapping) -> dict:
    """Why a valid d2t has far fewer distinct values than entries.

    `d2t[i+1] == d2t[i]` exactly when kept ids i and i+1 are consecutive target ids, so
    distinct values = N - (number of consecutive kept pairs). Returns the numbers and the check.
    """
    n = m.draft_vocab_size
    same = (m.d2t[1:] == m.d2t[:-1])  # [N-1]
    kept = m.targets("offset")
    consecutive = (kept[1:] - kept[:-1]) == 1
    # longest run of equal offsets
    longest, cur = 1, 1
    for s in same.tolist():
        cur = cur + 1 if s else 1
        longest = max(longest, cur)
    return {
        "draft_vocab": n,
        "distinct_values": m.distinct_values,
        "repeated_neighbours": int(same.sum()),
        "consecutive_kept_pairs": int(consecutive.sum()),
        "identity_holds": bool(torch.equal(same, consecutive)) and m.distinct_values == n - int(consecutive.sum())
        if m.non_decreasing else False,
        "longest_run": longest,
        "offset_distinct_targets": m.reading("offset").distinct_targets,
        "absolute_distinct_targets": m.reading("absolute").distinct_targets,
    }


# -- what the engines do ------------------------------------------------------------------------
from .terms import ENGINES_READING_D2T as ENGINES  # every engine that reads d2t


def engine_propose(draft_logits: torch.Tensor, d2t: torch.Tensor, engine: str, target_vocab_size: int) -> torch.Tensor:
    """The target id each engine proposes from draft logits [B, N] (greedy), in our own words.

    - sglang: builds `hot_token_id = d2t + arange(N)` once at load (t2d is skipped) and maps the
      chosen draft id through it;
    - vllm: scatters the draft logits into a target-vocab row of -inf at columns `arange(N) + d2t`,
      then picks in target space (t2d is skipped);
    - tensorrt-llm: picks the draft id, then adds `d2t[draft_id]` to it.
    """
    n = d2t.numel()
    if engine == "sglang":
        hot_token_id = d2t + torch.arange(n)  # [N]
        return hot_token_id[draft_logits.argmax(-1)]
    if engine == "vllm":
        full = draft_logits.new_full((*draft_logits.shape[:-1], target_vocab_size), float("-inf"))  # [B, V]
        full[..., torch.arange(n) + d2t] = draft_logits
        return full.argmax(-1)
    if engine in ("tensorrt-llm", "trtllm"):
        draft = draft_logits.argmax(-1)
        return d2t[draft] + draft
    raise ValueError(f"unknown engine {engine!r}; expected one of {ENGINES}")


def decode_table(m: VocabMapping, toy: ToyVocab = TOY):
    """One row per draft id: d2t, and the target id and token under each reading (pandas)."""
    import pandas as pd

    off, ab = m.targets("offset"), m.targets("absolute")
    kept = torch.nonzero(m.t2d).flatten() if m.t2d is not None else None
    return pd.DataFrame(
        {
            "draft id": range(m.draft_vocab_size),
            "d2t": m.d2t.tolist(),
            "offset: i + d2t[i]": off.tolist(),
            "offset token": toy.names(off),
            "absolute: d2t[i]": ab.tolist(),
            "absolute token": toy.names(ab),
            "t2d's i-th True id": kept.tolist() if kept is not None and kept.numel() == m.draft_vocab_size else None,
        }
    ).set_index("draft id")
