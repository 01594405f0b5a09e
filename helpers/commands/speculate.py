"""`speculate CHECKPOINT --target TARGET --prompts FILE`: real speculative decoding, no engine."""
from __future__ import annotations

import sys
from pathlib import Path

from helpers.commands import _options
from helpers.core import jsontext
from helpers.core.errors import BadInputError
from helpers.core.paths import bundled_samples

HELP = "run speculative decoding with a Hugging Face target and the draft, per reading of d2t"
DESCRIPTION = """\
Speculative decoding in plain PyTorch, as EAGLE-3 engines run it: the draft proposes from the
target's aux hidden states of the accepted tokens (a chain: --num-speculative-tokens K, vLLM's,
or --draft-tokens K alone, the older meaning; SGLang's tree: --speculative-num-steps S
--speculative-eagle-topk T --speculative-num-draft-tokens N, N counting the root, aliases --steps,
--topk, --draft-tokens; default a chain of 5, the one default of every speculate front end: reproduce,
the dashboard, notebook 07; a shape SGLang does not run, e.g. --steps 0 or
--steps 3 --topk 1 --draft-tokens 8, or flags that disagree, are refused in one line), the target verifies every proposed token
in one forward with its KV cache (a tree attention mask for trees) and keeps only the accepted
tokens' cache rows. Temperature 0 verifies greedily (the output is token for token the target's
own greedy output); temperature > 0 uses the rejection rule (the output follows the target's own
sampling), by the acceptance rule of the --engine named (vLLM's default and SGLang and llama.cpp's
EAGLE-3 drafter: the draft's argmax, accepted with probability p(token); textbook: drafts sampled
from q, accepted with min(1, p/q); --acceptance-rule picks one; docs/sampling.md). Each reading of d2t (offset, absolute, none) is run on the same prompts, so a misread
table shows as accept length ~1.0 while the text stays the same.

Targets: decoder-only causal LMs whose layers are full or sliding-window attention (Llama, Qwen,
DeepSeek-V3, Mistral, GPT-OSS, Gemma 2/3, ...); sliding layers see only their window in the verify
step too. Encoder-decoders, models with a recurrent state (Mamba, RWKV, Jamba, Qwen3-Next, ...) and
other layer types are refused from config.json, before loading, with one line (exit 2).

Measured, per reading: accept length per verify step (the correction/bonus token included, as
engines count; a step cut by --max-new-tokens or EOS counts only the tokens it emitted, so the
mean is tokens emitted by verify steps / verify steps, as SGLang's decode log counts it, the
prefill's first token not included), its mean and standard error, the histogram, per-position acceptance
(unconditional = accepted at position j / verify steps, vLLM's definition; conditional = / steps
that reached j), target forwards (prefills + verify steps) per generated token.

--target and --prompts default to the bundled tiny target and prompts (data_samples/, looked for
in $D2T_LAB_SAMPLES, ./data_samples, then the checkout; a wheel does not ship them), so
  d2t-lab speculate data_samples/tiny_draft_sglang
runs as is; --readings (or --reading) limits the run: offset, absolute, none, comma-separated, or all.

Under torchrun (torchrun --nproc-per-node N -m helpers speculate ...) prompt i is rank i % N's, and
rank 0 merges the runs (sums of counts) and prints. With --temperature > 0 each prompt's sampling
is seeded from --seed and its own index, so the tokens do not depend on how prompts are split.

JSON (--json): checkpoint, target, prompts, readings{R: settings{reading, drafting, steps, topk,
draft_tokens, num_draft_tokens, temperature, max_new_tokens, seed, engine, chat_template,
sglang{speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens},
vllm{num_speculative_tokens} (null for a tree)},
mean_accept_length, stderr, accept_length_definition, verify_steps, accepted_tokens,
generated_tokens, histogram, accepted_per_position,
per_position_unconditional, per_position_conditional, target_forwards, target_tokens_fed,
target_forwards_per_token, draft_forwards, seconds, loop_overhead_fraction,
engine_counts{engine, engine_name, rule, definition, drafts, draft_tokens, accepted, accepted_per_position,
accept_length, acceptance_rule, temperature} (the same steps as --engine counts them: llama.cpp drafts at most min(K, tokens
left - 1) and counts no step without a draft; null for a tree),
acceptance_rule ('greedy' at temperature 0, else the rule's name), temperature,
expected_per_position_unconditional, expected_accept_length (the rule's exact expectation on the
contexts met: argmax-drafted chains under sampling, else null),
prompts[{index, prompt_tokens, output_ids, text, kinds, draft_pos, accept_lengths, cut_from
(the accept length the verifier found in a last step the cut shortened, else null),
mean_accept_length}]}.
Exit 0 when done; 2 with one line on unusable input."""


