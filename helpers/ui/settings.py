"""One set of settings for a run of the kit: what the user gave, and what was filled in.

`RunSettings` names every input once, with one meaning, and the notebooks' `parameters` cells
use the same names, so the report passes one object to every notebook and its summary, and the
same quantity never shows two values in one bundle:

- `steps`: the drafting depth. Scored drafting steps in `evaluate`, the chain length of the
  replay, and SGLang's `--speculative-num-steps` for a tree.
- `topk`: SGLang's `--speculative-eagle-topk` (1: a chain).
- `draft_tokens`: SGLang's `--speculative-num-draft-tokens`, the verified root included
  (None: `steps + 1`, a chain of `steps` drafted tokens).

Their defaults are the one default shape of the kit, the speculate run builder's
(`helpers.acceptance.drafting.DEFAULT_DRAFTING`, a chain of 5): the report, its notebooks and
`d2t-lab speculate` draft the same chain when no flag or log states one.

The three are read into one `helpers.acceptance.drafting.Drafting` (`RunSettings.drafting`; `is_chain`
and `num_draft_tokens` are its, and `to_dict()` adds its `engine_flags()`), checked
there (a shape SGLang does not run, e.g. steps 3 topk 1 draft_tokens 8, is a ValueError naming
the flag). `resolve_drafting` fills the drafting settings from explicit values first, then from a serving
log's start-up line (SGLang `server_args=`, vLLM `num_speculative_tokens`), then from the default
shape, reads them into one `Drafting` (`Drafting.from_flags`) and records where each came from in
`sources`, so a report can say which numbers are defaults (`default_source()`); `note_defaults` does
the same for settings made directly in Python.
This module imports neither torch nor the notebooks.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

from helpers.acceptance.drafting import DEFAULT_DRAFTING, Drafting, fill
from helpers.engines.registry import engines_at
from helpers.core.errors import BadInputError


def default_drafting() -> Drafting:
    """The one default shape, the speculate run builder's (`helpers.acceptance.drafting.DEFAULT_DRAFTING`)."""
    return DEFAULT_DRAFTING


TOPK_DEFAULT = "default: a chain"  # `sources['topk']` where no flag or log gave it


def default_source() -> str:
    """How `sources` names the default shape where it stands in for a shape no flag or log stated."""
    return f"default: the speculate run builder's {default_drafting().label}; no flag or log stated a shape"


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
    steps: int = DEFAULT_DRAFTING.steps  # the one default shape's
    topk: int = DEFAULT_DRAFTING.topk
    draft_tokens: int | None = None if DEFAULT_DRAFTING.is_chain else DEFAULT_DRAFTING.num_draft_tokens  # None: steps + 1
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
    # prompts the loop verifies together (`SpecSettings.batch_size`); None: its default (speculate's)
    batch_size: int | None = None
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

    def inputs(self):
        """The run's inputs as `helpers.model.preflight.preflight` takes them (the paths and the prompt count)."""
        from helpers.model.preflight import Inputs

        return Inputs(checkpoint=self.checkpoint, target=self.target, target_config=self.target_config,
                      prompts=self.prompts, max_prompts=self.max_prompts, embed_from=self.embed_from,
                      samples=self.samples, target_head=self.target_head)

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
    """Fill steps / topk / draft_tokens: given values, else a log's start-up line, else the default
    shape (`default_drafting()`), read into one `Drafting` (`Drafting.from_flags`, SGLang's terms:
    draft_tokens counts the root, so draft tokens alone is a chain of one less).

    `settings.sources` records each one's origin ("--steps", "server_args in LOG", `default_source()`).
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
        Drafting.check_flags(steps, topk, draft_tokens, lone="sglang")  # each flag named before a log fills others
    except ValueError as e:
        raise BadInputError(None, str(e)) from None
    merged, origin = fill(given, found)
    sources = dict(settings.sources)
    for name in merged:
        sources[name] = f"--{name.replace('_', '-')}" if origin[name] == "given" else f"{found['source']} in {where}"
    try:
        if not merged:
            shape = default_drafting()
            sources["steps"], sources["topk"] = default_source(), TOPK_DEFAULT
        else:
            k, n = merged.get("topk"), merged.get("draft_tokens")
            if "steps" not in merged and (n is None or (k or 1) > 1):  # nothing states the depth: the default's
                merged["steps"], sources["steps"] = default_drafting().steps, default_source()
            elif "steps" not in merged:
                sources["steps"] = "draft tokens - 1 (a chain)"
            shape = Drafting.from_flags(merged.get("steps"), k, n, lone="sglang")
            sources.setdefault("topk", TOPK_DEFAULT)
    except ValueError as e:
        raise BadInputError(None, str(e)) from None
    if "draft_tokens" not in merged:
        sources["draft_tokens"] = "steps + 1 (a chain)" if shape.is_chain else default_source()
    return replace(settings, sources=sources, steps=shape.steps, topk=shape.topk,
                   draft_tokens=merged.get("draft_tokens") if shape.is_chain else shape.num_draft_tokens)


def note_defaults(settings: RunSettings) -> RunSettings:
    """`settings` whose `sources` say where the default shape stands in, for settings made directly in
    Python (not by `resolve_drafting`): a drafting setting with no recorded origin that holds the
    default's value is named as `resolve_drafting` names it (`default_source()`, `TOPK_DEFAULT`, draft
    tokens None "steps + 1 (a chain)"). Others are left as they are (the summary calls them given)."""
    d, sources = default_drafting(), dict(settings.sources)
    for name, value, default, word in (("steps", settings.steps, d.steps, default_source()),
                                       ("topk", settings.topk, d.topk, TOPK_DEFAULT),
                                       ("draft_tokens", settings.draft_tokens, None, "steps + 1 (a chain)")):
        if name not in sources and value == default:
            sources[name] = word
    return replace(settings, sources=sources)
