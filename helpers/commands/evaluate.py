"""`evaluate CHECKPOINT --samples DIR`: draft accuracy under each reading of d2t."""
from __future__ import annotations

import re

from helpers.commands import _options
from helpers.core import jsontext
from helpers.core.errors import BadInputError

HELP = "score a draft on hidden-state samples with d2t read as offsets, as absolute ids, and not at all"
DESCRIPTION = """\
Run the draft over SpecForge offline hidden-state samples (rows_*/data_*.ckpt[.gz]) and compare
its drafts with the real tokens (EAGLE-3 alignment: aux hidden states of t + embedding of token
t+1 -> token t+2; step k -> token t+2+k, fed its own previous draft), where loss_mask is 1 at the
label's position (--mask-at position: at t+k, as SpecForge's trainer masks). Readings of d2t:
  offset    target_id = i + d2t[i]   (what SGLang, vLLM and TensorRT-LLM do)
  absolute  target_id = d2t[i]       (the bug in hand-written tests)
  none      target_id = i            (no mapping at all)
A samples folder with train/ and val/ subfolders is scored per split, side by side.
Near-zero accuracy under 'offset' on trained-on data while another reading scores well is a
mapping bug; train far above validation is a generalisation gap.

JSON (--json): fractions in 0..1. Top level (all samples pooled): checkpoint, samples, device,
dtype, steps, topk, mask_at, has_d2t, full_vocab, hidden_normed, hidden_normed_how, warnings, samples_scored, tokens, coverage (share of labels
in the draft vocab), readings{READING: {top1, topk, step_top1[], step_topk[], coverage,
covered_top1, covered_topk, tokens, target_top1, target_step_top1, rank_distribution[{ranks[],
not_in_topk, outside_draft_vocab}] per step}}, splits{train, val: same shape}, diagnosis, conclusion,
predicted_accept_length[{drafting, steps, topk, num_draft_tokens, label, sglang{speculative_num_steps,
speculative_eagle_topk, speculative_num_draft_tokens}, vllm{num_speculative_tokens} (null for a tree),
flags (the same as one line of engine flags), expected, rank_table, source, one_rate,
expected_one_rate, notes, assumptions, temperature, acceptance_rule}] per --predict shape (default: a chain
of --steps); temperature (0: every prediction is greedy), acceptance_rule ('greedy'), temperature_asked
(--temperature), temperature_note (at T > 0: why the prediction stays greedy and what measures T).

--predict S/K/N (repeatable): also predict the accept length of SGLang's tree with
--speculative-num-steps S --speculative-eagle-topk K --speculative-num-draft-tokens N (root counted),
or of a chain of S drafted tokens with --predict S (vLLM's num_speculative_tokens = S). The
prediction is the exact expectation of the measured rank table (per step, the share of labels at
each rank of the draft's top k, on the validation split when there is one); score at least S steps
and top-K (--steps S --accuracy-topk K) for it to use measured ranks at every depth. It assumes teacher
forcing, independence across depths, every position weighted equally, and that a depth after an
accepted sibling ranks as after the rank-0 draft (the JSON lists them); `d2t-lab speculate` measures
the accept length with the target in the loop (docs/prediction-calibration.md).

Under torchrun (torchrun --nproc-per-node N -m helpers evaluate ...) each rank scores every N-th
sample file and the counts are summed (nccl on GPUs, gloo on CPU); rank 0 prints the same result
a single process gives.

Samples with a capture.json (written by `capture`) are checked against the draft before scoring:
a manifest naming another target (hidden size, vocab, captured layers, a target whose embed_tokens
the draft does not share, or a --target-head other than the one captured) is refused in one line
naming the manifest, what it says and what the draft expects; samples without one are scored as is.

--accuracy-topk K (older alias --topk) is the k of top-k accuracy, not a drafting shape: the
JSON keeps its name `topk` at the top level.

Exit 0 when scored; 2 with one line on unusable input."""


