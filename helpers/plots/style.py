"""The one visual style every figure of the kit shares, and the small helpers all figures use.

`style_rc()` is the style as rcParams, `set_style()` applies it globally (a notebook may call it
once), and `style()` draws inside it without changing the global rcParams, so a figure looks
the same whether or not `set_style()` was called. Nothing is changed at import.

The colours name what they mean (`BAD` for anything wrong, `REF` for the reference drawn
against, one colour per reading of d2t), so every figure says "wrong" the same way.
"""
from __future__ import annotations

from contextlib import contextmanager

import matplotlib as mpl
import matplotlib.pyplot as plt
import seaborn as sns
from matplotlib import ticker

READING_COLORS = {"offset": "#4C72B0", "absolute": "#DD8452", "none": "#8C8C8C"}
BAD = "#C44E52"  # anything wrong: duplicates, out of range, mismatches with t2d
GOOD = "#55A868"
REF = "#222222"  # the reference drawn against (t2d, baseline)
FORMULAS = {
    "offset": "target = i + d2t[i]",
    "absolute": "target = d2t[i]",
    "none": "target = i (no mapping)",
}
DPI = 100

# token ids on an axis: 163,840 rather than 1.6e5
_IDS = ticker.StrMethodFormatter("{x:,.0f}")


def style_rc() -> dict:
    """The rcParams of the kit's style (seaborn whitegrid, compact, 100 dpi)."""
    rc: dict = {}
    rc.update(sns.axes_style("whitegrid"))
    rc.update(sns.plotting_context("notebook", font_scale=0.85))
    rc.update(
        {
            "figure.dpi": DPI,
            "savefig.dpi": DPI,
            "figure.figsize": (8.0, 3.6),
            "axes.titlesize": 10.5,
            "axes.labelsize": 9.5,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "legend.fontsize": 8.5,
            "legend.frameon": False,
            "lines.linewidth": 1.4,
            "image.cmap": "viridis",
        }
    )
    return rc


def set_style() -> None:
    """Apply the kit's style to matplotlib globally (call once in a notebook if you like)."""
    mpl.rcParams.update(style_rc())


@contextmanager
def style():
    """Draw inside the kit's style without changing the global rcParams.

    Interactive mode is the one setting carried out of the context: IPython's inline backend
    switches it on when the first figure of a kernel is made, and restoring the value from
    before (off) would stop every later figure of the notebook from showing inline.
    """
    interactive = mpl.is_interactive()
    try:
        with mpl.rc_context(style_rc()):
            yield
            interactive = mpl.is_interactive()
    finally:
        mpl.interactive(interactive)


def _new_ax(ax, figsize):
    """`ax` itself, or the Axes of a new figure of `figsize` when `ax` is None."""
    if ax is not None:
        return ax
    _, ax = plt.subplots(figsize=figsize)
    return ax
