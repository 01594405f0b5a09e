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

Modules (import them by name; this file imports nothing, so `import helpers.plots` loads no
matplotlib; `from helpers.plots.mapping import plot_staircase`):

    style        the shared style (style_rc, set_style, style()) and colours
    provenance   save_figure, read_figure_metadata, figure_metadata, caption_line, mapping_label
    mapping      the mapping figures (staircase, histograms, coverage, readings) and the standard set
    accuracy     accuracy_table, plot_accuracy, plot_step_accuracy
    speculation  accept-length distribution, throughput, accept length over time, prediction curve
    serving      per-position acceptance from serving against the offline figures; accept length per interval
    findings     plot_findings (the doctor's findings grid)
    draft_diff   plot_draft_diff (what `d2t-lab diff` found: moved ids, lm_head agreement)
    tokens       plot_token_view (generated text, each token marked by how speculative decoding made it)
"""

__all__ = ["style", "provenance", "mapping", "accuracy", "speculation", "serving", "findings", "draft_diff", "tokens"]
