"""`figures PATH -o OUTDIR [--svg]`: the standard mapping figures, saved with provenance."""
from __future__ import annotations

from pathlib import Path

from helpers.commands import _options
from helpers.core import jsontext
from helpers.core.errors import BadInputError
from helpers.core.outputs import output_dir

HELP = "draw the standard d2t figures of a mapping (staircase, histograms, coverage, readings) as PNG"
DESCRIPTION = """\
Draw the standard figures of a checkpoint's d2t/t2d mapping and save them as PNG (and SVG with
--svg) into OUTDIR, named PREFIX_<figure>.png:
  staircase    d2t[i] against draft id i (flat runs = consecutive kept target ids)
  offset_hist  histogram of the values in d2t (red: impossible as offsets)
  gap_hist     gaps between consecutive kept target ids under the offset reading (red: duplicates)
  coverage     where the kept target ids lie in the target vocab
  readings     offset and absolute readings side by side against t2d (red: wrong target ids)
Each PNG records the source files (path, size, SHA-256), the kit version and the time in its
metadata (read it back with helpers.plots.provenance.read_figure_metadata), and carries a caption line
naming the checkpoint and the verdict. PATH is anything `inspect` reads.

OUTDIR is created (with missing parents) when it does not exist.
Exit 0 with the written files listed; 2 with one line on unreadable input or an OUTDIR that
cannot be written (an existing file, a path through a file, a read-only folder)."""


def add_arguments(p) -> None:
    _options.checkpoint(p)
    _options.out(p, "folder for the figures (--output and --out-dir are older names)", required=True,
                 aliases=("--output", "--out-dir"), dest="out_dir", metavar="OUTDIR")
    _options.json_flag(p, "print one JSON object: the verdict and the files written")
    p.add_argument("--svg", action="store_true", help="also write SVG files")
    p.add_argument("--prefix", default=None, help="file name prefix (default: the checkpoint folder's name)")
    p.add_argument("--label", default=None, help="name shown in the figure titles (default: the folder)")


def run(args) -> int:
    import matplotlib

    matplotlib.use("Agg")
    from helpers.io.checkpoint import load_mapping
    from helpers.plots.mapping import save_mapping_figures

    out_dir = output_dir(args.out_dir, "figures folder", create=False)  # created when the figures are saved
    if args.prefix is not None and (Path(args.prefix).name != args.prefix or args.prefix in (".", "..")):
        raise BadInputError(None, f"--prefix {args.prefix!r}: must be a file name prefix, not a path")
    m = load_mapping(args.checkpoint)
    given = Path(args.checkpoint).resolve()
    prefix = args.prefix or (given.stem if given.is_file() else given.name)  # draft.gguf -> draft_<figure>.png
    try:
        written = save_mapping_figures(m, out_dir, prefix=prefix, svg=args.svg, label=args.label)
    except OSError as e:
        raise BadInputError(e.filename or out_dir, f"cannot write the figure ({e.strerror or e})") from None
    if args.json:
        print(jsontext.dumps({"checkpoint": str(args.checkpoint), "verdict": m.verdict().encoding,
                          "files": [str(f) for f in written]}, indent=2))
    else:
        print(*written, sep="\n")
    return 0
