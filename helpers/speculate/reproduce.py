"""Which wiring bug reproduces a serving number: the engine-free loop under each known misconfiguration.

`reproduce(target, draft, records, settings, accept_length=L, stderr=S)` runs
`helpers.speculate.loop.speculate` on the same prompts and drafting settings once with the
correct wiring and once under each misconfiguration the kit can emulate, and ranks them by how
well they reproduce the measured accept length L: z = (engine-free mean - L) / sqrt(se² + S²).

Each misconfiguration is emulated by changing what the loop is given, never the forward code:
the reading of d2t and the aux-layer convention through `SpecSettings`, the draft's switches
through its `DraftConfig` flags (`final_norm`, `fc_norm`, `norm_before_fc`, `feed_normed`,
`sliding_window`), and borrowed weights by swapping the loaded draft's `lm_head` /
`embed_tokens` modules. Every change is undone when its run ends (the same loaded draft serves
all runs). A misconfiguration that cannot happen to this draft (no EAGLE-3.1 norms, no explicit
aux ids, an embedding equal to the target's) is listed with the reason and not run.

Each one carries a short static note on which engines make that mistake (the engine files the kit
read, and the releases where each rule holds, are `helpers.engines.table.ENGINE_TABLE`).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, replace

from helpers.engines.table import ENGINE_TABLE
from helpers.engines.registry import ENGINES, aux_convention, support_starts
from helpers.speculate.ladder import REPRODUCES_Z

DEFAULT_WINDOW = 8  # the window a full-attention draft is wrongly given


@dataclass(frozen=True)
class Miswiring:
    key: str
    label: str
    engines: str  # which engine versions make this mistake (static note)


def _norms_dropped_until() -> str:
    """Where each engine read dropped the EAGLE-3.1 norms, in words, from the engine table's rules."""
    sg, sg_mla = support_starts("sglang", "fc_norm"), support_starts("sglang", "mla.fc_norm")
    vl, vl_spec = support_starts("vllm", "fc_norm"), support_starts("vllm", "fc_norm.speculators")
    sg_in, vl_in = support_starts("sglang", "norm_before_fc"), support_starts("vllm", "norm_before_fc")
    return (f"SGLang up to {sg[0]} (MHA drafts; read from {sg[1]}, PR {sg[2]}) and {sg_mla[0]} (Kimi MLA drafts; "
            f"{sg_mla[2]}), vLLM up to {vl[0]} ({vl[2]}; speculators-style configs up to {vl_spec[0]}, {vl_spec[2]}), "
            f"input_norm (norm_before_fc) SGLang up to {sg_in[0]} and vLLM up to {vl_in[0]}")


def _catalogue(window: int) -> list[Miswiring]:
    sgl, vll = (f"{e.files['mha']} @ {e.name} {e.newest}" for e in (ENGINE_TABLE["sglang"], ENGINE_TABLE["vllm"]))
    return [
        Miswiring("correct", "the correct wiring",
                  "what the engines the kit read do: d2t as offsets, the engine's own aux-layer convention"),
        Miswiring("absolute", "d2t read as absolute ids",
                  "no released SGLang, vLLM or TensorRT-LLM reads d2t so (all add the draft id); hand-written "
                  "serving or test code does, and a checkpoint that stores absolute ids is served so by every "
                  "engine (`d2t-lab inspect` says ABSOLUTE; `d2t-lab fix` rewrites it)"),
        Miswiring("ignored", "d2t ignored (draft ids taken as target ids)",
                  "SGLang and vLLM read d2t only from the weight files: a d2t kept beside them (speculators' "
                  "d2t.npy) or dropped on export is never loaded and draft id i is served as target id i "
                  f"(read in {sgl}; {vll})"),
        Miswiring("aux_convention", "the other engine's aux-layer convention (capture layers shifted by one)",
                  f"SGLang adds 1 to explicit eagle_aux_hidden_state_layer_ids ({sgl}), vLLM uses them as given "
                  f"({vll}): a draft trained for one engine and served by the other sees every aux layer shifted"),
        Miswiring("fc_norm_dropped", "EAGLE-3.1 norms dropped (fc_norm / input_norm / norm_output)",
                  "engines older than their EAGLE-3.1 support drop fc_norm.* and ignore norm_output: "
                  f"{_norms_dropped_until()}; `d2t-lab doctor --engine ENGINE==VERSION` names the rule at a release"),
        Miswiring("final_norm", "the final norm skipped before lm_head",
                  "an engine that ignores SpecForge's norm_output switch (false: lm_head on the un-normed state) "
                  "applies the final norm where the draft has none, or skips it where it has one; see "
                  "`d2t-lab doctor` finding variant-norm_output for the engine files read"),
        Miswiring("lm_head_from_target", "lm_head borrowed from the target",
                  f"SGLang loads the target's lm_head over the draft's when config.json has no draft_vocab_size "
                  f"(load_lm_head_from_target, {sgl}); vLLM keeps the trained head ({vll})"),
        Miswiring("target_embedding", "the target's embedding in place of the draft's",
                  "SGLang and vLLM hand an EAGLE-3 draft the target's embed_tokens when its checkpoint has none "
                  "(most exports leave it out): a draft trained with its own embedding and exported without it "
                  "is served with the target's"),
        Miswiring("window", f"a wrong attention window ({window} tokens, or the draft's window ignored)",
                  "an engine that gives the draft the target's sliding-window layout, or ignores speculators' "
                  "sliding_window / layer_types (see `d2t-lab doctor` finding variant-sliding_window)"),
    ]


