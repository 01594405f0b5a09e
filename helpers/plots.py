"""Figures for the d2t/t2d mapping, draft accuracy and accept length, fit for a bug report.

Every `plot_*` function takes `ax=None` (draws on a new figure when None), returns what it drew
(the Axes, or the Figure for multi-panel plots), never calls `show()`, and labels its axes with
units and the reading of `d2t` it used. One visual style is shared: `set_style()` applies it
globally (a notebook may call it once); every function also draws inside `style()`, so the
figures look the same whether or not `set_style()` was called. Nothing is changed at import.

`save_figure` writes PNG (and SVG on request) with metadata naming the source files (path, size,
SHA-256), the kit version and the time, and draws a caption line naming the checkpoint and the
verdict; `read_figure_metadata` reads it back from a PNG.

The mapping functions accept a `VocabMapping` or a path that `helpers.checkpoint.load_mapping`
reads (a checkpoint folder or mapping file).
"""
from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
import torch
from matplotlib import ticker

from .errors import BadInputError
from .mapping import VocabMapping

# -- the shared style ------------------------------------------------------------------------
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
METADATA_KEY = "d2t-lab"  # the PNG text chunk holding the JSON metadata


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
    if ax is not None:
        return ax
    _, ax = plt.subplots(figsize=figsize)
    return ax


_IDS = ticker.StrMethodFormatter("{x:,.0f}")


# -- inputs ------------------------------------------------------------------------------------
def as_mapping(m) -> VocabMapping:
    """A `VocabMapping`, or a path read with `load_mapping`."""
    if isinstance(m, VocabMapping):
        return m
    from .checkpoint import load_mapping

    return load_mapping(m)


def mapping_label(m: VocabMapping) -> str:
    """A short name for a mapping: the folder its files came from."""
    if not m.sources:
        return "d2t"
    parents = {str(Path(s).parent) for s in m.sources}
    return parents.pop() if len(parents) == 1 else ", ".join(m.sources)


def _target_vocab(m: VocabMapping) -> int | None:
    return m.target_vocab_size


def reading_stats(m: VocabMapping, reading: str) -> dict:
    """What a reading gets wrong: duplicates, out-of-range ids, draft ids whose target differs from t2d.

    A draft id i was trained to mean the i-th kept target id (the i-th True position of t2d); a
    reading is wrong for i when it maps i anywhere else.
    """
    t = m.targets(reading)  # [N]
    n = t.numel()
    v = _target_vocab(m)
    out = {
        "reading": reading,
        "draft_vocab": n,
        "distinct": int(torch.unique(t).numel()),
        "duplicates": n - int(torch.unique(t).numel()),
        "out_of_range": None if v is None else int((t >= v).sum()),
        "mismatches": None,
        "matches_t2d": None,
    }
    if m.t2d is not None:
        kept = torch.nonzero(m.t2d).flatten()  # [#True]
        if kept.numel() == n:
            mism = t != kept
        else:  # sizes disagree: compare where both exist, the rest counts as wrong
            k = min(n, kept.numel())
            mism = torch.ones(n, dtype=torch.bool)
            mism[:k] = t[:k] != kept[:k]
        out["mismatches"] = int(mism.sum())
        out["matches_t2d"] = out["mismatches"] == 0
    return out


def _mismatch_mask(m: VocabMapping, t: torch.Tensor) -> torch.Tensor | None:
    if m.t2d is None:
        return None
    kept = torch.nonzero(m.t2d).flatten()
    k = min(t.numel(), kept.numel())
    mism = torch.ones(t.numel(), dtype=torch.bool)
    mism[:k] = t[:k] != kept[:k]
    return mism


# -- mapping figures ---------------------------------------------------------------------------
def plot_staircase(m, ax=None, *, zoom="auto", label: str | None = None):
    """`d2t[i]` as stored against draft id i: the staircase.

    With offsets, `d2t` is non-decreasing and flat wherever consecutive draft ids map to
    consecutive target ids; it never exceeds V - N (target minus draft vocab). Absolute ids climb
    at least one per draft id and run up to V. `zoom=(lo, hi)` (default: a window near N/32)
    adds an inset with one marker per draft id; `zoom=None` leaves it out.
    """
    m = as_mapping(m)
    n, v = m.draft_vocab_size, _target_vocab(m)
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
            lo, hi = max(0, int(zoom[0])), min(n, int(zoom[1]))
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
    return ax


