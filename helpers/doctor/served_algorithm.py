"""The doctor's `eagle3-as-eagle` for a server's stated speculative algorithm: what `probe`, `logs
--checkpoint` and `report --log` say when a server ran an EAGLE (1/2) algorithm.

The server side (the algorithm, the draft path or class, where each was stated) is read by
`helpers.serving.startup.Setup`; the finding is the doctor's: with a checkpoint its own check
decides (`helpers.doctor.checks_target.check_algorithm`, the draft's fc width), without one what
the setup shows of the draft (`Setup.wrong_algorithm`). Either way it is checked against the
registry (`helpers.doctor.registry.check_finding`) before it is returned.
"""
from __future__ import annotations

from helpers.doctor.registry import check_finding


def algorithm_findings(setup, checkpoint=None, engine: str = "all") -> list[dict]:
    """The doctor's `eagle3-as-eagle` where `setup` (`helpers.serving.startup.Setup`) says the server
    ran an EAGLE (1/2) algorithm: with `checkpoint` (a path or an open `Checkpoint`), the doctor's own
    finding (`doctor --algorithm eagle`'s, that check alone: `helpers.doctor.diagnose.served_as_eagle`;
    the draft's fc width decides); without, what the setup shows of the draft
    (`Setup.wrong_algorithm`). Each: {code, severity, message, fix, algorithm: where it was stated}."""
    if setup.family != "eagle":
        return []
    if not checkpoint:
        wrong = setup.wrong_algorithm()
        if wrong is None:
            return []
        check_finding(wrong["code"], wrong["severity"], None, None)
        return [wrong]
    from helpers.doctor.diagnose import served_as_eagle

    return [{**f.as_dict(), "algorithm": dict(setup.algorithm)} for f in served_as_eagle(checkpoint, engine)[:1]]


def finding_lines(findings) -> list[str]:
    """A finding per line: code, severity, message, where the algorithm was stated, fix."""
    out = []
    for f in findings:
        a = f.get("algorithm") or {}
        at = "" if not a else f" [algorithm {a['value']!r} at {a.get('where')}" + (
            f" line {a['line']}]" if a.get("line") is not None else "]")
        out.append(f"  finding: {f['code']} ({f['severity']}): {f['message']}{at}; fix: {f['fix']}")
    return out
