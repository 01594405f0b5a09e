"""The engine table in words: the rule x engine-release table that docs/doctor-findings.md quotes
("Engine rules by version"), rendered from `helpers.engines.table` (its one source; a test
compares the doc with it).
"""
from __future__ import annotations

from helpers.engines.table import ENGINE_TABLE, RULES, Engine


def _cell(e: Engine, rule: str) -> str:
    spans = e.rules.get(rule)
    if not spans:
        return "not read"

    def val(v):
        if isinstance(v, dict):  # a rule by kind (config.converter): "absent: a+b; null: ..."
            return "; ".join(f"{k}: {val(x)}" for k, x in v.items())
        return "none" if v == () else "+".join(v) if isinstance(v, tuple) else "yes" if v is True else "no" if v is False else str(v)

    if len(spans) == 1:
        sp = spans[0]
        return val(sp.value) + (f" ({sp.pr})" if sp.pr else "")
    parts, t = [], e.tag
    for sp in spans:
        rng = (f"to {t}{sp.until}" if sp.since is None else f"{t}{sp.since}+" if sp.until is None
               else f"{t}{sp.since}" if sp.since == sp.until else f"{t}{sp.since}-{t}{sp.until}")
        parts.append(f"{val(sp.value)} {rng}" + (f" ({sp.pr})" if sp.pr else ""))
    return "; ".join(parts)


def rule_table_markdown() -> str:
    """The rule x engine-release table, one row per rule, in markdown (the table is its one source)."""
    engines = list(ENGINE_TABLE.values())
    rules = list(dict.fromkeys(r for e in engines for r in e.rules))
    head = "| rule | " + " | ".join(e.name for e in engines) + " |"
    lines = [head, "|" + " --- |" * (len(engines) + 1)]
    for r in rules:
        lines.append(f"| {RULES.get(r, r)} | " + " | ".join(_cell(e, r) for e in engines) + " |")
    return "\n".join(lines)

