"""`simulate --accept-rate A --draft-tokens K [--topk T --steps S]`: expected accept length."""
from __future__ import annotations

import sys

from helpers.commands import _options
from helpers.core import jsontext

HELP = "expected accept length for chain or tree drafting (closed form / exact, and Monte Carlo)"
DESCRIPTION = """\
Expected accept length (tokens per verify step, the target's bonus token included, so >= 1) for
a per-token acceptance rate A, exactly and by Monte Carlo with its standard error.

""" + _options.SHAPE_TEXT + """

Chain (--num-speculative-tokens K; --draft-tokens K alone, as before; or --steps K): K drafted
tokens, E = (1 - A^(K+1)) / (1 - A).
Tree (--speculative-num-steps S --speculative-eagle-topk T --speculative-num-draft-tokens N):
  N counts the root, so the tree keeps N - 1 drafted nodes: those of highest path probability among the beam-search candidates
  (at most T + (S - 1) T^2 of them; with --topk 1 SGLang verifies exactly S + 1 tokens).
  With --steps or --topk, --draft-tokens always counts the root; a shape SGLang does not run
  (e.g. --steps 3 --topk 1 --draft-tokens 8) is refused in one line naming the flag, exit 2.
  At each depth the target's token is the draft's rank-r sibling with probability A (1 - A)^r.
  E = 1 + sum over kept nodes of P(path to node accepted).
A may be one rate or a comma-separated list: per drafted position (chain, K values) or per depth
(tree, S values).

Work sizes: draft tokens and steps at most 256, topk at most 64, --trials 2 to 100,000,000;
more is refused in one line (exit 2). No engine drafts more than a few dozen tokens per verify
step, past 256 drafted tokens a chain's accept length no longer moves (A^257 < 2e-12 for A <= 0.9),
and 100,000,000 trials (about a second) already give a standard error below 1e-4 of the spread.

Example: d2t-lab simulate --accept-rate 0.21 --speculative-num-steps 5 --speculative-eagle-topk 4
         --speculative-num-draft-tokens 16   (the investigation's serving setup: accept length ~1.9)
JSON (--json): ..., sglang{speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens},
vllm{num_speculative_tokens} (null for a tree): the shape in both engines' terms."""


def add_arguments(p) -> None:
    p.add_argument("--accept-rate", required=True, help="per-token acceptance A in [0, 1], or A1,A2,... per position/depth")
    _options.drafting(p, "drafted")
    p.add_argument("--trials", type=int, default=100_000,
                   help="Monte Carlo trials, 2 to 100,000,000 (default 100,000; 1e8 take about a second and "
                        "give a standard error below 1e-4 of the spread)")
    _options.json_flag(p)


def _rates(text: str):
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--accept-rate: {text!r} is not a number or a comma-separated list of numbers") from None
    if not vals:
        raise ValueError("--accept-rate is empty")
    return vals[0] if len(vals) == 1 else vals


def check_sizes(args) -> None:
    """Work sizes within what is meaningful (`helpers.acceptance.montecarlo.MAX_*`, why there): else
    one line naming the flag, before any work."""
    from helpers.acceptance.montecarlo import MAX_DRAFT_TOKENS, MAX_TOPK, MAX_TRIALS
    from helpers.core.errors import BadInputError

    if args.trials < 2:
        raise BadInputError("--trials", f"{args.trials:,} is fewer than 2 (a standard error needs two draws)")
    more = "no engine drafts more per verify step; past 256 a chain's accept length no longer moves"
    deeper = "no engine drafts deeper; past 256 the accept length no longer moves"
    wider = "SGLang runs 1 to 10; more only multiplies the candidates"
    limits = (("--draft-tokens", args.draft_tokens, MAX_DRAFT_TOKENS, more),
              ("--speculative-num-draft-tokens", args.speculative_num_draft_tokens, MAX_DRAFT_TOKENS, more),
              ("--num-speculative-tokens", args.num_speculative_tokens, MAX_DRAFT_TOKENS, more),
              ("--steps", args.steps, MAX_DRAFT_TOKENS, deeper),
              ("--speculative-num-steps", args.speculative_num_steps, MAX_DRAFT_TOKENS, deeper),
              ("--topk", args.topk, MAX_TOPK, wider),
              ("--speculative-eagle-topk", args.speculative_eagle_topk, MAX_TOPK, wider),
              ("--trials", args.trials, MAX_TRIALS, "1e8 trials already give a standard error below 1e-4 of the "
                                                    "spread"))
    for flag, value, high, why in limits:  # the low ends: the drafting shape's own check names them
        if value is not None and value > high:
            raise BadInputError(flag, f"{value:,} is more than {high:,}, the meaningful range's end ({why})")


def run(args) -> int:
    check_sizes(args)
    drafting = _options.drafting_from(args, "drafted")
    if drafting is None:
        print(f"error: {_options.NO_SHAPE}", file=sys.stderr)
        return 2
    try:
        from helpers.acceptance.drafting import simulation

        sglang_named = any(v is not None for v in (args.steps, args.topk, args.speculative_num_steps,
                                                   args.speculative_eagle_topk))
        r = simulation(_rates(args.accept_rate), drafting, args.trials,
                       tree_form=sglang_named and args.num_speculative_tokens is None)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(jsontext.dumps(r, indent=2) if args.json else r.report())
    return 0
