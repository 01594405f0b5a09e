"""The exercises of notebooks/00_offset_encoding_primer.ipynb and their checkers.

The first are asked on `helpers.teach.primer.PRACTICE`, a vocabulary the notebook never decodes, so
no printed table gives an answer away; the later ones on the bundled real-shaped tables (the
mapping at Kimi-K2.5's sizes and its absolute-id copy, the small trained draft). Each asks for
something the notebook's prose does not state (a test searches the prose above each exercise for
its answer). The answers are not written here: `ANSWER_SHA` holds a SHA-256 of each, and
`check(n, answer)` decides right or wrong by it; the reason for a wrong answer is worked out from
the library. `solutions()` computes the answers (the notebook calls it only with
`solutions=True`; a test checks it against the hashes). `check` never raises. The tree exercise (11)
is checked by computing its answer with the kit's own tree expectation (`helpers.acceptance.tree`),
to within `TREE_TOLERANCE`, rather than by a hash.
"""
from __future__ import annotations

import copy
import functools
import hashlib

import torch

from helpers.core.paths import bundled_samples
from helpers.io.mapping import VocabMapping
from helpers.teach.exercises import canon_int, canon_letters, verdict
from helpers.teach.primer import PRACTICE, served_targets

P = PRACTICE
N, V = P.draft_vocab_size, P.target_vocab_size
KIMI, KIMI_ABSOLUTE = "kimi_k25_mapping", "kimi_k25_mapping_absolute"  # in the bundled samples
SMALL_DRAFT = "tiny_draft_sglang"
CANDIDATES = {  # exercise 3: which could a trainer have written for the practice sizes?
    "A": (0, 0, 2, 2, 4),
    "B": (0, 1, 1, 0, 2),
    "C": (1, 1, 1, 1, 6),
    "D": (0, 3, 3, 5, 5),
    "E": (2, 2, 3, 3, 3),
}
KIMI_N, KIMI_V = 32_000, 163_840
ALL_ZERO_CASES = {  # exercise 6: four checkpoints at Kimi-K2.5's sizes with an all-zero d2t
    "A": f"draft vocab {KIMI_N:,}, target vocab {KIMI_V:,}, t2d the bundled Kimi t2d",
    "B": f"draft vocab {KIMI_V:,}, target vocab {KIMI_V:,}, no t2d",
    "C": f"draft vocab {KIMI_N:,}, target vocab {KIMI_V:,}, t2d True at target ids 0..{KIMI_N - 1:,}",
    "D": f"draft vocab {KIMI_N:,}, target vocab {KIMI_V:,}, t2d True at target ids 124..{KIMI_N + 123:,}",
}
# exercise 11: a rank table (depth x rank: the share of tokens that are the draft's rank-r candidate) and a tree
TREE_Q = ((0.7, 0.15), (0.6, 0.2))
TREE_SHAPE = {"steps": 2, "topk": 2, "num_draft_tokens": 4}  # SGLang's three flags (the root counted)
TREE_TOLERANCE = 0.005
# exercise 12: a chain of 3 served by vLLM at a temperature above 0 (its default rule): the target's probability, at
# that temperature, of the token the draft drafted (its argmax) at each position (0-based)
SAMPLED_RULE = "vllm-greedy-draft"
SAMPLED_P = (0.8, 0.7, 0.5)
# exercise 13: the draft id whose GGUF d2t value is asked
GGUF_DRAFT_ID = 100
EXERCISES = {
    1: "the kept target ids of the practice vocab (its draft vocab), ascending, as a list of ints",
    2: "d2t for the practice vocab, as a list of ints",
    3: f"which of these d2t tables could a trainer have written for the practice sizes (N = {N}, V = {V})? "
       "a string of letters, e.g. 'B'. " + "; ".join(f"{k}: {list(v)}" for k, v in CANDIDATES.items()),
    4: "the practice draft's argmax is draft id 4: the target id an engine proposes (an int, or the token)",
    5: "on the bundled small draft (tiny_draft_sglang), how many draft ids j > 0 can never come out right "
       "under the absolute reading, whatever the real token is (an int)?",
    6: "which of the checkpoints A-D (all-zero d2t) are served right? a string of letters, e.g. 'B'. "
       + "; ".join(f"{k}: {v}" for k, v in ALL_ZERO_CASES.items()),
    7: f"the trained practice draft is served without d2t: how many of its {N} draft ids still propose "
       "the token they stand for (an int)?",
    8: "the Kimi mapping stored as absolute ids (kimi_k25_mapping_absolute) is served: for how many draft ids "
       "does i + d2t[i] lie past the end of the target vocab (an int)?",
    9: "with the Kimi mapping, which target id do the engines propose for draft id 20,000 (an int)?",
    10: "the Kimi draft is served with a d2t that never loaded (vLLM's zeros): of the target ids it can then "
        "propose, how many are tokens its draft vocab keeps (an int)?",
    11: f"SGLang drafts a tree with --speculative-num-steps {TREE_SHAPE['steps']} --speculative-eagle-topk "
        f"{TREE_SHAPE['topk']} --speculative-num-draft-tokens {TREE_SHAPE['num_draft_tokens']} from a draft whose rank "
        f"table is TREE_Q = {[list(r) for r in TREE_Q]} (row: depth, column: rank): its expected accept length "
        "(a number, two decimals)?",
}
ANSWER_SHA = {  # sha256 of "primer exercise {n}: {canonical answer}"
    1: "0a5cdfaf2fddbfc18bd7bf9f277061361be5ef9c326a88058ae64b090e27953b",
    2: "9bdcd665f5923b4e288908b26ed7013da537bb65c6166deedde3b5a977937ba7",
    3: "ff71fa5d70ae70c112d46cd6c9883c4c01e9a4b77d930e6bdc9526d76cc72b10",
    4: "168ae20d5e6b11f3a0085171f87c3137531f03f6c563654b59af4849c5d7e88e",
    5: "c2337855d70c59db352dece3283efdfeece2c22488d2aec09bf637e79fa3ae8e",
    6: "7fd7498498863528e6e883c46d316a96459948c3baf14808d23aa4da428f80b7",
    7: "3ad5f033ecce96e3c57116925ec830b0f8f3531dc79b48a58c3ab0636779e6a2",
    8: "fe38ce8591f2dac2585dd6cb0274d86609a674a966b02881ae509ca9357598bb",
    9: "6c61ab4faf74d697521d3751a4dddb341ea25dc313816de49f70ffa93da8264f",
    10: "035cb966b73041aa515bef8794d060df6324d482d7b5c24ad6adc04b7a0d9fba",
}
HINTS = {
    1: f"Hint: take the {N} tokens with the largest counts, then sort their ids ascending.",
    2: "Hint: d2t stores offsets: d2t[i] = (i-th kept target id) - i.",
    3: "Hint: a valid d2t is never negative, never decreases, and i + d2t[i] stays below V (section 2).",
    4: "Hint: SGLang, vLLM and TensorRT-LLM all compute target = draft_id + d2t[draft_id].",
    5: "Hint: for j > 0 the absolute reading gives d2t[j]; it can be right only if d2t[j] is a token the "
       "draft keeps (a True id of t2d). Count the others.",
    6: "Hint: all zeros maps draft id i to target id i. It is right exactly when the kept ids are 0..N-1.",
    7: "Hint: served without d2t, draft id i becomes target id i; it stands for i + d2t[i].",
    8: "Hint: load the file with helpers.io.checkpoint.load_mapping and count i + d2t[i] >= V.",
    9: "Hint: target = i + d2t[i]; kimi.d2t holds the offsets.",
    10: "Hint: with zeros the engines propose target ids 0..N-1; t2d says which of those are kept.",
    11: "Hint: list the candidates (the topk children of the root, then the topk children of the topk most probable "
        "nodes of each depth), each with the product of the rank probabilities on its path; keep the "
        "num_draft_tokens - 1 most probable; the accept length is 1 + the sum of their path probabilities.",
}
LIST_ANSWERS = (1, 2)
LETTER_ANSWERS = (3, 6)
FLOAT_ANSWERS = (11,)


