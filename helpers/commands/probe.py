"""`probe URL [--target DIR [--checkpoint DRAFT]]`: measure a running speculative-decoding server."""
from __future__ import annotations

import sys
from pathlib import Path

from helpers.commands import _options
from helpers.core import jsontext
from helpers.engines.registry import engine_at
from helpers.core.errors import BadInputError
from helpers.core.paths import bundled_samples

HELP = ("measure a running vLLM / SGLang / llama.cpp speculative-decoding server with your prompts, and compare it "
        "with the checkpoint")
DESCRIPTION = """\
Sends your prompts to a running OpenAI-compatible speculative-decoding server, one request at a
time, greedy (temperature 0) or sampled at --temperature T (sent in every request; --seed S seeds
request i with S + i; llama.cpp also gets top_k 0, top_p 1, min_p 0 so its target samples plain
softmax(logits / T), and its answers' generation_settings say what it applied), and measures the
accept length it achieved on them. JSON temperature, temperature_source, seed, acceptance_rule (the
rule the engine accepts by at that temperature: helpers/engines/acceptance_rules.py; 'greedy' at 0).

The engine's own defect: a sampled run whose acceptance stops at position 0 (per position
[x, 0, 0, ...]), or accepts nothing where the engine-free loop at the same temperature accepts, is
the CPU sampler defect of vLLM's CPU build (helpers/engines/defects.py: the releases, the root cause
and the one-function fix); the conclusion names the engine's sampler, not the draft or its wiring (JSON
engine_defect {key, culprit, strength, evidence, caveats, conclusion, defect}).

What the server is: GET /v1/models (the served model: --model, default the first listed),
/metrics (vLLM vllm:spec_decode_* counters, SGLang sglang:*, llama.cpp llamacpp:spec_decode_*),
SGLang /get_server_info (drafting settings), llama.cpp /props (llama-server). --api-key KEY is
sent as a bearer token on every call (llama-server started with --api-key asks it everywhere but
/health, /metrics included). Drafting settings: SGLang's server info; vLLM's num_spec_tokens in the answers, else
the shape flags as the engines spell them (--num-speculative-tokens K, vLLM's chain; or SGLang's
--speculative-num-steps S --speculative-eagle-topk T --speculative-num-draft-tokens N, the root
counted; flags that disagree: one line, exit 2), else a start-up log (--log FILE), else the
positions /metrics counts. JSON drafting{..., sglang{...}, vllm{num_speculative_tokens} or null}.

What is sent: with --target DIR each prompt is rendered with the target's tokenizer and chat
template exactly as `speculate` does (--chat-template) and sent as token ids: vLLM
/v1/completions ("prompt": [ids], "return_token_ids": true), SGLang /generate ("input_ids"),
llama.cpp /completion ("prompt": [ids], "return_tokens": true, "cache_prompt": false).
Without --target: /v1/chat/completions with the prompt's messages (no token check then).

Accept length: per request where the engine reports it (vLLM {per_request}+ with
--per-request-spec-decode-metrics summary: 1 + accepted / verify steps; SGLang meta_info:
completion_tokens / spec_verify_ct), pooled over the requests, with a standard error over
requests (ratio estimator); else /metrics scraped before and after the run and differenced
(1 + accepted / drafts; per position accepted at j / drafts). With both, both are printed and
whether they agree (they do exactly unless the server had other traffic). llama.cpp: its answers'
timings carry draft tokens and accepted ones (draft_n, draft_n_accepted) but no verify steps, so
the accept length is its counters' 1 + accepted / drafts over the run (drafts: verify steps that
carried a draft), the server's own figure exactly; the answers' sums are checked against the
counters' draft tokens and accepted tokens (agreement; a difference is a finding, never averaged).

--target DIR: the target decodes each prompt greedily on its own and the served tokens are compared
with it: per prompt identical, or the first differing position, a near tie or not (a lossy verify,
a finding). --checkpoint DRAFT as well: the kit's engine-free loop (`speculate`: a chain of the
server's num_spec_tokens or SGLang's tree, reading offset, --engine's aux-layer convention, default
the server's engine) runs on the same token ids; served and engine-free accept lengths are compared
prompt by prompt (mean paired difference and its standard error), and `reproduce` ranks the
emulated wirings against the served number. Conclusion: "the served draft behaves as the
checkpoint does" (agree within 0.05 or 2 standard errors), "the served draft behaves like WIRING",
or "neither". Give --dtype as the server runs (bfloat16 for a bf16 server).

Forced acceptance: when the server reports a benchmark setting that presets acceptance (vLLM's
/server_info, started with VLLM_SERVER_DEV_MODE=1: rejection_sample_method "synthetic"), or the
start-up log (--log FILE) or --launch-command TEXT (the command the server was started with,
environment assignments included: SGLang's SGLANG_SIMULATE_ACC_LEN and TensorRT-LLM's
TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS are environment variables no endpoint reports; ATOM
--spec-decode-acceptance-length) shows one, no request is sent: one line names the setting and
where it was seen, no accept length and no conclusion (--json: url, engine, model,
forced_acceptance {setting, engine, means, where, line}, speculative_algorithm, conclusion null);
exit 0.

Algorithm: an EAGLE-3 draft served with the EAGLE (1/2) algorithm (SGLang /get_server_info
speculative_algorithm 'EAGLE', vLLM speculative_config method 'eagle', or the same in --log /
--launch-command) is the doctor's eagle3-as-eagle finding: with --checkpoint the doctor's own
check decides (the draft's fc width), else the draft path or class the server names (eagle3).

Exit 2 with one line naming the URL: nothing answers (connection refused), no answer within
--timeout SECONDS (every call: connect and between reads, default 30), not OpenAI-compatible (no
/v1/models and no /generate), not speculating (no per-request figures and no spec_decode
counters, or counters that did not move).

JSON (--json, also written to -o FILE): url, engine, model, endpoint, max_new_tokens, drafting{shape,
steps, topk, num_draft_tokens, source}, prompts_source{path, bundled_default, requests},
requests[{index, prompt_tokens, output_ids, text, completion_tokens, finish_reason, accept_length,
verify_steps, accepted, drafted, histogram}], accept_length, stderr, source (per-request or
metrics), accept_length_definition, stderr_method, metrics_accept_length, counters, agreement
(llama.cpp: per_request {draft_tokens, accepted} against metrics {drafts, draft_tokens, accepted}),
per_position, per_position_conditional, target_check, engine_free, reproduce, conclusion,
findings, notes, seconds, forced_acceptance (null), speculative_algorithm {algorithm, draft,
eagle3}, serving_findings [{code, severity, message, fix, algorithm}].

--repeat R (1 to 50, default 1; bounded: R x the prompts requests in all): send the prompt set R
times in a row and report the accept length of each repetition from the /metrics counters
differenced over it (else its per-request figures), with a standard error from its drafts: does it
decay as the server's prefix cache fills (vllm#41838)? The first repetition is the baseline; a later
one at least 0.05 AND 3 standard errors below it is flagged DECAYED. The comparison with the target
and the checkpoint uses the first repetition. JSON repetitions {intervals, baselines, decayed, rule}.""".replace(
    "{per_request}", engine_at("vllm").where("reply.spec_metrics", "answers").since)  # the engine table's release


