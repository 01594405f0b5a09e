"""Figures of draft accuracy: top-1 / top-k per reading of d2t, and top-1 per drafting step.

`accuracy_table` turns an `EvalResult` (or its `to_dict()`, or a plain dict of readings, pooled
or per split) into one row per (split, reading); `plot_accuracy` draws it as bars and
`plot_step_accuracy` as one line per reading over the drafting steps. Values in [0, 1] are
shown as percent. Both take `ax=None`, return the Axes and draw inside the kit's `style()`.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from matplotlib import ticker

from helpers.core.errors import BadInputError
from helpers.plots.style import READING_COLORS, REF, _new_ax, style


def _num(x) -> float:
    return float("nan") if x is None else float(x)


def _score_rows(d: Mapping, split: str | None, rows: list) -> None:
    """Append one row per reading found in `d` (walking "readings", "splits" and split names)."""
    for k, val in d.items():
        if not isinstance(val, Mapping):
            continue
        if "top1" in val:
            steps = val.get("step_top1") or []
            rows.append({"split": split, "reading": str(k), "top1": _num(val.get("top1")),
                         "topk": _num(val.get("topk")), "step_top1": [_num(x) for x in steps]})
        elif k == "readings":
            _score_rows(val, split, rows)
        elif k == "splits" and split is None:
            for name, sub in val.items():
                if isinstance(sub, Mapping):
                    _score_rows(sub, str(name), rows)
        elif split is None:
            _score_rows(val, str(k), rows)


def _to_percent(df, percent: bool | None):
    """Scale the scores to percent when `percent`, or (None) when every score lies in [0, 1]."""
    vals = [x for x in df["top1"].tolist() + df["topk"].tolist() + [x for s in df["step_top1"] for x in s]
            if not np.isnan(x)]
    if percent is None:
        percent = bool(vals) and max(vals) <= 1.0
    if percent:
        df["top1"] = df["top1"] * 100
        df["topk"] = df["topk"].astype(float) * 100
        df["step_top1"] = [[x * 100 for x in s] for s in df["step_top1"]]
    return df


def accuracy_table(result, percent: bool | None = None):
    """Rows (split, reading, top1, topk, step_top1) from an `EvalResult`, its `to_dict()`, or a plain dict.

    Accepted shapes: `{reading: {"top1": .., "topk": .., "step_top1": [..]}, ...}`, the same under
    a `"readings"` key (pooled, split None), per split under a `"splits"` key (as
    `helpers.measure.evaluate` writes it) or nested one level by split (`{"train": {...}, "val": {...}}`).
    Values in [0, 1] are taken as fractions and shown as percent (override with `percent=`);
    a score of None (nothing scored) becomes NaN.
    """
    import pandas as pd

    if hasattr(result, "to_dict") and not isinstance(result, Mapping):
        result = result.to_dict()
    if not isinstance(result, Mapping):
        raise BadInputError(None, f"accuracy result is a {type(result).__name__}, expected a dict of readings")
    rows: list = []
    _score_rows(result, None, rows)
    if not rows:
        raise BadInputError(None, "accuracy result holds no reading with a 'top1' value")
    df = pd.DataFrame(rows)
    # pandas >= 3 stores a missing split (the pooled rows) as NaN in a str column: keep it None
    df["split"] = pd.Series([None if pd.isna(x) else x for x in df["split"]], dtype=object, index=df.index)
    return _to_percent(df, percent)


def _pick_splits(df, splits: bool):
    """The pooled rows (split None) unless `splits` or there are none; then every split's rows."""
    pooled = df[df["split"].isna()]
    return df[df["split"].notna()].reset_index(drop=True) if (splits or pooled.empty) and df["split"].notna().any() \
        else pooled.reset_index(drop=True)


def plot_accuracy(result, ax=None, *, splits: bool = False, title: str | None = None, percent: bool | None = None):
    """Top-1 (and top-k) accuracy per reading, as bars.

    The top-k bars are drawn only when the result scored more than one candidate (its `topk` is
    not 1); with `topk=1` they would repeat the top-1 bars.

    Pooled scores by default; `splits=True` draws one bar group per (split, reading) when the
    result has splits (train / val).
    """
    if hasattr(result, "to_dict") and not isinstance(result, Mapping):
        result = result.to_dict()
    df = _pick_splits(accuracy_table(result, percent), splits)
    k = result.get("topk") if isinstance(result, Mapping) else None
    k = k if isinstance(k, int) and not isinstance(k, bool) else None
    has_k = bool(df["topk"].notna().any()) and k != 1  # top-1 of one candidate is the top-1 bar again
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
                        edgecolor="white", label=f"top-{k or 'k'}")
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
    """Top-1 accuracy per drafting step (step 0 = the first drafted token, as `evaluate` numbers them), one line per reading.

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
            ax.plot(np.arange(len(ys)), ys, marker="o", color=READING_COLORS.get(row["reading"], REF),
                    ls="-" if row["split"] in (None, "val", "validation") else ":", label=name)
        ax.set_ylim(0, 100)
        ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        ax.set_xlabel("drafting step (0 = the first drafted token; later steps are fed back their own draft)")
        ax.set_ylabel("top-1 accuracy (% of scored tokens)")
        ax.set_title(title or "draft accuracy per drafting step")
        ax.legend(loc="upper right")
    return ax
