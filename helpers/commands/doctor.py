"""`doctor CHECKPOINT`: check a draft checkpoint against the engine it will be served with."""
from __future__ import annotations

from helpers.commands import _options
from helpers.core import jsontext

HELP = "check a draft checkpoint for the known EAGLE-3 deployment bugs (exit 1 on an error)"
DESCRIPTION = """\
Check an EAGLE-3 draft checkpoint for the bugs seen in real deployments, as the chosen engine
would load it: d2t missing / absolute / all-zero / arange, t2d disagreeing, vocab sizes that
disagree, layers.0.* vs midlayer.* keys (SGLang skips layers.0.* silently), missing lm_head or
embed_tokens, an fc that does not take 3 x the target hidden size, aux layers (with
--target-config: which target layers each engine captures) and NaN/Inf weights (read tensor by
tensor, in row chunks).

--target TARGET (the target's folder: config.json and, when there, its weights, of which only
embed_tokens is read) adds the target checks: vocab and hidden sizes, aux layer ids against its
layers, embed_tokens equal to the target's (or off by a constant factor such as Gemma's
sqrt(hidden)), and max_position_embeddings / RoPE shorter than the target's. --previous CKPT
(an earlier checkpoint of the same draft) adds the mapping-drift check (see d2t-lab diff); a
--previous draft built for another target vocabulary is refused (exit 2, one line naming both sizes).
--samples DIR (with --target: the draft's training samples, SpecForge's offline layout) adds the
target-drift check: the target is loaded and run on the samples' own token ids, and its hidden
states at the draft's aux layers compared with the stored ones (a quantized, rotated or re-released
target; d2t-lab drift predicts the acceptance it costs).
--algorithm eagle says the draft is served with the EAGLE (1/2) flag. Every path may be
hf://ORG/REPO[@REV][/SUBDIR] or an http(s):// URL (only headers and the tensors read are fetched).

Each finding has a code, a severity (error / warning / info), what is wrong and how to fix it.
Exit 0 when no error was found, 1 when one was, 2 when the input cannot be read."""


def add_arguments(p) -> None:
    _options.checkpoint(p, "draft checkpoint folder (or weights file)")
    _options.engine(p)
    _options.target_config(p)
    p.add_argument("--target", metavar="TARGET", default=None,
                   help="the target model's folder (config.json; embed_tokens read from its weights when present)")
    p.add_argument("--previous", metavar="CKPT", default=None,
                   help="an earlier checkpoint of this draft: check for mapping drift against it")
    p.add_argument("--samples", metavar="DIR", default=None,
                   help="with --target: the draft's training samples; check the target for drift against their states")
    p.add_argument("--algorithm", choices=("eagle", "eagle3"), default=None,
                   help="the speculative algorithm flag the draft is served with (default: not checked)")
    p.add_argument("--no-weights", action="store_true",
                   help="skip the NaN/Inf scan (the only check that reads every weight)")
    _options.json_flag(p, "print one JSON object: path, engine, counts and findings [{code, severity, message, fix}]")


def run(args) -> int:
    from helpers.doctor.diagnose import diagnose
    from helpers.doctor.findings import has_error
    from helpers.model.preflight import Door, Inputs, preflight

    # the door: every path exists and is what it should be, --target is a target and not a draft,
    # --target and --target-config not both (the fit itself is the doctor's to report, as findings)
    if args.samples and not args.target:
        from helpers.core.errors import BadInputError

        raise BadInputError(None, "--samples needs --target: the drift check runs the target on the samples' tokens")
    preflight(Inputs(checkpoint=args.checkpoint, target=args.target, target_config=args.target_config,
                        previous=args.previous, samples=args.samples), Door(what="doctor", target_is_model=False, fit=False))
    if args.previous:  # a draft of another target vocabulary is no earlier checkpoint of this one: refused, exit 2
        from helpers.doctor.diff import refuse_other_target

        refuse_other_target(args.previous, args.checkpoint)

    findings = diagnose(args.checkpoint, args.engine, args.target_config, check_weights=not args.no_weights,
                        progress=_options.show_progress(args), target=args.target, previous=args.previous,
                        algorithm=args.algorithm, samples=args.samples)
    print(jsontext.dumps(findings.to_dict(), indent=2) if args.json else findings.report())
    return 1 if has_error(findings) else 0
