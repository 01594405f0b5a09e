"""`capture TARGET --prompts FILE -o DIR`: hidden states from a Hugging Face target, SpecForge's layout."""
from __future__ import annotations

from helpers.commands import _options
from helpers.core import jsontext
from helpers.core.errors import BadInputError

HELP = "run a Hugging Face target over prompts and save the hidden states an EAGLE-3 draft reads"
DESCRIPTION = """\
Load TARGET (a Hugging Face causal-LM folder: config.json, weights, tokenizer) with transformers,
tokenize each record of --prompts (JSONL: {"prompt": ...}, {"messages": [...]} OpenAI chat, or
{"conversations": [...]} ShareGPT) with the tokenizer's chat template, and save for each record
the dict SpecForge's offline trainer reads: input_ids, loss_mask (1 exactly on assistant tokens),
hidden_state (the last hidden state, after the target's final norm) and aux_hidden_state (the
inputs of three decoder layers, concatenated), under OUT/rows_*/data_<i>.ckpt, plus a manifest
OUT/capture.json (target and config hash, tokenizer, prompt file hash, layers, settings).

Which layers: the draft's configured aux ids (--draft), --aux-layers, or the engines' default
(inputs of layers 2, L//2, L-3), mapped the way the engine does it: --engine sglang adds 1 to
configured ids (captures the input of layer id+1), --engine vllm uses them as given.

--regenerate: the assistant part is the target's own greedy continuation of the prompt (what an
engine verifies drafts against); without it each record's answer is teacher-forced.

Resumable: re-run the same command after an interruption; finished files are skipped, files are
written under a temporary name and renamed, a folder holding another capture is refused.
Under torchrun (torchrun --nproc-per-node N -m helpers capture ...) batch k goes to rank k % N,
every rank writes its own files into the shared OUT, rank 0 prints; the files are the same as a
single process writes.
TARGET, --prompts and -o are required (there are no defaults); with the bundled samples:
  d2t-lab capture data_samples/tiny_target --prompts data_samples/prompts.jsonl --regenerate -o captured/
Every input is checked before the target loads (prompt records each with a user turn, and an
answer unless --regenerate; the draft's fit; --aux-layers against the draft's fc width). A run
that failed before writing any sample never blocks the corrected re-run in the same folder.

JSON (--json): out, written, skipped, tokens, manifest{...}.
Exit 0 when done; 2 with one line on unusable input (a draft that does not fit the target included)."""
RESUME_HINT = "re-run the same command to resume (finished samples are kept)"


def add_arguments(p) -> None:
    p.add_argument("target", metavar="TARGET", help="Hugging Face model folder of the target")
    p.add_argument("--prompts", metavar="FILE", required=True, help="JSONL prompt file")
    _options.out(p, "output folder (created; an existing capture there is resumed)", required=True)
    p.add_argument("--draft", metavar="CKPT", default=None,
                   help="draft checkpoint: checked against the target (vocab, hidden size, embedding); its "
                        "config's aux layer ids are used")
    _options.aux_engine(p, f"whose aux-layer convention to reproduce: {_options.aux_names()}, optionally ==VERSION")
    p.add_argument("--aux-layers", metavar="A,B,C", default=None,
                   help="aux layer ids as a draft config states them (overrides the draft's)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="with --regenerate: tokens to generate (default 256)")
    p.add_argument("--regenerate", action="store_true",
                   help="let the target answer each prompt greedily instead of teacher-forcing the dataset's answer")
    _options.chat_template(p, "texts joined as they are")
    _options.device_dtype(p)
    p.add_argument("--batch-size", type=int, default=8, help="records per forward pass (default 8)")
    p.add_argument("--max-prompts", "--max-samples", dest="max_samples", type=int, default=None,
                   help="capture at most the first N prompt records (--max-samples: the older spelling)")
    _options.dist_timeout(p)
    _options.json_flag(p)


def parse_layers(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInputError(None, f"--aux-layers {text!r}: expected comma-separated integers, e.g. 1,3,4") from None


def run(args) -> int:
    from helpers.core.devices import parse_dtype
    from helpers.core.distributed import finish, from_env
    from helpers.core.outputs import output_dir
    from helpers.model.capture import CaptureSettings, capture
    from helpers.model.preflight import Door, Inputs, preflight
    from helpers.model.target import load_target

    try:
        parse_dtype(args.dtype)
    except ValueError as e:
        raise BadInputError(None, f"--dtype: {e}") from None
    layers = parse_layers(args.aux_layers)
    # the door: prompts, the draft's fit and the aux layers, all before the target loads
    preflight(Inputs(checkpoint=args.draft, target=args.target, prompts=args.prompts, max_prompts=args.max_samples,
                        aux_layers=layers, engine=args.engine),
              Door(what="capture", target_flag="TARGET", need_answer=not args.regenerate))
    output_dir(args.out, "capture folder", create=False)  # not a file, its parents creatable
    _outside(args.out, {"TARGET": args.target, "--draft": args.draft})
    ranks = from_env(args.device, args.dist_timeout)  # under torchrun: this rank, its share of the batches
    target = load_target(args.target, device=ranks.device(args.device), dtype=args.dtype)
    settings = CaptureSettings(engine=args.engine, aux_layers=layers, draft=args.draft, regenerate=args.regenerate,
                               max_new_tokens=args.max_new_tokens, chat_template=args.chat_template,
                               max_samples=args.max_samples)
    result = capture(target, args.prompts, args.out, settings, batch_size=args.batch_size,
                     progress=_options.show_progress(args), ranks=ranks)
    if ranks.main:
        print(jsontext.dumps(result.to_json(), indent=2) if args.json else result.report())
    finish(ranks)
    return 0


def _outside(out, inputs: dict) -> None:
    """-o must not lie inside (or be) the target's or the draft's folder, as report and fix refuse to
    write into their inputs: one line naming both (symlinks resolved)."""
    from pathlib import Path

    o = Path(out).absolute().resolve()
    for flag, given in inputs.items():
        if not given or "://" in str(given):
            continue
        p = Path(given).resolve()
        folder = p if p.is_dir() else p.parent
        if o == folder or folder in o.parents:
            raise BadInputError(out, f"is inside {flag} {given}: capture never writes into the model it reads; "
                                     "pass an -o folder outside it")