def plot_offset_histogram(m, ax=None, *, bins: int = 80, log: bool = False, label: str | None = None):
    """Histogram of the values stored in `d2t` (one count per draft id).

    Values above V - N are impossible as offsets (i + d2t[i] would leave the target vocab for
    the last draft ids) and are drawn in red.
    """
    m = as_mapping(m)
    n, v = m.draft_vocab_size, _target_vocab(m)
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


def plot_gap_histogram(m, ax=None, *, reading: str = "offset", max_gap: int = 40, log: bool = False,
                       label: str | None = None):
    """Gaps between consecutive kept target ids (sorted) under a reading, one bar per gap.

    Gap 1 = two consecutive target ids both kept (they share an offset in d2t); gap 0 = two draft
    ids mapped to the same target id, which a valid mapping never does (red). Gaps above
    `max_gap` go into one last bar.
    """
    m = as_mapping(m)
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


def plot_coverage_strip(m, ax=None, *, reading: str = "offset", bin_size: int | None = None, prefix: int | None = 1024,
                        label: str | None = None):
    """Where the kept target ids lie in the target vocab: share of ids kept per bin.

    Dense at low ids, sparse in the tail, a fully kept prefix (special tokens, bytes). Ids a
    reading puts beyond the target vocab are drawn past the red line at V. When `t2d` exists its
    share is drawn as a dashed black line: the right reading lies exactly on it. An inset shows
    the first `prefix` target ids at a finer bin (`prefix=None` leaves it out).
    """
    m = as_mapping(m)
    t = torch.sort(m.targets(reading)).values.numpy()  # [N] kept ids under this reading
    v = _target_vocab(m) or int(t.max()) + 1
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
            t2d_share = np.histogram(torch.nonzero(m.t2d).flatten().numpy(), bins=edges)[0] / bin_size
            ax.stairs(t2d_share, edges, color=REF, ls="--", lw=0.9, label="t2d True ids")
        ax.axvline(v, color=BAD, lw=1.2)
        ax.text(v, 0.5, f"V = {v:,} ", color=BAD, fontsize=8, va="center", ha="right", rotation=90,
                transform=ax.get_xaxis_transform())
        if prefix:  # the first `prefix` ids at a fine bin: the fully kept special-token prefix shows
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


def plot_reading(m, reading: str = "offset", ax=None, *, label: str | None = None):
    """One reading against t2d: the target id each draft id gets, with every wrong one in red.

    The dashed black line is the i-th True id of `t2d` (what draft id i was trained to mean).
    The title counts draft ids whose target differs from it, duplicates and out-of-range ids.
    """
    m = as_mapping(m)
    t = m.targets(reading)
    n, v = t.numel(), _target_vocab(m)
    s = reading_stats(m, reading)
    x = np.arange(n)
    mism = _mismatch_mask(m, t)
    wrong = (s["duplicates"] > 0) or bool(s["out_of_range"]) or bool(s["mismatches"])
    with style():
        ax = _new_ax(ax, (6.0, 4.0))
        if m.t2d is not None:
            kept = torch.nonzero(m.t2d).flatten().numpy()
            ax.plot(np.arange(kept.size), kept, color=REF, ls="--", lw=1.2, label="t2d: i-th True id", zorder=3)
        ax.plot(x, t.numpy(), color=READING_COLORS.get(reading, REF), lw=1.6, label=FORMULAS[reading], zorder=2)
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
        verdict = "WRONG" if wrong else "consistent"
        parts = []
        if s["mismatches"] is not None:
            parts.append(f"{s['mismatches']:,} of {n:,} ids ≠ t2d")
        parts.append(f"{s['duplicates']:,} duplicates")
        if s["out_of_range"] is not None:
            parts.append(f"{s['out_of_range']:,} out of range")
        ax.set_title(
            f"{'✗' if wrong else '✓'} {reading} reading: {FORMULAS[reading]} · {verdict}\n" + " · ".join(parts),
            color=BAD if wrong else "#2E6B3A", fontsize=9.5,
        )
        ax.legend(loc="lower right")
    return ax