def add_arguments(p) -> None:
    _options.checkpoint(p, "draft checkpoint folder")
    p.add_argument("--target", metavar="DIR", default=None,
                   help="Hugging Face target folder (default: the bundled data_samples/tiny_target)")
    p.add_argument("--prompts", metavar="FILE", default=None,
                   help="JSONL prompt file (default: the bundled data_samples/prompts.jsonl)")
    _options.readings(p)
    _options.drafting(p, "drafted")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); > 0: speculative sampling")
    from helpers.engines.acceptance_rules import ENGINE_DEFAULT_RULE, LOOP_RULES

    p.add_argument("--acceptance-rule", choices=LOOP_RULES, default=None, metavar="RULE",
                   help="how drafted tokens are accepted at --temperature > 0 (default: the --engine's own: "
                        + ", ".join(f"{e} {r}" for e, r in ENGINE_DEFAULT_RULE.items() if e != "textbook")
                        + f"); one of {', '.join(LOOP_RULES)}")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate per prompt (default 64)")
    p.add_argument("--max-prompts", type=int, default=None, help="use at most the first N prompt records")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    from helpers.speculate.result import BATCH_HELP, DEFAULT_BATCH_SIZE

    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                   help=BATCH_HELP)
    _options.aux_engine(p, f"whose aux-layer convention feeds the draft: {_options.aux_names()}, optionally ==VERSION")
    _options.chat_template(p)
    _options.device_dtype(p)
    _options.embed_from(p)
    _options.dist_timeout(p)
    _options.json_flag(p)


def run(args) -> int:
    from helpers.core.devices import parse_dtype

    try:
        dtype = parse_dtype(args.dtype)
    except ValueError as e:
        raise BadInputError(None, f"--dtype: {e}") from None
    from helpers.model.preflight import Door, Inputs, preflight

    target_dir = Path(args.target) if args.target else bundled_samples("--target", "tiny_target")
    prompts = Path(args.prompts) if args.prompts else bundled_samples("--prompts", "prompts.jsonl")
    readings = _options.parse_readings(args.readings)
    drafting = _options.drafting_from(args, "drafted")  # flags first: checked before any file is touched
    from helpers.speculate.builder import build_run, spec_settings

    # the one builder every front end uses: no shape given is its default (a chain of 5), the engine honoured
    knobs = dict(temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=args.seed,
                 chat_template=args.chat_template, acceptance_rule=args.acceptance_rule, batch_size=args.batch_size)
    spec_settings(drafting, engine=args.engine, **knobs)  # checked before any file is touched
    # the door: every path, the prompt records, the draft's weights and its fit, before the target loads
    checked = preflight(Inputs(checkpoint=args.checkpoint, target=str(target_dir), prompts=str(prompts),
                                  max_prompts=args.max_prompts, embed_from=args.embed_from, engine=args.engine),
                        Door(what="speculate", need_weights=True))
    import torch

    from helpers.core.distributed import finish, from_env, gather_to_main
    from helpers.model.target import check_speculation_config
    from helpers.speculate.loop import result_json, result_text, speculate_readings
    from helpers.speculate.result import SpecRun

    check_speculation_config(target_dir, checked.target_cfg)  # a family the loop cannot run: one line, before loading
    ranks = from_env(args.device, args.dist_timeout)  # under torchrun: prompt i is rank i % world's; runs merged on rank 0
    # the draft's files are opened once: load_pair passes the open Checkpoint on (fit, memory, load, aux ids)
    (target, draft), settings = build_run(checked.opened or args.checkpoint, target_dir, drafting, engine=args.engine,
                                          device=ranks.device(args.device), dtype=dtype, embed_from=args.embed_from,
                                          **knobs)
    release_note = target.release_note(draft, args.engine)  # the newest release's capture standing in
    if release_note and ranks.main:
        print(f"note: {release_note}", file=sys.stderr)
    borrowed = getattr(draft, "embed_borrowed_from", None)
    if borrowed and ranks.main:
        print(f"note: {args.checkpoint} has no embed_tokens; using the target's ({borrowed}), as the engines do",
              file=sys.stderr)
    if draft.d2t is None and args.readings.strip().lower() != "all" and set(readings) - {"none"}:
        raise BadInputError(args.checkpoint, f"has no d2t: --readings {args.readings} needs one (use none)")
    if draft.d2t is None:
        readings = ["none"]
    records = list(checked.records)  # read once, at the door: at least one
    from helpers.speculate.builder import check_prompt_positions

    check_prompt_positions(target, records, settings)  # the longest prompt + tokens fit the target's context
    mine = [rec for rec in records if ranks.takes(rec.index)]
    show = _options.show_progress(args) and ranks.main
    with torch.inference_mode():
        runs = speculate_readings(target, draft, mine, settings, readings, progress=show,
                                  on_round=_options.token_progress(len(mine), settings.max_new_tokens, len(readings))
                                  if show else None)
    shards = gather_to_main(runs, ranks)
    if ranks.main:
        runs = {r: SpecRun.merge([shard[r] for shard in shards]) for r in readings}
        out = result_json(runs, target=str(target_dir), checkpoint=args.checkpoint, prompts=str(prompts),
                          embed_from=args.embed_from, borrowed=borrowed)
        print(jsontext.dumps(out, indent=2) if args.json else result_text(out), file=sys.stdout)
    finish(ranks)
    return 0

