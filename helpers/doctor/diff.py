"""What changed between two drafts' vocab mappings, and whether lm_head moved with it.

`diff_drafts(a, b)` reads each checkpoint's d2t (offset reading: draft slot i -> target id
i + d2t[i]) and, when both have one, its lm_head, and returns a `DraftDiff`: target ids added
and removed, ids kept at another draft slot ("moved"), and for the moved ids how well B's
lm_head rows agree with A's under each mapping: B's row at the id's NEW slot (B's mapping) and
at its OLD slot (A's mapping). A draft fine-tuned from A whose mapping was rebuilt from new data
while its lm_head rows kept A's order agrees under A's mapping, not its own: that is mapping
drift, and `check_drift` (the doctor's `--previous`) reports it as `mapping-drift`, with how many of
B's draft slots (`slots_changed`) now name another token than their carried-over head row: half or
more predicts an accept length about 1 (vLLM served the engine pair's `d2t-stale` copy at 1.0: the
engine table's `mapping-drift.error` outcome), fewer an accept length at or below the trained one
(`mapping-drift.partial`).

Each side's encoding verdict is read first (`VocabMapping.verdict`): a draft whose `d2t` is
stored as absolute ids is compared under the absolute reading (what its table means), and the
change of encoding is named as such (`encoding_a`, `encoding_b`, verdict "encoding changed",
with `d2t-lab fix` suggested), never as moved ids or drift. When no moved id's lm_head row
agrees under either mapping (0 % / 0 %), that tie has its own wording.
"""
from __future__ import annotations

import torch

from helpers.core.errors import BadInputError
from helpers.doctor.findings import CheckContext
from helpers.doctor.findings import fmt_number as _fmt
from helpers.io.checkpoint import Checkpoint, load_mapping, open_checkpoint
from helpers.io.configs import flat_config

AGREE = 0.9  # cosine similarity above which two lm_head rows count as the same row
DRIFT_MOST = 0.5  # share of draft slots naming another token from which drift is predicted at accept length ~1
SHOWN = 50  # moved ids listed in the text report


def _open(x) -> Checkpoint:
    return x if isinstance(x, Checkpoint) else open_checkpoint(x)


def _head(ck: Checkpoint) -> torch.Tensor | None:
    k = ck.tensors.find("lm_head.weight")
    return None if k is None or len(ck.tensors.shape(k)) != 2 else ck.tensors.get(k).float()


def _row_agreement(ha: torch.Tensor, hb: torch.Tensor, rows_a: torch.Tensor, rows_b: torch.Tensor) -> torch.Tensor:
    if rows_a.numel() == 0:
        return torch.empty(0)
    return torch.nn.functional.cosine_similarity(ha[rows_a], hb[rows_b], dim=-1)


class DraftDiff(dict):
    """The `diff --json` object, with its text rendering and the per-id arrays for the figure."""

    def report(self) -> str:
        r = self
        lines = [f"{r['a']}  ->  {r['b']}",
                 f"  draft vocab {_fmt(r['draft_vocab_a'])} -> {_fmt(r['draft_vocab_b'])}; target ids kept by both "
                 f"{_fmt(r['shared'])}, added {_fmt(len(r['added']))}, removed {_fmt(len(r['removed']))}, "
                 f"moved to another slot {_fmt(len(r['moved']))}"]
        for name in ("added", "removed"):
            if r[name]:
                lines.append(f"  {name}: " + ", ".join(map(str, r[name][:SHOWN])) + (" ..." if len(r[name]) > SHOWN else ""))
        if r["moved"]:
            lines.append("  moved (target id: slot in A -> slot in B): " + ", ".join(
                f"{m['target_id']}: {m['slot_a']}->{m['slot_b']}" for m in r["moved"][:SHOWN])
                + (" ..." if len(r["moved"]) > SHOWN else ""))
        h = r["lm_head"]
        if h is not None:
            lines.append(f"  lm_head rows of moved ids that match A's row for the same id: under B's mapping "
                         f"{h['agree_under_b']:.0%}, under A's (old) mapping {h['agree_under_a']:.0%}")
        lines.append(f"  verdict: {r['verdict']}")
        return "\n".join(lines)

    __str__ = report


