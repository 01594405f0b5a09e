"""`simulate --accept-rate A --draft-tokens K [--topk T --steps S]`: expected accept length."""
from __future__ import annotations

import json
import sys

from ..simulate import build_tree, chain_expected, simulate_chain, simulate_tree

HELP = "expected accept length for chain or tree drafting (closed form / exact, and Monte Carlo)"
DESCRIPTION = """\
Expected accept length (tokens per verify step, the target's bonus token included, so >= 1) for
a per-token acceptance rate A, exactly and by Monte Carlo with its standard error.

Chain (no --topk/--steps): K drafted tokens, E = (1 - A^(K+1)) / (1 - A).
Tree (--topk T --steps S, SGLang's --speculative-eagle-topk / --speculative-num-steps):
  --draft-tokens is SGLang's --speculative-num-draft-tokens, which counts the root, so the tree
  keeps K - 1 drafted nodes: those of highest path probability among the beam-search candidates.
  At each depth the target's token is the draft's rank-r sibling with probability A (1 - A)^r.
  E = 1 + sum over kept nodes of P(path to node accepted).
A may be one rate or a comma-separated list: per drafted position (chain, K values) or per depth
(tree, S values).

Example: python -m helpers simulate --accept-rate 0.21 --draft-tokens 16 --topk 4 --steps 5
(the investigation's serving setup: accept length ~1.9)."""


def add_arguments(p) -> None:
    p.add_argument("--accept-rate", required=True, help="per-token acceptance A in [0, 1], or A1,A2,... per position/depth")
    p.add_argument("--draft-tokens", type=int, required=True, help="chain: drafted tokens K; tree: SGLang's num-draft-tokens")
    p.add_argument("--topk", type=int, default=None, help="tree drafting: siblings per expanded node (SGLang eagle-topk)")
    p.add_argument("--steps", type=int, default=None, help="tree drafting: depth (SGLang num-steps)")
    p.add_argument("--trials", type=int, default=100_000, help="Monte Carlo trials (default 100,000)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _rates(text: str):
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--accept-rate: {text!r} is not a number or a comma-separated list of numbers") from None
    if not vals:
        raise ValueError("--accept-rate is empty")
    return vals[0] if len(vals) == 1 else vals


def simulate_args(accept_rate, draft_tokens: int, topk: int | None, steps: int | None, trials: int) -> dict:
    """The `simulate --json` object."""
    tree = topk is not None or steps is not None
    if trials < 2:
        raise ValueError("--trials must be at least 2")
    if tree:
        topk = 1 if topk is None else topk
        if steps is None:
            raise ValueError("tree drafting needs --steps (SGLang --speculative-num-steps)")
        t = build_tree(accept_rate, steps, topk, draft_tokens)
        mc = simulate_tree(accept_rate, steps, topk, draft_tokens, trials=trials)
        exact, kind = t.expected(), "tree"
        extra = {"tree_nodes": t.nodes, "tree_depth": int(t.depth.max()), "nodes_per_depth":
                 [int((t.depth == d).sum()) for d in range(1, steps + 1)]}
    else:
        exact, kind = chain_expected(accept_rate, draft_tokens), "chain"
        mc = simulate_chain(accept_rate, draft_tokens, trials=trials)
        extra = {}
    return {
        "mode": kind, "accept_rate": accept_rate, "draft_tokens": draft_tokens, "topk": topk, "steps": steps,
        "expected_accept_length": exact, "monte_carlo_mean": mc.mean, "monte_carlo_stderr": mc.stderr,
        "trials": mc.trials, "z": mc.z,
        "distribution": {str(k): v for k, v in mc.to_dict()["distribution"].items()}, **extra,
    }


def format_report(r: dict) -> str:
    how = ("chain, %d drafted tokens" % r["draft_tokens"]) if r["mode"] == "chain" else (
        f"tree, steps {r['steps']}, topk {r['topk']}, {r['draft_tokens']} draft tokens "
        f"({r['tree_nodes']} drafted nodes, per depth {r['nodes_per_depth']})")
    lines = [
        f"accept rate {r['accept_rate']}, {how}",
        f"  expected accept length: {r['expected_accept_length']:.4f}   ({'closed form' if r['mode'] == 'chain' else 'exact'})",
        f"  Monte Carlo:            {r['monte_carlo_mean']:.4f} ± {r['monte_carlo_stderr']:.4f} (1 s.e., {r['trials']:,} trials, z = {r['z']:+.2f})",
        "  distribution: " + ", ".join(f"{k}: {v:.3f}" for k, v in r["distribution"].items() if v > 0),
    ]
    return "\n".join(lines)


def run(args) -> int:
    try:
        r = simulate_args(_rates(args.accept_rate), args.draft_tokens, args.topk, args.steps, args.trials)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(r, indent=2) if args.json else format_report(r))
    return 0
