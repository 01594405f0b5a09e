"""Online against offline: per-position acceptance from serving next to the draft's offline figures.

`plot_accept_length_intervals`: accept length per interval against time (`helpers.serving.over_time`:
`metrics --watch`, `logs -o`), its baseline band, decayed intervals and restarts marked.

One Axes, x = drafted position (0 = the first drafted token), y = the chance a draft reaches that
position (unconditional acceptance, what vLLM reports): serving's figure, evaluate's per-step top-1
turned into the same quantity (their running product, as the chain model assumes), and the
per-position acceptance `speculate` measured with the real target. The computed diagnosis
(`helpers.acceptance.sources.compare_online_offline`) goes in the title area when given.
"""
from __future__ import annotations

import textwrap

import numpy as np

from helpers.core.errors import BadInputError
from helpers.plots.style import BAD, GOOD, REF, _new_ax, style


def plot_online_offline(online, offline_step_accuracy=None, measured=None, ax=None, *,
                        diagnosis: str | None = None, online_label: str = "serving"):
    """Draw serving's unconditional per-position acceptance against the offline figures.

    `online`: unconditional per-position acceptance from serving (a list of floats);
    `offline_step_accuracy`: evaluate's per-step top-1 (drawn as its running product);
    `measured`: `speculate`'s unconditional per-position acceptance (a plain list of floats).
    """
    if not online:
        raise BadInputError(None, "no per-position acceptance from serving to draw")
    with style():
        ax = _new_ax(ax, (7.0, 4.0))
        x = np.arange(len(online))
        ax.plot(x, online, marker="o", color=BAD, lw=1.8, label=f"{online_label} (unconditional)")
        if offline_step_accuracy:
            off = np.cumprod(np.asarray(offline_step_accuracy, dtype=float))
            ax.plot(np.arange(len(off)), off, marker="s", color=GOOD, ls="--",
                    label="offline: product of evaluate's per-step top-1")
        if measured:
            ax.plot(np.arange(len(measured)), measured, marker="^", color=REF, ls=":",
                    label="offline, measured with the target (speculate)")
        ax.set_xlabel("drafted position (0 = first drafted token)")
        ax.set_ylabel("P(draft reaches position)")
        ax.set_ylim(0, 1.02)
        ax.set_xticks(np.arange(max(len(online), len(offline_step_accuracy or []), len(measured or []))))
        title = "per-position acceptance: serving against offline"
        if diagnosis:
            title += "\n" + "\n".join(textwrap.wrap(diagnosis, 95))
        ax.set_title(title, fontsize=9, loc="left")
        ax.legend(loc="upper right", fontsize=8)
    return ax


def plot_accept_length_intervals(intervals, ax=None, *, baselines=None, title: str | None = None,
                                 xlabel: str = "time (s)"):
    """Accept length per interval against time (`helpers.serving.over_time`): one point per interval at
    its end, with its standard error as an error bar, the baseline of each segment (between restarts)
    as a band of two standard errors, `decayed` intervals marked, restarts as vertical lines and
    intervals without drafts as ticks on the x axis. One series per label (prompt class) where the
    intervals carry one. `intervals`: `Interval`s or their dicts. Returns the Axes."""
    rows = [iv if isinstance(iv, dict) else iv.to_dict() for iv in intervals]
    if not rows:
        raise BadInputError(None, "no interval to draw")
    with style():
        ax = _new_ax(ax, (8.0, 4.0))
        x_of = lambda r: r["end_s"] if r["end_s"] is not None else r["index"]  # noqa: E731
        labels = list(dict.fromkeys(r.get("label") for r in rows if r["status"] == "ok" and r["accept_length"] is not None))
        colours = [REF, GOOD, "#7b3294", "#e66101", "#5e3c99", "#1b9e77"]
        for k, lab in enumerate(labels or [None]):
            ok = [r for r in rows if r["status"] == "ok" and r["accept_length"] is not None and r.get("label") == lab]
            if not ok:
                continue
            for n, seg in enumerate(sorted({r.get("segment", 1) for r in ok})):  # no line across a restart
                part = [r for r in ok if r.get("segment", 1) == seg]
                ax.errorbar([x_of(r) for r in part], [r["accept_length"] for r in part],
                            yerr=[r["stderr"] or 0.0 for r in part], marker="o", ms=4, lw=1.2, capsize=2,
                            color=colours[k % len(colours)],
                            label=(lab or "accept length per interval") if n == 0 else None)
        bad = [r for r in rows if r.get("flag") == "decayed"]
        if bad:
            ax.scatter([x_of(r) for r in bad], [r["accept_length"] for r in bad], s=70, facecolors="none",
                       edgecolors=BAD, linewidths=1.6, zorder=5, label="decayed (below the baseline)")
        for b in baselines or []:
            seg = [r for r in rows if r.get("segment", 1) == b["segment"]]
            lo, hi = x_of(seg[0]) if seg[0]["start_s"] is None else seg[0]["start_s"], x_of(seg[-1])
            se = b.get("stderr") or 0.0
            ax.hlines(b["accept_length"], lo, hi, colors="grey", linestyles="--", lw=1,
                      label="baseline" if b is baselines[0] else None)
            if se:
                ax.fill_between([lo, hi], b["accept_length"] - 2 * se, b["accept_length"] + 2 * se, color="grey",
                                alpha=0.15, lw=0)
        for k, r in enumerate(x for x in rows if x["status"] == "restart"):
            ax.axvline(x_of(r), color=BAD, ls=":", lw=1.2, label="restart (counters went down)" if k == 0 else None)
        empty = [r for r in rows if r["status"] == "no drafts"]
        if empty:
            ax.plot([x_of(r) for r in empty], [0] * len(empty), "|", color="grey", ms=10, transform=ax.get_xaxis_transform(),
                    label="no drafts in the interval")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("accept length (bonus token counted)")
        ax.set_title(title or "accept length per interval", fontsize=9, loc="left")
        ax.legend(loc="best", fontsize=8)
    return ax


def save_accept_length_intervals(intervals, path, *, baselines=None, title: str | None = None,
                                 xlabel: str = "time (s)", source=None) -> None:
    """`plot_accept_length_intervals` saved with `provenance.save_figure` (the suffix of `path` picks the
    format; `source`, a log file, is named in the caption and the metadata) and closed: the figure of
    `logs --plot` and `metrics --watch -o`. A path it cannot write is one line naming it."""
    import matplotlib.pyplot as plt

    from helpers.plots.provenance import save_figure

    ax = plot_accept_length_intervals(intervals, baselines=baselines, title=title, xlabel=xlabel)
    try:
        save_figure(ax.figure, path, source=source, formats=(path.suffix[1:].lower(),), dpi=120)
    except OSError as e:
        raise BadInputError(path, f"cannot write the plot ({e.strerror or e})") from None
    finally:
        plt.close(ax.figure)
