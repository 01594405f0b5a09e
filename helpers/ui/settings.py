"""One set of settings for a run of the kit: what the user gave, and what was filled in.

`RunSettings` names every input once, with one meaning, and the notebooks' `parameters` cells
use the same names, so the report passes one object to every notebook and its summary, and the
same quantity never shows two values in one bundle:

- `steps`: the drafting depth. Scored drafting steps in `evaluate`, the chain length of the
  replay, and SGLang's `--speculative-num-steps` for a tree.
- `topk`: SGLang's `--speculative-eagle-topk` (1: a chain).
- `draft_tokens`: SGLang's `--speculative-num-draft-tokens`, the verified root included
  (default `steps + 1`, a chain of `steps` drafted tokens).

The three are read into one `helpers.acceptance.drafting.Drafting` (`RunSettings.drafting`; `is_chain`
and `num_draft_tokens` are its, and `to_dict()` adds its `engine_flags()`), checked
there (a shape SGLang does not run, e.g. steps 3 topk 1 draft_tokens 8, is a ValueError naming
the flag). `resolve_drafting` fills the drafting settings from explicit values first, then from a serving
log's start-up line (SGLang `server_args=`, vLLM `num_speculative_tokens`), then from defaults,
and records where each came from in `sources`, so a report can say which numbers are defaults.
This module imports neither torch nor the notebooks.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

from helpers.acceptance.drafting import Drafting, fill
from helpers.core.engines import engines_at
from helpers.core.errors import BadInputError

DEFAULT_STEPS = 3  # SGLang's usual EAGLE-3 chain: steps 3, top-k 1, 4 draft tokens
DEFAULT_TOPK = 1


@dataclass(frozen=True)
class RunSettings:
    """Everything one investigation runs on. Paths are strings or None (not given)."""

    checkpoint: str | None = None
    samples: str | None = None
    embed_from: str | None = None
    target_head: str | None = None
    target_config: str | None = None
    engine: str = "all"
    logs: tuple[str, ...] = ()
    metrics: str | None = None  # a serving-metrics file or URL (`helpers.serving.metrics.read_metrics`)
    steps: int = DEFAULT_STEPS
    topk: int = DEFAULT_TOPK
    draft_tokens: int | None = None
    baseline_tps: float | None = None
    spec_tps: float | None = None
    device: str | None = None
    dtype: str | None = None
    max_samples: int | None = None  # sample files scored per split (evaluate, notebooks 03/04)
    svg: bool = False
    # comparisons a notebook draws beside the user's checkpoint when they are named
    misencoded: str | None = None  # a copy with d2t stored as absolute ids
    compare_with: tuple[str, ...] = ()  # more checkpoints for the doctor's overview
    # the target in the loop: notebook 07 runs speculative decoding with it on these prompts
    target: str | None = None  # Hugging Face target folder
    prompts: str | None = None  # JSONL prompt file
    max_prompts: int | None = None  # prompt records used (None: all)
    max_new_tokens: int = 48  # tokens generated per prompt
    temperature: float = 0.0  # 0: greedy verification; > 0: speculative sampling
    sources: dict = field(default_factory=dict, compare=False)  # setting -> where its value came from

    def __post_init__(self):
        engines_at(self.engine)  # 'all', an engine, or an engine ==VERSION; ValueError naming them otherwise
        Drafting.check_flags(self.steps, self.topk, self.draft_tokens, lone="sglang")
        if self.topk == 1 or self.draft_tokens is not None:  # complete: the whole shape is checked now
            self.drafting  # noqa: B018 (raises ValueError naming the flag)

    @property
    def drafting(self) -> Drafting:
        """The drafting shape these settings describe (steps, topk, draft_tokens with the root counted)."""
        return Drafting.from_flags(self.steps, self.topk, self.draft_tokens, lone="sglang")

    @property
    def num_draft_tokens(self) -> int:
        """SGLang's --speculative-num-draft-tokens (the root counted): the `Drafting`'s."""
        return self.drafting.num_draft_tokens

    @property
    def is_chain(self) -> bool:
        return self.drafting.is_chain

    def with_(self, **changes) -> RunSettings:
        return replace(self, **changes)

    def notebook_parameters(self, declared, **extra) -> dict:
        """The values for the parameters a notebook declares (same names), plus `extra`."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(extra)
        out = {}
        for name in declared:
            if name in values:
                v = values[name]
                out[name] = list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, dict) else v
        return out

    def evaluate_kwargs(self) -> dict:
        """What `helpers.measure.evaluate.evaluate` takes from these settings besides the checkpoint and
        samples (`helpers.measure.evaluate.evaluate_settings` calls it so; the dashboard builds its Run
        from the same names)."""
        return dict(steps=self.steps, device=self.device, dtype=self.dtype, max_samples=self.max_samples,
                    embed_from=self.embed_from, target_head=self.target_head)

    def to_dict(self) -> dict:
        d = asdict(self)
        drafting = self.drafting
        d["draft_tokens"] = drafting.num_draft_tokens
        d["drafting"] = drafting.label
        d.update(drafting.engine_flags())  # the shape in both engines' terms: sglang{...}, vllm{...} or None
        return d


