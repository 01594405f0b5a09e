"""`fix SRC DST`: write a corrected copy of a draft checkpoint, then check it with the doctor.

The changes are planned first (`helpers.doctor.diagnose.plan_fix`); when they would resolve no error
finding for the engine, nothing is written (unless --force) and the command exits 2 saying why.
"""
from __future__ import annotations

from helpers.commands import _options
from helpers.core import jsontext
from helpers.core.errors import BadInputError
from helpers.core.outputs import new_output_dir

HELP = "write a corrected copy of a draft checkpoint when that fixes an error (SRC is never modified)"
DESCRIPTION = """\
Write a corrected copy of the checkpoint folder SRC to DST (which must not exist; its parent
must; it may not lie inside SRC). What fix can change:
  - d2t holding absolute target ids -> offsets (d2t - arange(N));
  - d2t/t2d kept only beside the weights (d2t.npy, d2t.pt) -> also inside the weights;
  - t2d built from the offsets when missing;
  - decoder-layer keys renamed for the engine (midlayer.* for sglang/all, layers.0.* for
    vllm) and model. prefixes dropped;
  - draft_vocab_size added to config.json when missing.
The changes are planned before anything is written, and the doctor is run on the planned copy.
When they resolve no error finding for --engine - the checkpoint is healthy, or its errors are
ones fix cannot repair (a missing d2t, NaN weights, ...) - nothing is written, not even a
temporary folder, and the command exits 2 with one line saying why; --force writes the copy
anyway. Cosmetic changes alone (renames the engine does not need, draft_vocab_size when
nothing is wrong) do not count.

Otherwise the copy is written to a temporary folder next to DST, renamed at the end, and the
doctor runs on it. Other files are copied; SRC is only read.

--dry-run: print the plan (changes, errors resolved, errors left) and write nothing.
--json: print one JSON object: src, dst, engine, changes, fixes (error codes resolved),
unfixable (error codes left), written, refusal (why nothing was written, or null), dry_run and
findings (the doctor on the written copy, or null).

Exit 0 when the copy has no error (with --dry-run: when fix would write a copy), 1 when the
doctor still finds one in the copy (it is kept for inspection), 2 when nothing was written
because there was nothing fix could repair, and on unreadable input or a bad DST."""


def add_arguments(p) -> None:
    p.add_argument("src", metavar="CHECKPOINT", help="checkpoint folder to fix (read only)")
    p.add_argument("dst", metavar="DST", help="new folder to write (must not exist; its parent must)")
    _options.engine(p, "the engine the copy is for (default: all)")
    _options.target_config(p, "the target's config.json, for the doctor runs")
    p.add_argument("--force", action="store_true",
                   help="write the copy even when it resolves no error (healthy or unrepairable checkpoint)")
    p.add_argument("--dry-run", action="store_true", help="print what would change and write nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object (plan, written, findings)")


def run(args) -> int:
    from helpers.doctor.fix import check_apart, fix_checkpoint, plan_fix

    dst = new_output_dir(args.dst, "fixed copy")
    check_apart(args.src, dst)  # DST inside SRC (or SRC inside DST): one line, nothing written
    plan = plan_fix(args.src, args.engine, args.target_config)
    will_write = plan.matters or args.force
    if args.dry_run or not will_write:
        if args.json:
            print(jsontext.dumps(plan.to_json(dst, written=False, dry_run=args.dry_run), indent=2))
        elif args.dry_run:
            print(plan.report(dst, will_write))
        if not will_write:
            raise BadInputError(plan.src, plan.refusal)
        return 0
    r = fix_checkpoint(args.src, dst, args.engine, args.target_config, force=args.force)
    print(jsontext.dumps(r.plan.to_json(r.dst, written=True, dry_run=False, findings=r.findings), indent=2)
          if args.json else r.report())
    return 0 if r.ok else 1