def _digest(n: int, canon: str) -> str:
    return hashlib.sha256(f"primer exercise {n}: {canon}".encode()).hexdigest()


def _valid_for(d2t, n: int, v: int) -> bool:
    """Whether a trainer could have written `d2t` for sizes (n, v): offsets of n sorted distinct ids < v."""
    d2t = torch.tensor(d2t, dtype=torch.int64)
    if d2t.numel() != n or int(d2t.min()) < 0:
        return False
    m = VocabMapping(d2t)
    return m.non_decreasing and int(m.targets("offset").max()) < v


def _kimi_zero_cases() -> str:
    """Exercise 6 on tensors of Kimi's sizes: the cases whose kept ids are exactly 0..N-1."""
    from helpers.io.checkpoint import load_mapping

    kimi = load_mapping(bundled_samples("primer exercises", KIMI))
    shifted = torch.zeros(KIMI_V, dtype=torch.bool)
    shifted[124:KIMI_N + 124] = True
    low = torch.zeros(KIMI_V, dtype=torch.bool)
    low[:KIMI_N] = True
    cases = {"A": (KIMI_N, kimi.t2d), "B": (KIMI_V, torch.ones(KIMI_V, dtype=torch.bool)), "C": (KIMI_N, low),
             "D": (KIMI_N, shifted)}
    return "".join(k for k, (n, t2d) in cases.items()
                   if bool(torch.equal(served_targets(torch.zeros(n, dtype=torch.int64), n), torch.nonzero(t2d).flatten())))


