"""What a speculative decoding run is set to do and what it counted (`helpers.speculate.loop` runs it).

`SpecSettings`: the reading of d2t, the drafting shape (`helpers.acceptance.drafting.Drafting`: a
chain of K drafted tokens, or SGLang's steps / topk / num_draft_tokens counting the root),
temperature, tokens per prompt, seed, aux-layer convention.
`SpecRun` keeps raw sums only - verify steps per accept length, verify steps that accepted each
drafted position, target forwards and tokens computed, seconds - so runs over shards of the
prompts (one per process) add up with `SpecRun.merge`; mean, standard error, histogram and
per-position acceptance (unconditional: / verify steps, vLLM's definition; conditional: / steps
that reached the position) derive from them. `PromptRun`: one prompt's ids, text and how each
generated token came.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from helpers.acceptance.chain import histogram_stderr
from helpers.acceptance.drafting import DEFAULT_DRAFTING, Drafting
from helpers.core.terms import check_reading
from helpers.engines.counting import EngineCounts
from helpers.engines.registry import DEFAULT_ENGINE


DEFINITION = ("accept length = tokens emitted by verify steps / verify steps (correction or bonus token counted; "
              "a step cut by --max-new-tokens or EOS counts only what it emitted; the prefill's first token is "
              "not a verify step's, as in SGLang's decode log; its meta_info completion_tokens / spec_verify_ct "
              "also counts that token); target forwards per token = (prefills + verify steps) / generated tokens")


DEFAULT_BATCH_SIZE = 16  # prompts verified together by the engine-free loop (chains and trees)
# the --batch-size help of every command that runs the loop (speculate, reproduce, probe, report)
BATCH_HELP = (f"prompts the engine-free loop verifies together, chains and trees (default {DEFAULT_BATCH_SIZE}; "
              "1: one at a time): greedy tokens and every count are the one-at-a-time ones (in bf16 a batched "
              "matmul may round a near-tie the other way), sampled tokens follow each prompt's own seed")


@dataclass
class SpecSettings:
    """How to speculate: the reading, the drafting shape (default a chain of 5), sampling, length.
    Front ends build them with `helpers.speculate.builder.spec_settings` (one default, the engine checked)."""

    reading: str = "offset"
    drafting: Drafting = DEFAULT_DRAFTING
    temperature: float = 0.0
    max_new_tokens: int = 64
    seed: int = 0
    engine: str = DEFAULT_ENGINE
    chat_template: str = "auto"
    # the acceptance rule under sampling (`helpers.engines.acceptance_rules`); None: the engine's default
    acceptance_rule: str | None = None
    # prompts the loop verifies together, chains and trees (`helpers.speculate.batched`; 1: one at
    # a time). Greedy tokens and every count are the one-at-a-time ones
    batch_size: int = DEFAULT_BATCH_SIZE

    def __post_init__(self):
        self.check()  # settings are checked when made (`replace` too): a run never starts on bad ones

    @property
    def is_chain(self) -> bool:
        return self.drafting.is_chain

    @property
    def rule(self):
        """The `AcceptanceRule` verification follows at temperature > 0: the named one, else the engine's."""
        from helpers.engines.acceptance_rules import rule_for_engine

        return rule_for_engine(self.engine, self.acceptance_rule)

    @property
    def rule_name(self) -> str:
        """What the accept lengths were measured under: 'greedy' at temperature 0 (every rule is then
        argmax-match), else the acceptance rule's name."""
        return "greedy" if self.temperature <= 0 else self.rule.name

    def check(self) -> SpecSettings:
        check_reading(self.reading)
        if not isinstance(self.drafting, Drafting):
            raise ValueError(f"drafting must be a Drafting, got {type(self.drafting).__name__}")
        self.drafting.check()
        if self.temperature < 0 or not math.isfinite(self.temperature):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.max_new_tokens < 1:
            raise ValueError("max new tokens must be at least 1")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch size must be an integer >= 1, got {self.batch_size!r}")
        from helpers.engines.acceptance_rules import LOOP_RULES

        if self.acceptance_rule is not None and self.acceptance_rule not in LOOP_RULES:
            raise ValueError(f"acceptance rule must be one of {', '.join(LOOP_RULES)}, got {self.acceptance_rule!r}")
        return self

    def to_dict(self) -> dict:
        """JSON: `draft_tokens` is K drafted tokens for a chain and num_draft_tokens (root counted)
        for a tree, as before; `num_draft_tokens` is always SGLang's count; `sglang` / `vllm` state the
        shape in both engines' terms (`Drafting.engine_flags`)."""
        d = self.drafting
        return {"reading": self.reading, "drafting": "chain" if d.is_chain else "tree", "steps": d.steps,
                "topk": d.topk, "draft_tokens": d.steps if d.is_chain else d.num_draft_tokens,
                "num_draft_tokens": d.num_draft_tokens, "temperature": self.temperature,
                "max_new_tokens": self.max_new_tokens, "seed": self.seed, "engine": self.engine,
                "chat_template": self.chat_template, "acceptance_rule": self.rule_name,
                "acceptance_rule_asked": self.acceptance_rule, "batch_size": self.batch_size, **d.engine_flags()}


