"""The `inspect` result: a mapping's verdict, sizes and both readings, as JSON and as text.

`inspect(path)` returns an `Inspection`, a dict (the `inspect --json` object, from
`inspect_path`) whose `report()` is the text the CLI prints and the dashboard shows;
`mapping_verdict` is the one word figure captions use. Only the d2t/t2d tensors are read (and
config.json, for the draft's family: MLA or MHA attention, `helpers.core.engines.draft_family`).
"""
from __future__ import annotations

from helpers.core.engines import draft_family
from helpers.io.checkpoint import load_mapping, open_checkpoint, read_mapping_tensors


def _fmt(x) -> str:
    return "unknown" if x is None else f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else str(x)


class Inspection(dict):
    """The `inspect --json` object, with its text rendering."""

    def report(self) -> str:
        r = self
        t2d = f"{_fmt(r['t2d_true'])} True" if r["has_t2d"] else "absent"
        lines = [
            f"{r['path']}",
            f"  verdict: {r['verdict'].upper()}",
            f"  draft vocab {_fmt(r['draft_vocab_size'])}, target vocab {_fmt(r['target_vocab_size'])}, "
            f"t2d: {t2d}, key layout: {r['key_layout']}",
            f"  d2t: {_fmt(r['nonzero_entries'])} non-zero of {_fmt(r['draft_vocab_size'])}, leading zeros "
            f"{_fmt(r['leading_zero_run'])}, distinct values {_fmt(r['distinct_values'])}, "
            f"non-decreasing: {'yes' if r['non_decreasing'] else 'no'}",
            "",
            f"  {'reading':<10}{'distinct targets':>18}{'in range':>10}{'= t2d':>8}{'max id':>10}",
        ]
        yn = {True: "yes", False: "NO", None: "-"}
        for name in ("offset", "absolute"):
            rr = r[f"{name}_reading"]
            lines.append(f"  {name:<10}{_fmt(rr['distinct_targets']):>18}{yn[rr['in_range']]:>10}"
                         f"{yn[rr['matches_t2d']]:>8}{_fmt(rr['max_id']):>10}")
        lines.append("")
        lines += [f"  - {e}" for e in r["evidence"]]
        lines += [f"  ! {e}" for e in r["reasons"]]
        d = r.get("draft")
        if d:
            arch = ", ".join(d["architectures"]) or "no architectures"
            lines.append(f"  draft: {d['attention'].upper()} attention (model_type {d['model_type'] or 'unset'}; {arch})")
        lines.append("  read: " + ", ".join(r["sources"]))
        lines += [f"  ignored: {f} ({why})" for f, why in r.get("ignored", {}).items()]
        return "\n".join(lines)

    __str__ = report


def inspect(path) -> Inspection:
    """How the d2t at `path` (any layout the readers know) is encoded, with the evidence."""
    return Inspection(inspect_path(path))


def mapping_verdict(path) -> str:
    """The d2t verdict of a checkpoint as one word for captions: offset, absolute, ... or 'no d2t'."""
    ck = open_checkpoint(path)
    d2t, _, _ = read_mapping_tensors(ck)
    return "no d2t" if d2t is None else load_mapping(ck).verdict().encoding


def inspect_path(path) -> dict:
    """The `inspect --json` object for a path: the mapping summary, key layout and files read."""
    ck = open_checkpoint(path)
    m = load_mapping(ck)
    out = m.summary()
    out["key_layout"] = ck.key_layout
    out["sources"] = m.sources
    out["ignored"] = dict(ck.ignored)
    out["draft"] = draft_family(ck.config) if ck.config else None  # MLA (DeepSeek / Kimi family) or MHA
    if read_mapping_tensors(ck)[0] is None:
        out["evidence"] = [f"no d2t: the draft keeps the full target vocab ({m.draft_vocab_size:,} ids), "
                           "so the engines' identity mapping is right"] + list(out["evidence"])
    out["path"] = str(path)
    return out

