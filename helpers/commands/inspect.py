"""`inspect PATH`: how a checkpoint's d2t is encoded, and whether it agrees with t2d."""
from __future__ import annotations

import json

from . import _options

HELP = "show how d2t is encoded (offset / absolute / identity / ambiguous / inconsistent)"
DESCRIPTION = """\
Read only the d2t/t2d tensors of a draft checkpoint or mapping file and report both readings:
  offset   target_id = i + d2t[i]   (what SGLang, vLLM and TensorRT-LLM do)
  absolute target_id = d2t[i]       (a common bug in hand-written tests)
PATH may be a checkpoint folder (config.json + model.safetensors / sharded index /
pytorch_model.bin), a single .safetensors/.bin/.pt file, a SpecForge/EAGLE mapping .pt dict,
separate d2t.pt + t2d.pt, or speculators' d2t.npy / t2d.npy (also d2t-32000.npy); a SpecForge
trainer folder (<run>-step<N>/training_state.pt, weights under draft_state_dict; the trainer's
output folder follows its <run>-latest link) or a speculators epoch folder. A .pt is taken as
the mapping only when it holds d2t (and optionally t2d) tensors; optimizer states, per-rank
training states and other .pt files beside a checkpoint are listed as ignored. A checkpoint
without d2t whose draft vocab equals the target vocab (speculators writes none then) reads as
the identity mapping.

Exit 0 on a readable mapping whatever the verdict; 2 with one line on unreadable input."""


def add_arguments(p) -> None:
    _options.checkpoint(p)
    _options.json_flag(p)


def format_report(r: dict) -> str:
    def fmt(x):
        return "unknown" if x is None else f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else str(x)

    lines = [
        f"{r['path']}",
        f"  verdict: {r['verdict'].upper()}",
        f"  draft vocab {fmt(r['draft_vocab_size'])}, target vocab {fmt(r['target_vocab_size'])}, "
        f"t2d: {'%s True' % fmt(r['t2d_true']) if r['has_t2d'] else 'absent'}, key layout: {r['key_layout']}",
        f"  d2t: {fmt(r['nonzero_entries'])} non-zero of {fmt(r['draft_vocab_size'])}, leading zeros {fmt(r['leading_zero_run'])}, "
        f"distinct values {fmt(r['distinct_values'])}, non-decreasing: {'yes' if r['non_decreasing'] else 'no'}",
        "",
        f"  {'reading':<10}{'distinct targets':>18}{'in range':>10}{'= t2d':>8}{'max id':>10}",
    ]
    for name in ("offset", "absolute"):
        rr = r[f"{name}_reading"]
        yn = {True: "yes", False: "NO", None: "-"}
        lines.append(
            f"  {name:<10}{fmt(rr['distinct_targets']):>18}{yn[rr['in_range']]:>10}{yn[rr['matches_t2d']]:>8}{fmt(rr['max_id']):>10}"
        )
    lines.append("")
    lines += [f"  - {e}" for e in r["evidence"]]
    lines += [f"  ! {e}" for e in r["reasons"]]
    lines.append("  read: " + ", ".join(r["sources"]))
    lines += [f"  ignored: {f} ({why})" for f, why in r.get("ignored", {}).items()]
    return "\n".join(lines)


def run(args) -> int:
    from ..checkpoint import inspect_path

    r = inspect_path(args.checkpoint)
    print(json.dumps(r, indent=2) if args.json else format_report(r))
    return 0