@dataclass
class Row:
    key: str
    label: str
    engines: str
    mean: float | None = None
    stderr: float | None = None
    verify_steps: int | None = None
    z: float | None = None
    skipped: str | None = None  # why it was not run
    run: object = field(default=None, repr=False)  # the SpecRun

    def to_dict(self) -> dict:
        fin = lambda x: None if x is None or not math.isfinite(x) else float(x)  # noqa: E731 - JSON has no inf/NaN
        return {"key": self.key, "label": self.label, "engines": self.engines, "mean": fin(self.mean),
                "stderr": fin(self.stderr), "verify_steps": self.verify_steps, "z": fin(self.z),
                "skipped": self.skipped, "reproduces": self.reproduces}

    @property
    def reproduces(self) -> bool:
        return self.z is not None and abs(self.z) < REPRODUCES_Z


@dataclass
class Reproduction:
    """The ranking: rows that ran, best first (|z|, ties in catalogue order), then those skipped."""

    accept_length: float
    stderr: float | None
    settings: dict
    prompts: int
    rows: list[Row]

    @property
    def ranked(self) -> list[Row]:
        return [r for r in self.rows if r.skipped is None]

    @property
    def best(self) -> Row | None:
        return self.ranked[0] if self.ranked else None

    @property
    def correct(self) -> Row | None:
        return next((r for r in self.rows if r.key == "correct"), None)

    def tied_with_best(self) -> list[Row]:
        b = self.best
        return [r for r in self.ranked[1:] if b is not None and r.mean is not None and abs(r.mean - b.mean) < 1e-9]

    def verdict(self) -> str:
        b, c = self.best, self.correct
        if b is None:
            return "Nothing ran"
        if not b.reproduces:
            return (f"No emulated wiring reproduces the measured {self.accept_length:.2f}: the closest is {b.label} "
                    f"({_fig(b)}); the correct wiring measures {_fig(c)}")
        if b.key == "correct" or (c is not None and c.reproduces):
            return (f"The correct wiring reproduces the measured {self.accept_length:.2f} (engine-free "
                    f"{_fig(c)}): no emulated misconfiguration is needed to explain it")
        ties = self.tied_with_best()
        also = f" (tied with {', '.join(r.label for r in ties)}: the accept length cannot tell them apart)" if ties else ""
        return (f"{b.label} reproduces the measured {self.accept_length:.2f} ({_fig(b)}){also}; the correct wiring "
                f"measures {_fig(c)}")

    def to_dict(self) -> dict:
        b = self.best
        return {"accept_length": self.accept_length, "stderr": self.stderr, "settings": self.settings,
                # the loop's rows were measured at the settings' temperature under this rule ('greedy' at 0)
                "temperature": self.settings.get("temperature"), "acceptance_rule": self.settings.get("acceptance_rule"),
                "prompts": self.prompts, "verdict": self.verdict(), "best": None if b is None else b.to_dict(),
                "correct": None if self.correct is None else self.correct.to_dict(),
                "rows": [r.to_dict() for r in self.rows]}

    def report(self) -> str:
        se = "" if self.stderr is None else f" ± {self.stderr:.2f}"
        s = self.settings
        lines = [f"reproduce: measured accept length {self.accept_length:.2f}{se}; engine-free on {self.prompts} "
                 f"prompts, {s.get('drafting')} (steps {s.get('steps')}, topk {s.get('topk')}, draft tokens "
                 f"{s.get('draft_tokens')}), engine {s.get('engine')}",
                 f"  {'rank':>4}  {'accept length':>16}  {'z':>6}  wiring"]
        for i, r in enumerate(self.ranked, 1):
            mark = "  <- reproduces" if r.reproduces else ""
            lines.append(f"  {i:>4}  {_fig(r):>16}  {r.z:+6.1f}  {r.label}{mark}")
        for r in self.rows:
            if r.skipped:
                lines.append(f"     -  {'not run':>16}  {'':>6}  {r.label}: {r.skipped}")
        lines.append("  " + self.verdict())
        b = self.best
        if b is not None and b.key != "correct":
            lines.append(f"  who makes that mistake: {b.engines}")
        return "\n".join(lines)

    def markdown(self) -> list[str]:
        L = [f"measured accept length **{self.accept_length:.2f}**"
             + ("" if self.stderr is None else f" ± {self.stderr:.2f}") + f"; engine-free on {self.prompts} prompts", "",
             "| rank | wiring | accept length (engine-free) | z | who makes that mistake |", "|---|---|---|---|---|"]
        for i, r in enumerate(self.ranked, 1):
            L.append(f"| {i} | {r.label}{' (reproduces)' if r.reproduces else ''} | {_fig(r)} | {r.z:+.1f} | {r.engines} |")
        for r in self.rows:
            if r.skipped:
                L.append(f"| - | {r.label} | not run: {r.skipped} | | {r.engines} |")
        return L + ["", f"**{self.verdict()}.**"]


