"""Findings: what the doctor reports about a checkpoint, and what its checks write into.

A `Finding` is one problem (or fact) with a stable code, a severity (error / warning / info),
one line saying what is wrong and one saying how to fix it; its code, severity, effect and engine
must be what the code's entry in `helpers.doctor.registry` declares (else ValueError). `CheckContext` is what every check
function receives: the opened checkpoint, the engines asked about (each at the release whose
rules apply, `helpers.engines.registry.EngineAt`), the flat config and the findings so far.
"""
from __future__ import annotations

import functools

from dataclasses import dataclass, field, replace

from helpers.engines.outcomes import RESULT_WORDS, SERVE_RESULTS
from helpers.engines.registry import EngineAt, engine_at, worst_outcome
from helpers.core.errors import BadInputError
from helpers.doctor.registry import NO_EFFECT, SEVERITIES, check_finding
from helpers.io.checkpoint import Checkpoint
from helpers.io.configs import read_config


@dataclass(frozen=True)
class Finding:
    """One problem (or fact) about a checkpoint: stable code, severity, one-line message and fix."""

    code: str
    severity: str  # error / warning / info
    message: str
    fix: str
    # What serving the checkpoint does because of this finding, in the engine-truth terms: the key
    # into each engine's outcome table (default `code.severity`), and per engine key the outcome at
    # the release checked (`EngineAt.outcome`), filled in by `with_outcomes`.
    effect: str | None = None
    outcome: dict | None = None
    engine: str | None = None  # the engine key a per-engine finding speaks of (None: every engine)

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        check_finding(self.code, self.severity, self.effect, self.engine)  # its registry entry declares it
        object.__setattr__(self, "message", " ".join(self.message.split()))
        object.__setattr__(self, "fix", " ".join(self.fix.split()))

    def as_dict(self) -> dict:
        d = {"code": self.code, "severity": self.severity, "message": self.message, "fix": self.fix}
        if self.outcome is not None:
            d["outcome"] = self.outcome
        return d

    @property
    def effect_key(self) -> str:
        return self.effect or f"{self.code}.{self.severity}"

    def with_outcomes(self, ats) -> "Finding":
        """This finding with its predicted outcome at each engine release in `ats` it speaks of: the
        engine table's row for its effect; for a note (info) without a row, the engine's healthy outcome
        (a note describes what the engine models as the draft was made); `result` "none" for a finding
        that changes nothing by itself (`NO_EFFECT`); `result` "unknown", with why, where the table has
        no row (the prediction then names the finding under `unknown_for`)."""
        found = {a.key: self._outcome_at(a) for a in ats if self.engine in (None, a.key)}
        if self.severity == "error" and found and all(o.get("result") == "serves" and o.get("accept") == "as-trained"
                                                      for o in found.values()):
            # every engine asked serves it as trained: a warning for them (its outcome row stays the error's)
            return replace(self, severity="warning", effect=self.effect_key, outcome=found)
        return replace(self, outcome=found or None)

    def _outcome_at(self, a) -> dict:
        if self.effect == NO_EFFECT:
            return {"result": "none", "why": "changes nothing by itself in how the engine serves", "release": a.version}
        o = a.outcome(self.effect_key)
        if o is None and self.severity == "info":
            o = a.outcome("healthy")
            if o is not None:
                o = o | {"as": "noted: served as the engine models it"}
        if o is None:
            o = {"result": "unknown", "release": a.version,
                 "why": f"the engine table holds no outcome for {self.effect_key} in {a.label}"}
        return o