def add_arguments(p) -> None:
    _options.checkpoint(p, "draft checkpoint folder (config.json + weights + d2t/t2d)")
    p.add_argument("--samples", metavar="SAMPLES", required=True, help="hidden-state samples folder (may hold train/ and val/)")
    _options.readings(p)
    p.add_argument("--steps", type=int, default=1, help="drafting steps to score (default 1)")
    p.add_argument("--accuracy-topk", "--topk", dest="topk", type=int, default=5, metavar="K",
                   help="k of top-k accuracy (default 5); --topk is its older alias (here it is not SGLang's "
                        "tree branching --speculative-eagle-topk: a tree to predict is --predict S/K/N)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T",
                   help="the serving temperature the predictions are for: stated in the JSON (every predicted accept "
                        "length is greedy, temperature 0; at T > 0 a note names the measurement that gives the figure "
                        "at T)")
    p.add_argument("--engine", default=None, metavar="ENGINE",
                   help="with --temperature: whose acceptance rule the note names (vllm, sglang, llamacpp)")
    p.add_argument("--predict", action="append", default=None, metavar="S/K/N",
                   help="predict the accept length of SGLang's tree S/K/N (steps/topk/draft tokens, root "
                        "counted) or of a chain of S (--predict S); repeatable (default: a chain of --steps)")
    _options.device_dtype(p)
    p.add_argument("--max-samples", type=int, default=None, help="score at most N samples (per split)")
    p.add_argument("--batch-size", type=int, default=8, help="samples per forward pass (default 8)")
    p.add_argument("--workers", type=int, default=None,
                   help="threads reading sample files ahead of the draft (default: 1 from 32 files on, else 0)")
    _options.embed_from(p)
    p.add_argument("--draft-config", metavar="FILE", default=None,
                   help="the draft's config.json, for a checkpoint without one (a SpecForge trainer step folder: "
                        "the config the trainer was given)")
    p.add_argument("--target-head", default=None,
                   help="target folder with final norm + lm_head: also score against the target's argmax")
    p.add_argument("--mask-at", choices=("label", "position", "specforge", "speculators"), default="label",
                   help="whose loss_mask counts step j at position t: the label's (t+2+j, default), "
                        "the position's (t+j, as SpecForge's trainer masks, where the label exists), or "
                        "'specforge': SpecForge 0.2.0's exact count - t+j, also the last 1+j positions of "
                        "each sample, whose label lies past the end and is scored as the pad id 0; with "
                        "--target-head the 'vs target argmax' figures then match SpecForge's acc_j to the token; "
                        "'speculators': speculators 0.9.0's rule, loss_mask of t+1+j")
    p.add_argument("--hidden-normed", choices=("yes", "no", "auto"), default="auto",
                   help="with --target-head: are the samples' hidden_state already after the target's final "
                        "norm (SpecForge stores them so: lm_head only) - 'yes', 'no' (apply the norm, then "
                        "lm_head) or 'auto' (default: normed when RMS(hidden_state / norm.weight) is within 2 %% "
                        "of 1 on 90 %% of the first samples' positions; the JSON says which was used)")
    _options.dist_timeout(p)
    _options.json_flag(p)


def run(args) -> int:
    import warnings

    from helpers.io.checkpoint import open_checkpoint
    from helpers.measure.evaluate import evaluate

    readings = _options.parse_readings(args.readings)
    if args.steps < 1 or args.topk < 1:  # --topk: --accuracy-topk's older alias
        raise BadInputError(None, "--steps and --accuracy-topk (--topk) must be at least 1")
    try:
        from helpers.core.devices import parse_dtype

        parse_dtype(args.dtype)
    except ValueError as e:
        raise BadInputError(None, f"--dtype: {e}") from None
    shapes = [_shape(x) for x in args.predict or ()]
    from helpers.model.preflight import check_samples

    opened = open_checkpoint(args.checkpoint)  # once: the samples' check and the loading read it
    # samples captured from another target than the draft's (their capture.json) are refused before scoring
    check_samples(args.checkpoint, args.samples, draft_config=args.draft_config, target=args.target_head, opened=opened,
                  target_flag="--target-head")
    from helpers.core.distributed import finish, from_env

    ranks = from_env(args.device, args.dist_timeout)  # under torchrun: this rank's share of the files, counts summed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the result carries its warnings; printed below / in the JSON
        r = evaluate(opened, args.samples, readings=tuple(readings), steps=args.steps, accuracy_topk=args.topk,
                     mask_at=args.mask_at, batch_size=args.batch_size, max_samples=args.max_samples,
                     workers=args.workers, progress=_options.show_progress(args), device=ranks.device(args.device),
                     dtype=args.dtype, embed_from=args.embed_from, draft_config=args.draft_config,
                     target_head=args.target_head, hidden_normed=args.hidden_normed, ranks=ranks, predict_for=shapes,
                     name=str(args.checkpoint))
    if ranks.main:
        d = _with_temperature(r.to_dict(), args.temperature, args.engine)
        text = r.report()
        if args.temperature:
            text += f"\n  note: {d['temperature_note']}"
        print(jsontext.dumps(d, indent=2) if args.json else text)
    finish(ranks)
    return 0