@functools.lru_cache(maxsize=1)
def _solutions() -> dict:
    """Every answer, computed once from the library (the notebook calls this only with solutions=True)."""
    from helpers.io.checkpoint import load_mapping

    m = P.mapping()
    kept = m.t2d_ids
    small = load_mapping(bundled_samples("primer exercises", SMALL_DRAFT))
    kimi = load_mapping(bundled_samples("primer exercises", KIMI))
    kimi_abs = load_mapping(bundled_samples("primer exercises", KIMI_ABSOLUTE))
    served_abs = served_targets(kimi_abs.d2t, kimi_abs.draft_vocab_size)
    return {
        1: kept.tolist(),
        2: m.d2t.tolist(),
        3: "".join(k for k, d2t in CANDIDATES.items() if _valid_for(d2t, N, V)),
        4: int(m.targets("offset")[4]),
        5: int((~torch.isin(small.d2t[1:], small.t2d_ids)).sum()),
        6: _kimi_zero_cases(),
        7: int((served_targets(None, N) == kept).sum()),
        8: int((served_abs >= kimi_abs.target_vocab_size).sum()),
        9: int(kimi.targets("offset")[20_000]),
        10: int(kimi.t2d[:kimi.draft_vocab_size].sum()),
        11: round(_tree_answer(), 2),
    }


def _tree_answer() -> float:
    """Exercise 11 with the kit's tree expectation (the one every front end predicts with)."""
    from helpers.acceptance.tree import tree_expected

    return tree_expected([list(r) for r in TREE_Q], TREE_SHAPE["steps"], TREE_SHAPE["topk"], TREE_SHAPE["num_draft_tokens"])


def _sampled_answer() -> float:
    """Exercise 12 with the kit's closed form for the rule (helpers.acceptance.sampling.exact_chain_acceptance)."""
    from helpers.teach.lessons import chain_under_rule

    return chain_under_rule(SAMPLED_RULE, SAMPLED_P)["accept_length"]


def _gguf_answer() -> int:
    """Exercise 13 with the kit's replica of the converter's d2t (helpers.io.gguf_files.absolute_d2t)."""
    from helpers.io.checkpoint import load_mapping
    from helpers.io.gguf_files import absolute_d2t

    small = load_mapping(bundled_samples("primer exercises", SMALL_DRAFT))
    return int(absolute_d2t(small.d2t, small.target_vocab_size)[GGUF_DRAFT_ID])


def solutions() -> dict:
    """Every answer, computed from the files (the notebook calls this only with solutions=True)."""
    return copy.deepcopy(_solutions())  # a copy: a caller that edits an answer does not change the next one


def _canon(n: int, answer):
    """The answer in one canonical form (list of ints, int or letters), or None when it has the wrong type."""
    if isinstance(answer, torch.Tensor):
        answer = answer.tolist()
    if n in LETTER_ANSWERS:
        return canon_letters(answer)
    if n in LIST_ANSWERS:
        if isinstance(answer, (str, bytes)):
            return None
        try:
            out = [int(x) for x in answer]
        except (TypeError, ValueError):
            return None
        return out if all(float(x) == int(x) for x in answer) else None
    if n in FLOAT_ANSWERS:
        if isinstance(answer, (bool, str)) or answer is None:
            return None
        try:
            return float(answer)
        except (TypeError, ValueError):
            return None
    if n == 4 and isinstance(answer, str):
        return P.tokens.index(answer.strip()) if answer.strip() in P.tokens else None
    return canon_int(answer)


def _text(canon) -> str:
    return ",".join(map(str, canon)) if isinstance(canon, list) else str(canon)


def is_right(n: int, answer) -> bool:
    """Whether `answer` to exercise n matches the stored hash."""
    canon = _canon(n, answer)
    if n in FLOAT_ANSWERS:
        return canon is not None and abs(canon - _tree_answer()) <= TREE_TOLERANCE
    return canon is not None and _digest(n, _text(canon)) == ANSWER_SHA[n]


