"""Figures of a d2t/t2d mapping: what `d2t` stores and what each reading of it makes of it.

The staircase (`d2t[i]` against i), the histogram of the stored values, the gaps between
consecutive kept target ids, where the kept ids lie in the target vocab (coverage strip), and
the readings (offset, absolute, none) side by side against t2d. `reading_stats` counts what a
reading gets wrong; `mapping_figures` / `save_mapping_figures` draw (and save) the standard set.

Every `plot_*` function takes `ax=None` (draws on a new figure when None), returns what it drew
(the Axes, or the Figure for multi-panel plots), never calls `show()`, and draws inside the
kit's `style()`. They take a `VocabMapping`: this module reads no files (the caller loads a
checkpoint folder or mapping file with `helpers.io.checkpoint.load_mapping`), and anything else is
a TypeError naming that loader.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib import ticker

from helpers.io.mapping import VocabMapping
from helpers.plots.provenance import mapping_label, save_figure
from helpers.plots.style import (
    _IDS,
    BAD,
    FORMULAS,
    GOOD,
    READING_COLORS,
    REF,
    _new_ax,
    style,
)

STANDARD = ("staircase", "offset_hist", "gap_hist", "coverage", "readings")


def _require_mapping(m, what: str) -> VocabMapping:
    """`m` itself when it is a `VocabMapping`; a TypeError naming the loader otherwise."""
    if isinstance(m, VocabMapping):
        return m
    raise TypeError(
        f"{what} takes a VocabMapping, not a {type(m).__name__}: load a checkpoint folder or "
        f"mapping file first with helpers.io.checkpoint.load_mapping(path)"
    )


def _kept_ids(m: VocabMapping) -> torch.Tensor:
    """The True positions of t2d: the target id each draft id was trained to mean, in order."""
    return torch.nonzero(m.t2d).flatten()


def reading_stats(m: VocabMapping, reading: str) -> dict:
    """What a reading gets wrong: duplicates, out-of-range ids, draft ids whose target differs from t2d.

    A draft id i was trained to mean the i-th kept target id (the i-th True position of t2d); a
    reading is wrong for i when it maps i anywhere else.
    """
    m = _require_mapping(m, "reading_stats")
    t = m.targets(reading)  # [N]
    n = t.numel()
    v = m.target_vocab_size
    distinct = int(torch.unique(t).numel())
    out = {
        "reading": reading,
        "draft_vocab": n,
        "distinct": distinct,
        "duplicates": n - distinct,
        "out_of_range": None if v is None else int((t >= v).sum()),
        "mismatches": None,
        "matches_t2d": None,
    }
    mism = _mismatch_mask(m, t)
    if mism is not None:
        out["mismatches"] = int(mism.sum())
        out["matches_t2d"] = out["mismatches"] == 0
    return out


def _mismatch_mask(m: VocabMapping, t: torch.Tensor) -> torch.Tensor | None:
    """True for each draft id whose target under `t` is not its t2d id (None without t2d).

    When the sizes disagree, ids are compared where both exist and the rest count as wrong.
    """
    if m.t2d is None:
        return None
    kept = _kept_ids(m)
    k = min(t.numel(), kept.numel())
    mism = torch.ones(t.numel(), dtype=torch.bool)
    mism[:k] = t[:k] != kept[:k]
    return mism


# -- the staircase ------------------------------------------------------------------------------
def _staircase_inset(ax, x, d2t, lo: int, hi: int) -> None:
    """One marker per draft id in d2t[lo:hi], with the count of flat steps."""
    flat = int((np.diff(d2t[lo:hi]) == 0).sum())
    ins = ax.inset_axes([0.07, 0.36, 0.36, 0.4])
    ins.plot(x[lo:hi], d2t[lo:hi], drawstyle="steps-post", marker="o", ms=3, color=READING_COLORS["offset"])
    ins.set_title(f"d2t[{lo:,}:{hi:,}]: {flat} flat steps\n(flat = consecutive kept target ids)",
                  fontsize=8, loc="left")
    ins.tick_params(labelsize=7)
    ins.yaxis.set_major_formatter(_IDS)
    ins.xaxis.set_major_locator(ticker.MaxNLocator(4, integer=True))
    ins.yaxis.set_major_locator(ticker.MaxNLocator(4, integer=True))
    ins.grid(True, lw=0.4)


def plot_staircase(m: VocabMapping, ax=None, *, zoom="auto", label: str | None = None):
    """`d2t[i]` as stored against draft id i: the staircase.

    With offsets, `d2t` is non-decreasing and flat wherever consecutive draft ids map to
    consecutive target ids; it never exceeds V - N (target minus draft vocab). Absolute ids climb
    at least one per draft id and run up to V. `zoom=(lo, hi)` (default: a window near N/32)
    adds an inset with one marker per draft id; `zoom=None` leaves it out.
    """
    m = _require_mapping(m, "plot_staircase")
    n, v = m.draft_vocab_size, m.target_vocab_size
    d2t = m.d2t.numpy()
    x = np.arange(n)
    with style():
        ax = _new_ax(ax, (8.0, 3.6))
        ax.plot(x, d2t, drawstyle="steps-post", color=READING_COLORS["offset"], label="d2t[i] as stored")
        top = max(int(d2t.max()), v - n if v is not None else 0) * 1.06 + 1
        if v is not None:
            limit = v - n
            ax.axhline(limit, color=BAD, ls="--", lw=1, label=f"V − N = {limit:,}: the largest possible offset")
            ax.axhspan(limit, top, color=BAD, alpha=0.07, lw=0)
            over = d2t > limit
            if over.any():
                ax.plot(x, np.where(over, d2t, np.nan), drawstyle="steps-post", color=BAD, lw=2.2,
                        label=f"{int(over.sum()):,} entries above V − N: not offsets")
        ax.set_xlim(0, n)
        ax.set_ylim(0, top)
        ax.xaxis.set_major_formatter(_IDS)
        ax.yaxis.set_major_formatter(_IDS)
        ax.set_xlabel("draft id i (draft-vocab token id)")
        ax.set_ylabel("d2t[i] as stored (token ids)")
        lead = m.leading_zero_run
        ax.set_title(
            f"d2t staircase · {label or mapping_label(m)}\n"
            f"{n:,} entries, {m.distinct_values:,} distinct values, first {lead:,} zero, "
            f"{'non-decreasing' if m.non_decreasing else 'NOT non-decreasing'}, max {int(d2t.max()):,}"
        )
        ax.legend(loc="lower right")
        if zoom == "auto":
            zoom = (n // 32, n // 32 + 24) if n >= 64 else None
        if zoom is not None:
            _staircase_inset(ax, x, d2t, max(0, int(zoom[0])), min(n, int(zoom[1])))
    return ax


# -- histograms ---------------------------------------------------------------------------------
def plot_offset_histogram(m: VocabMapping, ax=None, *, bins: int = 80, log: bool = False,
                          label: str | None = None):
    """Histogram of the values stored in `d2t` (one count per draft id).

    Values above V - N are impossible as offsets (i + d2t[i] would leave the target vocab for
    the last draft ids) and are drawn in red.
    """
    m = _require_mapping(m, "plot_offset_histogram")
    n, v = m.draft_vocab_size, m.target_vocab_size
    d2t = m.d2t.numpy()
    hi = max(int(d2t.max()), v or 0) + 1
    with style():
        ax = _new_ax(ax, (8.0, 3.4))
        limit = None if v is None else v - n
        if limit is not None and limit > 0:  # bin edges on V - N (+0.5: V - N itself is a valid offset)
            width = (limit + 0.5) / max(1, round(bins * limit / hi))
            edges = np.arange(0, hi + width, width)
        else:
            edges = np.linspace(0, hi, bins + 1)
        counts, edges, patches = ax.hist(d2t, bins=edges, color=READING_COLORS["offset"], log=log)
        above = 0
        if limit is not None:
            for p, left in zip(patches, edges[:-1]):
                if left >= limit:
                    p.set_facecolor(BAD)
            above = int((d2t > limit).sum())
            ax.axvline(limit, color=BAD, ls="--", lw=1, label=f"V − N = {limit:,}: above this d2t cannot be an offset")
            ax.axvspan(limit, edges[-1], color=BAD, alpha=0.07, lw=0)
            ax.legend(loc="upper right")
        ax.set_xlim(0, edges[-1])
        ax.xaxis.set_major_formatter(_IDS)
        ax.set_xlabel("d2t[i] value (token ids; as an offset: target id − draft id)")
        ax.set_ylabel(f"draft ids per bin of {edges[1] - edges[0]:,.0f}" + (" (log)" if log else ""))
        ax.set_title(
            f"d2t values · {label or mapping_label(m)}\n"
            f"{n:,} draft ids, {m.distinct_values:,} distinct values"
            + ("" if limit is None else f", {above:,} above V − N (impossible as offsets)")
        )
    return ax


def plot_gap_histogram(m: VocabMapping, ax=None, *, reading: str = "offset", max_gap: int = 40,
                       log: bool = False, label: str | None = None):
    """Gaps between consecutive kept target ids (sorted) under a reading, one bar per gap.

    Gap 1 = two consecutive target ids both kept (they share an offset in d2t); gap 0 = two draft
    ids mapped to the same target id, which a valid mapping never does (red). Gaps above
    `max_gap` go into one last bar.
    """
    m = _require_mapping(m, "plot_gap_histogram")
    g = m.gaps(reading).numpy()  # [N - 1]
    counts = np.bincount(np.minimum(g, max_gap + 1), minlength=max_gap + 2)[: max_gap + 2]
    x = np.arange(max_gap + 2)
    colors = [BAD if i == 0 else READING_COLORS.get(reading, REF) for i in x]
    colors[-1] = "#6F6F6F"
    with style():
        ax = _new_ax(ax, (8.0, 3.4))
        ax.bar(x, counts, width=0.85, color=colors, log=log)
        ticks = [0, 1, 2, 5, 10, 20, 30, max_gap + 1]
        ticks = sorted({t for t in ticks if t <= max_gap} | {max_gap + 1})
        ax.set_xticks(ticks, [str(t) if t <= max_gap else f">{max_gap}" for t in ticks])
        ax.set_xlim(-0.7, max_gap + 1.7)
        ax.yaxis.set_major_formatter(_IDS)
        ax.set_xlabel(f"gap between consecutive kept target ids ({reading} reading, token ids)")
        ax.set_ylabel("neighbouring pairs (count)" + (", log" if log else ""))
        n0, n1 = int((g == 0).sum()), int((g == 1).sum())
        odd = n0 > 0 or (n1 == 0 and g.size >= 100)
        ax.set_title(
            f"gaps between consecutive kept target ids, {reading} reading · {label or mapping_label(m)}\n"
            f"{n0:,} gaps of 0 (duplicate targets), {n1:,} of 1 (consecutive ids)"
            + f", max gap {int(g.max()) if g.size else 0:,}"
            + ("\nno consecutive kept ids at all: suspicious for a frequency-built vocab" if n1 == 0 and g.size >= 100 else ""),
            color=BAD if odd else REF,
        )
    return ax


# -- coverage strip -----------------------------------------------------------------------------
def _coverage_inset(ax, t: np.ndarray, reading: str, prefix: int, lead: int) -> None:
    """The first `prefix` target ids at a fine bin: the fully kept special-token prefix shows."""
    fine = max(1, prefix // 64)
    fe = np.arange(0, prefix + fine, fine)
    ins = ax.inset_axes([0.15, 0.52, 0.25, 0.36])
    ins.stairs(np.histogram(t, bins=fe)[0] / fine, fe, fill=True, color=READING_COLORS.get(reading, REF))
    if lead >= 2:
        ins.axvspan(0, lead, color=GOOD, alpha=0.3, lw=0)
    ins.set_xlim(0, prefix)
    ins.set_ylim(0, 1.05)
    ins.tick_params(labelsize=7)
    ins.xaxis.set_major_formatter(_IDS)
    ins.set_title(f"first {prefix:,} ids" + (f": 0–{lead - 1:,} all kept" if lead >= 2 else ": no kept prefix"),
                  fontsize=8, loc="left", color="#2E6B3A" if lead >= 2 else REF)


def plot_coverage_strip(m: VocabMapping, ax=None, *, reading: str = "offset", bin_size: int | None = None,
                        prefix: int | None = 1024, label: str | None = None):
    """Where the kept target ids lie in the target vocab: share of ids kept per bin.

    Dense at low ids, sparse in the tail, a fully kept prefix (special tokens, bytes). Ids a
    reading puts beyond the target vocab are drawn past the red line at V. When `t2d` exists its
    share is drawn as a dashed black line: the right reading lies exactly on it. An inset shows
    the first `prefix` target ids at a finer bin (`prefix=None` leaves it out).
    """
    m = _require_mapping(m, "plot_coverage_strip")
    t = torch.sort(m.targets(reading)).values.numpy()  # [N] kept ids under this reading
    v = m.target_vocab_size or int(t.max()) + 1
    top = max(v, int(t.max()) + 1)
    if bin_size is None:
        bin_size = max(1, int(np.ceil(v / 512)))
    edges = np.arange(0, top + bin_size, bin_size)
    share = np.histogram(t, bins=edges)[0] / bin_size
    lead = int(np.argmin(t == np.arange(t.size))) if not np.all(t == np.arange(t.size)) else t.size
    out = int((t >= v).sum())
    if prefix is not None:
        prefix = min(int(prefix), v)
    with style():
        ax = _new_ax(ax, (9.0, 3.3))
        inside = edges[:-1] < v
        ax.stairs(share, edges, fill=True, color=READING_COLORS.get(reading, REF), alpha=0.85,
                  label=f"kept ids, {reading} reading")
        if out:
            ax.stairs(np.where(inside, 0, share), edges, fill=True, color=BAD, label=f"{out:,} ids ≥ V (out of range)")
        if m.t2d is not None:
            t2d_share = np.histogram(_kept_ids(m).numpy(), bins=edges)[0] / bin_size
            ax.stairs(t2d_share, edges, color=REF, ls="--", lw=0.9, label="t2d True ids")
        ax.axvline(v, color=BAD, lw=1.2)
        ax.text(v, 0.5, f"V = {v:,} ", color=BAD, fontsize=8, va="center", ha="right", rotation=90,
                transform=ax.get_xaxis_transform())
        if prefix:
            _coverage_inset(ax, t, reading, prefix, lead)
        ax.set_xlim(0, edges[-1])
        ax.set_ylim(0, 1.0)
        ax.xaxis.set_major_formatter(_IDS)
        ax.set_xlabel("target id (target-vocab token id)")
        ax.set_ylabel(f"share kept\nper {bin_size:,} ids")
        ax.set_title(
            f"kept target ids over the target vocab, {reading} reading · {label or mapping_label(m)}\n"
            f"{t.size:,} of {v:,} ids ({t.size / v:.1%}); {int((t < v // 8).sum()):,} in the first eighth, "
            f"{int((t >= v - v // 8).sum() - out):,} in the last; {out:,} out of range",
            color=BAD if out else REF,
        )
        ax.legend(loc="upper right")
    return ax


# -- the readings against t2d -------------------------------------------------------------------
def _reading_title(reading: str, s: dict, n: int) -> tuple[str, bool]:
    """The title of one reading's panel, and whether the reading is wrong."""
    wrong = (s["duplicates"] > 0) or bool(s["out_of_range"]) or bool(s["mismatches"])
    parts = []
    if s["mismatches"] is not None:
        parts.append(f"{s['mismatches']:,} of {n:,} ids ≠ t2d")
    parts.append(f"{s['duplicates']:,} duplicates")
    if s["out_of_range"] is not None:
        parts.append(f"{s['out_of_range']:,} out of range")
    head = f"{'✗' if wrong else '✓'} {reading} reading: {FORMULAS[reading]} · {'WRONG' if wrong else 'consistent'}"
    title = head + "\n" + " · ".join(parts)
    return title, wrong


