"""The `inspect` result: a mapping's verdict, sizes and both readings, as JSON and as text.

`inspect(path)` returns an `Inspection`, a dict (the `inspect --json` object, from
`inspect_path`) whose `report()` is the text the CLI prints and the dashboard shows;
`mapping_verdict` is the one word figure captions use. Only the d2t/t2d tensors are read (and
config.json, for the draft's family: MLA or MHA attention, `helpers.engines.registry.draft_family`).

A block-diffusion draft (DFlash / DSpark / XPress, `helpers.model.dflash`) adds `draft_kind`, its
0-based `dflash_layer_ids` and `dflash` (what it is, where vLLM reads its ids and the target layers
they capture). Such a draft stores no d2t and no lm_head when it keeps the target's vocab; it then
reads as the identity over `vocab_size`, as vLLM serves it. Its config.json alone (a folder without
weights) is read the same way, the weights being unread.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from helpers.engines.registry import draft_family, engines_at
from helpers.core.errors import BadInputError
from helpers.io.checkpoint import Checkpoint, load_mapping, open_checkpoint, read_mapping_tensors
from helpers.io.configs import read_config
from helpers.io.mapping import VocabMapping
from helpers.model.config_fields import check_draft_config
from helpers.model.dflash import capture_per_engine, dflash_draft


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
        if r.get("dflash"):
            lines += _dflash_lines(r)
        if r.get("format") == "gguf":
            lines.append("  format: GGUF (llama.cpp's EAGLE-3 draft); llama.cpp reads its d2t as absolute target ids "
                         "(SGLang, vLLM and TensorRT-LLM read offsets, but do not load a GGUF)")
            lines.append(f"  for llama.cpp: {r['engine_reading']['says']}")
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
    ck, alone = _open(path)
    if ck.config is not None:  # each field typed once (null is absent), the first wrong one named
        ck = replace(ck, config=check_draft_config(ck.config, ck.config_path or ck.path, sizes=False))
    dflash = dflash_draft(ck.config, ck.tensors.keys()) if ck.config or ck.tensors.keys() else None
    m = _identity(ck, dflash) if dflash is not None and read_mapping_tensors(ck)[0] is None else None
    m = m or load_mapping(ck)
    out = m.summary()
    out["key_layout"] = ck.key_layout
    out["sources"] = m.sources
    out["ignored"] = dict(ck.ignored)
    out["draft"] = draft_family(ck.config) if ck.config else None  # MLA (DeepSeek / Kimi family) or MHA
    if read_mapping_tensors(ck)[0] is None:
        out["evidence"] = [f"no d2t: the draft keeps the full target vocab ({m.draft_vocab_size:,} ids), "
                           "so the engines' identity mapping is right"] + list(out["evidence"])
    out.update(engine_reading(ck, out["verdict"]))
    out["path"] = str(path)
    out["draft_kind"] = dflash.kind if dflash else None  # set for a block-diffusion draft only
    out["dflash_layer_ids"] = dflash.trained_ids if dflash else None
    out["dflash"] = None
    if dflash:
        out["dflash"] = dflash.to_dict() | {"capture": capture_per_engine(dflash, engines_at("all")),
                                             "config_only": alone}
        if alone:
            out["evidence"] = [f"config.json alone: the weights were not read; {_fmt(m.draft_vocab_size)} ids and no "
                               "d2t is what the config says"] + list(out["evidence"])
    return out


def engine_reading(ck: Checkpoint, verdict: str) -> dict:
    """What the engine that reads this file makes of its stored d2t: `format`, `stored_convention` (how the
    format's reader reads d2t: "offset" for an HF checkpoint, "absolute" for a GGUF), `read_by` and
    `engine_reading` {engine, reads, healthy (None: undecided), says}."""
    conv = ck.d2t_convention
    engine = ", ".join(ck.d2t_readers)
    reads = "absolute target ids (target = d2t[i])" if conv == "absolute" else "offsets (target = i + d2t[i])"
    other = "absolute" if conv == "offset" else "offset"
    if verdict == conv or (verdict == "identity" and conv == "offset"):
        healthy = True
        says = (f"the stored values are {'absolute target ids' if conv == 'absolute' else 'offsets'}, which is what "
                f"{engine} reads: healthy for {engine}")
    elif verdict == other:
        healthy = False
        says = (f"{'offsets' if verdict == 'offset' else 'absolute ids'} stored where {engine} reads "
                f"{'absolute ids' if conv == 'absolute' else 'offsets'}: {engine} proposes wrong tokens"
                + (" (fix: d2t-lab fix SRC DST.gguf writes absolute ids)" if ck.format == "gguf" else ""))
    else:
        healthy = None
        says = f"the verdict is {verdict}: {engine} reads {reads}, and neither reading is clearly right"
    return {"format": ck.format, "stored_convention": conv,
            "read_by": {"engines": list(ck.d2t_readers), "reads": conv},
            "engine_reading": {"engine": engine, "reads": conv, "healthy": healthy, "says": says}}


def _open(path) -> tuple[Checkpoint, bool]:
    """(the checkpoint, whether it is a block-diffusion draft's config.json alone)."""
    try:
        return open_checkpoint(path), False
    except BadInputError:
        p = Path(path) if not (isinstance(path, str) and "://" in path) else None
        cfg = None if p is None else p / "config.json" if p.is_dir() else p if p.name == "config.json" else None
        if cfg is None or not cfg.is_file():
            raise
        config = read_config(cfg)
        if dflash_draft(config) is None:
            raise
        return Checkpoint(path=cfg.parent, config=config, config_path=cfg), True


def _identity(ck: Checkpoint, d) -> VocabMapping | None:
    """A block-diffusion draft without d2t: vLLM's draft vocab is draft_vocab_size, else vocab_size; when it
    is the config's vocab_size the ids map as they are (None otherwise: `load_mapping` says why not)."""
    n = d.draft_vocab_size or d.vocab_size
    if n is None or n != d.vocab_size:
        return None
    src = ck.config_path.as_posix() if ck.config_path else str(ck.path)
    return VocabMapping(torch.zeros(n, dtype=torch.int64), target_vocab_size=d.vocab_size, sources=[src])


def _dflash_lines(r: dict) -> list[str]:
    d = r["dflash"]
    kind = {"dflash": "DFlash", "dspark": "DSpark", "xpress": "XPress"}[d["kind"]]
    lines = [f"  draft kind: {d['kind']} ({kind} block-diffusion draft; {d['architecture'] or 'no architectures'}; "
             f"vLLM method {d['method']})"]
    ids = d["trained_layer_ids"]
    said = f"{ids} (0-based target layers, the output of each)" if ids is not None else "none stated"
    lines.append(f"  layer ids: {said}")
    for key, cap in (d.get("capture") or {}).items():
        if cap is None:
            lines.append(f"  {key}: its DFlash path was not read")
        elif cap["aux_ids"] is None:
            lines.append(f"  {key} {cap['release']}: no ids: the target's default capture (2, L // 2, L - 3)")
        else:
            lines.append(f"  {key} {cap['release']}: aux ids {cap['aux_ids']} from {cap['from']}, the output of target "
                         f"layers {cap['output_of_layers']}")
    extras = [f"block {d['block_size']}" if d["block_size"] is not None else None,
              f"mask token {d['mask_token_id']}" if d["mask_token_id"] is not None else None,
              f"trained for {d['num_target_layers']} target layers" if d["num_target_layers"] is not None else None]
    if any(extras):
        lines.append("  " + ", ".join(e for e in extras if e))
    return lines

