"""`throughput --baseline-tps B --accept-length L --spec-tps S`: step cost and break-even."""
from __future__ import annotations

import math
import sys

from helpers.commands import _options
from helpers.core import jsontext

HELP = "speculative step cost and break-even accept length from one measured (accept length, tok/s) pair"
DESCRIPTION = """\
From the plain decode rate B (tok/s without speculation) and one measured pair (accept length L,
speculative tok/s S):
  step cost c = L * B / S   (one speculative step, draft + verify, in plain decode steps)
  tokens/s(L) = B * L / c,  break-even accept length = c.

Example (the investigation): d2t-lab throughput --baseline-tps 90 --accept-length 1.9
--spec-tps 46.7  ->  step cost 3.66 decode steps, break-even accept length 3.66."""


def add_arguments(p) -> None:
    p.add_argument("--baseline-tps", type=float, required=True, help="decode tok/s without speculation")
    p.add_argument("--accept-length", type=float, required=True, help="measured accept length (bonus token included)")
    p.add_argument("--spec-tps", type=float, required=True, help="measured decode tok/s with speculation")
    _options.json_flag(p)


def run(args) -> int:
    try:
        from helpers.acceptance.throughput import throughput_summary

        d = throughput_summary(args.baseline_tps, args.accept_length, args.spec_tps)
    except ValueError as e:  # each value finite and in range, the flag named
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not all(math.isfinite(v) for v in (d["step_cost"], d["speedup"], *d["tps_at"].values())):
        print(f"error: --baseline-tps {args.baseline_tps:g}, --spec-tps {args.spec_tps:g}: the figures they give "
              "are not finite numbers (a value out of scale)", file=sys.stderr)
        return 2
    print(jsontext.dumps(d, indent=2) if args.json else d.report())
    return 0
