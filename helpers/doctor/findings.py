"""Findings: what the doctor reports about a checkpoint, and what its checks write into.

A `Finding` is one problem (or fact) with a stable code, a severity (error / warning / info),
one line saying what is wrong and one saying how to fix it. `CheckContext` is what every check
function receives: the opened checkpoint, the engines asked about (each at the release whose
rules apply, `helpers.core.engines.EngineAt`), the flat config and the findings so far.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from helpers.core.engines import EngineAt, engine_at
from helpers.io.checkpoint import Checkpoint

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    """One problem (or fact) about a checkpoint: stable code, severity, one-line message and fix."""

    code: str
    severity: str  # error / warning / info
    message: str
    fix: str

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        object.__setattr__(self, "message", " ".join(self.message.split()))
        object.__setattr__(self, "fix", " ".join(self.fix.split()))

    def as_dict(self) -> dict:
        return {"code": self.code, "severity": self.severity, "message": self.message, "fix": self.fix}


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

    def to_dict(self) -> dict:
        counts = self.counts
        return {"path": None if self.path is None else str(self.path), "engine": self.engine, "counts": counts,
                "ok": counts["error"] == 0, "findings": [f.as_dict() for f in self],
                "engine_versions": [a.as_dict() for a in self.versions]}

    def report(self) -> str:
        lines = [f"{self.path} (engine: {self.engine})"]
        lines += [f"  rules of {a.label}" + (f": {a.note}" if a.note else "") for a in self.versions]
        for f in self:
            lines.append(f"  {f.severity.upper():<8}{f.code:<28}{f.message}")
            if f.severity != "info" or f.fix != "nothing to do":
                lines.append(f"  {'':<8}{'':<28}fix: {f.fix}")
        c = self.counts
        lines.append(f"  {c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s)")
        return "\n".join(lines)


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

    @property
    def engine_list(self) -> list[EngineAt]:
        """Each engine asked about at the release whose rules apply."""
        return [self.at.get(e) or engine_at(e) for e in self.engines]

    def add(self, code, severity, message, fix):
        self.findings.append(Finding(code, severity, message, fix))

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