def plot_readings(m, ax=None, *, readings: Sequence[str] = ("offset", "absolute"), label: str | None = None):
    """The readings side by side against t2d (one panel each); returns the Figure.

    `ax` may be a sequence of Axes, one per reading.
    """
    m = as_mapping(m)
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


# -- accuracy ---------------------------------------------------------------------------------
def _num(x) -> float:
    return float("nan") if x is None else float(x)


def accuracy_table(result, percent: bool | None = None):
    """Rows (split, reading, top1, topk, step_top1) from an `EvalResult`, its `to_dict()`, or a plain dict.

    Accepted shapes: `{reading: {"top1": .., "topk": .., "step_top1": [..]}, ...}`, the same under
    a `"readings"` key (pooled, split None), per split under a `"splits"` key (as
    `helpers.evaluate` writes it) or nested one level by split (`{"train": {...}, "val": {...}}`).
    Values in [0, 1] are taken as fractions and shown as percent (override with `percent=`);
    a score of None (nothing scored) becomes NaN.
    """
    import pandas as pd

    if hasattr(result, "to_dict") and not isinstance(result, Mapping):
        result = result.to_dict()
    if not isinstance(result, Mapping):
        raise BadInputError(None, f"accuracy result is a {type(result).__name__}, expected a dict of readings")
    rows = []

    def walk(d: Mapping, split: str | None):
        for k, val in d.items():
            if not isinstance(val, Mapping):
                continue
            if "top1" in val:
                steps = val.get("step_top1") or []
                rows.append({"split": split, "reading": str(k), "top1": _num(val.get("top1")),
                             "topk": _num(val.get("topk")), "step_top1": [_num(x) for x in steps]})
            elif k == "readings":
                walk(val, split)
            elif k == "splits" and split is None:
                for name, sub in val.items():
                    if isinstance(sub, Mapping):
                        walk(sub, str(name))
            elif split is None:
                walk(val, str(k))

    walk(result, None)
    if not rows:
        raise BadInputError(None, "accuracy result holds no reading with a 'top1' value")
    df = pd.DataFrame(rows)
    # pandas >= 3 stores a missing split (the pooled rows) as NaN in a str column: keep it None
    df["split"] = pd.Series([None if pd.isna(x) else x for x in df["split"]], dtype=object, index=df.index)
    vals = [x for x in df["top1"].tolist() + df["topk"].tolist() + [x for s in df["step_top1"] for x in s]
            if not np.isnan(x)]
    if percent is None:
        percent = bool(vals) and max(vals) <= 1.0
    if percent:
        df["top1"] = df["top1"] * 100
        df["topk"] = df["topk"].astype(float) * 100
        df["step_top1"] = [[x * 100 for x in s] for s in df["step_top1"]]
    return df


def _pick_splits(df, splits: bool):
    """The pooled rows (split None) unless `splits` or there are none; then every split's rows."""
    pooled = df[df["split"].isna()]
    return df[df["split"].notna()].reset_index(drop=True) if (splits or pooled.empty) and df["split"].notna().any() \
        else pooled.reset_index(drop=True)


def plot_accuracy(result, ax=None, *, splits: bool = False, title: str | None = None, percent: bool | None = None):
    """Top-1 (and top-k) accuracy per reading, as bars.

    Pooled scores by default; `splits=True` draws one bar group per (split, reading) when the
    result has splits (train / val).
    """
    if hasattr(result, "to_dict") and not isinstance(result, Mapping):
        result = result.to_dict()
    df = _pick_splits(accuracy_table(result, percent), splits)
    has_k = df["topk"].notna().any()
    df["name"] = [r if s is None else f"{r}\n({s})" for s, r in zip(df["split"], df["reading"])]
    x = np.arange(len(df))
    w = 0.38 if has_k else 0.6
    coverage = result.get("coverage") if isinstance(result, Mapping) else None
    with style():
        ax = _new_ax(ax, (6.5, 3.6))
        colors = [READING_COLORS.get(r, REF) for r in df["reading"]]
        b1 = ax.bar(x - (w / 2 if has_k else 0), df["top1"].fillna(0), width=w, color=colors, label="top-1")
        ax.bar_label(b1, fmt="%.1f", fontsize=8, padding=2)
        if has_k:
            bk = ax.bar(x + w / 2, df["topk"].fillna(0), width=w, color=colors, alpha=0.45, hatch="//",
                        edgecolor="white", label="top-k")
            ax.bar_label(bk, fmt="%.1f", fontsize=8, padding=2)
        if isinstance(coverage, (int, float)):
            cov = coverage * 100 if coverage <= 1 else coverage
            ax.axhline(cov, color=REF, ls="--", lw=1, label=f"coverage ceiling {cov:.1f} %")
        ax.set_xticks(x, df["name"])
        ax.set_ylim(0, 105)
        ax.set_xlabel("reading of d2t")
        ax.set_ylabel("accuracy (% of scored tokens)")
        ax.set_title(title or "draft accuracy per reading of d2t")
        ax.legend(loc="upper right")
    return ax


