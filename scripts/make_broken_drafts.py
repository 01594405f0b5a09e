"""Write one broken draft per second-wave doctor finding, made from the bundled samples.

    python -m scripts.make_broken_drafts OUT

OUT/<case>/draft is the bundled SGLang-style draft (data_samples/tiny_draft_sglang) with one
known deployment bug put in; OUT/<case>/target, where a case needs one, is a copy of
data_samples/tiny_target with the target side changed. OUT/cases.json lists each case: its
draft, the doctor arguments it needs, and the finding code and severity it must yield.
The tests run this script into a temporary folder; nothing is written into data_samples/.
"""
from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

SAMPLES = Path(__file__).resolve().parents[1] / "data_samples"
DRAFT, TARGET = SAMPLES / "tiny_draft_sglang", SAMPLES / "tiny_target"


def _copy(src: Path, dst: Path, tensors=None, config=None, files=("config.json", "model.safetensors")) -> Path:
    dst.mkdir(parents=True)
    for name in files:
        shutil.copy(src / name, dst / name)
    if tensors:
        t = load_file(str(dst / "model.safetensors"))
        t = tensors(t) or t
        save_file({k: v.contiguous() for k, v in t.items()}, str(dst / "model.safetensors"))
    if config:
        cfg = json.loads((dst / "config.json").read_text())
        cfg = config(cfg) or cfg
        (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst


def d2t_absolute(t):
    """d2t stores the absolute target ids (arange + offsets) instead of the offsets."""
    t["d2t"] = t["d2t"] + torch.arange(t["d2t"].numel())


def d2t_zeros(t):
    t["d2t"] = torch.zeros_like(t["d2t"])


def d2t_arange(t):
    t["d2t"] = torch.arange(t["d2t"].numel(), dtype=t["d2t"].dtype)


def side_files(folder: Path) -> None:
    """Move d2t/t2d out of the weights into speculators-style d2t.npy / t2d.npy beside them."""
    import numpy as np

    t = load_file(str(folder / "model.safetensors"))
    np.save(folder / "d2t.npy", t.pop("d2t").numpy())
    np.save(folder / "t2d.npy", t.pop("t2d").numpy())
    save_file(t, str(folder / "model.safetensors"), metadata={"format": "pt"})


def rebuilt_mapping(t: dict, swap: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    """(new kept target ids, new d2t): `swap` kept ids dropped and as many others added, kept sorted."""
    old = t["d2t"] + torch.arange(t["d2t"].numel())
    vocab = t["t2d"].numel()
    dropped = set(old[1::max(1, old.numel() // swap)][:swap].tolist())
    outside = [i for i in range(vocab - 1, -1, -1) if i not in set(old.tolist())][:swap]
    new = torch.tensor(sorted((set(old.tolist()) - dropped) | set(outside)), dtype=old.dtype)
    return new, new - torch.arange(new.numel(), dtype=old.dtype)


def _rebuild(permute_head: bool):
    def f(t):
        old = (t["d2t"] + torch.arange(t["d2t"].numel())).tolist()
        new, d2t = rebuilt_mapping(t)
        t["d2t"] = d2t
        t2d = torch.zeros_like(t["t2d"])
        t2d[new] = True
        t["t2d"] = t2d
        if permute_head:  # the head follows the new mapping: rows of kept ids move, new ids get fresh rows
            head, slot = t["lm_head.weight"], {tid: i for i, tid in enumerate(old)}
            g = torch.Generator().manual_seed(1)
            rows = [head[slot[tid]] if tid in slot else torch.randn(head.shape[1], generator=g).to(head.dtype)
                    for tid in new.tolist()]
            t["lm_head.weight"] = torch.stack(rows)
    return f


def _set(**kv):
    def f(cfg):
        cfg.update(kv)
    return f


def _unset(key):
    def f(cfg):
        cfg.pop(key, None)
    return f


def _aux(nested=None, top=None):
    def f(cfg):
        if nested is not None:
            cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": nested, "use_aux_hidden_state": True}
        if top is not None:
            cfg["eagle_aux_hidden_state_layer_ids"] = top
    return f


def _widen_fc(k):
    def f(t):
        fc = t["fc.weight"]
        h = fc.shape[1] // 3
        g = torch.Generator().manual_seed(3)
        extra = (torch.randn(fc.shape[0], (k - 3) * h, generator=g) * fc.float().std()).to(fc.dtype)
        t["fc.weight"] = torch.cat([fc, extra], dim=1)
    return f


def _full_vocab_head(t):
    del t["d2t"], t["t2d"]
    t["lm_head.weight"] = t["embed_tokens.weight"].clone()  # a trained full-vocab head


def _drop_head_and_mapping(t):
    del t["lm_head.weight"], t["d2t"], t["t2d"]


def _embed_key(t) -> str:
    """The embedding's name: a draft's `embed_tokens.weight`, a transformers target's `model.embed_tokens.weight`."""
    return "embed_tokens.weight" if "embed_tokens.weight" in t else "model.embed_tokens.weight"


def _scaled_embed(factor):
    def f(t):
        k = _embed_key(t)
        t[k] = (t[k].float() * factor).to(t[k].dtype)
    return f


def _other_revision(t):
    k = _embed_key(t)
    e = t[k].float()
    g = torch.Generator().manual_seed(7)
    rows = torch.randperm(e.shape[0], generator=g)[:200]
    e[rows] += torch.randn(200, e.shape[1], generator=g) * e.std()
    t[k] = e.to(t[k].dtype)


def build(out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    cases = {}

    def add(name, code, severity, draft, args=(), previous=False, target=None):
        cases[name] = {"draft": str(draft), "args": list(args), "code": code, "severity": severity}

    d = _copy(DRAFT, out / "eagle1-architecture" / "draft", config=_set(architectures=["LlamaForCausalLMEagle"]))
    add("eagle1-architecture", "eagle3-as-eagle", "error", d)
    add("served-with-eagle-flag", "eagle3-as-eagle", "error", DRAFT, ["--algorithm", "eagle"])
    d = _copy(DRAFT, out / "aux-states-switched-off" / "draft",
              config=lambda c: c["eagle_config"].update(use_aux_hidden_state=False))
    add("aux-states-switched-off", "eagle3-as-eagle", "error", d)
    d = _copy(DRAFT, out / "head-replaced-by-target" / "draft", tensors=_full_vocab_head,
              config=_unset("draft_vocab_size"))
    add("head-replaced-by-target", "lm-head-borrowed", "warning", d, ["--engine", "sglang"])
    d = _copy(DRAFT, out / "head-never-borrowed" / "draft", tensors=_drop_head_and_mapping,
              config=lambda c: c.update(draft_vocab_size=c["vocab_size"]))
    add("head-never-borrowed", "lm-head-borrowed", "error", d)
    for name, fn in (("embed-gemma-scale", _scaled_embed(1 / math.sqrt(64))), ("embed-other-revision", _other_revision)):
        tgt = _copy(TARGET, out / name / "target", tensors=fn)
        add(name, "embed-mismatch", "error", DRAFT, ["--target", str(tgt)])
    d = _copy(DRAFT, out / "short-context" / "draft", config=_set(max_position_embeddings=128))
    add("short-context", "context-length", "warning", d, ["--target", str(TARGET)])
    tgt = _copy(TARGET, out / "target-rope-scaling" / "target", files=("config.json",),
                config=_set(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}))
    add("target-rope-scaling", "context-length", "warning", DRAFT, ["--target", str(tgt)])
    d = _copy(DRAFT, out / "aux-out-of-range" / "draft", config=_aux(nested=[1, 4, 7]))
    add("aux-out-of-range", "aux-layers", "error", d, ["--target", str(TARGET)])
    d = _copy(DRAFT, out / "aux-places-differ" / "draft", config=_aux(nested=[1, 3, 4], top=[2, 4, 6]))
    add("aux-places-differ", "aux-layers", "warning", d)
    d = _copy(DRAFT, out / "aux-five-ids-three-state-fc" / "draft", config=_aux(nested=[1, 2, 3, 4, 5]))
    add("aux-five-ids-three-state-fc", "aux-layers", "error", d)
    d = _copy(DRAFT, out / "aux-five-layer-draft" / "draft", tensors=_widen_fc(5), config=_aux(nested=[1, 2, 3, 4, 5]))
    # SGLang sizes fc from the id count from 0.5.12 (vLLM from 0.22.0): the warning is about older releases
    add("aux-five-layer-draft", "aux-layers", "warning", d, ["--engine", "sglang==0.5.11"])
    d = _copy(DRAFT, out / "mapping-drift" / "draft", tensors=_rebuild(permute_head=False))
    add("mapping-drift", "mapping-drift", "error", d, ["--previous", str(DRAFT)])
    ok = _copy(DRAFT, out / "mapping-rebuilt-with-head" / "draft", tensors=_rebuild(permute_head=True))
    cases["mapping-drift"]["healthy_twin"] = str(ok)
    (out / "cases.json").write_text(json.dumps(cases, indent=2))
    return cases


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for name, case in build(Path(sys.argv[1])).items():
        print(f"{name}: {case['code']} ({case['severity']})")
