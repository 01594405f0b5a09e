"""`throughput --baseline-tps B --accept-length L --spec-tps S`: step cost and break-even."""
from __future__ import annotations

import json
import sys

from ..simulate import throughput_model

HELP = "speculative step cost and break-even accept length from one measured (accept length, tok/s) pair"
DESCRIPTION = """\
From the plain decode rate B (tok/s without speculation) and one measured pair (accept length L,
speculative tok/s S):
  step cost c = L * B / S   (one speculative step, draft + verify, in plain decode steps)
  tokens/s(L) = B * L / c,  break-even accept length = c.

Example (the investigation): python -m helpers throughput --baseline-tps 90 --accept-length 1.9
--spec-tps 46.7  ->  step cost 3.66 decode steps, break-even accept length 3.66."""


def add_arguments(p) -> None:
    p.add_argument("--baseline-tps", type=float, required=True, help="decode tok/s without speculation")
    p.add_argument("--accept-length", type=float, required=True, help="measured accept length (bonus token included)")
    p.add_argument("--spec-tps", type=float, required=True, help="measured decode tok/s with speculation")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def throughput_args(baseline_tps: float, accept_length: float, spec_tps: float) -> dict:
    """The `throughput --json` object."""
    m = throughput_model(baseline_tps, accept_length, spec_tps)
    d = m.to_dict(accept_length, spec_tps)
    d["tps_at"] = {str(L): float(m.tps(L)) for L in (1, 2, 3, 4, 5, 6)}
    return d


def format_report(d: dict) -> str:
    verdict = "slower than" if d["speedup"] < 1 else "faster than"
    lines = [
        f"baseline {d['baseline_tps']:g} tok/s; measured accept length {d['accept_length']:g} at {d['spec_tps']:g} tok/s "
        f"({d['speedup']:.2f}x, {verdict} no speculation)",
        f"  step cost:                {d['step_cost']:.2f} decode steps per speculative step",
        f"  break-even accept length: {d['break_even_accept_length']:.2f}",
        "  tok/s at accept length:   " + ", ".join(f"{k}: {v:.1f}" for k, v in d["tps_at"].items()),
    ]
    return "\n".join(lines)


def run(args) -> int:
    try:
        d = throughput_args(args.baseline_tps, args.accept_length, args.spec_tps)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(d, indent=2) if args.json else format_report(d))
    return 0
