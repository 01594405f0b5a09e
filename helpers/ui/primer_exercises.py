"""The exercises of notebooks/00_offset_encoding_primer.ipynb and their checkers.

Every exercise is asked on `helpers.ui.primer.PRACTICE`, a vocabulary the notebook never decodes,
so no printed table gives an answer away. The answers are not written here: `ANSWER_SHA` holds
a SHA-256 of each, and `check(n, answer)` decides right or wrong by it; the reason for a wrong
answer is worked out from the library. `solutions()` computes the answers (the notebook calls it
only with `solutions=True`; a test checks it against the hashes). `check` never raises.
"""
from __future__ import annotations

import hashlib

import torch

from helpers.io.mapping import VocabMapping
from helpers.ui.primer import PRACTICE, served_targets

P = PRACTICE
N, V = P.draft_vocab_size, P.target_vocab_size
RED_HERRING_D2T = (0, 0, 0, 2, 2, 5, 5, 5, 9, 9)
ALL_ZERO_CASES = {  # exercise 6: three checkpoints with an all-zero d2t
    "A": f"draft vocab {V}, target vocab {V}, t2d all True",
    "B": f"draft vocab {N}, target vocab {V}, t2d built from the practice counts",
    "C": f"draft vocab {N}, target vocab {V}, t2d True at target ids 0..{N - 1} only",
}
EXERCISES = {
    1: "the kept target ids of the practice vocab (its draft vocab), ascending, as a list of ints",
    2: "d2t for the practice vocab, as a list of ints",
    3: "the largest value any valid d2t can hold with the practice vocab's sizes (an int)",
    4: "the practice draft's argmax is draft id 4: the target id an engine proposes (an int, or the token)",
    5: f"under the absolute reading, how many of the {N} practice draft ids decode to the token they stand for (an int)?",
    6: "which of the checkpoints A, B, C (all-zero d2t) are right? a string of letters, e.g. 'B'. "
       + "; ".join(f"{k}: {v}" for k, v in ALL_ZERO_CASES.items()),
    7: f"the trained practice draft is served without d2t: how many of its {N} draft ids still propose "
       "the token they stand for (an int)?",
    8: f"the practice draft's d2t was saved as arange({N}): the target ids the engines propose for draft ids "
       f"0..{N - 1}, as a list of ints",
    9: f"d2t = {list(RED_HERRING_D2T)} has {len(set(RED_HERRING_D2T))} distinct values: how many distinct "
       "target ids does it map its draft ids to (an int)?",
}
ANSWER_SHA = {  # sha256 of "primer exercise {n}: {canonical answer}"
    1: "0a5cdfaf2fddbfc18bd7bf9f277061361be5ef9c326a88058ae64b090e27953b",
    2: "9bdcd665f5923b4e288908b26ed7013da537bb65c6166deedde3b5a977937ba7",
    3: "b539113ee9040ff032dda271ccd7d2f692d63260feb747df09e539c5c7ec1fb6",
    4: "168ae20d5e6b11f3a0085171f87c3137531f03f6c563654b59af4849c5d7e88e",
    5: "6713886f6c7d4c78df903dcfca826cda824a6527a8778015f0ad4f17c2279fea",
    6: "ebed5b2a6e08ffcbc87d65b7cead5feda293cb4f3e78eab43ea39eca34b2701a",
    7: "3ad5f033ecce96e3c57116925ec830b0f8f3531dc79b48a58c3ab0636779e6a2",
    8: "b25a48e8dbb3f3fb3c331de274eb69cad6caca66df510eb8bff46ca5484dc16b",
    9: "f42d70e7c98be4e729a1c80cfe91561eee428a037bc4d78a4046566ae2778d06",
}
HINTS = {
    1: f"Hint: take the {N} tokens with the largest counts, then sort their ids ascending.",
    2: "Hint: d2t stores offsets: d2t[i] = (i-th kept target id) - i.",
    3: "Hint: the i-th kept id is at most V - 1 - (N - 1 - i), since N - 1 - i larger kept ids sit above it.",
    4: "Hint: SGLang, vLLM and TensorRT-LLM all compute target = draft_id + d2t[draft_id].",
    5: "Hint: the absolute reading gives d2t[i]; the draft id stands for i + d2t[i]. When are they equal?",
    6: "Hint: all zeros maps draft id i to target id i. Which t2d keeps exactly the ids 0..N-1?",
    7: "Hint: served without d2t, draft id i becomes target id i; it stands for i + d2t[i].",
    8: "Hint: the engines add the draft id to the stored value: i + d2t[i].",
    9: "Hint: read each entry as an offset (target = i + d2t[i]) and count the distinct results.",
}
LIST_ANSWERS = (1, 2, 8)
LETTER_ANSWERS = (6,)