def _with_temperature(d: dict, temperature: float, engine: str | None) -> dict:
    """Every predicted accept length states what it predicts: the teacher-forced rank table is the
    draft's argmax against the labels, so the prediction is greedy (temperature 0, rule 'greedy')
    whatever --temperature asks; at T > 0 the JSON says so (temperature_asked, temperature_note) and
    names the measurement that gives the figure at T (the engine-free loop under the engine's rule)."""
    from helpers.engines.acceptance_rules import rule_for_engine

    for p in d.get("predicted_accept_length") or []:
        p.update({"temperature": 0.0, "acceptance_rule": "greedy"})
    d["temperature"], d["acceptance_rule"] = 0.0, "greedy"
    d["temperature_asked"] = temperature
    d["temperature_note"] = None
    if temperature:
        rule = rule_for_engine(engine).name
        d["temperature_note"] = (
            f"the predictions are greedy (temperature 0): the rank table counts the draft's argmax against the labels, "
            f"while at T = {temperature:g} the engine's rule ({rule}) accepts a drafted token with the target's "
            f"probability of it, which samples without the target's logits cannot give; measure it with the target in "
            f"the loop: d2t-lab speculate CHECKPOINT --target DIR --temperature {temperature:g}"
            + (f" --engine {engine}" if engine else " --engine E"))
    return d


def _shape(text: str):
    """--predict S, or S/K/N in SGLang's names: a checked `Drafting` (one line, exit 2, otherwise)."""
    from helpers.acceptance.drafting import Drafting

    parts = text.strip().split("/")
    try:
        nums = [int(x) for x in parts]
        if len(nums) == 1:
            return Drafting.chain(nums[0])
        if len(nums) == 3:
            return Drafting.tree(*nums)
    except ValueError as e:
        if all(x.strip().lstrip("-").isdigit() for x in parts):
            raise BadInputError(None, f"--predict {text}: {_in_predict_terms(str(e), parts)}") from None
    raise BadInputError(None, f"--predict {text!r}: expected S (a chain of S drafted tokens) or S/K/N (SGLang's "
                              "steps/topk/num-draft-tokens, root counted), e.g. --predict 5/4/16")


def _in_predict_terms(message: str, parts) -> str:
    """A shape check's message (`helpers.acceptance.drafting`, which names the shape flags of
    speculate/simulate) in --predict's own terms: evaluate takes none of those flags, and its --steps
    and --topk mean other things (the scored depth, top-k accuracy)."""
    steps = parts[0].strip()
    message = re.sub(r"give --draft-tokens (\d+) or leave it out",
                     lambda m: f"give --predict {steps}/1/{m.group(1)} or --predict {steps}", message)
    message = re.sub(r"\(?SGLang(?:'s)? --speculative-num-steps\)?", "", message)
    message = re.sub(r"--num-speculative-tokens (\d+)", r"--predict \1", message)
    for flag, letter in (("--steps", "S"), ("--topk", "K"), ("--draft-tokens", "N"),
                         ("--speculative-num-steps", "S"), ("--speculative-eagle-topk", "K"),
                         ("--speculative-num-draft-tokens", "N")):
        message = re.sub(rf"(?<![\w-]){flag}(?![\w-])( (\d+))?",
                         lambda m, letter=letter: letter + (f" = {m.group(2)}" if m.group(2) else ""), message)
    message = message.replace("vLLM's num_speculative_tokens", "a chain of")
    return " ".join(message.split())
