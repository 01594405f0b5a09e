"""Figures for the d2t/t2d mapping, draft accuracy and accept length, fit for a bug report.

Every `plot_*` function takes `ax=None` (draws on a new figure when None), returns what it drew
(the Axes, or the Figure for multi-panel plots), never calls `show()`, and labels its axes with
units and the reading of `d2t` it used. One visual style is shared: `set_style()` applies it
globally (a notebook may call it once); every function also draws inside `style()`, so the
figures look the same whether or not `set_style()` was called. Nothing is changed at import.

`save_figure` writes PNG (and SVG on request) with metadata naming the source files (path, size,
SHA-256), the kit version and the time, and draws a caption line naming the checkpoint and the
verdict; `read_figure_metadata` reads it back from a PNG.

The mapping figures take a `VocabMapping`; no figure function opens a checkpoint (load one with
`helpers.io.checkpoint.load_mapping` first; a path is a TypeError that says so).

The modules, each usable through this package's names (`plots.plot_staircase`, `plots.style()`):

    style        the shared style (style_rc, set_style, style()) and colours
    provenance   save_figure, read_figure_metadata, figure_metadata, caption_line, mapping_label
    mapping      the mapping figures (staircase, histograms, coverage, readings) and the standard set
    accuracy     accuracy_table, plot_accuracy, plot_step_accuracy
    speculation  accept-length distribution, throughput, accept length over time, prediction curve
    serving      per-position acceptance from serving against the offline figures
    findings     plot_findings (the doctor's findings grid)
    draft_diff   plot_draft_diff (what `d2t-lab diff` found: moved ids, lm_head agreement)
    tokens       plot_token_view (generated text, each token marked by how speculative decoding made it)

`plots.style` is the context manager `style()`, not the module of that name: the package binds
the function last, so `from helpers.plots import style` and `plots.style()` both get it. The
module is `sys.modules["helpers.plots.style"]` (or `from helpers.plots.style import ...`).
"""
from __future__ import annotations

from helpers.plots.accuracy import accuracy_table, plot_accuracy, plot_step_accuracy
from helpers.plots.draft_diff import plot_draft_diff
from helpers.plots.findings import SEVERITY_COLORS, plot_findings
from helpers.plots.mapping import (
    STANDARD,
    mapping_figures,
    plot_coverage_strip,
    plot_gap_histogram,
    plot_offset_histogram,
    plot_reading,
    plot_readings,
    plot_staircase,
    reading_stats,
    save_mapping_figures,
)
from helpers.plots.provenance import (
    METADATA_KEY,
    caption_line,
    figure_metadata,
    mapping_label,
    read_figure_metadata,
    save_figure,
)
from helpers.plots.serving import plot_online_offline
from helpers.plots.speculation import (
    plot_accept_length_over_time,
    plot_accept_lengths,
    plot_prediction_curve,
    plot_throughput,
)

# last, so that the name is the context manager and not the submodule `helpers.plots.style`
from helpers.plots.style import (
    BAD,
    DPI,
    FORMULAS,
    GOOD,
    READING_COLORS,
    REF,
    set_style,
    style,
    style_rc,
)
from helpers.plots.tokens import plot_token_view, token_style

__all__ = [
    # style
    "BAD", "DPI", "FORMULAS", "GOOD", "READING_COLORS", "REF", "set_style", "style", "style_rc",
    # provenance
    "METADATA_KEY", "caption_line", "figure_metadata", "mapping_label", "read_figure_metadata", "save_figure",
    # mapping
    "STANDARD", "mapping_figures", "plot_coverage_strip", "plot_gap_histogram",
    "plot_offset_histogram", "plot_reading", "plot_readings", "plot_staircase", "reading_stats",
    "save_mapping_figures",
    # accuracy
    "accuracy_table", "plot_accuracy", "plot_step_accuracy",
    # speculation
    "plot_accept_length_over_time", "plot_accept_lengths", "plot_prediction_curve", "plot_throughput",
    # serving
    "plot_online_offline",
    # findings
    "SEVERITY_COLORS", "plot_findings",
    # draft_diff
    "plot_draft_diff",
    # tokens
    "plot_token_view", "token_style",
]
