"""`report CHECKPOINT -o OUT`: a folder to attach to a bug report."""
from __future__ import annotations

from helpers.commands import _options
from helpers.core import jsontext
from helpers.core.outputs import output_dir
from helpers.ui.notebook import SEQUENCE, SPECULATE
from helpers.ui.settings import RunSettings, resolve_drafting, resolve_engine

HELP = "run the notebooks on a checkpoint and write a bug-report folder (summary.md, HTML, PNGs)"
DESCRIPTION = f"""\
Run the investigation notebooks ({', '.join(SEQUENCE)}, and {SPECULATE} with
--target and --prompts) with papermill on CHECKPOINT and the inputs you pass, and write to OUT:
  summary.md / summary.json  conclusion, the inputs (and which were not given), d2t verdict,
                             doctor findings, accuracy per reading, predicted / replayed /
                             measured accept length, tokens/s, environment
  notebooks/*.ipynb          the executed notebooks
  html/*.html                an HTML export of each (works offline)
  figures/<notebook>/*.png   every figure a notebook shows, once, with source files, SHA-256,
                             kit version and time in the PNG metadata; numbers.json beside them
Only your inputs are read: no bundled sample is compared with your checkpoint, and a section
whose input you did not give says so (e.g. "not given: pass --log FILE"). Every input is
checked before the first notebook starts (exit 2, one line): paths, prompt records, the draft's
fit to --target (its family, vocab, hidden size and the draft's embed_tokens against the target's:
what `speculate` refuses), the samples' capture.json against the draft and --target (what
`evaluate` refuses); the doctor with --target also runs first, and its errors are printed and
quoted in the summary's conclusion. With --target DIR --prompts FILE the report also runs 07_speculative_decoding:
real speculative decoding with that target under both readings of d2t (token view, measured vs
predicted accept length, tokens/s; --max-prompts, --max-new-tokens, --temperature), and the
doctor (06) checks the draft against the target's config. The drafting settings come from
the shape flags (vLLM's --num-speculative-tokens K; SGLang's --speculative-num-steps,
--speculative-eagle-topk, --speculative-num-draft-tokens, the root counted; aliases --steps,
--topk, --draft-tokens; --draft-tokens alone, a chain of N - 1 here before, is refused in one
line naming --num-speculative-tokens), else from the first --log with SGLang's server_args= (or vLLM's
num_speculative_tokens) line, else the default chain of 5, speculate's (the one default of every
speculate front end); summary.md and summary.json's settings.sources say which. When flags and such a
log disagree, the conflict is named (on stdout, in summary.md's conclusion and summary.json's
drafting_conflict) and the log's settings are used, what the server ran (--drafting-from flags:
the flags'). A shape SGLang does not
run (--steps 0, --topk 1 with --draft-tokens other than steps + 1, a tree larger than its search
keeps) is refused before any notebook, one line naming the flag.
A --log (or --metrics file) whose server forced its acceptance (SGLANG_SIMULATE_ACC_LEN > 0,
rejection_sample_method "synthetic", TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS > 0, ATOM
--spec-decode-acceptance-length / -rate, wherever the file shows it) is refused before any
notebook: one line naming the setting and its line, exit 2 (its accept lengths say nothing about
the draft). A --log that shows the EAGLE (1/2) algorithm with an EAGLE-3 draft (checked against
CHECKPOINT by the doctor's eagle3-as-eagle) prints that finding before the notebooks run.
OUT is created (with missing parents); it must not be a file.
Exit 0 when every notebook succeeded, 1 when one failed, 2 on bad input or an OUT that cannot
be written (all checked before any notebook runs)."""


