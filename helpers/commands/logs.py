"""`logs FILE [--json] [--plot OUT.png]`: SGLang / vLLM speculative-decoding log lines -> table."""
from __future__ import annotations

import json
from pathlib import Path

from helpers.commands import _options
from helpers.core.errors import BadInputError
from helpers.core.outputs import output_file
from helpers.serving.logs import read_log

HELP = "read SGLang 'Decode batch' / vLLM 'SpecDecoding metrics' lines: accept length over time"
DESCRIPTION = """\
Read a server log of SGLang (current 'Decode batch, ... accept len: X, accept rate: Y, ...' and
older 'Decode batch. ... accept len: X, ...') or vLLM ('SpecDecoding metrics: Mean acceptance
length: X, ...', with the generation tok/s of the engine stats line before it). Prints counts,
mean accept length, acceptance rate and throughput; lines it does not recognise are counted and
skipped, and a recognised line whose numbers do not read is counted as garbled and skipped.
The drafting settings on the log's start-up line (SGLang's server_args=..., vLLM's
num_speculative_tokens) are read and used: the per-token rate the mean accept length implies
under them, and which definition SGLang's accept rate follows in this build.

--json: the summary plus every parsed row. --plot OUT.png: accept length over time (the suffix
picks the format: .png, .svg, .pdf, ...; an existing file is replaced), with a caption line and
metadata naming the log file (path, size, SHA-256; read a PNG's back with
helpers.plots.read_figure_metadata).
Exit 2 with one line when the file has no line this reader understands, or when the plot cannot
be written there (no such folder, a folder in its place, an unknown suffix)."""


def add_arguments(p) -> None:
    p.add_argument("file", metavar="LOG", help="an SGLang or vLLM server log file")
    p.add_argument("--year", type=int, default=None, metavar="Y",
                   help="year of a vLLM log's times (its lines carry none; default: this year)")
    _options.json_flag(p, "print one JSON object (summary and rows)")
    _options.out(p, "write a plot of accept length over time (the suffix picks the format; --plot is the older name)",
                 aliases=("--plot",), dest="plot", metavar="OUT.png")


def plot_path(path: str) -> Path:
    """Where `--plot PATH` writes (matplotlib adds .png to a name without a suffix), checked."""
    from matplotlib.backend_bases import FigureCanvasBase

    p = output_file(path, "plot")  # a folder given as PATH is refused here, before any suffix is added
    known = FigureCanvasBase.get_supported_filetypes()
    if not p.suffix:
        return output_file(p.with_name(p.name + ".png"), "plot")
    if p.suffix[1:].lower() not in known:
        raise BadInputError(p, f"unknown plot format {p.suffix!r} (use one of {', '.join('.' + k for k in sorted(known))})")
    return p


def save_plot(log, path: Path) -> None:
    """Draw accept length over time and save it with `plots.save_figure`: the caption line and
    the metadata name the log file (path, size, SHA-256); the suffix of `path` picks the format."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.plots import plot_accept_length_over_time, save_figure

    ax = plot_accept_length_over_time(log.table, label=f"{', '.join(log.engines)} log")
    try:
        save_figure(ax.figure, path, source=log.path, formats=(path.suffix[1:].lower(),), dpi=120)
    except OSError as e:
        raise BadInputError(path, f"cannot write the plot ({e.strerror or e})") from None
    finally:
        plt.close(ax.figure)


def run(args) -> int:
    plot = plot_path(args.plot) if args.plot else None
    log = read_log(args.file, year=args.year)
    if plot is not None:
        save_plot(log, plot)
    from helpers.acceptance.sources import log_conversion

    conv = log_conversion(log.summary())
    if args.json:
        print(json.dumps({**log.to_json(), "conversion": conv}, indent=2))
        return 0
    print(log.report())
    s = log.summary()
    if conv["per_token_rate"] is not None:
        print(f"  per-token rate: {conv['per_token_rate']:.3f} implied by mean accept length "
              f"{s['mean_accept_length']:.3f} under {conv['drafting']} (d2t-lab rate-for)")
    if conv.get("note"):
        print(f"  note: {conv['note']}")
    if conv["accept_rate_definition"]:
        what = ("accept length / num_draft_tokens" if conv["accept_rate_definition"] == "length/N"
                else "accepted drafts / (num_draft_tokens - 1)")
        print(f"  accept rate:   this build prints {what}: not a per-token rate, do not give it to simulate")
    return 0
