"""The exercises of notebooks/08_debug_a_checkpoint.ipynb and their checkers.

They are asked on the bundled broken draft (`data_samples/tiny_draft_absolute`, d2t stored as
absolute ids) and on five checkpoints described by their files, whatever checkpoint the notebook
is run on. As in the primer (`helpers.teach.primer_exercises`), the answers are not written here:
`ANSWER_SHA` holds a SHA-256 of each, `check(n, answer)` decides by it and never raises, and
`solutions()` computes the answers from the files (the notebook calls it only with
`solutions=True`; a test checks it against the hashes).
"""
from __future__ import annotations

import copy
import functools
import hashlib

import torch

from helpers.core.paths import bundled_samples
from helpers.teach.exercises import canon_int, canon_letters, verdict

BROKEN = "tiny_draft_absolute"  # in the bundled samples
FILE_CASES = {  # exercise 1: five checkpoints of a draft with N = 800 and V = 4,096, by their files
    "A": "model.safetensors: d2t [800] int64 (non-decreasing, max 3,292), t2d [4096] bool with 800 True; "
         "nonzero(t2d) == arange(800) + d2t",
    "B": "model.safetensors: weights only (no d2t, no t2d); d2t.npy and t2d.npy beside it",
    "C": "model.safetensors: d2t [800] int64 all zeros, t2d [4096] bool True at ids 0..799",
    "D": "model.safetensors: d2t [800] int64 strictly increasing, max 4,091; t2d [4096] bool equal to d2t's values",
    "E": "config.json: draft_vocab_size 4096 = vocab_size; model.safetensors: lm_head [4096, 64], no d2t, no t2d",
}
EXERCISES = {
    1: "which of the checkpoints A-E (see FILE_CASES) does an engine serve with a wrong draft-to-target "
       "mapping? a string of letters, e.g. 'A'",
    2: "the bundled broken draft (tiny_draft_absolute) is served as it is: for how many of its draft ids "
       "does i + d2t[i] lie past the end of the target vocab (>= V)? (an int)",
    3: "a colleague rebuilds t2d from the broken d2t read as offsets (t2d[i + d2t[i]] = True, dropping ids "
       ">= V): how many True entries does that t2d hold? (an int)",
}
ANSWER_SHA = {  # sha256 of "checkpoint exercise {n}: {canonical answer}"
    1: "b53a964fd3af9622372b116578e5b94638e6e768d163108f7cd1194750078905",
    2: "6204a1c284cfa4663203008d56f989d8df4a1047f7bdd9c606d201bacb56e751",
    3: "b241ed2dd17fc7592770b394956f8ed00d54f801d9f3e08bbf8284cbed464d54",
}
HINTS = {
    1: "Hint: the engines read d2t only from the weight files, as offsets (i + d2t[i]); all zeros is the "
       "identity, right only when the kept ids are 0..N-1; no d2t is right only with the full vocab.",
    2: "Hint: load the draft's d2t (helpers.io.checkpoint.load_mapping) and count i + d2t[i] >= V.",
    3: "Hint: the offset reading of the broken d2t, kept only where < V, then count the distinct ids.",
}
LETTER_ANSWERS = (1,)


def _digest(n: int, canon: str) -> str:
    return hashlib.sha256(f"checkpoint exercise {n}: {canon}".encode()).hexdigest()


def _wrong_cases(kept: torch.Tensor, v: int) -> str:
    """Exercise 1 worked out on tensors shaped as each case states: which serve a wrong mapping.

    `kept`: a real draft's kept target ids (N of them, ascending). Each case gives (what the engines
    serve, i.e. i + d2t[i] with d2t read from the weights or zeros when absent; the ids the draft
    means); a case is wrong when they differ.
    """
    from helpers.teach.primer import served_targets

    n = kept.numel()
    low = torch.arange(n)
    cases = {
        "A": (served_targets(kept - low, n), kept),           # offsets, consistent with t2d
        "B": (served_targets(None, n), kept),                 # the side files are never read
        "C": (served_targets(torch.zeros(n, dtype=torch.int64), n), low),  # t2d keeps 0..N-1
        "D": (served_targets(kept, n), kept),                 # absolute ids read as offsets
        "E": (served_targets(None, v), torch.arange(v)),      # the full vocab: identity
    }
    return "".join(k for k, (served, meant) in cases.items() if not torch.equal(served, meant))


@functools.lru_cache(maxsize=1)
def _solutions() -> dict:
    """Every answer, computed once from the files (the notebook calls this only with solutions=True)."""
    from helpers.io.checkpoint import load_mapping

    m = load_mapping(bundled_samples("checkpoint exercises", BROKEN))
    v = m.target_vocab_size
    served = m.targets("offset")  # what the engines compute from the stored values
    return {
        1: _wrong_cases(m.t2d_ids, v),
        2: int((served >= v).sum()),
        3: int(torch.unique(served[served < v]).numel()),
    }


def solutions() -> dict:
    """Every answer, computed from the files (the notebook calls this only with solutions=True)."""
    return copy.deepcopy(_solutions())  # a copy: a caller that edits an answer does not change the next one


def _canon(n: int, answer):
    """The answer in one canonical form (letters or an int), or None when it has the wrong type."""
    if isinstance(answer, torch.Tensor):
        answer = answer.tolist()
    return canon_letters(answer) if n in LETTER_ANSWERS else canon_int(answer)


def is_right(n: int, answer) -> bool:
    """Whether `answer` to exercise n matches the stored hash."""
    canon = _canon(n, answer)
    return canon is not None and _digest(n, str(canon)) == ANSWER_SHA[n]


def check(n: int, answer) -> str:
    """One line: right, wrong (with a hint) or not answered yet. Never raises."""
    return verdict(n, answer, exercises=EXERCISES, hints=HINTS, canon=_canon, is_right=is_right,
                   why_right=lambda k, _got: _why_right(k), what_is_wrong=_what_is_wrong)


def _why_right(n: int) -> str:
    if n == 1:
        return ("a side file is never read (B is served as the identity with a reduced vocab) and absolute ids "
                "are read as offsets (D); all zeros with t2d keeping 0..N-1 (C) and no d2t with the full vocab (E) are right.")
    if n == 2:
        return "those draft ids index past the end of the target vocab: SGLang's hot_token_id and vLLM's scatter hold ids >= V."
    return "fewer than N: the misread ids collide and run off the end, so such a t2d disagrees with any valid d2t."


def _what_is_wrong(n: int, got) -> str:  # the correct answer is worked out but never printed
    if n == 1:
        if "C" in got:
            return "C is right: its t2d keeps exactly 0..N-1, where all zeros is the identity that is wanted. " + HINTS[1]
        if "E" in got:
            return "E keeps the full vocab: no d2t is the identity, which is right there. " + HINTS[1]
        if "A" in got:
            return "A is a consistent offset mapping. " + HINTS[1]
        return f"{got or 'none'} is not the whole set. {HINTS[1]}"
    if n == 2 and got == 800:
        return "not every draft id: the low kept ids stay in range. " + HINTS[2]
    if n == 3 and got == 800:
        return "800 would mean N distinct in-range ids. " + HINTS[3]
    return f"{got} is not it. {HINTS[n]}"