def add_arguments(p) -> None:
    p.add_argument("url", metavar="URL", help="the server's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="the server's API key, sent as 'Authorization: Bearer KEY' (default: $D2T_API_KEY, else none)")
    p.add_argument("--model", default=None, metavar="NAME",
                   help="the served model name (default: the first id GET /v1/models lists)")
    p.add_argument("--prompts", metavar="FILE", default=None,
                   help="JSONL prompt file (default: the bundled data_samples/prompts.jsonl)")
    p.add_argument("--max-prompts", type=int, default=16, metavar="N",
                   help="send at most the first N prompt records (default 16)")
    p.add_argument("--max-new-tokens", type=int, default=32, metavar="N", help="tokens to generate per prompt (default 32)")
    p.add_argument("--repeat", type=int, default=1, metavar="R",
                   help="send the prompt set R times in a row (1 to 50) and report the accept length per repetition: "
                        "does it decay?")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T",
                   help="sample every request at T (default 0: greedy); the engine-free loop then runs at T under the "
                        "engine's acceptance rule, and the engine's own sampled-decoding defect is looked for")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="with --temperature: seed request i with S + i (and the engine-free loop with S)")
    p.add_argument("--target", metavar="DIR", default=None,
                   help="the served target's Hugging Face folder: send token ids and check the served tokens")
    p.add_argument("--checkpoint", metavar="DRAFT", default=None,
                   help="the served draft's checkpoint (needs --target): compare with the engine-free loop")
    p.add_argument("--log", metavar="FILE", default=None,
                   help="the server's start-up log (its drafting settings, algorithm, forced acceptance)")
    p.add_argument("--launch-command", metavar="TEXT", default=None,
                   help="the command the server was started with (env assignments included): its algorithm, draft "
                        "and forced acceptance")
    p.add_argument("--engine", type=_options.aux_engine_value, default=None, metavar="ENGINE[==VERSION]",
                   help=f"whose aux-layer convention the engine-free loop uses: {_options.aux_names()} (default: the server's)")
    from helpers.speculate.result import BATCH_HELP, DEFAULT_BATCH_SIZE

    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                   help=f"with --checkpoint: {BATCH_HELP}")
    _options.drafting(p, "refuse", "drafting shape, when the server does not report it (the engines' own flags)",
                      aliases=False)
    _options.chat_template(p)
    _options.device_dtype(p)
    _options.embed_from(p)
    _options.json_flag(p)
    _options.out(p, "also write the JSON object to this file", metavar="FILE")