def _digest(n: int, canon: str) -> str:
    return hashlib.sha256(f"primer exercise {n}: {canon}".encode()).hexdigest()


def solutions() -> dict:
    """Every answer, computed from the library (the notebook calls this only with solutions=True)."""
    m = P.mapping()
    kept = m.t2d_ids
    d2t = m.d2t
    t2d_low = torch.zeros(V, dtype=torch.bool)
    t2d_low[:N] = True
    cases = {"A": torch.ones(V, dtype=torch.bool), "B": m.t2d, "C": t2d_low}
    right_cases = "".join(k for k, t2d in cases.items()
                          if torch.equal(torch.nonzero(t2d).flatten(), torch.arange(int(t2d.sum()))))
    return {
        1: kept.tolist(),
        2: d2t.tolist(),
        3: V - N,
        4: int(m.targets("offset")[4]),
        5: int((m.targets("absolute") == kept).sum()),
        6: right_cases,
        7: int((served_targets(None, N) == kept).sum()),
        8: served_targets(torch.arange(N), N).tolist(),
        9: int(VocabMapping(torch.tensor(RED_HERRING_D2T)).reading("offset").distinct_targets),
    }


def _canon(n: int, answer):
    """The answer in one canonical form (list of ints, int or letters), or None when it has the wrong type."""
    if isinstance(answer, torch.Tensor):
        answer = answer.tolist()
    if n in LETTER_ANSWERS:
        if isinstance(answer, str):
            answer = [c for c in answer if c.isalpha()]
        try:
            letters = sorted({str(x).strip().upper() for x in answer})
        except TypeError:
            return None
        return "".join(letters) if all(len(x) == 1 for x in letters) else None
    if n in LIST_ANSWERS:
        if isinstance(answer, (str, bytes)):
            return None
        try:
            out = [int(x) for x in answer]
        except (TypeError, ValueError):
            return None
        return out if all(float(x) == int(x) for x in answer) else None
    if n == 4 and isinstance(answer, str):
        return P.tokens.index(answer.strip()) if answer.strip() in P.tokens else None
    if isinstance(answer, (bool, str)) or answer is None:
        return None
    try:
        return int(answer) if float(answer) == int(answer) else None
    except (TypeError, ValueError):
        return None


def _text(canon) -> str:
    return ",".join(map(str, canon)) if isinstance(canon, list) else str(canon)


def is_right(n: int, answer) -> bool:
    """Whether `answer` to exercise n matches the stored hash."""
    canon = _canon(n, answer)
    return canon is not None and _digest(n, _text(canon)) == ANSWER_SHA[n]


def check(n: int, answer) -> str:
    """One line: right (with why), wrong (with what is wrong) or not answered yet. Never raises."""
    if n not in EXERCISES:
        return f"✗ there is no exercise {n}; exercises are {sorted(EXERCISES)}"
    if answer is None:
        q = EXERCISES[n] if EXERCISES[n].endswith("?") else EXERCISES[n] + "."
        return f"✗ not answered yet (answer_{n} is None). Exercise {n}: {q} {HINTS[n]}"
    canon = _canon(n, answer)
    if canon is None:
        return f"✗ wrong type: exercise {n} asks for {EXERCISES[n]}; got {type(answer).__name__} {answer!r}"
    if is_right(n, answer):
        return f"✓ right: {_why_right(n, canon)}"
    return f"✗ wrong: {_what_is_wrong(n, canon)}"


