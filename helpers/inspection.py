"""The `inspect` result: a mapping's verdict, sizes and both readings, as JSON and as text.

`inspect(path)` returns an `Inspection`, a dict (the `inspect --json` object, from
`helpers.checkpoint.inspect_path`) whose `report()` is the text the CLI prints and the
dashboard shows. It reads only the d2t/t2d tensors.
"""
from __future__ import annotations


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
        lines.append("  read: " + ", ".join(r["sources"]))
        lines += [f"  ignored: {f} ({why})" for f, why in r.get("ignored", {}).items()]
        return "\n".join(lines)

    __str__ = report


def inspect(path) -> Inspection:
    """How the d2t at `path` (any layout the readers know) is encoded, with the evidence."""
    from .checkpoint import inspect_path

    return Inspection(inspect_path(path))