def plot_step_accuracy(result, ax=None, *, splits: bool = False, title: str | None = None,
                       percent: bool | None = None):
    """Top-1 accuracy per drafting step (step 1 = first drafted token), one line per reading.

    Pooled scores by default; `splits=True` draws one line per (split, reading).
    """
    df = _pick_splits(accuracy_table(result, percent), splits)
    with style():
        ax = _new_ax(ax, (6.5, 3.6))
        for _, row in df.iterrows():
            ys = row["step_top1"]
            if not ys:
                continue
            name = row["reading"] if row["split"] is None else f"{row['reading']} ({row['split']})"
            ax.plot(np.arange(1, len(ys) + 1), ys, marker="o", color=READING_COLORS.get(row["reading"], REF),
                    ls="-" if row["split"] in (None, "val", "validation") else ":", label=name)
        ax.set_ylim(0, 100)
        ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        ax.set_xlabel("drafting step (1 = first drafted token, fed back its own output after)")
        ax.set_ylabel("top-1 accuracy (% of scored tokens)")
        ax.set_title(title or "draft accuracy per drafting step")
        ax.legend(loc="upper right")
    return ax


# -- accept length and throughput ---------------------------------------------------------------
def _as_histogram(data) -> tuple[np.ndarray, np.ndarray, bool]:
    """(values, counts, integer) from accept lengths or a {length: count} histogram."""
    if isinstance(getattr(data, "histogram", None), Mapping):  # helpers.simulate.ReplayResult
        data = data.histogram
    elif isinstance(data, Mapping) and isinstance(data.get("histogram"), Mapping):  # its to_dict()
        data = data["histogram"]
    if isinstance(data, Mapping):
        keys = np.asarray([float(k) for k in data], dtype=float)
        counts = np.asarray([float(data[k]) for k in data], dtype=float)
        order = np.argsort(keys)
        return keys[order], counts[order], bool(np.all(keys == np.round(keys)))
    if hasattr(data, "index") and hasattr(data, "values") and not hasattr(data, "columns") and getattr(data, "name", None) in ("count", "counts"):
        return _as_histogram(dict(zip(data.index, data.values)))
    arr = np.asarray(data.cpu() if isinstance(data, torch.Tensor) else data, dtype=float).ravel()
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        raise BadInputError(None, "no accept lengths to plot")
    if np.all(arr == np.round(arr)):
        vals, counts = np.unique(arr, return_counts=True)
        return vals, counts.astype(float), True
    return arr, np.ones_like(arr), False


def plot_accept_lengths(data, ax=None, *, label: str | None = None, share: bool = False):
    """Distribution of accept lengths (bonus token included, so the minimum is 1).

    `data`: accept lengths (array/list/tensor; integers per verify step or per-interval means),
    a histogram `{length: count}` (dict or a pandas Series named 'count'), or a replay result
    with a `histogram` (`helpers.simulate.ReplayResult` or its `to_dict()`).
    """
    vals, counts, integer = _as_histogram(data)
    total = counts.sum()
    mean = float((vals * counts).sum() / total)
    with style():
        ax = _new_ax(ax, (6.5, 3.4))
        if integer:
            heights = counts / total if share else counts
            ax.bar(vals, heights, width=0.8, color=READING_COLORS["offset"], label=label)
            ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        else:
            ax.hist(vals, bins=np.arange(np.floor(vals.min() * 4) / 4, vals.max() + 0.25, 0.25),
                    weights=np.full(vals.size, 1 / vals.size) if share else None, color=READING_COLORS["offset"],
                    label=label)
        ax.axvline(mean, color=BAD, ls="--", lw=1.2, label=f"mean {mean:.2f}")
        ax.set_xlabel("accept length (tokens per verify step, bonus token included)")
        ax.set_ylabel("share of verify steps" if share else "verify steps (count)")
        ax.set_title(f"accept-length distribution{' · ' + label if label else ''}\n"
                     f"{int(total):,} steps, mean {mean:.2f}, P(length = 1) = {counts[vals == 1].sum() / total:.1%}")
        ax.legend(loc="upper right")
    return ax


