"""Speculative decoding without an engine: a `transformers` target verifies the kit's EAGLE-3 draft,
token by token, in plain PyTorch - the ground truth the closed form, the Monte Carlo model and the
replay approximate (docs/speculative-decoding.md).

One round, with n tokens in the target's KV cache and the root (the last generated token) not yet:

1. the draft proposes a chain or a tree from its cached state (`helpers.model.drafter.Drafter`);
2. ONE target forward over [root, drafted nodes] with the cache (positions n + depth; for a tree a
   4-D attention mask lets each node see the context, its ancestors and itself), recording the aux
   hidden states (`HiddenStateCapture`);
3. verification walks from the root: greedy (temperature 0) accepts a child equal to the target's
   argmax; sampling applies the engine's acceptance rule child by child
   (`helpers.engines.acceptance_rules`, chosen by `SpecSettings.rule`: the --engine's default, or
   --acceptance-rule): with a sampled draft accept c with min(1, p(c)/q(c)), else p <- normalised
   max(p - q, 0), q being the draft distribution mapped to target ids through the reading; with an
   argmax draft (vLLM's default, SGLang, llama.cpp's EAGLE-3) q is a point mass, so c is accepted
   with probability p(c) (llama.cpp: the target samples and c must match; SGLang: its thresholds);
   the walk's last node gives the correction (a rejected depth) or bonus token (a leaf reached)
   from its target distribution;
4. the cache keeps the context, the root and the accepted nodes' rows (rejected rows are dropped,
   nothing is recomputed: one target forward per round), and the draft extends its own cache over
   the same positions with their aux states.

The target's cache, the verify masks (per attention type: sliding-window layers see only their
window) and the row cuts are `helpers.speculate.target_cache`; a target the loop cannot run is
refused by `helpers.model.target.speculation_refusal`.

Accept length = accepted drafted tokens + 1 (the correction/bonus), as engines count, of the tokens
a verify step EMITS: a step cut by `max_new_tokens` or EOS counts only the tokens it emitted (its
last emitted token stands in for the bonus), so the mean is what SGLang's decode log counts: tokens
emitted by verify steps / verify steps, the prefill's first token not included (`SpecRun.mean`).
`SpecRun` keeps raw sums (so runs over shards of the prompts add up with `SpecRun.merge`) and
derives means, standard error, histogram and per-position acceptance from them.
"""
from __future__ import annotations

import os
import time

import torch

from helpers.core.errors import BadInputError
from helpers.io.chat import prompt_ids, uses_template
from helpers.measure.predict import cpu_threads
from helpers.model.drafter import Drafter
from helpers.model.target import HiddenStateCapture, Target, speculation_refusal
from helpers.speculate.result import PromptRun, SpecRun, SpecSettings
from helpers.speculate.target_cache import TargetCache
from helpers.speculate.verify import _eos_ids, chain_expectation, verify


