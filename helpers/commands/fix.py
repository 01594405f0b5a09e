"""`fix SRC DST`: write a corrected copy of a draft checkpoint, then check it with the doctor."""
from __future__ import annotations

from ..doctor import fix_checkpoint
from .doctor import format_findings

HELP = "write a corrected copy of a draft checkpoint (SRC is never modified)"
DESCRIPTION = """\
Write a corrected copy of the checkpoint folder SRC to DST (which must not exist):
  - d2t holding absolute target ids -> offsets (d2t - arange(N));
  - d2t/t2d kept only beside the weights (d2t.npy, d2t.pt) -> also inside the weights;
  - t2d built from the offsets when missing;
  - decoder-layer keys renamed for the engine (midlayer.* for sglang/all, layers.0.* for
    vllm) and model. prefixes dropped;
  - draft_vocab_size added to config.json when missing.
Other files are copied. SRC is only read. The copy is written to a temporary folder next to
DST and renamed at the end; the doctor then runs on it. Exit 0 when the copy has no error,
1 when the doctor still finds one (the copy is kept for inspection), 2 on unreadable input."""


def add_arguments(p) -> None:
    p.add_argument("src", help="checkpoint folder to fix (read only)")
    p.add_argument("dst", help="new folder to write (must not exist)")
    p.add_argument("--engine", choices=["sglang", "vllm", "all"], default="all",
                   help="the engine the copy is for (default: all)")
    p.add_argument("--target-config", metavar="FILE", help="the target's config.json, for the doctor run on the copy")


def run(args) -> int:
    r = fix_checkpoint(args.src, args.dst, args.engine, args.target_config)
    print(f"wrote {r.dst}")
    for c in r.changes:
        print(f"  - {c}")
    print(format_findings(r.dst, args.engine, r.findings))
    if not r.ok:
        print("the fixed copy still has errors (see above); fix cannot repair those")
        return 1
    return 0
