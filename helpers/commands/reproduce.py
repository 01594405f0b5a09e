"""`reproduce CHECKPOINT --target T --prompts F --accept-length L`: which wiring bug reproduces a serving number."""
from __future__ import annotations

import math
import sys
from pathlib import Path

from helpers.commands import _options
from helpers.core import jsontext
from helpers.core.errors import BadInputError

HELP = "rank the known wiring bugs by how well they reproduce a measured (serving) accept length"
DESCRIPTION = """\
Runs speculative decoding with the target in the loop (as `speculate` does, no engine) on the
prompts, once with the correct wiring and once under each misconfiguration the kit can emulate:
d2t read as absolute ids, d2t ignored, the other engine's aux-layer convention (capture layers
shifted by one), EAGLE-3.1 norms dropped, the final norm skipped, lm_head borrowed from the
target, the target's embedding in place of the draft's, a wrong attention window. Each is ranked
by z = (engine-free accept length - L) / sqrt(its stderr² + S²): the wirings with |z| < 2
reproduce the measured number. Each row says which engines make that mistake. A misconfiguration
that cannot happen to this draft is listed with the reason and not run.

Give the drafting settings the server used, as its launch command spells them (vLLM's
--num-speculative-tokens K; SGLang's --speculative-num-steps S --speculative-eagle-topk T
--speculative-num-draft-tokens N, the root counted; aliases --steps, --topk, --draft-tokens, and
--draft-tokens K alone a chain of K; default a chain of 5, as in `speculate`, the dashboard and
notebook 07) and, if known, the standard error of the measured accept length (--stderr;
`d2t-lab logs` and the report print it).

JSON (--json): accept_length, stderr, settings, prompts, verdict, best{...}, correct{...},
rows[{key, label, engines, mean, stderr, verify_steps, z, skipped, reproduces}] (ranked rows
first, skipped ones last).
Exit 0 when done; 2 with one line on unusable input."""


def add_arguments(p) -> None:
    from helpers.engines.registry import DEFAULT_ENGINE

    _options.checkpoint(p, "draft checkpoint folder")
    p.add_argument("--target", metavar="DIR", required=True, help="Hugging Face target folder")
    p.add_argument("--prompts", metavar="FILE", required=True, help="JSONL prompt file (ideally the serving traffic)")
    p.add_argument("--accept-length", type=float, required=True, metavar="L",
                   help="the measured accept length to reproduce (bonus token included, as engines count)")
    p.add_argument("--stderr", type=float, default=None, metavar="S", help="its standard error (default: 0)")
    _options.drafting(p, "drafted")  # default: a chain of 5
    p.add_argument("--max-new-tokens", type=int, default=48, help="tokens to generate per prompt (default 48)")
    p.add_argument("--max-prompts", type=int, default=None, help="use at most the first N prompt records")
    p.add_argument("--engine", choices=("sglang", "vllm"), default=DEFAULT_ENGINE,
                   help="the engine serving the draft: whose aux-layer convention is the correct one "
                        f"(default {DEFAULT_ENGINE})")
    p.add_argument("--window", type=int, default=None,
                   help="the wrong window to emulate for a full-attention draft (default 8 tokens)")
    _options.chat_template(p)
    from helpers.speculate.result import BATCH_HELP, DEFAULT_BATCH_SIZE

    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                   help=BATCH_HELP)
    _options.device_dtype(p)
    _options.embed_from(p)
    _options.json_flag(p)


def run(args) -> int:
    from helpers.core.devices import parse_dtype
    from helpers.speculate.reproduce import DEFAULT_WINDOW

    if not (math.isfinite(args.accept_length) and args.accept_length >= 1.0):
        raise BadInputError(None, f"--accept-length must be at least 1.0 (it counts the bonus token), got {args.accept_length}")
    if args.stderr is not None and not (math.isfinite(args.stderr) and args.stderr >= 0):
        raise BadInputError(None, f"--stderr must be >= 0, got {args.stderr}")
    drafting = _options.drafting_from(args, "drafted")  # a shape no engine runs: one line
    if args.window is not None and args.window < 1:
        raise BadInputError(None, f"--window must be at least 1, got {args.window}")
    try:
        dtype = parse_dtype(args.dtype)
    except ValueError as e:
        raise BadInputError(None, f"--dtype: {e}") from None
    prompts = Path(args.prompts)
    if not prompts.is_file():
        raise BadInputError(prompts, "no such prompt file")
    from helpers.io.prompts import read_prompts
    from helpers.speculate.builder import build_run, spec_settings
    from helpers.speculate.reproduce import reproduce

    # the one builder every front end uses: no shape given is its default (a chain of 5), the engine honoured
    knobs = dict(max_new_tokens=args.max_new_tokens, chat_template=args.chat_template, batch_size=args.batch_size)
    spec_settings(drafting, engine=args.engine, **knobs)  # checked before the prompts and models are read
    records = list(read_prompts(prompts, args.max_prompts))
    if not records:
        raise BadInputError(prompts, "holds no prompt records")
    (target, draft), settings = build_run(args.checkpoint, Path(args.target), drafting, engine=args.engine,
                                          device=args.device, dtype=dtype, embed_from=args.embed_from, **knobs)
    from helpers.speculate.builder import check_prompt_positions

    check_prompt_positions(target, records, settings)  # the longest prompt + tokens fit the target's context
    res = reproduce(target, draft, records, settings, accept_length=args.accept_length, stderr=args.stderr,
                    window=args.window or DEFAULT_WINDOW, progress=_options.show_progress(args))
    if args.json:
        out = {"checkpoint": args.checkpoint, "target": args.target, "prompts": str(prompts), **res.to_dict()}
        print(jsontext.dumps(out, indent=2), file=sys.stdout)
    else:
        print(res.report(), file=sys.stdout)
    return 0
