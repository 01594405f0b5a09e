"""`drift CHECKPOINT --target TARGET --samples DIR`: has the target changed since the draft was trained?"""
from __future__ import annotations

from helpers.commands import _options
from helpers.core import jsontext

HELP = "compare the served target's hidden states with the draft's training samples; predict the acceptance lost"
DESCRIPTION = """\
A target quantized, rotated (QuaRot / SpinQuant folded into its weights) or moved to another
revision after the draft was trained keeps every file right and still lowers acceptance
(vllm-ascend#5974). This runs the served target (--target) over the samples' own token ids, or
reads states captured from the served build (--states DIR: a samples folder made by d2t-lab capture
on the same samples' prompts), and compares them with the stored states at the draft's aux layers:
cosine and relative error per layer, and the draft's step-0 logits on both (rank correlation,
argmax agreement). Then the draft is scored on both (the offset reading, as deep and wide as the
drafting shape) and each score turned into a predicted accept length: the difference is the
acceptance the drift costs (default shape: a chain of 5, speculate's default).

The served draft reads the served target's embedding under --engine sglang (SGLang's EAGLE-3
worker calls set_embed with the target's embedding, whatever the draft stores), its own otherwise;
--draft-embedding own|target overrides. -o DIR keeps the served states as a samples folder
(d2t-lab evaluate reads it).

JSON (--json): samples, served, layers, per_layer[{layer, cosine, relative_error}], max_relative_error,
draft_rank_correlation, top1_agreement, final_cosine, drifted, severe, kind, drafting,
predicted_accept_length{stored_states, served_states}, predicted_loss, predicted_loss_fraction.
Exit 0: no drift; 1: a drift was found; 2: bad input."""


def add_arguments(p) -> None:
    _options.checkpoint(p, "draft checkpoint folder")
    p.add_argument("--samples", metavar="DIR", required=True,
                   help="the draft's training samples (SpecForge offline layout, with capture.json when made by capture)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--target", metavar="TARGET", default=None, help="the served target's folder (run on the samples' ids)")
    g.add_argument("--states", metavar="DIR", default=None,
                   help="states captured from the served build, as a samples folder with the samples' file names")
    _options.aux_engine(p, "the engine serving the draft: its aux-layer convention, and which embedding the "
                        "draft reads")
    p.add_argument("--draft-embedding", choices=("own", "target"), default=None,
                   help="the embedding the served draft reads (default: the target's under sglang, else its own)")
    p.add_argument("--max-samples", type=int, default=None, metavar="N", help="samples compared per split")
    _options.drafting(p, "drafted")
    _options.out(p, "keep the served states here as a samples folder")
    p.add_argument("--device", default=None, help="device for the target (default cpu)")
    _options.json_flag(p)


def run(args) -> int:
    from helpers.core.errors import BadInputError
    from helpers.measure.drift import run_drift
    from helpers.model.preflight import Door, Inputs, preflight

    if args.max_samples is not None and args.max_samples < 1:
        raise BadInputError(None, "--max-samples must be at least 1")
    preflight(Inputs(checkpoint=args.checkpoint, target=args.target, samples=args.samples),
              Door(what="drift", fit=False))
    if args.states:
        from helpers.io.inputs import input_path

        input_path(args.states, "served states folder", kind="folder", flag="--states")
    drafting = _options.drafting_from(args, "drafted", positions=5)
    r = run_drift(args.checkpoint, args.samples, drafting, target=args.target, states=args.states,
                  engine=args.engine, embedding=args.draft_embedding, out=args.out,
                  max_samples=args.max_samples, device=args.device, progress=_options.show_progress(args))
    print(jsontext.dumps(r.to_dict(), indent=2) if args.json else r.report())
    return 1 if r.check.drifted else 0