def run(args) -> int:
    from helpers.core.outputs import output_file

    for flag, value in (("--max-prompts", args.max_prompts), ("--max-new-tokens", args.max_new_tokens),
                        ("--num-speculative-tokens", args.num_speculative_tokens), ("--batch-size", args.batch_size)):
        if value is not None and value < 1:
            raise BadInputError(None, f"{flag} must be at least 1, got {value}")
    if not 1 <= args.repeat <= MAX_REPEAT:
        raise BadInputError(None, f"--repeat must be 1 to {MAX_REPEAT}, got {args.repeat}")
    if not (args.temperature >= 0 and args.temperature < float("inf")):
        raise BadInputError(None, f"--temperature must be a number >= 0, got {args.temperature}")
    # what the command needs of the shared options, read together: the progress setting, the shape flags
    progress = _options.show_progress(args)
    given = _options.drafting_from(args, "refuse")  # the shape flags, read once; None when none given
    if args.checkpoint and not args.target:
        raise BadInputError(None, "--checkpoint needs --target DIR: the engine-free loop runs the draft with its target")
    out = output_file(args.out, "probe JSON") if args.out else None
    prompts = Path(args.prompts) if args.prompts else bundled_samples("--prompts", "prompts.jsonl")
    from helpers.model.preflight import Door, Inputs, preflight

    # the door: the paths (the log's too), the prompt records (read once, kept), and with --target the target's
    # config, with --checkpoint the draft's weights and its fit, before anything loads; the later stages take them
    inputs = preflight(Inputs(checkpoint=args.checkpoint, target=args.target, prompts=str(prompts),
                              max_prompts=args.max_prompts, embed_from=args.embed_from, log=args.log),
                       Door(what="probe", need_weights=bool(args.checkpoint)))
    import functools
    import os

    from helpers.doctor.served_algorithm import algorithm_findings
    from helpers.serving.probe_run import ProbeInputs, probe

    probed = probe(ProbeInputs(
        url=args.url, prompts=prompts, bundled=args.prompts is None, inputs=inputs,
        max_new_tokens=args.max_new_tokens, api_key=args.api_key or os.environ.get("D2T_API_KEY") or None,
        model=args.model, repeat=args.repeat, temperature=args.temperature, seed=args.seed, target=args.target,
        checkpoint=args.checkpoint, log=args.log, launch_command=args.launch_command,
        engine=args.engine, batch_size=args.batch_size, given=given, chat_template=args.chat_template,
        device=args.device, dtype=args.dtype, embed_from=args.embed_from, progress=progress,
        judge=functools.partial(algorithm_findings, checkpoint=inputs.opened)))  # the draft the door opened
    obj = probed.to_dict()
    if out is not None:
        try:
            out.write_text(jsontext.dumps(obj, indent=2) + "\n")
        except OSError as e:
            raise BadInputError(out, f"cannot write: {e.strerror or e}") from None
    print(jsontext.dumps(obj, indent=2) if args.json else probed.report(), file=sys.stdout)
    return 0


MAX_REPEAT = 50