class DifferentTargets(BadInputError):
    """Two drafts built for different target vocabularies: nothing to diff (one line, exit 2)."""


def target_vocab(ck: Checkpoint, m, targets: torch.Tensor) -> tuple[int | None, str, int]:
    """(the target vocab a draft states, where it states it, the smallest vocab its d2t needs).

    Stated: config.json's vocab_size (`target_vocab_size` where the config names it so), else
    t2d's length; `load_mapping` has already refused a draft whose config and t2d disagree.
    Needed: its largest target id + 1 under the reading its table is compared under."""
    need = int(targets.max()) + 1 if targets.numel() else 0
    if m.target_vocab_size is None:
        return None, "", need
    flat = flat_config(ck.config) if isinstance(ck.config, dict) and ck.config else {}
    key = "target_vocab_size" if "target_vocab_size" in flat else "vocab_size"
    stated_in_config = isinstance(flat.get(key), int) and flat.get(key) == m.target_vocab_size
    return m.target_vocab_size, f"config {key}" if stated_in_config else "t2d length", need


def check_same_target(a: str, va: tuple, b: str, vb: tuple) -> None:
    """Refuse (one line naming both sizes) two drafts built for different target vocabularies:
    their mappings index different token tables, so no id, slot or lm_head row compares."""
    (sa, wa, na), (sb, wb, nb) = va, vb
    if sa is not None and sb is not None and sa != sb:
        raise DifferentTargets(b, f"is a draft for a {sb:,}-token target vocab ({wb}), {a} for a {sa:,}-token one ({wa}): "
                            "drafts of different targets, their mappings do not compare (diff two checkpoints of "
                            "one draft, or of drafts for the same target)")
    for stated, where, name, need, other in ((sa, wa, a, nb, b), (sb, wb, b, na, a)):
        if stated is not None and need > stated:
            raise DifferentTargets(other, f"maps draft ids to target ids up to {need - 1:,}, past the {stated:,}-token "
                                f"target vocab of {name} ({where}): drafts of different targets, their mappings do "
                                "not compare")


def _name(x, ck: Checkpoint) -> str:
    return ck.origin or str(x if not isinstance(x, Checkpoint) else ck.path)


def _side(x) -> tuple:
    """(opened checkpoint, mapping, its encoding, its target ids under the reading it is compared under)."""
    ck = _open(x)
    m = load_mapping(ck)
    enc = m.verdict().encoding
    return ck, m, enc, m.targets(_reading(enc))


def refuse_other_target(previous, current) -> None:
    """`doctor --previous`: a previous checkpoint of a draft for another target vocabulary is refused
    (`DifferentTargets`, one line naming both sizes, exit 2) before the doctor runs. A side without
    a readable mapping passes here: the doctor's mapping checks name that."""
    try:
        (cka, ma, _, ta), (ckb, mb, _, tb) = _side(previous), _side(current)
    except BadInputError:
        return
    check_same_target(_name(previous, cka), target_vocab(cka, ma, ta), _name(current, ckb), target_vocab(ckb, mb, tb))


