"""`inspect PATH`: how a checkpoint's d2t is encoded, and whether it agrees with t2d."""
from __future__ import annotations

from helpers.commands import _options
from helpers.core import jsontext

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


def run(args) -> int:
    from helpers.doctor.inspection import inspect

    r = inspect(args.checkpoint)
    print(jsontext.dumps(r, indent=2) if args.json else r.report())
    return 0