def check(n: int, answer) -> str:
    """One line: right (with why), wrong (with what is wrong) or not answered yet. Never raises."""
    return verdict(n, answer, exercises=EXERCISES, hints=HINTS, canon=_canon, is_right=is_right,
                   why_right=_why_right, what_is_wrong=_what_is_wrong)


def _why_right(n: int, got) -> str:
    if n == 1:
        return f"{got} = {P.names(got)}, the {N} most frequent, ascending."
    if n == 2:
        return "d2t[i] = kept[i] - i for every i."
    if n == 3:
        return ("the others decrease somewhere or send a draft id past V - 1; a valid d2t need not start with "
                "zeros (only when target id 0 is kept).")
    if n == 4:
        return f"draft id 4 -> 4 + d2t[4] = {got} ({P.tokens[got]!r})."
    if n == 5:
        return "those draft ids store a value that is no kept token: the absolute reading can never match a label there."
    if n == 6:
        return "all zeros is right exactly when the kept ids are 0..N-1: the full vocab, or a t2d keeping exactly those."
    if n == 7:
        return "the draft ids in the leading zero run of d2t, where i + d2t[i] = i."
    if n == 8:
        return "those draft ids index past the end of the vocab: from the engines' code, an index error, not a wrong token."
    if n == 9:
        return "20,000 + d2t[20,000]."
    if n == 11:
        return "1 + the path probabilities of the three most probable candidates (helpers.acceptance.tree.tree_expected)."
    return "the kept ids below N: the rest of 0..N-1 are tokens the draft never learnt to mean."


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
        if "B" in got:
            return "B decreases (d2t[3] < d2t[2]): two draft ids would land in the wrong order. " + HINTS[3]
        if "C" in got:
            return f"C sends draft id 4 to 4 + 6 = 10, past the largest target id {V - 1}. " + HINTS[3]
        return f"{got or 'none'} is not the whole set. {HINTS[3]}"
    if n == 4:
        if got == d2t[4]:
            return f"{got} ({P.names([got])[0]!r}) is d2t[4] read as an absolute id: the engines add the draft id."
        if got == 4:
            return f"4 is the draft id itself: without the mapping it points at the wrong token. {HINTS[4]}"
        return f"{got} is not it. {HINTS[4]}"
    if n == 6:
        if "A" in got:
            return "A keeps the frequent ids, not 0..N-1: all zeros sends its draft ids to the wrong tokens. " + HINTS[6]
        if "D" in got:
            return "D keeps a block of N ids, but not starting at 0: draft id i means 124 + i. " + HINTS[6]
        return f"{got or 'none'} is not the whole set. {HINTS[6]}"
    if n == 7 and got == N:
        return "identity is right only where kept[i] = i, not for every draft id. " + HINTS[7]
    if n == 9 and got == 20_000:
        return "20,000 is the draft id itself. " + HINTS[9]
    if n == 11:
        return _tree_wrong(got)
    if n == 10 and got == KIMI_N:
        return "not every id below N is kept. " + HINTS[10]
    return f"{got} is not it. {HINTS[n]}"


def _small_d2t() -> list:
    from helpers.io.checkpoint import load_mapping

    return load_mapping(bundled_samples("primer exercises", SMALL_DRAFT)).d2t.tolist()


def _sampled_wrong(got: float) -> str:
    """What a wrong exercise-12 answer most likely did."""
    k = len(SAMPLED_P)
    if abs(got - (1 + k)) <= TREE_TOLERANCE:
        return f"{1 + k} is temperature 0 with every drafted token the argmax: under sampling each is accepted with p_T(t). " + LESSON_HINTS[12]
    if abs(got - (1 + sum(SAMPLED_P))) <= TREE_TOLERANCE:
        return "that adds the conditional rates as if they were unconditional: a later position needs every earlier one. " + LESSON_HINTS[12]
    if abs(got - sum(_prod(SAMPLED_P[:j + 1]) for j in range(k))) <= TREE_TOLERANCE:
        return "that leaves out the 1: the target's own token always counts. " + LESSON_HINTS[12]
    return f"{got} is not it. {LESSON_HINTS[12]}"


def _prod(xs) -> float:
    out = 1.0
    for x in xs:
        out *= x
    return out


