"""The accuracy conclusion, case by case: which kind of bug a draft's scores point to.

`EvalResult.diagnosis()` / `conclusion()` (helpers.measure.evaluate) try these cases in order: no
mapping at all, a misread mapping (another reading works where the engines' does not), a wiring
bug outside the mapping (nothing works), the offset reading not scored, a train/validation gap
(coverage or generalisation), and weak or healthy. Each returns (diagnosis, sentence) or None.
"""
from __future__ import annotations

from helpers.measure.scores import ReadingScores, SplitScores

ENGINE_READING = "offset"  # SGLang, vLLM and TensorRT-LLM all read d2t as offsets
# the reading of a file whose engine reads it another way: a llama.cpp GGUF stores (and llama.cpp reads) absolute ids
WHO_READS = {"offset": "the engines use", "absolute": "llama.cpp uses for a GGUF"}
NEAR_ZERO = 0.05  # top-1 at or below this on trained-on data: "scores nothing"
GOOD = 0.30  # a reading at or above this is "the working one" when the engines' one scores
# at most max(NEAR_ZERO, a quarter of it)
GAP = 0.10  # train top-1 this far above validation: a generalisation gap


def _pct_text(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def no_mapping(name: str, s: ReadingScores) -> tuple[str, str]:
    """No d2t at all: only the 'none' reading was scored."""
    return "no_mapping", (
        f"No d2t in the checkpoint: with draft ids taken as target ids the draft scores "
        f"{_pct_text(s.top1)} top-1 on {name}; that says nothing about the mapping the engines will use "
        "- find the d2t that belongs to these weights and score it under the offset reading."
    )


def misread(name: str, scored: dict, best: str, eng: ReadingScores | None,
            er: str = ENGINE_READING) -> tuple[str, str] | None:
    """Another reading works where the engine's one (`er`) scores (near) nothing: a mapping bug."""
    if not (
        eng is not None and best != er and scored[best].top1 >= GOOD
        and eng.top1 <= max(NEAR_ZERO, scored[best].top1 / 4)
    ):
        return None
    what = {
        "absolute": "this checkpoint's d2t holds absolute target ids where SGLang, vLLM and "
        "TensorRT-LLM expect offsets (write a corrected copy with d2t-lab fix CHECKPOINT DST)",
        "offset": "this GGUF's d2t holds offsets where llama.cpp reads absolute ids (write a corrected GGUF with "
        "d2t-lab fix CHECKPOINT DST.gguf)",
        "none": "the draft ids already are target ids, so d2t should be all zeros (identity) "
        "and the stored one sends every draft to the wrong target",
    }[best]
    return "mapping", (
        f"Wiring/mapping bug: on {name} the draft scores {_pct_text(eng.top1)} top-1 under the {er} "
        f"reading {WHO_READS[er]} but {_pct_text(scored[best].top1)} under the {best} reading: {what}."
    )


def wiring(name: str, best: ReadingScores) -> tuple[str, str] | None:
    """Every reading scores (near) nothing: the bug is outside the mapping."""
    if best.top1 > NEAR_ZERO:
        return None
    return "wiring", (
        f"Wiring bug outside the mapping: on {name} the draft scores at most {_pct_text(best.top1)} "
        "top-1 under every reading - check that the weights were loaded (key layout midlayer.* vs "
        "layers.0.*), the aux hidden-state layers, embed_tokens, and the samples' alignment."
    )


def offset_not_scored(name: str, best: str, s: ReadingScores, er: str = ENGINE_READING) -> tuple[str, str]:
    return "weak", f"Best reading {best}: {_pct_text(s.top1)} top-1 on {name} (the {er} reading was not scored)."


def split_gap(tr: SplitScores | None, va: SplitScores | None, er: str = ENGINE_READING) -> tuple[str, str] | None:
    """Train well above validation: a coverage gap (draft vocab) or a generalisation gap."""
    if tr is None or va is None:
        return None
    pct = _pct_text
    t1, v1 = tr.readings[er].top1, va.readings[er].top1
    tc, vc = tr.readings[er].covered_top1, va.readings[er].covered_top1
    if t1 is not None and v1 is not None and t1 - v1 > GAP and tc is not None and vc is not None \
            and tc - vc <= GAP / 2:
        return "coverage", (
            f"Not a wiring bug: {er} top-1 is {pct(t1)} on train but {pct(v1)} on validation, and "
            f"the gap is coverage - {pct(va.coverage)} of validation labels are in the draft vocab "
            f"against {pct(tr.coverage)} of train labels, while among covered labels the draft "
            f"scores {pct(vc)} vs {pct(tc)}. A draft vocab built from more varied text would close it."
        )
    if t1 is not None and v1 is not None and t1 - v1 > GAP:
        return "generalisation", (
            f"Generalisation gap, not a wiring bug: {er} top-1 is {pct(t1)} on train but {pct(v1)} "
            "on validation - the draft fits its training data and the mapping is read correctly, "
            "but it does not carry over to new text (more or more varied training data)."
        )
    return None


def weak_or_healthy(name: str, ref: SplitScores, scored: dict, eng: ReadingScores,
                     tr: SplitScores | None, va: SplitScores | None, er: str = ENGINE_READING) -> tuple[str, str]:
    """No bug found: a weak draft, or a healthy one (with what its train/validation difference is)."""
    pct = _pct_text
    cov = ref.coverage
    if eng.top1 < GOOD:
        return "weak", (
            f"No sign of a wiring bug (no reading beats {er}), but the draft is weak: {pct(eng.top1)} "
            f"{er} top-1 on {name} with a coverage ceiling of {pct(cov)} - look at training and "
            "the draft vocab, not at the mapping."
        )
    others = ", ".join(f"{r} {pct(x.top1)}" for r, x in scored.items() if r != er)
    text = (
        f"Healthy: the {er} reading {WHO_READS[er]} is the one that works: {pct(eng.top1)} top-1 on {name}"
        + ("" if va is None else f", {pct(va.readings[er].top1)} on validation")
        + (f" (other readings: {others})." if others else ".")
    )
    if va is None or tr is None:
        return "healthy", text + f" Coverage ceiling {pct(cov)}; no train/validation split to compare."
    return "healthy", text + _train_val_difference(tr.readings[er], va.readings[er])


def _train_val_difference(to: ReadingScores, vo: ReadingScores) -> str:
    """The sentence on how far train and validation differ under the offset reading, and why."""
    pct = _pct_text
    diff = None if None in (vo.top1, to.top1) else to.top1 - vo.top1
    if diff is None or diff <= 0.02 or None in (vo.covered_top1, to.covered_top1, vo.coverage, to.coverage):
        return " Train and validation agree: no generalisation gap."
    # top1 = coverage x covered_top1 (a hit is always a covered label), so the difference splits
    # exactly into (coverage difference) x covered_top1(train) + coverage(val) x (the rest)
    by_cov = (to.coverage - vo.coverage) * to.covered_top1
    what = "coverage, not generalisation" if by_cov >= diff / 2 else "mostly accuracy on covered labels"
    return (
        f" The {100 * diff:.1f}-point train/validation difference is {what}: {pct(to.coverage)} vs "
        f"{pct(vo.coverage)} of labels are in the draft vocab ({100 * by_cov:.1f} points), and among "
        f"those the draft scores {pct(to.covered_top1)} vs {pct(vo.covered_top1)}."
    )
