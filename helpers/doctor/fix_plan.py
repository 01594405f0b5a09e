"""The fixer's results: what a fix would change (`FixPlan`) and what it wrote (`FixResult`).

Both render themselves for the CLI (`report()`, and `to_json()` for `fix --json`);
what a fix would need that it cannot supply is each code's `cannot_repair` in `helpers.doctor.registry`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from helpers.doctor.findings import Finding, Findings, has_error
from helpers.doctor.registry import cannot_repair


@dataclass
class FixPlan:
    """What `fix_checkpoint` would change in `src` for `engine`, worked out without writing.

    `changes`: what the copy would differ in; `fixes`: the error codes those changes resolve
    (judged by running the doctor on the planned copy); `unfixable`: the error findings that
    would remain. `matters` is False when no error would be resolved: then fix refuses (only
    cosmetic changes, or none) and `refusal` says why in one line.
    """

    src: Path
    engine: str
    changes: list[str]
    fixes: list[str]
    unfixable: list[Finding]
    before: list[Finding] = field(default_factory=list, repr=False)
    copy: object | None = field(default=None, repr=False, compare=False)  # fix's planned copy, for writing
    next_step: str | None = None  # what to run after fix (for llama.cpp: the converter's command line)

    @property
    def matters(self) -> bool:
        return bool(self.fixes)

    @property
    def refusal(self) -> str | None:
        """Why fix writes nothing (one line, without the path), or None when it would fix something."""
        if self.matters:
            return None
        force = "pass --force to write a copy anyway"
        codes = list(dict.fromkeys(f.code for f in self.unfixable))
        if not codes:
            who = "sglang and vllm" if self.engine == "all" else self.engine
            more = ""
            if self.next_step and self.src.suffix.lower() != ".gguf":
                from helpers.io.gguf_files import converter_command

                more = ("; for llama.cpp convert it as it is: "
                        + converter_command(self.src, None, self.src.name + ".gguf").replace("TARGET_DIR", "TARGET")
                        + " (TARGET: the target model's HF folder)")
            return f"nothing to fix for {who}: the doctor finds no error in the keys, mapping or config ({force}){more}"
        parts = [f"{c} ({cannot_repair(c)})" for c in codes]
        return f"cannot repair {', '.join(parts)}; nothing written ({force})"

    def as_dict(self) -> dict:
        return {"src": str(self.src), "engine": self.engine, "changes": list(self.changes),
                "fixes": list(self.fixes), "unfixable": list(dict.fromkeys(f.code for f in self.unfixable)),
                "matters": self.matters, "refusal": self.refusal}

    def to_json(self, dst, *, written: bool, dry_run: bool, findings=None) -> dict:
        """The `fix --json` object."""
        d = self.as_dict()
        return {
            "src": d["src"], "dst": str(dst), "engine": d["engine"], "changes": d["changes"], "fixes": d["fixes"],
            "unfixable": d["unfixable"], "written": written, "refusal": d["refusal"], "dry_run": dry_run,
            "findings": None if findings is None else [f.as_dict() for f in findings],
            "next_step": self.next_step,
        }

    def report(self, dst, will_write: bool) -> str:
        """The `fix --dry-run` text."""
        lines = [f"dry run: {self.src} -> {dst} (engine: {self.engine}); nothing written"]
        lines += [f"  - {c}" for c in self.changes] or ["  - (no changes)"]
        lines.append(f"  resolves: {', '.join(self.fixes) or '(no error)'}")
        left = list(dict.fromkeys(f.code for f in self.unfixable))
        lines.append(f"  left: {', '.join(left) or '(no error)'}")
        lines.append("  fix would write the copy" if will_write else "  fix would refuse: " + self.refusal)
        if self.next_step:
            lines.append(f"  next: {self.next_step}")
        return "\n".join(lines)


@dataclass
class FixResult:
    """What `fix_checkpoint` wrote: where, what changed, and the doctor's findings on the copy."""

    dst: Path
    changes: list[str]
    findings: list[Finding]  # the doctor on the written copy
    plan: FixPlan | None = None

    @property
    def ok(self) -> bool:
        return not has_error(self.findings)

    def report(self) -> str:
        """What `fix` prints after writing the copy."""
        lines = [f"wrote {self.dst}"] + [f"  - {c}" for c in self.changes]
        fixes = self.plan.fixes if self.plan is not None else []
        lines.append(f"  resolves: {', '.join(fixes) or '(no error; written because of --force)'}")
        engine = self.plan.engine if self.plan is not None else getattr(self.findings, "engine", None)
        findings = Findings(self.findings, path=self.dst, engine=engine)  # the doctor ran before the rename
        lines.append(findings.report())
        if not self.ok:
            lines.append("the fixed copy still has errors (see above); fix cannot repair those")
        if self.plan is not None and self.plan.next_step:
            lines.append(f"next: {self.plan.next_step}")
        return "\n".join(lines)