# -- the loop -------------------------------------------------------------------------------------
@torch.inference_mode()
def speculate_prompt(target: Target, draft, ids: list[int], settings: SpecSettings, run: SpecRun, *,
                     layers: list[int], index: int = 0, generator=None, on_round=None) -> PromptRun:
    """Generate for one prompt (token ids), adding its counts to `run`; `layers`: the target layers
    whose input feeds the draft (`Target.draft_layers`)."""
    d = settings.drafting
    steps, topk, n_tokens = d.steps, d.topk, d.num_draft_tokens
    T = float(settings.temperature)
    rule = settings.rule
    sample_chain = T > 0 and topk == 1 and n_tokens == steps + 1 and rule.samples_draft
    dev = target.input_device
    eos = _eos_ids(target)
    out = PromptRun(index, list(ids))
    drafter = Drafter(draft, settings.reading)
    model = target.model
    tc = TargetCache(model)
    t_start = time.perf_counter()
    t_target = 0.0

    def forward(x, **kw):
        nonlocal t_target
        t0 = time.perf_counter()
        logits = model(input_ids=x, use_cache=True, **{tc.argument: tc.cache}, **kw).logits[0]
        t_target += time.perf_counter() - t0
        return logits

    def emit(tok, kind, pos=-1):
        out.output_ids.append(int(tok)), out.kinds.append(kind), out.draft_pos.append(pos)
        return len(out.output_ids) >= settings.max_new_tokens or int(tok) in eos

    with HiddenStateCapture(target, layers) as cap:
        x = torch.tensor([ids], device=dev)
        logits = forward(x)
        run.target_forwards += 1
        run.target_tokens_fed += len(ids)
        last = logits[-1].float()
        first = int(last.argmax()) if T <= 0 else int(torch.multinomial(
            torch.softmax(last / T, -1), 1, generator=generator))
        drafter.extend(cap.aux(), torch.tensor([ids[1:] + [first]], device=dev))
        done = emit(first, "target")
        root, n = first, len(ids)
        while not done:
            prop = drafter.propose(root, steps, topk, n_tokens, sample=sample_chain, temperature=T or 1.0,
                                   generator=generator, draft_top_k=rule.draft_top_k)
            feed = torch.tensor([[t if t >= 0 else 0 for t in prop.tokens]], device=dev)
            depth = torch.tensor([prop.depth], device=dev)
            kw = {"position_ids": n + depth, "cache_position": torch.arange(n, n + prop.size, device=dev)}
            chain = all(prop.parent[i] == i - 1 for i in range(1, prop.size))
            if not chain:
                kw["attention_mask"] = tc.tree_masks(prop, n, model.dtype, dev)
            cap.clear()
            logits = forward(feed, **kw)
            aux = cap.aux()
            run.target_forwards += 1
            run.target_tokens_fed += prop.size
            path, nxt, how = verify(prop, logits, T, drafter, generator, rule)
            tc.keep(n, [0] + path, chain)
            rows = torch.tensor([0] + path, device=aux.device)
            accepted = [prop.tokens[c] for c in path]
            drafter.extend(aux[:, rows], torch.tensor([accepted + [nxt]], device=dev))
            before = len(out.output_ids)
            remaining = settings.max_new_tokens - before
            for j, tok in enumerate(accepted):
                if emit(tok, "draft", j):
                    done = True
                    break
            if not done:
                done = emit(nxt, how)
            emitted = len(out.output_ids) - before  # len(path) + 1 unless max_new_tokens / EOS cut it
            run.record_step(out, remaining, emitted)
            if run.expected_per_position is not None and chain:
                exact = chain_expectation(prop, logits, T, rule)
                m = min(len(exact), remaining - 1)  # positions this step could emit (EOS not foreseen)
                run.expected_per_position[:m] += exact[:m]
            if emitted < len(path) + 1:
                out.cut_from = len(path) + 1
            n += 1 + len(path)
            root = nxt
            if on_round is not None:
                on_round(out)
    run.draft_forwards += drafter.forwards
    run.batched_forwards["target"] += 1 + len(out.accept_lengths)
    run.batched_forwards["draft"] += drafter.forwards
    run.seconds["target"] += t_target
    run.seconds["draft"] += drafter.seconds
    run.seconds["total"] += time.perf_counter() - t_start
    if target.tokenizer is not None:
        out.text = target.tokenizer.decode(out.output_ids)
        out.pieces = [target.tokenizer.decode([t]) for t in out.output_ids]
    return out


def batch_refusal(target: Target, settings: SpecSettings) -> str | None:
    """Why `speculate` runs these settings one prompt at a time although batch_size > 1 (None: batched)."""
    if settings.batch_size <= 1:
        return "batch size 1"
    from transformers import DynamicCache

    if not hasattr(DynamicCache(), "layers"):
        return "the batched cache needs transformers >= 4.56"
    return None


def speculate(target: Target, draft, records, settings: SpecSettings, *, progress: bool = False,
              on_round=None, on_prompt=None) -> SpecRun:
    """Speculate on every prompt record (`helpers.io.prompts.Conversation`, or a list of token ids).

    `records` may be any iterable, e.g. one process's shard of a prompt file; runs over shards
    add up with `SpecRun.merge`. Chains and trees are verified `settings.batch_size` prompts at a
    time (`helpers.speculate.batched`: the same greedy tokens and counts).
    """
    why = speculation_refusal(target.config, target.model)
    if why:
        raise BadInputError(target.path, f"cannot be a speculate target: {why}")
    run = SpecRun.empty(settings)
    layers = target.draft_layers(draft, settings.engine)
    template = uses_template(target.tokenizer, settings.chat_template) if target.tokenizer is not None else False
    gen = torch.Generator(device=target.input_device)
    from tqdm.auto import tqdm

    if batch_refusal(target, settings) is None:
        return _speculate_batched(target, draft, records, settings, run, layers, template, progress=progress,
                                  on_round=on_round, on_prompt=on_prompt)
    with cpu_threads(target.model):  # a small model on a busy CPU: one thread (see predict.cpu_threads)
        for k, rec in enumerate(tqdm(records, desc=f"speculate ({settings.reading})", unit="prompt",
                                     disable=not progress)):
            if isinstance(rec, (list, tuple)):
                ids, index = [int(t) for t in rec], k
            else:
                ids, index = prompt_ids(target.tokenizer, rec.prompt_messages(), template), rec.index
            gen.manual_seed(int(settings.seed) * 1_000_003 + index)  # per prompt: the same tokens however prompts are split
            pr = speculate_prompt(target, draft, ids, settings, run, index=index, layers=layers, generator=gen,
                                  on_round=on_round)
            run.prompts.append(pr)
            if on_prompt is not None:
                on_prompt(pr)
    return run


