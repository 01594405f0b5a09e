"""Findings: what the doctor reports about a checkpoint, and what its checks write into.

A `Finding` is one problem (or fact) with a stable code, a severity (error / warning / info),
one line saying what is wrong and one saying how to fix it. `CheckContext` is what every check
function receives: the opened checkpoint, the engines asked about, the flat config and the
findings so far.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .checkpoint import Checkpoint

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


def has_error(findings) -> bool:
    """Any finding of severity error."""
    return any(f.severity == "error" for f in findings)


@dataclass
class CheckContext:
    """What the checks share: the checkpoint, the engines asked about, its flat config, and the
    findings so far (`add` appends one)."""

    ck: Checkpoint
    engines: tuple[str, ...]
    cfg: dict
    findings: list[Finding] = field(default_factory=list)

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
