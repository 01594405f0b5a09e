"""What the notebooks' exercise checkers share: an answer put in canonical form (letters, an int)
and the one-line verdict a check cell prints. The exercises, their hashed answers and the words
of each verdict live with each notebook's checker (`primer_exercises`, `checkpoint_exercises`).
"""
from __future__ import annotations


def canon_letters(answer) -> str | None:
    """'A', 'bd', ['B', 'd'] -> sorted capital letters ('BD'); None when it is not letters."""
    if isinstance(answer, str):
        answer = [c for c in answer if c.isalpha()]
    try:
        letters = sorted({str(x).strip().upper() for x in answer})
    except TypeError:
        return None
    return "".join(letters) if all(len(x) == 1 for x in letters) else None


def canon_int(answer) -> int | None:
    """A whole number (an int, or a float or numpy/torch scalar without a fraction); None otherwise
    (a bool or a string is not an answer to a counting question)."""
    if isinstance(answer, (bool, str)) or answer is None:
        return None
    try:
        return int(answer) if float(answer) == int(answer) else None
    except (TypeError, ValueError, OverflowError):
        return None


def verdict(n: int, answer, *, exercises: dict, hints: dict, canon, is_right, why_right, what_is_wrong) -> str:
    """One line: right (with why), wrong (with what is wrong), the wrong type, or not answered yet.
    Never raises. `canon(n, answer)` gives the canonical answer or None; `why_right(n, canon)` and
    `what_is_wrong(n, canon)` give the words."""
    if n not in exercises:
        return f"✗ there is no exercise {n}; exercises are {sorted(exercises)}"
    if answer is None:
        q = exercises[n] if exercises[n].endswith("?") else exercises[n] + "."
        return f"✗ not answered yet (answer_{n} is None). Exercise {n}: {q} {hints[n]}"
    got = canon(n, answer)
    if got is None:
        return f"✗ wrong type: exercise {n} asks for {exercises[n]}; got {type(answer).__name__} {answer!r}"
    if is_right(n, answer):
        return f"✓ right: {why_right(n, got)}"
    return f"✗ wrong: {what_is_wrong(n, got)}"