@dataclass
class PromptRun:
    """One prompt's generation: ids, text and how every generated token came."""

    index: int
    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # "target" (prefill), "draft", "correction", "bonus"
    draft_pos: list[int] = field(default_factory=list)  # drafted position (0-based) of "draft" tokens, else -1
    accept_lengths: list[int] = field(default_factory=list)  # tokens each verify step emitted
    cut_from: int | None = None  # the last step cut by max_new_tokens / EOS: the accept length it verified
    text: str = ""
    pieces: list[str] = field(default_factory=list)  # each output token decoded on its own (token view)

    def to_dict(self) -> dict:
        return {"index": self.index, "prompt_tokens": len(self.prompt_ids), "output_ids": self.output_ids,
                "text": self.text, "kinds": self.kinds, "draft_pos": self.draft_pos,
                "accept_lengths": self.accept_lengths, "cut_from": self.cut_from, "pieces": self.pieces,
                "mean_accept_length": float(np.mean(self.accept_lengths)) if self.accept_lengths else None}


@dataclass
class SpecRun:
    """Raw sums of a speculation run (one reading) and the prompts' outputs; everything else derives."""

    settings: dict
    histogram_counts: np.ndarray  # [steps + 2]: verify steps with accept length L
    accepted_per_position: np.ndarray  # [steps]: verify steps that accepted drafted position j
    verify_steps: int = 0
    target_forwards: int = 0  # prefills + verify forwards, per prompt (as one at a time, however batched)
    target_tokens_fed: int = 0  # tokens the target computed (prompts + tree nodes): the cache is reused
    draft_forwards: int = 0
    seconds: dict = field(default_factory=lambda: {"total": 0.0, "target": 0.0, "draft": 0.0})
    prompts: list[PromptRun] = field(default_factory=list)
    # the same steps as the settings' engine counts them (chains only; None for a tree)
    engine_counts: EngineCounts | None = None
    # sum over verify steps of the exact P(drafted position j accepted | the step's context), where the
    # rule makes it a closed form (an argmax-drafted chain: prod_{i<=j} of the rule's per-token
    # acceptance, `helpers.engines.acceptance_rules.exact_chain_acceptance`); None otherwise
    expected_per_position: np.ndarray | None = None
    # forwards that actually ran: one batched forward verifies (or prefills, or drafts for) many prompts
    batched_forwards: dict = field(default_factory=lambda: {"target": 0, "draft": 0})

    @classmethod
    def empty(cls, settings: SpecSettings) -> SpecRun:
        steps = settings.drafting.steps
        counts = EngineCounts(settings.engine, steps) if settings.is_chain else None
        exact = (np.zeros(steps, np.float64) if settings.is_chain and settings.temperature > 0
                 and not settings.rule.samples_draft else None)
        return cls(settings.to_dict(), np.zeros(steps + 2, np.int64), np.zeros(steps, np.int64), engine_counts=counts,
                   expected_per_position=exact)

    def record_step(self, out: PromptRun, remaining: int, emitted: int) -> None:
        """One verify step of prompt `out` that emitted `emitted` tokens with `remaining` still to generate before
        it: the sums, the prompt's accept lengths, and the engine's own counting (the one-prompt and batched loops)."""
        self.verify_steps += 1
        self.histogram_counts[emitted] += 1
        self.accepted_per_position[: emitted - 1] += 1
        out.accept_lengths.append(emitted)
        if self.engine_counts is not None:
            self.engine_counts.record(remaining, emitted)

    @classmethod
    def merge(cls, runs: list[SpecRun]) -> SpecRun:
        """Sum runs over shards of the prompts (same settings), prompts in index order."""
        out = cls(dict(runs[0].settings), sum(r.histogram_counts for r in runs),
                  sum(r.accepted_per_position for r in runs))
        if runs[0].engine_counts is not None:
            out.engine_counts = EngineCounts(runs[0].engine_counts.engine, runs[0].engine_counts.steps)
        if all(r.expected_per_position is not None for r in runs):
            out.expected_per_position = sum(r.expected_per_position for r in runs)
        for r in runs:
            if out.engine_counts is not None and r.engine_counts is not None:
                out.engine_counts.add(r.engine_counts)
            out.verify_steps += r.verify_steps
            out.target_forwards += r.target_forwards
            out.target_tokens_fed += r.target_tokens_fed
            out.draft_forwards += r.draft_forwards
            for k in out.batched_forwards:
                out.batched_forwards[k] += r.batched_forwards.get(k, 0)
            for k in out.seconds:
                out.seconds[k] += r.seconds.get(k, 0.0)
            out.prompts += r.prompts
        out.prompts.sort(key=lambda p: p.index)
        return out

    @property
    def accepted_tokens(self) -> int:
        """Sum of accept lengths: the tokens verify steps emitted (correction/bonus included; a step
        cut by max_new_tokens or EOS counts what it emitted), i.e. generated tokens - 1 per prompt
        (the prefill's first token is not a verify step's)."""
        return int((np.arange(self.histogram_counts.size) * self.histogram_counts).sum())

    @property
    def generated_tokens(self) -> int:
        """Every token the prompts got, the prefill's first included (SGLang's completion tokens)."""
        return sum(len(p.output_ids) for p in self.prompts)

    @property
    def mean(self) -> float:
        """Accept length: tokens emitted by verify steps / verify steps (`DEFINITION`)."""
        return self.accepted_tokens / self.verify_steps if self.verify_steps else float("nan")

    @property
    def stderr(self) -> float:
        return histogram_stderr(self.histogram_counts)

    @property
    def histogram(self) -> dict[int, int]:
        return {int(i): int(c) for i, c in enumerate(self.histogram_counts) if i > 0}

    @property
    def per_position_unconditional(self) -> list[float]:
        """vLLM's per-position acceptance: accepted at drafted position j / verify steps."""
        return [float(a / self.verify_steps) if self.verify_steps else float("nan") for a in self.accepted_per_position]

    @property
    def per_position_conditional(self) -> list[float]:
        """Accepted at position j / verify steps that reached j (accepted j - 1)."""
        reached = [self.verify_steps] + self.accepted_per_position[:-1].tolist()
        return [float(a / r) if r else float("nan") for a, r in zip(self.accepted_per_position.tolist(), reached)]

    @property
    def forwards_per_token(self) -> float:
        """Target forwards (prefills + verify steps) per generated token (prefill's first included):
        about 1 / accept length on long runs, the prefills counted on short ones."""
        n = self.generated_tokens
        return self.target_forwards / n if n else float("nan")

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens / wall seconds of the whole run (prompt forwards included)."""
        n = sum(len(p.output_ids) for p in self.prompts)
        return n / self.seconds["total"] if self.seconds["total"] else float("nan")

    @property
    def overhead_fraction(self) -> float:
        """Share of wall time spent outside model forwards (the loop's own cost)."""
        s = self.seconds
        return (s["total"] - s["target"] - s["draft"]) / s["total"] if s["total"] else float("nan")

    @property
    def expected_unconditional(self) -> list[float] | None:
        """The exact expectation of `per_position_unconditional` given the contexts the run met (argmax
        drafted chains under sampling only; None otherwise): its Monte Carlo counterpart should lie
        within a few standard errors."""
        return _expected_unconditional(self)

    @property
    def expected_accept_length(self) -> float:
        e = self.expected_unconditional
        return 1.0 + sum(e) if e is not None else float("nan")

    def _engine_counts_dict(self) -> dict | None:
        if self.engine_counts is None:
            return None
        return {**self.engine_counts.to_dict(), "acceptance_rule": self.settings.get("acceptance_rule"),
                "temperature": self.settings.get("temperature")}

    def to_dict(self, prompts: bool = True) -> dict:
        d = {"settings": self.settings, "mean_accept_length": _num(self.mean), "stderr": _num(self.stderr),
             "accept_length_definition": DEFINITION, "verify_steps": self.verify_steps,
             "accepted_tokens": self.accepted_tokens, "generated_tokens": self.generated_tokens,
             "histogram": self.histogram, "accepted_per_position": self.accepted_per_position.tolist(),
             "per_position_unconditional": [_num(x) for x in self.per_position_unconditional],
             "per_position_conditional": [_num(x) for x in self.per_position_conditional],
             "target_forwards": self.target_forwards, "target_tokens_fed": self.target_tokens_fed,
             "target_forwards_per_token": _num(self.forwards_per_token), "draft_forwards": self.draft_forwards,
             "batched_forwards": dict(self.batched_forwards),
             "seconds": dict(self.seconds), "loop_overhead_fraction": _num(self.overhead_fraction),
             "engine_counts": self._engine_counts_dict(),
             "acceptance_rule": self.settings.get("acceptance_rule"), "temperature": self.settings.get("temperature"),
             "expected_per_position_unconditional": self.expected_unconditional,
             "expected_accept_length": _num(self.expected_accept_length)}
        if prompts:
            d["prompts"] = [p.to_dict() for p in self.prompts]
        return d


def _expected_unconditional(run: SpecRun) -> list | None:
    if run.expected_per_position is None or not run.verify_steps:
        return None
    return [float(x / run.verify_steps) for x in run.expected_per_position]


def _num(x: float) -> float | None:
    """A float for JSON: None where undefined (NaN: no verify step reached that position)."""
    return None if x is None or x != x else float(x)
