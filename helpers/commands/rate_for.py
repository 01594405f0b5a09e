"""`rate-for --accept-length L --draft-tokens K [--topk T --steps S]`: accept length -> per-token rate."""
from __future__ import annotations

import sys

from helpers.commands import _options
from helpers.core import jsontext

NAME = "rate-for"
HELP = "the per-token acceptance rate a measured accept length implies (chain or SGLang tree)"
DESCRIPTION = """\
The inverse of `simulate`: the single per-token acceptance rate A whose exact expected accept
length, under the drafting given, equals the measured L (bonus token counted, as engines print
it). Found by bisection on the same closed form (chain) or exact tree expectation `simulate` uses.

Chain: --draft-tokens K alone is K drafted tokens (the older meaning, kept), --steps K (or
--steps K --topk 1 [--draft-tokens K+1]) the same chain in SGLang's names. Tree (--topk T
--steps S --draft-tokens N): N is SGLang's --speculative-num-draft-tokens, which counts the root.
Whenever --steps or --topk is given, --draft-tokens counts the root. The drafting is read and
checked by the same code as `metrics` (a shape SGLang does not run is refused, one line, exit 2),
so `rate-for --topk 1 --steps S` gives the rate `metrics --topk 1 --steps S` implies.
Also prints the `accept rate` SGLang's log would show for L under its two definitions (accept
length / num_draft_tokens, or accepted drafts / (num_draft_tokens - 1)): neither is a per-token
rate, so never feed a logged accept rate to `simulate --accept-rate`.

Example: d2t-lab rate-for --accept-length 1.91 --draft-tokens 16 --topk 4 --steps 5   (A ~ 0.21)"""


def add_arguments(p) -> None:
    p.add_argument("--accept-length", type=float, required=True, help="measured accept length L (>= 1, bonus counted)")
    _options.drafting(p, "drafted")
    _options.json_flag(p)


def run(args) -> int:
    from helpers.acceptance.sources import rate_for, rate_for_report

    drafting = _options.drafting_from(args, "drafted")
    if drafting is None:
        print("error: give --draft-tokens K (a chain of K) or --steps S [--topk T --draft-tokens N]", file=sys.stderr)
        return 2
    try:
        r = rate_for(args.accept_length, drafting, given={"draft_tokens": args.draft_tokens, "topk": args.topk,
                                                          "steps": args.steps})
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(jsontext.dumps(r, indent=2) if args.json else rate_for_report(r))
    return 0
