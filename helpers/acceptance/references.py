"""Published accept lengths of public EAGLE-3 drafts, and where a user's number sits among them.

The table ships in the package (`reference_values.json`): target, family, draft, engine, drafting
settings, benchmark, accept length (bonus token counted), per-position rates where published,
the source URL and where the value was read back. They are the publishers' figures, not
measurements by this kit: a report labels them "published reference values", never user data.
Benchmarks differ from a user's traffic, so a placement is a sense of scale, not a verdict.
"""
from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files


@lru_cache(maxsize=1)
def reference_values() -> list[dict]:
    """Every row of the shipped table as a dict (column names from the file)."""
    data = json.loads(files(__package__).joinpath("reference_values.json").read_text(encoding="utf-8"))
    return [dict(zip(data["columns"], row)) for row in data["rows"]]


def family_of(target: str | None) -> str | None:
    """The reference family a target name belongs to ('kimi-k2', 'llama-3.1', ...), or None."""
    if not target:
        return None
    t = target.lower().replace("_", "-")
    for fam in sorted({r["family"] for r in reference_values()}, key=len, reverse=True):
        if fam in t or fam.replace("-", "") in t.replace("-", ""):
            return fam
    return None


def matching(family: str | None = None, steps=None, topk=None, draft_tokens=None) -> list[dict]:
    """Rows for a family (all when None) and, where given, the same drafting settings."""
    out = []
    for r in reference_values():
        if family and r["family"] != family:
            continue
        if steps is not None and r["steps"] != steps or topk is not None and r["topk"] != topk:
            continue
        if draft_tokens is not None and r["draft_tokens"] != draft_tokens:
            continue
        out.append(r)
    return out


def place(accept_length: float, family: str | None = None, steps=None, topk=None, draft_tokens=None) -> dict:
    """Where `accept_length` sits among the published values for the same family and settings
    (all families when none match): the rows compared, how many are below it, one sentence."""
    rows = matching(family, steps, topk, draft_tokens)
    scope = f"{family} drafts" if rows and family else "public EAGLE-3 drafts"
    if not rows:
        rows = matching(None, steps, topk, draft_tokens)
        scope = "public EAGLE-3 drafts of any family"
    if not rows:
        return {"rows": [], "below": 0, "text": "No published reference value for these drafting settings."}
    values = sorted(r["accept_length"] for r in rows)
    below = sum(v < accept_length for v in values)
    text = (f"Your {accept_length:.2f} against {len(values)} published reference value(s) for {scope} with the same "
            f"drafting ({values[0]:.2f} .. {values[-1]:.2f}): above {below} of them. Published values are the "
            "publishers' benchmarks (MT-Bench, GSM8K, HumanEval), not your traffic.")
    return {"rows": rows, "below": below, "text": text}