def resolve_engine(settings: RunSettings) -> RunSettings:
    """The engine release from a serving log when `settings.engine` names none.

    A log whose start-up lines state its engine's release (`helpers.serving.startup.read_engine_version`)
    narrows 'all' to that engine, or adds the version to the engine named ('vllm' -> 'vllm==X.Y.Z');
    an engine given with a version, or a log of another engine, leaves it as it is.
    `settings.sources['engine']` says where the value came from.
    """
    from helpers.serving.startup import read_engine_version

    sources = dict(settings.sources)
    if any(op in settings.engine for op in "=<>~!"):
        sources.setdefault("engine", "--engine")
        return replace(settings, sources=sources)
    for log in settings.logs:
        found = read_engine_version(log)
        if found and settings.engine in ("all", found[0]):
            sources["engine"] = f"the {found[0]} release stated in {log}"
            return replace(settings, engine=f"{found[0]}=={found[1]}", sources=sources)
    sources.setdefault("engine", "--engine" if settings.engine != "all" else "default: every engine at its newest release read")
    return replace(settings, sources=sources)


def resolve_drafting(settings: RunSettings, *, steps=None, topk=None, draft_tokens=None) -> RunSettings:
    """Fill steps / topk / draft_tokens: given values, else a log's start-up line, else defaults.

    `settings.sources` records each one's origin ("--steps", "server_args in LOG", "default").
    """
    from helpers.serving.startup import read_drafting

    found, where = {}, None
    for log in settings.logs:
        found = read_drafting(log)
        if found:
            where = log
            break
    given = {"steps": steps, "topk": topk, "draft_tokens": draft_tokens}
    try:
        Drafting.check_flags(steps, topk, draft_tokens, lone="sglang")
    except ValueError as e:
        raise BadInputError(None, str(e)) from None
    merged, origin = fill(given, found)
    values, sources = {}, dict(settings.sources)
    for name, value in merged.items():
        values[name] = int(value)
        sources[name] = f"--{name.replace('_', '-')}" if origin[name] == "given" else f"{found['source']} in {where}"
    if "steps" not in values and values.get("topk", 1) == 1 and "draft_tokens" in values:
        values["steps"], sources["steps"] = values["draft_tokens"] - 1, "draft tokens - 1 (a chain)"
    values.setdefault("steps", DEFAULT_STEPS)
    values.setdefault("topk", DEFAULT_TOPK)
    sources.setdefault("steps", "default")
    sources.setdefault("topk", "default")
    if "draft_tokens" not in values:
        values["draft_tokens"] = None
        sources["draft_tokens"] = "steps + 1 (a chain)" if values["topk"] == 1 else "default"
        if values["topk"] > 1:
            raise BadInputError(None, "a tree (--topk above 1) needs --draft-tokens "
                                "(SGLang's --speculative-num-draft-tokens)")
    try:
        return replace(settings, sources=sources, **values)
    except ValueError as e:
        raise BadInputError(None, str(e)) from None