def _tree_wrong(got: float) -> str:
    """What a wrong tree answer most likely did (the right one is computed, never printed)."""
    from helpers.acceptance.chain import chain_expected

    q = [list(r) for r in TREE_Q]
    chain = chain_expected([r[0] for r in q], TREE_SHAPE["steps"])
    every = 1 + sum(q[0]) + sum(a * b for a in q[0] for b in q[1])  # every candidate kept
    if abs(got - chain) <= TREE_TOLERANCE:
        return "that is the chain (rank 0 at every depth): the tree also keeps a rank-1 node. " + HINTS[11]
    if abs(got - every) <= TREE_TOLERANCE:
        return ("that keeps every candidate: SGLang verifies only num_draft_tokens - 1 of them, the most probable. "
                + HINTS[11])
    if got < 1:
        return "an accept length is never below 1: the target's own token always counts. " + HINTS[11]
    return f"{got} is not it. {HINTS[11]}"


# -- the lessons' exercises (sampling, GGUF): checked by computing the answer with the kit, never hashed -------------
# Kept apart from EXERCISES (the primer's hashed ones): `check_lesson` / `lesson_solutions` work as `check` /
# `solutions` do, and the notebook numbers them after the primer's.
LESSON_EXERCISES = {
    12: f"a chain of {len(SAMPLED_P)} is served by vLLM at a temperature above 0 with its default rule "
        f"({SAMPLED_RULE}); at the temperature, the target gives the draft's drafted (argmax) token probability "
        f"SAMPLED_P = {list(SAMPLED_P)} at positions 0, 1, 2 (0 = the first drafted token): its expected accept length (a number, two decimals)?",
    13: f"the small draft (tiny_draft_sglang) is converted by llama.cpp's converter: which value does the GGUF's "
        f"d2t hold for draft id {GGUF_DRAFT_ID} (an int)?",
}
LESSON_HINTS = {
    12: "Hint: the rule accepts the drafted argmax t with probability p_T(t) (the conditional rate); a chain "
        "stops at its first rejection, so position j counts with the product of the rates up to j; add 1.",
    13: "Hint: the converter writes the absolute ids arange(N) + d2t (load_mapping(checkpoint) gives d2t).",
}


def lesson_solutions() -> dict:
    """The lessons' answers, computed with the kit (the notebook calls this only with solutions=True)."""
    return {12: round(_sampled_answer(), 2), 13: _gguf_answer()}


def _lesson_canon(n: int, answer):
    if isinstance(answer, torch.Tensor):
        answer = answer.item() if answer.numel() == 1 else None
    if n == 12:
        if isinstance(answer, (bool, str)) or answer is None:
            return None
        try:
            return float(answer)
        except (TypeError, ValueError):
            return None
    return canon_int(answer)


def lesson_is_right(n: int, answer) -> bool:
    """Whether `answer` is the answer the kit computes (exercise 12 within two decimals)."""
    got = _lesson_canon(n, answer)
    if got is None:
        return False
    return abs(got - _sampled_answer()) <= TREE_TOLERANCE if n == 12 else got == _gguf_answer()


def check_lesson(n: int, answer) -> str:
    """One line: right (with why), wrong (with what is wrong) or not answered yet. Never raises."""
    return verdict(n, answer, exercises=LESSON_EXERCISES, hints=LESSON_HINTS, canon=_lesson_canon,
                   is_right=lesson_is_right, why_right=_lesson_why, what_is_wrong=_lesson_wrong)


def _lesson_why(n: int, got) -> str:
    if n == 12:
        return ("1 + p0 + p0 p1 + p0 p1 p2: the conditional rates multiplied into unconditional ones "
                "(helpers.acceptance.sampling.exact_chain_acceptance); at temperature 0 the same chain would accept "
                "all three wherever t is the argmax.")
    if n == 13:
        return (f"{GGUF_DRAFT_ID} + d2t[{GGUF_DRAFT_ID}]: the GGUF stores the absolute id, and llama.cpp reads it as one "
                "(helpers.io.gguf_files.absolute_d2t).")
    return ""


def _lesson_wrong(n: int, got) -> str:
    if n == 12:
        return _sampled_wrong(got)
    if n == 13:
        small = _small_d2t()
        if got == small[GGUF_DRAFT_ID]:
            return "that is the Hugging Face offset d2t[i]; the converter stores the absolute id. " + LESSON_HINTS[13]
        if got == GGUF_DRAFT_ID:
            return "that is the draft id itself. " + LESSON_HINTS[13]
        return f"{got} is not it. {LESSON_HINTS[13]}"
    return f"{got} is not it. {LESSON_HINTS[n]}"
