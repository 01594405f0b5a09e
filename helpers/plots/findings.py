"""The checkpoint doctor's findings as a grid: checkpoints (rows) x finding codes (columns).

Each cell is coloured by the worst severity of that code for that checkpoint, so a before /
after pair (a checkpoint and its fixed copy) shows at a glance what the fix resolved.
"""
from __future__ import annotations

import numpy as np

from helpers.plots.style import _new_ax, style

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
