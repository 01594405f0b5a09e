"""The figure of `d2t-lab diff`: where shared target ids sit in each draft, and lm_head agreement.

`plot_draft_diff(diff)` takes a `helpers.doctor.diff.DraftDiff` (it reads no files): left, each
target id kept by both drafts as a point (its draft slot in A, how far it moved in B), moved ids in the
warning colour, drawn as the shift of its slot; right, for the moved ids, the cosine similarity between A's lm_head row and B's
row under B's mapping and under A's (old) mapping. Mapping drift shows as high agreement under
the old mapping only.
"""
from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.plots.style import BAD, GOOD, REF, style


def plot_draft_diff(diff, figsize=(10, 4)):
    """Two panels (slots A vs B; lm_head row agreement of moved ids); returns the Figure."""
    arr = getattr(diff, "arrays", None)
    if arr is None:
        raise TypeError("plot_draft_diff takes the result of helpers.doctor.diff.diff_drafts(a, b)")
    with style():
        fig, (ax, bx) = plt.subplots(1, 2, figsize=figsize)
        kept = [(a, b - a) for a, b, m in zip(arr["slot_a"], arr["slot_b"], arr["moved"]) if not m]
        moved = [(a, b - a) for a, b, m in zip(arr["slot_a"], arr["slot_b"], arr["moved"]) if m]
        if kept:
            ax.scatter(*zip(*kept), s=4, color=GOOD, label=f"same slot ({len(kept):,})")
        if moved:
            ax.scatter(*zip(*moved), s=6, color=BAD, label=f"moved ({len(moved):,})")
        ax.set_xlabel("draft slot in A (offset reading)")
        ax.set_ylabel("slot in B - slot in A")
        ax.set_title("where the ids kept by both drafts moved")
        if kept or moved:
            ax.legend(loc="best")
        if arr["cos_under_b"] is not None and moved:
            bins = [i / 20 for i in range(-20, 21)]
            def clip(v):  # rounding can put a cosine a hair past +-1, outside the bins
                return [min(1.0, max(-1.0, x)) for x in v]

            bx.hist(clip(arr["cos_under_b"]), bins=bins, color=GOOD, alpha=0.7, label="B's mapping (new slots)")
            bx.hist(clip(arr["cos_under_a"]), bins=bins, color=BAD, alpha=0.7, label="A's mapping (old slots)")
            bx.axvline(diff["lm_head"]["threshold"], color=REF, lw=1, ls="--")
            bx.set_xlabel("cosine(A's lm_head row, B's row) per moved id")
            bx.set_ylabel("moved ids")
            bx.legend(loc="upper left")
        else:
            bx.text(0.5, 0.5, "no moved ids, or no lm_head in one draft", ha="center", va="center",
                    transform=bx.transAxes)
            bx.set_axis_off()
        bx.set_title(diff["verdict"], fontsize=9)
        fig.tight_layout()
    return fig