def diff_drafts(a, b) -> DraftDiff:
    """How draft `b`'s mapping (and lm_head) differs from draft `a`'s. Paths, URLs or opened checkpoints.

    Two drafts of different target vocabularies (config vocab_size, t2d length, d2t's range) are
    refused first, one `BadInputError` line naming both sizes (`check_same_target`)."""
    (cka, ma, ea, ta), (ckb, mb, eb, tb) = _side(a), _side(b)
    check_same_target(_name(a, cka), target_vocab(cka, ma, ta), _name(b, ckb), target_vocab(ckb, mb, tb))
    slot_a = {int(t): i for i, t in enumerate(ta.tolist())}
    slot_b = {int(t): i for i, t in enumerate(tb.tolist())}
    shared = sorted(set(slot_a) & set(slot_b))
    moved = [t for t in shared if slot_a[t] != slot_b[t]]
    out = DraftDiff(
        a=_name(a, cka), b=_name(b, ckb),
        draft_vocab_a=ma.draft_vocab_size, draft_vocab_b=mb.draft_vocab_size, shared=len(shared),
        added=sorted(set(slot_b) - set(slot_a)), removed=sorted(set(slot_a) - set(slot_b)),
        moved=[{"target_id": t, "slot_a": slot_a[t], "slot_b": slot_b[t]} for t in moved],
        lm_head=None, encoding_a=ea, encoding_b=eb,
        # how each side's format means d2t to be read: "offset" (HF), "absolute" (a llama.cpp GGUF)
        convention_a=cka.d2t_convention, convention_b=ckb.d2t_convention,
        # draft slots of B that name another target id than the same slot of A: with A's head rows carried over,
        # each of them drafts a token its head row was not trained for
        slots_changed=sum(int(x) != int(y) for x, y in zip(ta.tolist(), tb.tolist())) + abs(len(ta) - len(tb)),
    )
    ha, hb = _head(cka), _head(ckb)
    agree_a = agree_b = None
    if ha is not None and hb is not None and ha.shape[1] == hb.shape[1] and moved:
        ra = torch.tensor([slot_a[t] for t in moved])
        rb = torch.tensor([slot_b[t] for t in moved])
        in_b = rb < hb.shape[0]
        in_a = ra < hb.shape[0]
        agree_b = _row_agreement(ha, hb, ra[in_b], rb[in_b])
        agree_a = _row_agreement(ha, hb, ra[in_a], ra[in_a])
        out["lm_head"] = {"rows_compared": len(moved), "threshold": AGREE,
                          "agree_under_b": float((agree_b > AGREE).float().mean()) if agree_b.numel() else 0.0,
                          "agree_under_a": float((agree_a > AGREE).float().mean()) if agree_a.numel() else 0.0}
    out["verdict"] = _verdict(out)
    out.sources = list(dict.fromkeys(ma.sources + mb.sources))
    out.arrays = {"slot_a": [slot_a[t] for t in shared], "slot_b": [slot_b[t] for t in shared],
                  "moved": [slot_a[t] != slot_b[t] for t in shared],
                  "cos_under_a": None if agree_a is None else agree_a.tolist(),
                  "cos_under_b": None if agree_b is None else agree_b.tolist()}
    return out


def _reading(encoding: str) -> str:
    """The reading a side's table is compared under: absolute ids as absolute, else offsets."""
    return "absolute" if encoding == "absolute" else "offset"


def encoding_change(d: DraftDiff, a: str = "A", b: str = "B") -> str | None:
    """'A stores d2t as offsets, B as absolute ids' when exactly one side is absolute, else None."""
    ea, eb = d.get("encoding_a"), d.get("encoding_b")
    if (ea == "absolute") == (eb == "absolute"):
        return None
    say = {"absolute": "absolute ids", "offset": "offsets"}
    return f"{a} stores d2t as {say.get(ea, ea)}, {b} as {say.get(eb, eb)}"


def misencoded(d: DraftDiff, side: str) -> bool:
    """Side "a" / "b" stores d2t in the other encoding than its format's reader reads (absolute ids in an HF
    checkpoint, offsets in a llama.cpp GGUF)."""
    enc, conv = d.get(f"encoding_{side}"), d.get(f"convention_{side}", "offset")
    return enc in ("absolute", "offset") and enc != conv


def _verdict(d: DraftDiff) -> str:
    v = _verdict_of_ids(d)
    if not encoding_change(d):
        for side in ("b", "a"):
            if misencoded(d, side) and d.get(f"convention_{side}") == "absolute":
                v += (f"; {side.upper()} is a GGUF whose d2t holds offsets where llama.cpp reads absolute ids: "
                      f"d2t-lab fix {d[side]} FIXED.gguf")
    return v


