"""Figures of speculative decoding: accept length and throughput.

The accept-length distribution (from lengths, a histogram or a replay result), tokens/s
against accept length with the break-even point, accept length over time from a server log,
and the accept length predicted from the per-token acceptance rate, one curve per drafting
setup. Each takes `ax=None`, returns the Axes and draws inside the kit's `style()`.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from matplotlib import ticker

from helpers.core.errors import BadInputError
from helpers.plots.style import BAD, GOOD, READING_COLORS, REF, _new_ax, style


def _as_histogram(data) -> tuple[np.ndarray, np.ndarray, bool]:
    """(values, counts, integer) from accept lengths or a {length: count} histogram."""
    if isinstance(getattr(data, "histogram", None), Mapping):  # helpers.acceptance.chain.ReplayResult
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
    with a `histogram` (`helpers.acceptance.chain.ReplayResult` or its `to_dict()`).
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
    and `tps` columns, drawn as points. `baseline_tps` may also be a `helpers.acceptance.chain.ThroughputModel`
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
    """Accept length over time from a log table (pandas DataFrame, or `helpers.serving.logs.LogTable`).

    Rows without an accept length are left out. Columns: `time` (datetime or seconds) or `line` (log line number) for x; `accept_length`
    for y. `prediction`: a number (a horizontal line) or a sequence as long as the table.
    """
    if not hasattr(table, "columns") and hasattr(table, "table"):  # helpers.serving.logs.LogTable
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


def plot_prediction_curve(setups, ax=None, marks: dict | None = None, rates=None):
    """Expected accept length against the per-token acceptance rate, one line per setup.

    `setups`: objects with `.label` and `.expected(rate)` (e.g. `helpers.acceptance.chain.Drafting`).
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


def plot_accept_length_vs_temperature(curve, ax=None, *, predicted: float | None = None, served=None,
                                      rule: str | None = None):
    """Accept length against the sampling temperature: the engine-free loop at each temperature under
    the engine's acceptance rule (`curve`: dicts or objects with `temperature`, `mean_accept_length` /
    `value` and `stderr`), the teacher-forced prediction (greedy, at T = 0: `predicted`) and the served
    point (`served`: (temperature or None, accept length[, stderr]); a served figure at an unknown
    temperature is drawn as a band across every temperature, since it may belong to any of them).
    Returns the Axes."""
    def get(c, *names):
        for n in names:
            v = c.get(n) if isinstance(c, Mapping) else getattr(c, n, None)
            if v is not None:
                return v
        return None

    pts = sorted((float(get(c, "temperature")), float(get(c, "mean_accept_length", "value")),
                  float(get(c, "stderr") or 0.0)) for c in curve if get(c, "temperature") is not None
                 and get(c, "mean_accept_length", "value") is not None)
    if not pts and predicted is None and served is None:
        raise BadInputError(None, "nothing to plot: no engine-free figure at any temperature, no prediction, no served point")
    with style():
        ax = _new_ax(ax, (6.4, 3.6))
        ys = [1.0]
        if pts:
            t, m, se = (np.asarray(x) for x in zip(*pts))
            ax.errorbar(t, m, yerr=2 * se, marker="o", ms=5, capsize=3, color=READING_COLORS["offset"],
                        label="engine-free" + (f" ({rule})" if rule else "") + " ± 2 se")
            ys += list(m + 2 * se)
        if predicted is not None:
            ax.plot([0.0], [float(predicted)], marker="D", ms=7, ls="none", color=GOOD,
                    label=f"predicted (teacher-forced, greedy) {float(predicted):.2f}")
            ys.append(float(predicted))
        if served is not None:
            st, sv = served[0], float(served[1])
            sse = float(served[2]) if len(served) > 2 and served[2] is not None else 0.0
            if st is None:
                ax.axhspan(sv - 2 * sse, sv + 2 * sse if sse else sv + 0.005, color=BAD, alpha=0.25, lw=0)
                ax.axhline(sv, color=BAD, lw=1.3, label=f"served {sv:.2f} (temperature not stated)")
            else:
                ax.errorbar([float(st)], [sv], yerr=[2 * sse], marker="s", ms=7, capsize=3, ls="none", color=BAD,
                            label=f"served {sv:.2f} at T = {float(st):g}")
            ys.append(sv + 2 * sse)
        ax.axhline(1.0, color=REF, lw=0.8, ls=":", label="1.0 = no draft token accepted")
        ax.set_xlim(-0.05, max([1.05] + [p[0] + 0.05 for p in pts]))
        ax.set_ylim(0.9, max(ys) * 1.1 + 0.05)
        ax.set_xlabel("temperature T (0 = greedy)")
        ax.set_ylabel("accept length (tokens per verify step)")
        ax.set_title("accept length against temperature")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return ax