def _measured_points(measured) -> np.ndarray:
    if measured is None:
        return np.zeros((0, 2))
    if hasattr(measured, "columns"):
        lcol = next(c for c in ("accept_length", "accept_len") if c in measured.columns)
        tcol = next(c for c in ("tps", "tokens_per_s", "throughput", "gen_throughput") if c in measured.columns)
        return measured[[lcol, tcol]].to_numpy(dtype=float)
    arr = np.asarray(measured, dtype=float)
    return arr.reshape(-1, 2)


def plot_throughput(baseline_tps, step_cost: float | None = None, ax=None, *, measured=None,
                    max_length: float | None = None, label: str | None = None):
    """Tokens/s against accept length, with the break-even point.

    A speculative step costs `step_cost` plain decode steps and yields `accept_length` tokens, so
    tokens/s = baseline_tps * accept_length / step_cost; speculation pays above accept length =
    step_cost. `measured`: (accept_length, tokens/s) pairs, or a DataFrame with `accept_length`
    and `tps` columns, drawn as points. `baseline_tps` may also be a `helpers.simulate.ThroughputModel`
    (its baseline and step cost are used).
    """
    if hasattr(baseline_tps, "step_cost"):
        baseline_tps, step_cost = float(baseline_tps.baseline_tps), float(baseline_tps.step_cost)
    if step_cost is None:
        raise ValueError("step_cost is required (decode steps one speculative step costs)")
    if baseline_tps <= 0 or step_cost <= 0:
        raise ValueError("baseline_tps and step_cost must be positive")
    pts = _measured_points(measured)
    top = max_length or max(2.0 * step_cost, float(pts[:, 0].max()) + 1 if len(pts) else 0, step_cost + 2)
    x = np.linspace(1.0, top, 200)
    y = baseline_tps * x / step_cost
    with style():
        ax = _new_ax(ax, (6.5, 3.8))
        ax.plot(x, y, color=READING_COLORS["offset"], label=f"model: {baseline_tps:g} tok/s × L / {step_cost:.2f}")
        ax.axhline(baseline_tps, color=REF, ls="--", lw=1, label=f"no speculation: {baseline_tps:g} tok/s")
        ax.fill_between(x, 0, baseline_tps, where=x <= step_cost, color=BAD, alpha=0.08, lw=0)
        ax.plot([step_cost], [baseline_tps], marker="D", color=BAD, ms=7, zorder=5, ls="none",
                label=f"break-even accept length {step_cost:.2f}")
        ax.annotate(f"break-even L = {step_cost:.2f}", (step_cost, baseline_tps), xytext=(8, -16),
                    textcoords="offset points", color=BAD, fontsize=8.5)
        if len(pts):
            ax.scatter(pts[:, 0], pts[:, 1], color=BAD if np.all(pts[:, 1] < baseline_tps) else GOOD, s=36,
                       edgecolor="white", zorder=6, label=label or "measured")
            for lx, ly in pts[:4]:
                ax.annotate(f"{lx:.2f} → {ly:.1f} tok/s", (lx, ly), xytext=(6, 4), textcoords="offset points", fontsize=8)
        ax.set_xlim(1.0, top)
        ax.set_ylim(0, max(y.max(), pts[:, 1].max() if len(pts) else 0) * 1.05)
        ax.set_xlabel("accept length L (tokens per verify step, bonus token included)")
        ax.set_ylabel("decode throughput (tokens/s)")
        ax.set_title(f"throughput against accept length: a speculative step costs {step_cost:.2f} decode steps")
        ax.legend(loc="upper left")
    return ax