def add_arguments(p) -> None:
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="draft checkpoint folder or mapping file")
    p.add_argument("-o", "--out", required=True, help="output folder (created; only files under it are written)")
    g = p.add_argument_group("inputs")
    g.add_argument("--samples", metavar="SAMPLES", default=None,
                   help="SpecForge hidden-state folder (rows_*/data_*.ckpt; may hold train/ and val/)")
    g.add_argument("--log", metavar="LOG", action="append", default=[], dest="logs",
                   help="an SGLang or vLLM serving log (repeatable)")
    g.add_argument("--metrics", metavar="FILE|URL", default=None,
                   help="serving metrics: a /metrics or /get_server_info URL, or a saved file (see `d2t-lab metrics`)")
    _options.engine(g, "engine the doctor checks against, optionally ==VERSION (default: all; a serving log's "
                       "version is used when --log names one)")
    g.add_argument("--embed-from", default=None, help="embed_tokens for a draft that has none (the target's weights folder)")
    g.add_argument("--target-config", default=None, help="the target's config.json, for the doctor's aux-layer check")
    g.add_argument("--target", metavar="DIR", default=None,
                   help="Hugging Face target folder: also run speculative decoding with it (notebook 07; needs --prompts)")
    g.add_argument("--prompts", metavar="FILE", default=None, help="JSONL prompts for --target")
    g.add_argument("--target-head", default=None, help="target final norm + lm_head, to score against the target's argmax")
    d = p.add_argument_group("deployment (the engines' flags; default: from the log's server_args, else "
                             "the default chain of 5, speculate's)")
    _options.drafting(d, "refuse", group=False)
    d.add_argument("--drafting-from", choices=("log", "flags"), default="log",
                   help="when the shape flags and a --log's start-up line disagree, whose settings the "
                        "report uses: the log's (default: what the server ran) or the flags'; the conflict is named "
                        "either way")
    d.add_argument("--baseline-tps", type=float, default=None, help="decode tokens/s without speculation")
    d.add_argument("--spec-tps", type=float, default=None,
                   help="decode tokens/s with speculation (default: the logs' generation throughput)")
    r = p.add_argument_group("running")
    r.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: the best present)")
    r.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: bf16 on GPU, fp32 on CPU)")
    r.add_argument("--max-samples", type=int, default=None, help="score at most this many sample files per split")
    r.add_argument("--max-prompts", type=int, default=None,
                   help="with --target: use at most the first N prompt records (default: all)")
    r.add_argument("--max-new-tokens", type=int, default=48, help="with --target: tokens generated per prompt (default 48)")
    r.add_argument("--temperature", type=float, default=0.0,
                   help="with --target: 0 verifies greedily (default); > 0 uses speculative sampling")
    from helpers.speculate.result import BATCH_HELP, DEFAULT_BATCH_SIZE

    r.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                   help=f"with --target: {BATCH_HELP}")
    r.add_argument("--svg", action="store_true", help="save every figure as SVG too")
    r.add_argument("--json", action="store_true", help="print summary.json instead of the progress lines")


def settings_from_args(args) -> RunSettings:
    s = RunSettings(
        checkpoint=args.checkpoint, samples=args.samples, embed_from=args.embed_from, target_head=args.target_head,
        target_config=args.target_config, engine=args.engine, logs=tuple(args.logs), metrics=args.metrics, baseline_tps=args.baseline_tps,
        spec_tps=args.spec_tps, target=args.target, prompts=args.prompts, device=args.device, dtype=args.dtype, max_samples=args.max_samples, svg=args.svg,
        max_prompts=args.max_prompts, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        batch_size=args.batch_size,
    )
    shape = _options.shape_flags(args, "refuse")  # the engines' flags and the aliases, read once
    try:
        by_flags = resolve_drafting(s, **shape)
        chosen = by_flags
        conflict = drafting_conflict(args, s, by_flags)
        if conflict is not None:
            by_log, text = conflict
            if getattr(args, "drafting_from", "log") == "log":
                chosen = by_log
                text += "; the report uses the log's (what the server ran; --drafting-from flags uses the flags')"
            else:
                text += "; the report uses the flags' (--drafting-from flags), so the log's accept length is not " \
                        "compared with the runs as if on the same settings"
            chosen = chosen.with_(sources={**chosen.sources, "drafting_conflict": text})
        return resolve_engine(chosen)
    except ValueError as e:
        from helpers.core.errors import BadInputError

        raise BadInputError(None, str(e)) from None


def drafting_conflict(args, s: RunSettings, by_flags: RunSettings):
    """(the settings as the log states them, one line naming the conflict) when drafting flags were
    given and the first --log with a start-up line states another shape; else None."""
    from pathlib import Path

    from helpers.serving.startup import read_drafting

    given = [f"--{n.replace('_', '-')} {getattr(args, n)}" for n in _options.SHAPE_DESTS
             if getattr(args, n, None) is not None]
    if not given:
        return None
    for log in s.logs:
        if not Path(log).is_file():
            continue  # the report's own check names a missing path
        found = read_drafting(log)
        if not found:
            continue
        by_log = resolve_drafting(s)
        if by_log.drafting == by_flags.drafting:
            return None
        return by_log, (f"drafting settings conflict: {' '.join(given)} say {by_flags.drafting.label}, but "
                        f"{found['source']} in {log} says the server ran {by_log.drafting.label}")
    return None


def run(args) -> int:
    output_dir(args.out, "report folder", create=False)  # before any notebook runs; run_report creates it
    import sys

    from helpers.ui.report import run_report, serving_inputs  # the notebooks: loaded when a report is made

    for line in serving_inputs(args.logs, args.metrics, args.checkpoint, args.engine or "all"):
        print(line, file=sys.stderr if args.json else sys.stdout)
    settings = settings_from_args(args)
    if settings.sources.get("drafting_conflict"):
        print("warning: " + settings.sources["drafting_conflict"], file=sys.stderr if args.json else sys.stdout)
    res = run_report(settings, args.out, progress=None if args.json else print)
    if args.json:
        print(jsontext.dumps(res.summary, indent=2, default=str))
    else:
        n_ok = sum(r.ok for r in res.runs)
        print(f"{n_ok}/{len(res.runs)} notebooks succeeded. Summary: {res.summary_path}")
    return 0 if res.ok else 1