class Findings(list):
    """The doctor's findings for one checkpoint and engine, errors first: a list of `Finding`
    that knows its checkpoint and engine, with the `doctor --json` object and the doctor's text."""

    def __init__(self, findings=(), *, path=None, engine: str | None = None, versions=()):
        super().__init__(sorted(findings, key=lambda f: SEVERITIES.index(f.severity)))
        self.path, self.engine = path, engine
        self.versions = tuple(versions)  # the EngineAt of each engine checked

    @property
    def counts(self) -> dict:
        return {s: sum(f.severity == s for f in self) for s in SEVERITIES}

    def predicted_outcome(self) -> dict:
        """Per engine key: what serving this checkpoint does, the worst outcome of its findings (a
        checkpoint with none: the engine's healthy outcome), and under `unknown_for` the error and
        warning codes whose outcome the engine table does not hold (the prediction leaves them out).
        Engines without an outcome table are left out."""
        out = {}
        partial = any(f.code == "config-only" for f in self)
        for a in self.versions:
            healthy = a.outcome("healthy")
            if healthy is None:
                continue
            worst = worst_outcome([healthy] + [o for f in self if (o := (f.outcome or {}).get(a.key))
                                               and o["result"] in SERVE_RESULTS])
            unknown = sorted({f.code for f in self if f.severity != "info" and f.engine in (None, a.key)
                              and (f.outcome or {}).get(a.key, {}).get("result") == "unknown"})
            if partial and worst["result"] == "serves" and worst["accept"] == "as-trained":
                worst = worst | {"accept": "unknown"}  # the weights were not read: nothing vouches for them
            out[a.key] = worst | {"unknown_for": unknown} | ({"from_config_only": True} if partial else {})
        return out

    def to_dict(self) -> dict:
        counts = self.counts
        return {"path": None if self.path is None else str(self.path), "engine": self.engine, "counts": counts,
                "ok": counts["error"] == 0, "findings": [f.as_dict() for f in self],
                "engine_versions": [a.as_dict() for a in self.versions],
                "predicted_outcome": self.predicted_outcome()}

    def report(self) -> str:
        lines = [f"{self.path} (engine: {self.engine})"]
        lines += [f"  rules of {a.label}" + (f": {a.note}" if a.note else "") for a in self.versions]
        for f in self:
            lines.append(f"  {f.severity.upper():<8}{f.code:<28}{f.message}")
            if f.severity != "info" or f.fix != "nothing to do":
                lines.append(f"  {'':<8}{'':<28}fix: {f.fix}")
        c = self.counts
        lines.append(f"  {c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s)")
        names = {a.key: a.label for a in self.versions}
        for key, o in self.predicted_outcome().items():
            lines.append(f"  served by {names[key]}: {outcome_words(o)}")
        return "\n".join(lines)


_ACCEPT_WORDS = {
    "as-trained": "at the accept length it was trained for",
    "at-most": "at or below the accept length it was trained for (how far below, the files cannot tell)",
    "about-1": "at accept length about 1 (almost no draft token accepted)",
    "unknown": "at an accept length the files cannot tell (see the findings)",
}


def outcome_words(o: dict) -> str:
    """One predicted outcome in words, e.g. 'starts, then dies on the first request that meets it (its error names
    IndexError) [checked by running this release]'."""
    if o["result"] == "serves":
        text = "starts and serves " + _ACCEPT_WORDS.get(o["accept"], "")
    else:
        text = RESULT_WORDS[o["result"]]
        if o.get("stage") == "convert":  # llama.cpp: its converter writes no file
            text = "refuses at conversion (no GGUF is written)"
        if o.get("says"):
            text += f" (its error names {o['says']})"
    if o.get("from_config_only"):
        text += ", judged from config.json alone"
    if o.get("unknown_for"):
        text += f"; the outcome of {', '.join(o['unknown_for'])} is not in the engine table"
    if o.get("checked"):
        return text + " [checked by running this release]"
    source = o.get("source") or ""
    if source.startswith("run in"):
        return text + f" [as {source}; {o.get('release')} was not run]"
    return text + f" [{source or 'read in the code'}" + ("]" if "not run" in source else "; not run]")


def has_error(findings) -> bool:
    """Any finding of severity error."""
    return any(f.severity == "error" for f in findings)


@dataclass
class CheckContext:
    """What the checks share: the checkpoint, the engines asked about, its flat config, and the
    findings so far (`add` appends one)."""

    ck: Checkpoint
    engines: tuple[str, ...]  # the engine keys, as the checks compare them
    cfg: dict
    findings: list[Finding] = field(default_factory=list)
    at: dict = field(default_factory=dict)  # engine key -> EngineAt (default: the newest release read)
    # config fields named by a config-invalid finding (taken out of the config the other checks read)
    invalid: frozenset = frozenset()

    @property
    def engine_list(self) -> list[EngineAt]:
        """Each engine asked about at the release whose rules apply."""
        return [self.at.get(e) or engine_at(e) for e in self.engines]

    @functools.cached_property
    def raw_config(self) -> dict | None:
        """config.json as written, nulls and wrongly typed fields kept (the checkpoint's `config` reads nulls as
        absent, as the kit's loaders do; an engine reads the file as it is)."""
        path = self.ck.config_path
        if path is None or path.suffix != ".json" or not path.is_file():
            return self.ck.config
        try:
            return read_config(path)
        except BadInputError:  # the config checks say what is wrong with it
            return self.ck.config

    def add(self, code, severity, message, fix, effect: str | None = None, engine: str | None = None):
        """Append a finding; `effect` names its outcome row when `code.severity` is too coarse, `engine`
        the one engine a per-engine finding is about."""
        self.findings.append(Finding(code, severity, message, fix, effect=effect, engine=engine))

    def key(self, name: str) -> str | None:
        """The stored key for a top-level name (with or without `model.`)."""
        for k in (name, "model." + name):
            if k in self.ck.tensors:
                return k
        return None

    def shape(self, name: str):
        k = self.key(name)
        return None if k is None else self.ck.tensors.shape(k)


def fmt_number(n) -> str:
    """An int with thousands separators, anything else as str (for findings' messages)."""
    return f"{n:,}" if isinstance(n, int) else str(n)
