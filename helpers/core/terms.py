"""The kit's shared words, each defined once: readings of d2t and size limits (the engines are
`helpers.engines.registry`, from the table in `helpers.engines.table`).

Imported by every layer; imports nothing.
"""
from __future__ import annotations

READINGS = ("offset", "absolute", "none")  # target = i + d2t[i] / d2t[i] / i
MAX_VOCAB = 2**31 - 1  # token ids are int32 in every engine: a larger vocab_size is no vocab
MAX_BUILT_T2D = 1 << 24  # fix builds a t2d of vocab_size entries only below this (no tokenizer comes near)


def check_reading(reading: str) -> str:
    """`reading` when it is one of `READINGS`; ValueError naming them otherwise."""
    if reading not in READINGS:
        raise ValueError(f"unknown reading {reading!r}; expected one of {READINGS}")
    return reading
