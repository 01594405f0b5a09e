"""`diff CHECKPOINT_A CHECKPOINT_B`: what changed between two drafts' mappings, and their lm_head rows."""
from __future__ import annotations

from helpers.commands import _options
from helpers.core import jsontext

HELP = "compare two drafts' vocab mappings: ids added / removed / moved, lm_head rows under each mapping"
DESCRIPTION = """\
Compare the d2t mappings of two drafts (an earlier and a fine-tuned checkpoint, say), read with
the offset reading (draft slot i -> target id i + d2t[i]): target ids only in A (removed), only
in B (added), and kept by both at another draft slot (moved, listed exactly as target id: slot
in A -> slot in B). When both have an lm_head, the rows of the moved ids are compared (cosine
similarity with A's row for the same id) under B's mapping and under A's: agreement under A's
mapping only is mapping drift (the mapping was rebuilt while lm_head kept the old row order).

Both drafts must be built for the same target vocabulary: each one's size (config.json's
vocab_size, else t2d's length) and the range of its d2t are compared first, and two drafts of
different targets (a 163,840- and a 4,096-token vocab, say) are refused with one line naming
both sizes, exit 2: their ids index different token tables, so nothing "moved".

Only d2t/t2d and lm_head are read; either checkpoint may be hf:// or http(s)://.
-o/--out FILE.png saves the figure (slots in A vs B; lm_head agreement) with provenance.
JSON (--json): a, b, draft_vocab_a, draft_vocab_b, shared, added [ids], removed [ids],
moved [{target_id, slot_a, slot_b}], lm_head {rows_compared, threshold, agree_under_b,
agree_under_a} or null, verdict. Exit 0 (whatever changed); 2 on unreadable input or drafts of
different target vocabularies."""


def add_arguments(p) -> None:
    p.add_argument("a", metavar="CHECKPOINT_A", help="the earlier (reference) draft")
    p.add_argument("b", metavar="CHECKPOINT_B", help="the draft to compare with it")
    _options.out(p, "save the figure here (PNG; .svg also works)", metavar="FIGURE")
    _options.json_flag(p, "print one JSON object (fields above) instead of the text report")


def run(args) -> int:
    from helpers.doctor.diff import diff_drafts
    from helpers.io.inputs import input_path

    for path in (args.a, args.b):  # the door: both exist (or are remote) before anything is read
        input_path(path, "file or folder", remote_ok=True)
    if args.out:
        _options.figure_path(args.out)  # a bad output path is refused before anything is read
    d = diff_drafts(args.a, args.b)
    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        from pathlib import Path

        from helpers.core.errors import BadInputError
        from helpers.plots.draft_diff import plot_draft_diff
        from helpers.plots.provenance import save_figure

        out = _options.figure_path(args.out)
        fig = plot_draft_diff(d)
        try:
            written = save_figure(fig, out, source=d.sources, verdict=d["verdict"].split(":")[0],
                                  formats=(Path(out).suffix.lstrip(".").lower(),))
        except OSError as e:
            raise BadInputError(e.filename or out, f"cannot write the figure ({e.strerror or e})") from None
        d["figure"] = [str(w) for w in written]
    print(jsontext.dumps(d, indent=2) if args.json else d.report() + "".join(f"\n  figure: {w}" for w in d.get("figure", [])))
    return 0