_ACCEPT_COLS = ("accept_length", "accept_len", "mean_acceptance_length")


def plot_accept_length_over_time(table, ax=None, *, prediction=None, label: str | None = None):
    """Accept length over time from a log table (pandas DataFrame, or `helpers.logs.LogTable`).

    Rows without an accept length are left out. Columns: `time` (datetime or seconds) or `line` (log line number) for x; `accept_length`
    for y. `prediction`: a number (a horizontal line) or a sequence as long as the table.
    """
    if not hasattr(table, "columns") and hasattr(table, "table"):  # helpers.logs.LogTable
        table = table.table
    cols = list(getattr(table, "columns", []))
    ycol = next((c for c in _ACCEPT_COLS if c in cols), None)
    if ycol is None:
        raise BadInputError(None, f"log table has no accept-length column (want one of {_ACCEPT_COLS}; has {cols})")
    keep = table[ycol].notna().to_numpy()
    if prediction is not None and np.ndim(prediction) > 0:
        prediction = np.asarray(prediction, dtype=float)[keep]
    table = table[keep]
    if not len(table):
        raise BadInputError(None, "log table has no row with an accept length")
    xcol = "time" if "time" in cols and table["time"].notna().any() else "line" if "line" in cols else None
    xs = table[xcol] if xcol else np.arange(len(table))
    ys = table[ycol].to_numpy(dtype=float)
    with style():
        ax = _new_ax(ax, (8.0, 3.4))
        ax.plot(xs, ys, marker=".", ms=4, color=READING_COLORS["offset"], label=label or "logged accept length")
        ax.axhline(1.0, color="#8C8C8C", lw=0.8, ls=":", label="1.0 = no draft token accepted")
        if prediction is not None:
            if np.ndim(prediction) == 0:
                ax.axhline(float(prediction), color=GOOD, ls="--", lw=1.3, label=f"predicted {float(prediction):.2f}")
            else:
                ax.plot(xs, np.asarray(prediction, dtype=float), color=GOOD, ls="--", lw=1.3, label="predicted")
        ax.set_ylim(0.9, max(np.nanmax(ys), float(np.max(prediction)) if prediction is not None else 0) * 1.1 + 0.1)
        ax.set_xlabel({"time": "time", "line": "log line number", None: "log record"}[xcol])
        ax.set_ylabel("accept length (tokens per verify step)")
        ax.set_title(f"accept length over time: mean {np.nanmean(ys):.2f} over {len(ys):,} log records")
        ax.legend(loc="best")
        if xcol == "time" and np.issubdtype(np.asarray(xs).dtype, np.datetime64):
            ax.figure.autofmt_xdate()
    return ax


