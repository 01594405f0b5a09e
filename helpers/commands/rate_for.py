"""`rate-for --accept-length L --draft-tokens K [--topk T --steps S]`: accept length -> per-token rate."""
from __future__ import annotations

import sys

from helpers.commands import _options
from helpers.core import jsontext

HELP = "the per-token acceptance rate a measured accept length implies (chain or SGLang tree)"
DESCRIPTION = """\
The inverse of `simulate`: the single per-token acceptance rate A whose exact expected accept
length, under the drafting given, equals the measured L (bonus token counted, as engines print
it). Found by bisection on the same closed form (chain) or exact tree expectation `simulate` uses.

""" + _options.SHAPE_TEXT + """
--draft-tokens K with no other shape flag is a chain of K drafted tokens (this command's older
meaning, kept; = --num-speculative-tokens K). The drafting is read and checked by the same code as `metrics` (a shape SGLang does not run is refused, one line, exit 2),
so `rate-for --num-speculative-tokens S` gives the rate `metrics --num-speculative-tokens S` implies.
Also prints the `accept rate` SGLang's log would show for L under its two definitions (accept
length / num_draft_tokens, or accepted drafts / (num_draft_tokens - 1)): neither is a per-token
rate, so never feed a logged accept rate to `simulate --accept-rate`.

Example: d2t-lab rate-for --accept-length 1.91 --speculative-num-steps 5 --speculative-eagle-topk 4
         --speculative-num-draft-tokens 16   (A ~ 0.21)
JSON (--json): ..., sglang{speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens},
vllm{num_speculative_tokens} (null for a tree)."""


def add_arguments(p) -> None:
    p.add_argument("--accept-length", type=float, required=True, help="measured accept length L (>= 1, bonus counted)")
    _options.drafting(p, "drafted")
    _options.json_flag(p)


def run(args) -> int:
    from helpers.acceptance.sources import rate_for, rate_for_report

    drafting = _options.drafting_from(args, "drafted")
    if drafting is None:
        print(f"error: {_options.NO_SHAPE}", file=sys.stderr)
        return 2
    typed = {"draft_tokens": args.draft_tokens, "topk": args.topk, "steps": args.steps}
    try:  # the JSON echoes the older flags as typed, else the engines' flags in SGLang's terms
        r = rate_for(args.accept_length, drafting, given=typed if any(v is not None for v in typed.values())
                     else _options.shape_flags(args, "drafted"))
        r.update(drafting.engine_flags())
        from helpers.acceptance.drafting import RATE_SAMPLING

        r.update({**RATE_SAMPLING, "sampling_note": "the accept length given: its own temperature and acceptance rule"})
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(jsontext.dumps(r, indent=2) if args.json else rate_for_report(r))
    return 0