def _verdict_of_ids(d: DraftDiff) -> str:
    h = d["lm_head"]
    change = encoding_change(d)
    if change:
        same = "the same target ids" if not d["moved"] and not d["added"] and not d["removed"] else "ids that differ"
        wrong = [s for s in ("b", "a") if misencoded(d, s)]
        if not wrong:  # each as its format is read (an HF checkpoint and its llama.cpp GGUF, say)
            return f"encoding changed: {change} (each read as stored: {same}); each as its format's engine reads it"
        fixed = wrong[0].upper()
        return (f"encoding changed: {change} (each read as stored: {same}); serve {fixed} after "
                f"d2t-lab fix {d['b'] if fixed == 'B' else d['a']} FIXED")
    if not d["moved"] and not d["added"] and not d["removed"]:
        return "same mapping"
    if h is None:
        return "mapping changed (lm_head rows not compared)"
    if h["agree_under_a"] > 0.5 and h["agree_under_a"] > h["agree_under_b"] + 0.25:
        return "mapping drift: the mapping was rebuilt but lm_head rows keep the old order"
    if h["agree_under_a"] == 0 and h["agree_under_b"] == 0:
        return "mapping changed; no moved id's lm_head row agrees under either mapping (0 % / 0 %): a retrained head"
    if h["agree_under_b"] >= h["agree_under_a"]:
        return "mapping changed and lm_head rows moved with it"
    return "mapping changed; lm_head rows match neither order well (retrained head)"


def check_drift(c: CheckContext, previous) -> None:
    """mapping-drift: the checkpoint against an earlier one of the same draft (`doctor --previous`)."""
    try:
        d = diff_drafts(previous, c.ck)
    except BadInputError as e:  # no mapping in one of them (the mapping checks say so for this one), or drafts
        # of different target vocabularies: named as not compared, never as drift
        other = isinstance(e, DifferentTargets)
        c.add("mapping-drift", "info", f"not compared with the previous checkpoint: {e}",
              "pass --previous an earlier checkpoint of this same draft (same target)" if other else "nothing to do")
        return
    h = d["lm_head"]
    change = encoding_change(d, "the previous checkpoint", "this one")
    if change:  # not drift: the d2t encoding checks report the absolute table itself (and its fix)
        fix_this = misencoded(d, "b")
        same = not d["moved"] and not d["added"] and not d["removed"]
        c.add("mapping-drift", "info",
              f"against {d['a']}: not drift but an encoding change ({change}); each read as stored, the tables map "
              + ("the same target ids" if same else
                 f"{len(d['moved']):,} ids to other slots, {len(d['added']):,} added, {len(d['removed']):,} removed"),
              f"d2t-lab fix {d['b']} FIXED (d2t stored as its engines read it)" if fix_this else "nothing to do")
        return
    if d["verdict"].startswith("mapping drift"):
        n = max(d["draft_vocab_b"] or 0, 1)
        share = d["slots_changed"] / n
        most = share >= DRIFT_MOST
        c.add("mapping-drift", "error",
              f"against {d['a']}: {len(d['moved']):,} target ids moved to other draft slots, but lm_head rows for "
              f"them match the previous draft's rows at the OLD slots ({h['agree_under_a']:.0%}) and not at the new "
              f"ones ({h['agree_under_b']:.0%}): the mapping was rebuilt while lm_head kept the old order, so "
              f"every moved id is drafted as another token; {d['slots_changed']:,} of {n:,} draft slots ({share:.0%}) "
              "now name another token than their head row was trained for"
              + (", so almost every drafted token is wrong: accept length about 1" if most else
                 ": accept length at or below the trained one, by how often those tokens come up")
              + " (training accuracy does not show it: the trainer scores the head against its own mapping; "
              "SpecForge #534)",
              "ship the previous d2t/t2d with these weights (or permute lm_head rows to the new mapping); "
              "see d2t-lab diff PREVIOUS CHECKPOINT", effect=None if most else "mapping-drift.partial")
    elif d["moved"] or d["added"] or d["removed"]:
        c.add("mapping-drift", "info",
              f"against {d['a']}: {d['verdict']} ({len(d['moved']):,} moved, {len(d['added']):,} added, "
              f"{len(d['removed']):,} removed)", "nothing to do")