# -- saving with provenance -------------------------------------------------------------------
def _sha256(path: Path) -> str:
    st = Path(path).stat()
    return _sha256_cached(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    """SHA-256 of a file, computed once per (path, size, mtime): multi-GB checkpoints are
    hashed once, not once per saved figure."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _source_files(source) -> tuple[str | None, list[Path]]:
    """(checkpoint name, files) from a path, a list of paths or a VocabMapping."""
    if source is None:
        return None, []
    if isinstance(source, VocabMapping):
        return mapping_label(source), [Path(s) for s in source.sources]
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if p.is_dir():
            return str(p), sorted(f for f in p.iterdir() if f.is_file())
        if not p.exists():
            raise BadInputError(p, "source file for the figure metadata does not exist")
        return str(p), [p]
    files = [Path(s) for s in source]
    parents = {str(f.parent) for f in files}
    return (parents.pop() if len(parents) == 1 else ", ".join(map(str, files))), files


def figure_metadata(source=None, verdict=None, caption: str | None = None) -> dict:
    """The provenance recorded by `save_figure`."""
    from . import __version__

    name, files = _source_files(source)
    recs = []
    for f in files:
        try:
            recs.append({"path": str(f), "size": f.stat().st_size, "sha256": _sha256(f)})
        except OSError as e:
            raise BadInputError(f, f"cannot be read for the figure metadata ({e.strerror or e})") from None
    verdict = getattr(verdict, "encoding", verdict)
    meta = {
        "kit": "d2t-lab",
        "kit_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "checkpoint": name,
        "verdict": verdict,
        "caption": caption,
        "sources": recs,
        "source": recs[0]["path"] if recs else None,
        "source_size": recs[0]["size"] if recs else None,
        "source_sha256": recs[0]["sha256"] if recs else None,
    }
    return meta


def caption_line(meta: dict) -> str:
    parts = []
    if meta.get("checkpoint"):
        sha = f" (sha256 {meta['source_sha256'][:12]}…)" if meta.get("source_sha256") else ""
        parts.append(f"checkpoint: {meta['checkpoint']}{sha}")
    if meta.get("verdict"):
        parts.append(f"verdict: {str(meta['verdict']).upper()}")
    if meta.get("caption"):
        parts.append(str(meta["caption"]))
    parts.append(f"d2t-lab {meta['kit_version']}, {meta['created'][:16].replace('T', ' ')} UTC")
    return " · ".join(parts)


def save_figure(fig, path, *, source=None, verdict=None, caption: str | None = None, formats=("png",)) -> list[Path]:
    """Write `fig` as PNG (and SVG when 'svg' is in `formats`) with provenance; return the paths.

    `source`: the checkpoint folder, a file, a list of files or a `VocabMapping` (its files);
    each file's path, size and SHA-256 are recorded. `verdict`: a string or a `Verdict`. A
    caption line naming the checkpoint and the verdict is drawn under the figure.
    """
    if hasattr(fig, "figure") and not isinstance(fig, mpl.figure.Figure):
        fig = fig.figure  # an Axes
    path = Path(path)
    stem = path.with_suffix("") if path.suffix.lower() in (".png", ".svg") else path
    stem.parent.mkdir(parents=True, exist_ok=True)
    meta = figure_metadata(source, verdict, caption)
    blob = json.dumps(meta, sort_keys=True)
    # Put the caption under everything already drawn (rotated tick labels, x labels reach below
    # the figure's bottom edge), so it never overlaps them.
    lowest = fig.get_tightbbox().y0 / fig.get_figheight()
    text = fig.text(0.005, min(0.0, lowest) - 0.01, caption_line(meta), fontsize=7.5, color="#555555",
                    ha="left", va="top")
    written = []
    try:
        for fmt in formats:
            fmt = fmt.lower().lstrip(".")
            out = stem.with_suffix(f".{fmt}")
            if fmt == "png":
                md = {
                    METADATA_KEY: blob,
                    "Title": (fig.axes[0].get_title().splitlines() or [""])[0] if fig.axes else "",
                    "Software": f"d2t-lab {meta['kit_version']} (matplotlib {mpl.__version__})",
                    "Source": meta["source"] or "",
                    "Description": caption_line(meta),
                }
            elif fmt == "svg":
                md = {"Description": blob, "Creator": f"d2t-lab {meta['kit_version']}", "Title": caption_line(meta)}
            else:
                raise ValueError(f"unsupported format {fmt!r}; use 'png' or 'svg'")
            fig.savefig(out, format=fmt, dpi=DPI, bbox_inches="tight", pad_inches=0.12, metadata=md)
            written.append(out)
    finally:
        text.remove()
    return written


def read_figure_metadata(png_path) -> dict:
    """The metadata `save_figure` wrote into a PNG (or the Description of an SVG)."""
    p = Path(png_path)
    if p.suffix.lower() == ".svg":
        import re
        import xml.sax.saxutils as su

        m = re.search(r"<dc:description>(.*?)</dc:description>", p.read_text(), re.S)
        if not m:
            raise BadInputError(p, "holds no d2t-lab metadata")
        return json.loads(su.unescape(m.group(1)))
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(p) as im:
            text = dict(getattr(im, "text", {}) or {})
    except FileNotFoundError:
        raise BadInputError(p, "no such file") from None
    except (UnidentifiedImageError, OSError) as e:
        raise BadInputError(p, f"not a readable image ({e})") from None
    if METADATA_KEY not in text:
        raise BadInputError(p, "holds no d2t-lab metadata (not written by save_figure)")
    return json.loads(text[METADATA_KEY])


# -- the standard mapping figures -------------------------------------------------------------
STANDARD = ("staircase", "offset_hist", "gap_hist", "coverage", "readings")


def mapping_figures(m, *, label: str | None = None) -> dict:
    """The standard figures of a mapping: name -> Figure (staircase, histograms, coverage, readings)."""
    m = as_mapping(m)
    return {
        "staircase": plot_staircase(m, label=label).figure,
        "offset_hist": plot_offset_histogram(m, label=label).figure,
        "gap_hist": plot_gap_histogram(m, label=label).figure,
        "coverage": plot_coverage_strip(m, label=label).figure,
        "readings": plot_readings(m, label=label),
    }


def save_mapping_figures(m, out_dir, *, prefix: str | None = None, svg: bool = False, close: bool = True,
                         label: str | None = None) -> list[Path]:
    """Draw the standard figures of a mapping and save them with metadata; return the files."""
    m = as_mapping(m)
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


# -- doctor findings --------------------------------------------------------------------------------
SEVERITY_COLORS = {"error": "#c0392b", "warning": "#e6a23c", "info": "#8fb3d9"}


def plot_findings(findings_by_name: dict, ax=None, *, title: str = "checkpoint doctor findings"):
    """A grid of checkpoints (rows) x finding codes (columns), each cell coloured by severity.

    `findings_by_name` maps a row label (e.g. "before (sglang)") to a list of findings: objects
    with `code` and `severity` attributes, or dicts with those keys. Returns the Axes; the cell
    colours are in `ax.images[0]` order, the codes in the x tick labels.
    """
    import matplotlib.colors as mcolors

    def pairs(fs):
        for f in fs:
            yield (f["code"], f["severity"]) if isinstance(f, dict) else (f.code, f.severity)

    rank = {"info": 1, "warning": 2, "error": 3}
    rows = list(findings_by_name)
    codes = sorted({c for fs in findings_by_name.values() for c, _ in pairs(fs)})
    grid = np.zeros((len(rows), max(len(codes), 1)), dtype=int)
    for i, name in enumerate(rows):
        for code, sev in pairs(findings_by_name[name]):
            j = codes.index(code)
            grid[i, j] = max(grid[i, j], rank.get(sev, 1))
    with style():
        ax = _new_ax(ax, (max(6, 1.1 * len(codes) + 3), 0.55 * len(rows) + 1.8))
        cmap = mcolors.ListedColormap(["#f4f4f4", SEVERITY_COLORS["info"], SEVERITY_COLORS["warning"], SEVERITY_COLORS["error"]])
        ax.imshow(grid, cmap=cmap, vmin=0, vmax=3, aspect="auto")
        names = {1: "info", 2: "warning", 3: "error"}
        for (i, j), v in np.ndenumerate(grid):
            if v:
                ax.text(j, i, names[v], ha="center", va="center", fontsize=8, color="white" if v == 3 else "black")
        ax.set_xticks(range(len(codes)), codes or ["(none)"], rotation=30, ha="right")
        ax.set_yticks(range(len(rows)), rows)
        ax.set_xlabel("finding code")
        ax.grid(False)
        n_err = int((grid == 3).any(axis=1).sum())
        ax.set_title(f"{title} · {n_err} of {len(rows)} with errors")
    return ax


def plot_prediction_curve(setups, ax=None, marks: dict | None = None, rates=None):
    """Expected accept length against the per-token acceptance rate, one line per setup.

    `setups`: objects with `.label` and `.expected(rate)` (e.g. `helpers.simulate.Drafting`).
    marks: {label: (rate, accept_length)} points to place on the curves (e.g. a measured accept
    length at the rate it implies). Returns the Axes.
    """
    with style():
        ax = _new_ax(ax, (6.5, 3.8))
        a = np.linspace(0.0, 0.99, 100) if rates is None else np.asarray(rates, dtype=float)
        for d in setups:
            ax.plot(a, [d.expected(x) for x in a], label=d.label)
        for i, (name, (x, y)) in enumerate((marks or {}).items()):
            ax.plot([x], [y], marker="o", ls="none", color=f"C{len(setups) + i}", label=f"{name}: a={x:.3f}, L={y:.2f}")
        ax.axhline(1.0, color="0.6", lw=0.8, ls=":")
        ax.set_xlabel("per-token acceptance rate a")
        ax.set_ylabel("expected accept length (bonus token included)")
        ax.set_title("accept length predicted from the per-token acceptance")
        ax.legend(loc="upper left", fontsize="small")
    return ax