def _why_right(n: int, got) -> str:
    if n == 1:
        return f"{got} = {P.names(got)}, the {N} most frequent, ascending."
    if n == 2:
        return "d2t[i] = kept[i] - i for every i."
    if n == 3:
        return f"V - N = {V} - {N}: kept[i] <= V - N + i, so d2t[i] = kept[i] - i <= V - N."
    if n == 4:
        return f"draft id 4 -> 4 + d2t[4] = {got} ({P.tokens[got]!r})."
    if n == 5:
        return "only draft id 0: d2t[i] = i + d2t[i] holds only at i = 0."
    if n == 6:
        return "all zeros is right exactly when t2d keeps the ids 0..N-1 (with N = V, all of them)."
    if n == 7:
        return "the draft ids in the leading zero run of d2t, where i + d2t[i] = i."
    if n == 8:
        return "i + i = 2i: wrong tokens, and out of range once 2i >= V."
    return "every repeated offset is a run of consecutive kept target ids."


def _what_is_wrong(n: int, got) -> str:  # the correct answer is worked out here but never printed
    sol = solutions()[n]
    m = P.mapping()
    kept, d2t = m.t2d_ids.tolist(), m.d2t.tolist()
    if n in LIST_ANSWERS and len(got) != len(sol):
        return f"expected {len(sol)} numbers (one per draft id), got {len(got)}. {HINTS[n]}"
    if n == 1:
        if sorted(got) == sol:
            return "the right ids in the wrong order: sort ascending (draft id i is the i-th smallest kept id)."
        extra = sorted(set(got) - set(sol))
        return f"{extra} = {P.names(extra)}: not among the {N} most frequent. {HINTS[1]}"
    if n == 2:
        if got == kept:
            return "these are the kept target ids themselves (absolute ids): d2t stores offsets, target id minus draft id."
        if got == [-x for x in sol]:
            return "sign flipped: d2t[i] = target id - draft id, not draft id - target id."
        bad = [i for i, (a, b) in enumerate(zip(got, sol)) if a != b]
        return f"wrong at draft id(s) {bad}. {HINTS[2]}"
    if n == 3:
        if got == V - 1:
            return f"{V - 1} is the largest target id, but d2t[i] = kept[i] - i and kept[i] cannot be that large for every i. {HINTS[3]}"
        if got == N:
            return f"{N} is the draft vocab size. {HINTS[3]}"
        return f"{got} is not it. {HINTS[3]}"
    if n == 4:
        if got == d2t[4]:
            return f"{got} ({P.names([got])[0]!r}) is d2t[4] read as an absolute id: the engines add the draft id."
        if got == 4:
            return f"4 is the draft id itself: without the mapping it points at the wrong token. {HINTS[4]}"
        return f"{got} is not it. {HINTS[4]}"
    if n == 5:
        if got == 0:
            return "one draft id does agree under both readings. " + HINTS[5]
        return f"{got} is not it. {HINTS[5]}"
    if n == 6:
        if "B" in got:
            return ("B keeps ids that are not 0..N-1, so all zeros sends its draft ids to the wrong tokens: "
                    "that is the reduced-vocab bug (or a d2t never loaded).")
        return f"{got or 'none'} is not the whole set. {HINTS[6]}"
    if n == 7:
        if got == N:
            return "identity is right only where kept[i] = i, not for every draft id. " + HINTS[7]
        return f"{got} is not it. {HINTS[7]}"
    if n == 8:
        if got == list(range(N)):
            return "that is the absolute reading of arange (d2t[i] = i); the engines add the draft id."
        return f"wrong. {HINTS[8]}"
    if got == len(set(RED_HERRING_D2T)):
        return "that is the number of distinct offsets, the red herring: consecutive kept target ids share an offset. " + HINTS[9]
    return f"{got} is not it. {HINTS[9]}"