def _fig(r: Row | None) -> str:
    if r is None or r.mean is None:
        return "-"
    return f"{r.mean:.2f}" + ("" if r.stderr is None or r.stderr != r.stderr else f" ± {r.stderr:.2f}")


# -- emulation ------------------------------------------------------------------------------------
@contextlib.contextmanager
def _patched(obj, **values):
    """Set attributes for the duration of one run, then put the old values back."""
    old = {k: getattr(obj, k) for k in values}
    try:
        for k, v in values.items():
            setattr(obj, k, v)
        yield
    finally:
        for k, v in old.items():
            setattr(obj, k, v)


def _explicit_aux_ids(draft) -> bool:
    """Whether either engine reads explicit aux layer ids from the draft's config (else both use 2, L//2, L-3)."""
    from helpers.model.target import draft_aux_ids

    if not getattr(draft, "source", None):
        return bool(draft.config.aux_layer_ids)
    return any(draft_aux_ids(draft, e) for e in ENGINES)


def _emulation(key: str, target, draft, settings, window: int):
    """(why not applicable, or None; a context manager that sets the misconfiguration; its settings)."""
    cfg = draft.config
    null = contextlib.nullcontext()
    if key == "correct":
        return None, null, settings
    if key in ("absolute", "ignored"):
        if draft.d2t is None:
            return "the draft has no d2t", null, settings
        return None, null, replace(settings, reading="absolute" if key == "absolute" else "none")
    if key == "aux_convention":
        if not _explicit_aux_ids(draft):
            return "the draft's config states no aux layer ids: both engines capture 2, L//2, L-3", null, settings
        mine = aux_convention(settings.engine)  # the other convention: the first engine whose shift differs
        other = next((k for k in ENGINES if aux_convention(k) != mine),
                     next(k for k in ENGINES if k != settings.engine))
        return None, null, replace(settings, engine=other)
    if key == "fc_norm_dropped":
        if not (cfg.fc_norm or cfg.norm_before_fc or cfg.feed_normed):
            return "the draft has no EAGLE-3.1 norms (fc_norm, norm_before_fc, norm_output)", null, settings
        stack = contextlib.ExitStack()
        stack.enter_context(_patched(cfg, fc_norm=False, norm_before_fc=False, feed_normed=False))
        stack.enter_context(_patched(draft, fc_norm=None, input_norm=None))
        return None, stack, settings
    if key == "final_norm":
        return None, _patched(cfg, final_norm=not cfg.final_norm, feed_normed=False), settings
    if key == "lm_head_from_target":
        head = target.model.get_output_embeddings()
        if head is None or head.weight.shape[1] != draft.lm_head.weight.shape[1]:
            return "the target's lm_head does not fit the draft's hidden size", null, settings
        stack = contextlib.ExitStack()
        stack.enter_context(_patched(draft, lm_head=head, d2t=None))
        return None, stack, replace(settings, reading="none")
    if key == "target_embedding":
        emb = target.model.get_input_embeddings()
        mine = draft.embed_tokens.weight
        if emb.weight.shape != mine.shape:
            return "the target's embedding does not fit the draft", null, settings
        if bool((emb.weight.to(mine.device, mine.dtype) == mine).all()):
            return "the draft's embed_tokens equals the target's: the mistake changes nothing here", null, settings
        return None, _patched(draft, embed_tokens=emb), settings
    if key == "window":
        wrong = None if cfg.sliding_window else int(window)
        stack = contextlib.ExitStack()
        stack.enter_context(_patched(cfg, sliding_window=wrong))
        for m in draft.modules():  # attention modules that copied the config's window at construction
            if hasattr(m, "window") and not callable(getattr(m, "window")):
                stack.enter_context(_patched(m, window=wrong))
        return None, stack, settings
    raise ValueError(f"unknown misconfiguration {key!r}")