def plot_reading(m: VocabMapping, reading: str = "offset", ax=None, *, label: str | None = None):
    """One reading against t2d: the target id each draft id gets, with every wrong one in red.

    The dashed black line is the i-th True id of `t2d` (what draft id i was trained to mean).
    The title counts draft ids whose target differs from it, duplicates and out-of-range ids.
    """
    m = _require_mapping(m, "plot_reading")
    t = m.targets(reading)
    n, v = t.numel(), m.target_vocab_size
    mism = _mismatch_mask(m, t)
    with style():
        ax = _new_ax(ax, (6.0, 4.0))
        if m.t2d is not None:
            kept = _kept_ids(m).numpy()
            ax.plot(np.arange(kept.size), kept, color=REF, ls="--", lw=1.2, label="t2d: i-th True id", zorder=3)
        ax.plot(np.arange(n), t.numpy(), color=READING_COLORS.get(reading, REF), lw=1.6, label=FORMULAS[reading],
                zorder=2)
        if mism is not None and bool(mism.any()):
            idx = np.flatnonzero(mism.numpy())
            step = max(1, idx.size // 3000)  # enough dots to see, a small PNG
            ax.scatter(idx[::step], t.numpy()[idx[::step]], s=4, color=BAD, lw=0, zorder=4, rasterized=True,
                       label="target ≠ t2d")
        if v is not None:
            ax.axhline(v, color=BAD, lw=1)
            ymax = max(v, int(t.max())) * 1.04
            ax.axhspan(v, 10 * ymax, color=BAD, alpha=0.08, lw=0)  # clipped by the y limit
            ax.text(0.01, v, f"target vocab end V = {v:,}", color=BAD, fontsize=8, va="bottom",
                    transform=ax.get_yaxis_transform())
            ax.set_ylim(0, ymax)
        ax.set_xlim(0, n)
        ax.xaxis.set_major_formatter(_IDS)
        ax.yaxis.set_major_formatter(_IDS)
        ax.set_xlabel("draft id i")
        ax.set_ylabel(f"target id ({reading} reading)")
        title, wrong = _reading_title(reading, reading_stats(m, reading), n)
        ax.set_title(title, color=BAD if wrong else "#2E6B3A", fontsize=9.5)
        ax.legend(loc="lower right")
    return ax


def plot_readings(m: VocabMapping, ax=None, *, readings: Sequence[str] = ("offset", "absolute"),
                  label: str | None = None):
    """The readings side by side against t2d (one panel each); returns the Figure.

    `ax` may be a sequence of Axes, one per reading.
    """
    m = _require_mapping(m, "plot_readings")
    with style():
        if ax is None:
            fig, axes = plt.subplots(1, len(readings), figsize=(5.6 * len(readings), 4.2))
            axes = np.atleast_1d(axes)
        else:
            axes = list(ax) if isinstance(ax, Sequence | np.ndarray) else [ax]
            if len(axes) != len(readings):
                raise ValueError(f"got {len(axes)} axes for {len(readings)} readings")
            fig = axes[0].figure
        for a, r in zip(axes, readings):
            plot_reading(m, r, ax=a)
        top = max(a.get_ylim()[1] for a in axes)  # one y scale, so the panels compare by eye
        for a in axes:
            a.set_ylim(0, top)
        fig.suptitle(f"d2t readings against t2d · {label or mapping_label(m)}", x=0.01, ha="left", fontsize=11)
        if ax is None:
            fig.tight_layout()
    return fig


# -- the standard set ---------------------------------------------------------------------------
def mapping_figures(m: VocabMapping, *, label: str | None = None) -> dict:
    """The standard figures of a mapping: name -> Figure (staircase, histograms, coverage, readings)."""
    m = _require_mapping(m, "mapping_figures")
    return {
        "staircase": plot_staircase(m, label=label).figure,
        "offset_hist": plot_offset_histogram(m, label=label).figure,
        "gap_hist": plot_gap_histogram(m, label=label).figure,
        "coverage": plot_coverage_strip(m, label=label).figure,
        "readings": plot_readings(m, label=label),
    }


def save_mapping_figures(m: VocabMapping, out_dir, *, prefix: str | None = None, svg: bool = False,
                         close: bool = True, label: str | None = None) -> list[Path]:
    """Draw the standard figures of a mapping and save them with metadata; return the files."""
    m = _require_mapping(m, "save_mapping_figures")
    out_dir = Path(out_dir)
    prefix = prefix or Path(mapping_label(m)).name or "mapping"
    verdict = m.verdict()
    written: list[Path] = []
    for name, fig in mapping_figures(m, label=label).items():
        with style():
            fig.tight_layout()
        written += save_figure(fig, out_dir / f"{prefix}_{name}", source=m, verdict=verdict,
                               formats=("png", "svg") if svg else ("png",))
        if close:
            plt.close(fig)
    return written
