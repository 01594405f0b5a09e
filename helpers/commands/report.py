"""`report CHECKPOINT -o OUT`: a folder to attach to a bug report."""
from __future__ import annotations

from ..outputs import output_dir
from ..report import SEQUENCE, run_report

HELP = "run the notebooks on a checkpoint and write a bug-report folder (summary.md, HTML, PNGs)"
DESCRIPTION = f"""\
Run the investigation notebooks ({', '.join(SEQUENCE)}) with papermill on CHECKPOINT,
passing it (and --samples) as parameters, and write to OUT:
  summary.md / summary.json  verdict, doctor findings, accuracy per reading, predicted and
                             replayed accept length, environment (kit, torch, CUDA, GPU, Python)
  notebooks/*.ipynb          the executed notebooks
  html/*.html                an HTML export of each
  figures/<notebook>/*.png   every figure, with source file, size, SHA-256, kit version and time
                             in the PNG metadata
Without --samples the sample-dependent parts are skipped and summary.md says so.
A notebook that fails is reported in summary.md and the rest still run.
OUT is created (with missing parents); it must not be a file.
Exit 0 when every notebook succeeded, 1 when one failed, 2 on unreadable input or an OUT that
cannot be written (checked before any notebook runs)."""


def add_arguments(p) -> None:
    p.add_argument("checkpoint", help="draft checkpoint folder or mapping file")
    p.add_argument("--samples", default=None, help="SpecForge hidden-state folder (rows_*/data_*.ckpt; may hold train/ and val/)")
    p.add_argument("--engine", default="all", choices=["sglang", "vllm", "all"], help="engine the doctor checks against")
    p.add_argument("--embed-from", default=None, help="embed_tokens for a draft that has none (the target's weights folder)")
    p.add_argument("--target-config", default=None, help="the target's config.json, for the doctor's aux-layer check")
    p.add_argument("--target-head", default=None, help="target final norm + lm_head, to score against the target's argmax")
    p.add_argument("-o", "--out", required=True, help="output folder (created; only files under it are written)")
    p.add_argument("--max-samples", type=int, default=None, help="score at most this many sample files per split")


def run(args) -> int:
    output_dir(args.out, "report folder", create=False)  # before any notebook runs; run_report creates it
    res = run_report(
        args.checkpoint, args.out, samples=args.samples, engine=args.engine, embed_from=args.embed_from,
        target_config=args.target_config, target_head=args.target_head, max_samples=args.max_samples,
    )
    n_ok = sum(r.ok for r in res.runs)
    print(f"{n_ok}/{len(res.runs)} notebooks succeeded. Summary: {res.summary_path}")
    return 0 if res.ok else 1