def _speculate_batched(target: Target, draft, records, settings: SpecSettings, run: SpecRun, layers, template, *,
                       progress=False, on_round=None, on_prompt=None) -> SpecRun:
    """`speculate` through `helpers.speculate.batched`: records tokenized first, one
    generator per prompt seeded as one at a time."""
    from tqdm.auto import tqdm

    from helpers.speculate.batched import speculate_batched

    items = []
    for k, rec in enumerate(records):
        if isinstance(rec, (list, tuple)):
            items.append(([int(t) for t in rec], k))
        else:
            items.append((prompt_ids(target.tokenizer, rec.prompt_messages(), template), rec.index))
    gens = []
    for _, index in items:
        g = torch.Generator(device=target.input_device)
        g.manual_seed(int(settings.seed) * 1_000_003 + index)  # per prompt: the same tokens however prompts are batched
        gens.append(g)
    bar = tqdm(total=len(items), desc=f"speculate ({settings.reading})", unit="prompt", disable=not progress)

    def finished(pr):
        bar.update(1)
        if on_prompt is not None:
            on_prompt(pr)

    with cpu_threads(target.model), bar:
        run.prompts.extend(speculate_batched(target, draft, items, settings, run, layers=layers, generators=gens,
                                             batch_size=settings.batch_size, on_round=on_round, on_prompt=finished))
    return run


def speculate_readings(target: Target, draft, records, settings: SpecSettings, readings, **kw) -> dict[str, SpecRun]:
    """The same prompts and settings under each reading of d2t: {reading: SpecRun}."""
    from dataclasses import replace

    records = list(records)
    return {r: speculate(target, draft, records, replace(settings, reading=r), **kw) for r in readings}


def result_json(runs: dict[str, SpecRun], *, target: str, checkpoint: str, prompts: str | None,
                embed_from: str | None = None, borrowed: str | None = None) -> dict:
    """The command's JSON: inputs, then one entry per reading, then the embedding the draft ran with
    (`borrowed`: the target's, where the draft has none; else `embed_from`, --embed-from)."""
    return {"checkpoint": os.fspath(checkpoint), "target": os.fspath(target),
            "prompts": os.fspath(prompts) if prompts else None,
            "readings": {r: run.to_dict() for r, run in runs.items()},
            "embed_from": {"path": borrowed or embed_from,
                           "why": "the draft has no embed_tokens: the target's, as the engines do" if borrowed
                           else "--embed-from" if embed_from else None}}


def _fmt(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def result_text(out: dict) -> str:
    """The command's text: per reading the accept length, its exact expectation, per position, and as
    the engine counts it; the definition; the first prompt's text."""
    lines = [f"speculate: {out['checkpoint']} with target {out['target']} on {out['prompts']}"]
    for r, d in out["readings"].items():
        s = d["settings"]
        shape = (f"chain of {s['steps']}" if s["drafting"] == "chain"
                 else f"tree steps {s['steps']} topk {s['topk']} draft tokens {s['draft_tokens']}")
        lines.append(f"  {r:8s} accept length {_fmt(d['mean_accept_length'])} ± {_fmt(d['stderr'])} over "
                     f"{d['verify_steps']} verify steps ({shape}, temperature {s['temperature']}, "
                     f"rule {d.get('acceptance_rule')}); target forwards/token {_fmt(d['target_forwards_per_token'])}")
        if d.get("expected_accept_length") is not None:
            lines.append(f"           exact expectation (the rule's closed form on the contexts met): accept length "
                         f"{_fmt(d['expected_accept_length'])}; per position "
                         + " ".join(_fmt(x, 2) for x in d["expected_per_position_unconditional"]))
        lines.append("           per position: unconditional " +
                     " ".join(_fmt(x, 2) for x in d["per_position_unconditional"]) + " | conditional " +
                     " ".join(_fmt(x, 2) for x in d["per_position_conditional"]))
        ec = d.get("engine_counts")
        if ec and ec.get("rule", "loop") != "loop":
            lines.append(f"           as {ec['engine_name']} counts: accept length {_fmt(ec['accept_length'])} = 1 + "
                         f"{ec['accepted']} accepted / {ec['drafts']} drafts ({ec['draft_tokens']} draft tokens; per position "
                         + " ".join(str(x) for x in ec["accepted_per_position"]) + ")")
    lines.append(f"  ({next(iter(out['readings'].values()))['accept_length_definition']})")
    first = next(iter(out["readings"].values()))["prompts"]
    if first:
        lines.append(f"  prompt {first[0]['index']}: {first[0]['text'][:120]!r}")
    return "\n".join(lines)


@torch.inference_mode()
def plain_decode_tps(target: Target, prompts: list[list[int]], max_new_tokens: int) -> float:
    """Tokens/s of the target decoding greedily on its own (transformers' generate, KV cache, batch 1):
    the baseline a speculative run on the same machine is compared with."""
    total, seconds = 0, 0.0
    dev = target.input_device
    with cpu_threads(target.model):
        for ids in prompts:
            x = torch.tensor([ids], device=dev)
            t0 = time.perf_counter()
            out = target.model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                                        max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                                        temperature=None, top_p=None, top_k=None, pad_token_id=0)
            seconds += time.perf_counter() - t0
            total += out.shape[1] - x.shape[1]
    return total / seconds if seconds else float("nan")