def run_wiring(target, draft, records, settings, key: str, *, window: int = DEFAULT_WINDOW):
    """The engine-free run under one wiring of the catalogue (`key`, e.g. "absolute"), or None when
    it cannot happen to this draft. `settings` are the correct wiring's (reading offset)."""
    from helpers.speculate.loop import speculate

    why, ctx, st = _emulation(key, target, draft, settings, window)
    if why is not None:
        return None
    with ctx:
        return speculate(target, draft, list(records), st)


def reproduce(target, draft, records, settings, *, accept_length: float, stderr: float | None = None,
              known: dict | None = None, window: int = DEFAULT_WINDOW, only=None, progress: bool = False) -> Reproduction:
    """Run the catalogue (see the module docstring) and rank it against `accept_length`.

    `known`: SpecRuns already measured on the same records and settings, by key ("correct",
    "absolute", "ignored"), reused instead of run again. `only`: the keys to run (None: all).
    """
    from tqdm.auto import tqdm

    from helpers.speculate.loop import speculate

    if not (isinstance(accept_length, (int, float)) and math.isfinite(accept_length) and accept_length >= 1.0):
        raise ValueError(f"the measured accept length must be a number >= 1.0 (it counts the bonus token), "
                         f"got {accept_length!r}")
    if stderr is not None and not (math.isfinite(stderr) and stderr >= 0):
        raise ValueError(f"the standard error must be >= 0, got {stderr!r}")
    settings = replace(settings, reading="offset" if draft.d2t is not None else "none")
    records = list(records)
    known = dict(known or {})
    rows = []
    cat = [m for m in _catalogue(window) if only is None or m.key in only or m.key == "correct"]
    for m in tqdm(cat, desc="reproduce", unit="wiring", disable=not progress):
        row = Row(m.key, m.label, m.engines)
        why, ctx, st = _emulation(m.key, target, draft, settings, window)
        if why is not None:
            row.skipped = why
        else:
            run = known.get(m.key)
            if run is None:
                with ctx:
                    run = speculate(target, draft, records, st)
            row.run, row.mean, row.stderr, row.verify_steps = run, run.mean, run.stderr, run.verify_steps
            se = math.sqrt((0.0 if run.stderr != run.stderr else run.stderr) ** 2 + (stderr or 0.0) ** 2)
            d = run.mean - accept_length
            row.z = (0.0 if abs(d) < 0.005 else math.copysign(math.inf, d)) if se < 1e-9 else d / se
        rows.append(row)
    order = {m.key: i for i, m in enumerate(cat)}
    ran = sorted((r for r in rows if r.skipped is None), key=lambda r: (abs(r.z), order[r.key]))
    return Reproduction(float(accept_length), stderr, settings.to_dict(), len(records),
                        ran + [r for r in rows if r.skipped is not None])
