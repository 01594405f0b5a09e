"""The checkpoint doctor: every known EAGLE-3 deployment bug as a finding, and a safe fixer.

`diagnose(path, engine)` reads a draft checkpoint lazily (sizes from headers, d2t/t2d, then
each float tensor once, in row chunks, for NaN/Inf) and returns `Finding`s, each with a stable
code, a severity (error / warning / info), one line saying what is wrong and one saying how to
fix it. The rules mirror what the engines' loaders do, read in their public source:

- SGLang `LlamaForCausalLMEagle3.load_weights` (models/llama_eagle3.py) looks a checkpoint name
  up as `NAME` or `model.NAME` among its parameters (`model.midlayer.*`, `model.fc`,
  `model.embed_tokens`, `model.norm`, `lm_head`) and skips every other name without a word:
  a `layers.0.*` layer stays at its random init. `d2t` becomes `hot_token_id = d2t + arange`;
  `t2d` is ignored. Aux layers come from `eagle_config.eagle_aux_hidden_state_layer_ids`; the
  target captures the input of layer `id + 1` (default: inputs of layers 2, L//2, L-3). One
  newer model file (GLM-4.7-Flash) adds 1 only when the first id is 1.
- vLLM `Eagle3LlamaForCausalLM.load_weights` (models/llama_eagle3.py) renames `midlayer.` to
  `layers.0.`, so both layouts load; it prefixes `model.` to every name without `lm_head`, and
  its loader raises on a name it has no parameter for, so the server fails to start. `d2t`
  fills `draft_id_to_target_id` (zeros when absent) and logits are scattered to `arange + d2t`.
  Aux layers come from the top-level `eagle_aux_hidden_state_layer_ids` (newer versions fall
  back to `eagle_config`'s), used as given: id `i` captures the input of layer `i` (default:
  2, L//2, L-3). The same ids therefore capture one layer apart in the two engines.
- Both read `d2t` only from the weight files, never from `d2t.npy` / `d2t.pt` beside them, and
  both size `lm_head` from `draft_vocab_size`, falling back to `vocab_size` when it is absent.

`plan_fix(src, engine)` works out what a fix would change (offsets from absolute ids, mapping
tensors moved into the weights, key renames, `draft_vocab_size` in the config) and which error
findings that resolves, writing nothing. `fix_checkpoint(src, dst, engine)` refuses when the plan
resolves no error (unless `force=True`); otherwise it writes the corrected copy into a temporary
folder next to `dst`, runs the doctor on it and renames it at the end.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .checkpoint import (
    Checkpoint,
    TensorStore,
    flat_config,
    open_checkpoint,
    read_config,
    read_mapping_tensors,
    torch_load,
)
from .errors import BadInputError
from .mapping import VocabMapping, absolute_to_offsets
from .outputs import new_output_dir

ENGINES = ("sglang", "vllm")
SEVERITIES = ("error", "warning", "info")
ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM"}

# The names one EAGLE-3 draft layer holds (after `midlayer.` / `layers.0.`).
LAYER_PARAMS = (
    "input_layernorm.weight",
    "hidden_norm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)
LAYER_OPTIONAL = tuple(f"self_attn.{p}_proj.bias" for p in "qkvo")
TOP_PARAMS = ("embed_tokens.weight", "fc.weight", "norm.weight")
MAX_VOCAB = 1 << 24  # no tokenizer comes near; a larger vocab_size in a config is a typo or hostile
CHUNK_BYTES = 32 << 20  # rows read at once by the NaN/Inf scan


@dataclass(frozen=True)
class Finding:
    """One problem (or fact) about a checkpoint: stable code, severity, one-line message and fix."""

    code: str
    severity: str  # error / warning / info
    message: str
    fix: str

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        object.__setattr__(self, "message", " ".join(self.message.split()))
        object.__setattr__(self, "fix", " ".join(self.fix.split()))

    def as_dict(self) -> dict:
        return {"code": self.code, "severity": self.severity, "message": self.message, "fix": self.fix}


def has_error(findings) -> bool:
    return any(f.severity == "error" for f in findings)


def findings_table(findings):
    """The findings as a pandas DataFrame (columns code, severity, message, fix)."""
    import pandas as pd

    return pd.DataFrame([f.as_dict() for f in findings], columns=["code", "severity", "message", "fix"])


def unused_path(path) -> Path:
    """`path`, or `path_2`, `path_3`, ... : the first that does not exist yet (fix never overwrites)."""
    path = Path(path)
    candidate, i = path, 1
    while candidate.exists() or candidate.is_symlink():
        i += 1
        candidate = path.with_name(f"{path.name}_{i}")
    return candidate


def overview(checkpoints: dict, engines=ENGINES, target_config=None, *, check_weights: bool = True):
    """One row per (checkpoint, engine): error and warning codes, as a pandas DataFrame.

    `checkpoints` maps a display name to a path.
    """
    import pandas as pd

    rows = []
    for name, path in checkpoints.items():
        for eng in engines:
            fs = diagnose(path, eng, target_config, check_weights=check_weights)
            rows.append({
                "checkpoint": name,
                "engine": eng,
                "errors": ", ".join(sorted({f.code for f in fs if f.severity == "error"})) or "-",
                "warnings": ", ".join(sorted({f.code for f in fs if f.severity == "warning"})) or "-",
                "verdict": "fails" if has_error(fs) else "passes",
            })
    return pd.DataFrame(rows, columns=["checkpoint", "engine", "errors", "warnings", "verdict"])


WEIGHT_SCAN_CODES = ("nonfinite-weights",)  # the findings of the one check that reads every weight


def diagnose_each(path, engine: str = "all", target_config=None, *, check_weights: bool = True, scanned=None):
    """(findings for `engine`, {engine: findings} for each engine it covers), weights scanned once.

    The per-engine lists share the NaN/Inf finding of the one scan instead of reading every
    weight again per engine (a draft's weights are gigabytes). `scanned`: findings of an earlier
    scan of the same weight values (a fixed copy keeps its source's values); then none is made.
    """
    main = diagnose(path, engine, target_config, check_weights=check_weights and scanned is None)
    scanned = [f for f in (main if scanned is None else scanned) if f.code in WEIGHT_SCAN_CODES]
    main = main if not scanned or any(f.code in WEIGHT_SCAN_CODES for f in main) else scanned + main
    order = {s: i for i, s in enumerate(SEVERITIES)}
    each = {e: sorted(diagnose(path, e, target_config, check_weights=False) + scanned, key=lambda f: order[f.severity])
            for e in _engines(engine)}
    return main, each


def _engines(engine: str) -> tuple[str, ...]:
    if engine == "all":
        return ENGINES
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of sglang, vllm, all; got {engine!r}")
    return (engine,)


# -- key names ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class KeyInfo:
    key: str  # as stored
    prefixed: bool  # stored with a leading "model."
    layout: str | None  # "midlayer" / "layers.0" for decoder-layer keys, else None
    name: str  # without "model." and without the layer prefix for layer keys

    @property
    def canonical(self) -> str:
        """`midlayer.X` for layer keys, else the plain top-level name."""
        return f"midlayer.{self.name}" if self.layout else self.name


def parse_key(key: str) -> KeyInfo:
    rest, prefixed = (key[len("model."):], True) if key.startswith("model.") else (key, False)
    for layout in ("midlayer", "layers.0"):
        if rest.startswith(layout + "."):
            return KeyInfo(key, prefixed, layout, rest[len(layout) + 1:])
    return KeyInfo(key, prefixed, None, rest)


def _is_mapping_key(key: str) -> bool:
    return key.split(".")[-1] in ("d2t", "t2d")


def _known(info: KeyInfo) -> bool:
    if info.layout:
        return info.name in LAYER_PARAMS or info.name in LAYER_OPTIONAL
    return info.name in TOP_PARAMS or info.name in ("lm_head.weight", "fc.bias")


def engine_accepts(engine: str, key: str) -> bool:
    """Would `engine`'s EAGLE-3 loader put this checkpoint tensor into a parameter?"""
    if _is_mapping_key(key) or ".rotary_emb." in key:  # both skip rotary buffers by design
        return True
    info = parse_key(key)
    if engine == "sglang":
        # Looked up as NAME or model.NAME; its parameters are model.{embed_tokens,fc,midlayer.*,norm}, lm_head.
        if key == "lm_head.weight":
            return True
        return _known(info) and info.name != "lm_head.weight" and info.layout != "layers.0"
    # vLLM: "model." is prefixed to every name without "lm_head"; midlayer. -> layers.0.; fc has no bias.
    if "lm_head" in key:
        return key == "lm_head.weight"
    return not info.prefixed and _known(info) and info.name != "fc.bias"


# -- configs ------------------------------------------------------------------------------------
def _text_config(cfg: dict) -> dict:
    """A target config's language-model part (multimodal configs nest it under text_config)."""
    for k in ("text_config", "language_config", "llm_config"):
        if isinstance(cfg.get(k), dict) and "num_hidden_layers" in cfg[k]:
            return cfg[k]
    return cfg


def aux_layer_ids(cfg: dict | None) -> dict[str, list[int] | None]:
    """The aux layer ids each engine reads from a draft config (None: not set, engine default).

    SGLang reads only `eagle_config.eagle_aux_hidden_state_layer_ids`. vLLM reads the top-level
    `eagle_aux_hidden_state_layer_ids` (speculators configs) and, in newer versions, falls back
    to the `eagle_config` one (older versions read only the top level).
    """
    cfg = cfg or {}
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    nested = eagle.get("eagle_aux_hidden_state_layer_ids")
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    nested = [int(i) for i in nested] if isinstance(nested, list) and nested else None
    top = [int(i) for i in top] if isinstance(top, list) and top else None
    return {"sglang": nested, "vllm": top or nested}


def captured_layers(engine: str, ids: list[int] | None, num_layers: int) -> list[int]:
    """Target layers whose INPUT (= output of the layer before) the engine captures."""
    if ids is None:
        return [2, num_layers // 2, num_layers - 3]
    if engine == "sglang":
        return [i + 1 for i in ids]
    return list(ids)


# -- the checks ---------------------------------------------------------------------------------
@dataclass
class _Ctx:
    ck: Checkpoint
    engines: tuple[str, ...]
    cfg: dict
    findings: list[Finding] = field(default_factory=list)

    def add(self, code, severity, message, fix):
        self.findings.append(Finding(code, severity, message, fix))

    def key(self, name: str) -> str | None:
        """The stored key for a top-level name (with or without `model.`)."""
        for k in (name, "model." + name):
            if k in self.ck.tensors:
                return k
        return None

    def shape(self, name: str):
        k = self.key(name)
        return None if k is None else self.ck.tensors.shape(k)


def _fmt(n) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def _check_vocab(c: _Ctx, d2t, t2d, target_cfg: dict | None) -> tuple[int | None, int | None]:
    """vocab-size-mismatch; returns (draft_vocab, target_vocab) as best known."""
    lm = c.shape("lm_head.weight")
    emb = c.shape("embed_tokens.weight")
    cfg_draft = c.cfg.get("draft_vocab_size") if isinstance(c.cfg.get("draft_vocab_size"), int) else None
    cfg_target = c.cfg.get("vocab_size") if isinstance(c.cfg.get("vocab_size"), int) else None
    draft = {
        "d2t": int(d2t.shape[0]) if d2t is not None and d2t.dim() == 1 else None,
        "lm_head rows": lm[0] if lm else None,
        "config draft_vocab_size": cfg_draft,
    }
    target = {
        "t2d": int(t2d.shape[0]) if t2d is not None and t2d.dim() == 1 else None,
        "embed_tokens rows": emb[0] if emb else None,
        "config vocab_size": cfg_target,
    }
    if target_cfg is not None:
        tv = _text_config(target_cfg).get("vocab_size")
        target["target config vocab_size"] = tv if isinstance(tv, int) else None
    fix_cfg = "correct config.json (draft_vocab_size = lm_head rows = len(d2t); vocab_size = target vocab) or rebuild the mapping for this draft"
    for what, sizes in (("draft", draft), ("target", target)):
        known = {k: v for k, v in sizes.items() if v is not None}
        if len(set(known.values())) > 1:
            c.add(
                "vocab-size-mismatch", "error",
                f"{what} vocab sizes disagree: " + ", ".join(f"{k} {_fmt(v)}" for k, v in known.items()),
                fix_cfg,
            )
    n = next((v for v in draft.values() if v is not None), None)
    v = cfg_target or next((v for v in target.values() if v is not None), None)
    if cfg_draft is None and lm and cfg_target is not None and lm[0] != cfg_target:
        c.add(
            "vocab-size-mismatch", "error",
            f"config.json has no draft_vocab_size: SGLang and vLLM then size lm_head from vocab_size "
            f"({_fmt(cfg_target)}) but it has {_fmt(lm[0])} rows, so loading fails or the head is not loaded",
            f"set draft_vocab_size = {lm[0]} in config.json (python -m helpers fix SRC DST does it)",
        )
    if n is not None and v is not None and n > v:
        c.add("vocab-size-mismatch", "error", f"draft vocab {_fmt(n)} is larger than the target vocab {_fmt(v)}", fix_cfg)
    return n, v


def _check_mapping(c: _Ctx, n: int | None, v: int | None, d2t, t2d, used: list[str]) -> None:
    ck = c.ck
    in_weights = ck.tensors.find("d2t") is not None
    reduced = n is not None and v is not None and n < v
    if d2t is None:
        if reduced:
            c.add(
                "d2t-missing", "error",
                f"no d2t with a reduced draft vocab ({_fmt(n)} of {_fmt(v)}): SGLang then proposes draft id i as "
                "target id i and vLLM scatters to zeros + arange, so only target ids 0.."
                f"{_fmt(n - 1)} are ever drafted (the accept length falls towards 1)",
                "add the d2t (and t2d) the draft was trained with to the weights; never rebuild it from guesses",
            )
        elif n is None or v is None:
            c.add(
                "d2t-missing", "warning",
                "no d2t found and the vocab sizes are unknown: if the draft vocab is reduced the engines will use "
                "an identity mapping",
                "add the d2t the draft was trained with, and draft_vocab_size / vocab_size to config.json",
            )
        return
    if not in_weights:
        c.add(
            "d2t-missing", "error",
            f"d2t is only in {Path(used[0]).name}, beside the weights: SGLang and vLLM read d2t only from the "
            "weight files, so they would serve with an identity mapping",
            "move d2t/t2d into the weights: python -m helpers fix SRC DST",
        )
    if t2d is not None and (t2d.dim() != 1 or (v is not None and t2d.shape[0] != v) or t2d.dtype != torch.bool):
        if t2d.dtype != torch.bool:
            c.add("t2d-mismatch", "error", f"t2d has dtype {t2d.dtype}, expected bool [target_vocab]",
                  "rebuild t2d from the offsets: t2d[arange(N) + d2t] = True")
        t2d = None  # already reported; judge d2t alone
    try:
        m = VocabMapping(d2t, t2d, target_vocab_size=v, sources=used)
    except BadInputError as e:
        c.add("d2t-invalid", "error", f"d2t cannot be a mapping: {e.problem}",
              "re-export d2t from the producer's vocab mapping (int64 offsets, target = i + d2t[i])")
        return
    if m.draft_vocab_size > 1 and torch.equal(m.d2t, torch.arange(m.draft_vocab_size)):
        c.add(
            "d2t-arange", "error",
            "d2t equals arange(N): as offsets it sends draft id i to target id 2i"
            + (f", up to {_fmt(2 * (m.draft_vocab_size - 1))} (out of range)" if m.reading("offset").in_range is False else "")
            + "; someone stored draft ids, not the mapping",
            "re-export d2t from the producer's vocab mapping (offsets: d2t = sorted_kept_ids - arange(N))",
        )
        return
    verdict = m.verdict()
    off = m.reading("offset")
    if verdict.encoding == "absolute":
        c.add(
            "d2t-absolute", "error",
            "d2t holds absolute target ids, but every engine reads offsets (target = i + d2t[i]): "
            + verdict.evidence[-1],
            "convert to offsets (d2t - arange(N)): python -m helpers fix SRC DST",
        )
    elif verdict.encoding == "inconsistent":
        reasons = "; ".join(verdict.reasons)
        if m.is_all_zero:
            c.add(
                "d2t-identity-reduced-vocab", "error",
                f"d2t is all zeros with a reduced vocab ({_fmt(m.draft_vocab_size)} draft vs {_fmt(v)} target ids): "
                f"only target ids 0..{_fmt(m.draft_vocab_size - 1)} can ever be drafted",
                "restore the d2t the draft was trained with (an all-zero d2t is only right when draft vocab = target vocab)",
            )
        elif m.t2d is not None and off.valid:
            c.add("t2d-mismatch", "error", f"t2d does not match d2t read as offsets: {reasons}",
                  "rebuild t2d from the offsets (t2d[arange(N) + d2t] = True) or take both from the same export")
        else:
            c.add("d2t-invalid", "error", f"d2t is not a usable mapping under either reading: {reasons}",
                  "re-export d2t from the producer's vocab mapping")
    elif verdict.encoding == "ambiguous" and not m.is_all_zero:
        strictly = bool((m.d2t[1:] > m.d2t[:-1]).all()) if m.draft_vocab_size > 1 else False
        if strictly:
            c.add(
                "d2t-absolute", "warning",
                "no t2d to decide, and d2t is strictly increasing with no repeated value: that is what absolute ids "
                "look like (offsets of a frequency-built vocab repeat wherever kept ids are adjacent)",
                "check with python -m helpers inspect; if absolute, convert: python -m helpers fix SRC DST",
            )
        else:
            c.add("d2t-unverified", "info", "no t2d: both readings of d2t give distinct in-range ids; the offset "
                  "reading is assumed (non-decreasing, repeated values)", "ship t2d with the checkpoint so it can be checked")
    elif verdict.encoding == "ambiguous":
        c.add("d2t-unverified", "warning", "d2t is all zeros and the target vocab size is unknown",
              "add vocab_size to config.json")
    if verdict.encoding in ("offset", "identity") and m.t2d is not None and off.matches_t2d is False:
        c.add("t2d-mismatch", "error", "t2d does not match d2t read as offsets",
              "rebuild t2d from the offsets (t2d[arange(N) + d2t] = True)")


def _check_keys(c: _Ctx) -> None:
    keys = [k for k in c.ck.tensors.keys() if not _is_mapping_key(k)]
    infos = [parse_key(k) for k in keys]
    layouts = sorted({i.layout for i in infos if i.layout})
    present = {i.canonical for i in infos}
    missing = [f"midlayer.{p}" for p in LAYER_PARAMS if f"midlayer.{p}" not in present]
    if not layouts:
        c.add("key-layout", "error", "no decoder-layer weights (neither midlayer.* nor layers.0.*)",
              "point at the draft checkpoint folder (config.json + model.safetensors)")
        return
    if missing and len(missing) < len(LAYER_PARAMS):
        shown = ", ".join(m.replace("midlayer.", "") for m in missing[:4])
        c.add("key-layout", "error", f"the decoder layer lacks {len(missing)} weight(s): {shown}",
              "re-export the checkpoint with the whole layer")
    if "norm.weight" not in present:
        c.add("key-layout", "error", "no final norm (norm.weight): the engines leave it at its init",
              "re-export the checkpoint with norm.weight")
    for e in c.engines:
        rejected = [k for k in keys if not engine_accepts(e, k)]
        if e == "sglang":
            layer_skips = [k for k in rejected if parse_key(k).layout]
            head_skips = [k for k in rejected if not parse_key(k).layout and _known(parse_key(k))]
            others = [k for k in rejected if k not in layer_skips and k not in head_skips]
            if head_skips:
                c.add(
                    "key-layout", "error",
                    f"SGLang would silently skip {', '.join(head_skips)}: it looks a name up as NAME or model.NAME "
                    "and its head is lm_head.weight, so the draft-vocab head would keep random weights",
                    "rename model.lm_head.weight to lm_head.weight: python -m helpers fix SRC DST",
                )
            if layer_skips:
                c.add(
                    "key-layout", "error",
                    f"SGLang: {len(layer_skips)} decoder-layer keys are layers.0.* (e.g. {layer_skips[0]}); SGLang's "
                    "EAGLE-3 loader only knows model.midlayer.* and skips other names silently, so the layer "
                    "would serve with random weights",
                    "rename layers.0.* to midlayer.*: python -m helpers fix SRC DST --engine sglang",
                )
            if others:
                c.add(
                    "key-layout", "warning",
                    f"SGLang would silently skip {len(others)} key(s) it has no parameter for: "
                    + ", ".join(others[:4]),
                    "check whether these tensors matter; drop or rename them (python -m helpers fix renames known ones)",
                )
        else:
            if rejected:
                prefixed = [k for k in rejected if parse_key(k).prefixed and _known(parse_key(k))]
                why = (
                    "vLLM prefixes model. to every name without lm_head, so model.* keys become model.model.*"
                    if prefixed else "vLLM's loader has no parameter for them"
                )
                c.add(
                    "key-layout", "error",
                    f"vLLM: {len(rejected)} key(s) would make loading fail at start-up (e.g. {rejected[0]}): {why}",
                    "strip the model. prefix / drop unknown keys: python -m helpers fix SRC DST --engine vllm"
                    if prefixed else "drop or rename the unknown keys before serving with vLLM",
                )
    if len(layouts) > 1:
        c.add("key-layout", "warning", "the layer is split across midlayer.* and layers.0.* keys",
              "rename to one layout: python -m helpers fix SRC DST")
    else:
        who = "SGLang/SpecForge/EAGLE" if layouts[0] == "midlayer" else "speculators/vLLM"
        ok = [ENGINE_NAMES[e] for e in c.engines if not (e == "sglang" and layouts[0] == "layers.0")]
        c.add("key-layout", "info", f"layer keys use the {layouts[0]}.* layout ({who})"
              + (f"; loads in {' and '.join(ok)}" if ok else ""), "nothing to do")


def _check_shapes(c: _Ctx, target_cfg: dict | None) -> None:
    h = c.cfg.get("hidden_size")
    ht = c.cfg.get("target_hidden_size") or h
    where = "config target_hidden_size" if c.cfg.get("target_hidden_size") else "config hidden_size"
    if target_cfg is not None:
        tcfg_h = _text_config(target_cfg).get("hidden_size")
        if isinstance(tcfg_h, int):
            if isinstance(ht, int) and ht != tcfg_h:
                c.add("fc-shape", "error", f"the draft config says target hidden size {_fmt(ht)} but the target config "
                      f"says hidden_size {_fmt(tcfg_h)}", "use the draft trained for this target")
            ht, where = tcfg_h, "target hidden_size"
    lm = c.shape("lm_head.weight")
    if lm is None:
        c.add("lm-head-missing", "error",
              "no lm_head.weight: the engines would leave the draft-vocab head at its random init (SGLang: or load "
              "the target's full-vocab head when draft_vocab_size is absent)",
              "re-export the checkpoint with lm_head.weight [draft_vocab, hidden]")
    elif isinstance(h, int) and lm[-1] != h:
        c.add("lm-head-missing", "error", f"lm_head is {list(lm)}, its width is not hidden_size {_fmt(h)}",
              "re-export the checkpoint with a matching lm_head")
    fc = c.shape("fc.weight")
    if fc is None:
        c.add("fc-shape", "error", "no fc.weight (the 3 x target-hidden -> hidden projection of the aux states)",
              "re-export the checkpoint with fc.weight")
    else:
        if len(fc) != 2:
            c.add("fc-shape", "error", f"fc.weight has shape {list(fc)}, expected 2-D [hidden, 3 x target hidden]",
                  "re-export the checkpoint")
        else:
            if isinstance(ht, int) and fc[1] != 3 * ht:
                c.add("fc-shape", "error",
                      f"fc.weight takes {_fmt(fc[1])} inputs but 3 x {where} is {_fmt(3 * ht)}: the aux hidden "
                      "states will not fit (wrong target, or target_hidden_size missing from config.json)",
                      "set target_hidden_size in config.json to the target's hidden size, or use the draft trained "
                      "for this target")
            elif not isinstance(ht, int) and fc[1] % 3:
                c.add("fc-shape", "error", f"fc.weight takes {_fmt(fc[1])} inputs, not a multiple of 3",
                      "re-export the checkpoint")
            if isinstance(h, int) and fc[0] != h:
                c.add("fc-shape", "error", f"fc.weight gives {_fmt(fc[0])} outputs but hidden_size is {_fmt(h)}",
                      "re-export the checkpoint")
    emb = c.shape("embed_tokens.weight")
    if emb is None:
        shared_h = target_cfg is not None and isinstance(h, int) and _text_config(target_cfg).get("hidden_size") not in (None, h)
        if shared_h:
            c.add("embed-missing", "error",
                  f"no embed_tokens and the target's hidden size differs from the draft's {_fmt(h)}: the target's "
                  "embedding cannot be borrowed (SGLang skips the sharing and keeps random weights)",
                  "export the draft's own embed_tokens with the checkpoint")
        else:
            c.add("embed-missing", "info",
                  "no embed_tokens: the engine borrows the target's embedding (fine when the draft was trained with "
                  "the target's frozen embedding; the kit's own loader needs embed_from=TARGET)",
                  "nothing to do for serving; pass embed_from to helpers.draft.load_draft")


def _check_aux(c: _Ctx, target_cfg: dict | None) -> None:
    ids = aux_layer_ids(c.ck.config)
    if target_cfg is None:
        named = {e: v for e, v in ids.items() if v is not None}
        if named:
            parts = [f"{ENGINE_NAMES[e]} reads {ids[e]}" if ids[e] is not None else f"{ENGINE_NAMES[e]} finds none "
                     "(uses its default)" for e in c.engines]
            c.add("aux-layers", "info", "aux layer ids in config.json: " + "; ".join(parts)
                  + "; SGLang captures the input of layer id+1, vLLM of layer id",
                  "pass --target-config TARGET/config.json to check them against the target")
        return
    t = _text_config(target_cfg)
    n_layers = t.get("num_hidden_layers")
    if not isinstance(n_layers, int) or n_layers < 4:
        c.add("aux-layers", "warning", "the target config has no usable num_hidden_layers", "pass the target's config.json")
        return
    captured = {}
    for e in c.engines:
        got = captured_layers(e, ids[e], n_layers)
        captured[e] = got
        name = ENGINE_NAMES[e]
        src = f"ids {ids[e]}" if ids[e] is not None else "no ids (default)"
        bad = [i for i in got if i < 0 or i >= n_layers]
        if ids[e] is not None and len(ids[e]) != 3:
            c.add("aux-layers", "error", f"{name}: {len(ids[e])} aux layer ids {ids[e]}, but fc takes 3 hidden states",
                  "name exactly three aux layers")
        if bad:
            c.add("aux-layers", "error",
                  f"{name}: {src} capture the input of target layers {got}; {bad} is outside the target's "
                  f"{n_layers} layers (0..{n_layers - 1}), so fewer hidden states arrive than fc expects",
                  "use ids the target has (SGLang adds 1 to each configured id)")
        else:
            c.add("aux-layers", "info",
                  f"{name}: {src} -> captures the input of target layers {got} (outputs of layers "
                  f"{[i - 1 for i in got]}) of {n_layers}", "nothing to do if the draft was trained on these")
    if len(captured) == 2 and captured["sglang"] != captured["vllm"]:
        only_top = ids["vllm"] is not None and ids["sglang"] is None
        c.add("aux-layers", "warning",
              f"SGLang and vLLM capture different target layers ({captured['sglang']} vs {captured['vllm']})"
              + (": only the top-level eagle_aux_hidden_state_layer_ids is set, which SGLang does not read (it "
                 "uses its default)" if only_top else ": SGLang adds 1 to each configured id, vLLM uses them as given"),
              "serve with the engine whose capture matches the training data, or adjust the ids for the other")


def _row_chunks(ck: Checkpoint, key: str, max_bytes: int = CHUNK_BYTES):
    """Yield a tensor in row chunks, each read on its own so memory stays near `max_bytes`."""
    store = ck.tensors
    shape = store.shape(key)
    nbytes = store.nbytes(key)
    if len(shape) < 2 or nbytes <= max_bytes:
        yield store.get(key)
        return
    rows = shape[0]
    step = max(1, int(rows * max_bytes // max(nbytes, 1)))
    path = store.file_of(key)
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        for a in range(0, rows, step):
            try:  # a fresh mapping per chunk, so pages read are released after each chunk
                with safe_open(str(path), framework="pt", device="cpu") as f:
                    part = f.get_slice(key)[a:a + step]
            except Exception as e:
                raise BadInputError(path, f"tensor {key!r} cannot be read ({e})") from None
            yield part
            del part
    else:
        for a in range(0, rows, step):
            obj = torch_load(path)  # mmap: only the chunk's pages are read, released with obj
            if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
                obj = obj["state_dict"]
            part = obj[key][a:a + step]
            yield part
            del part, obj


def _all_finite(t: torch.Tensor) -> bool:
    """No NaN/Inf in `t`: one min/max pass (NaN propagates through both), no bool temporary."""
    if t.numel() == 0:
        return True
    try:
        lo, hi = torch.aminmax(t)
    except (RuntimeError, NotImplementedError):  # dtypes aminmax lacks (float8)
        return bool(torch.isfinite(t.float()).all())
    return bool(torch.isfinite(lo)) and bool(torch.isfinite(hi))


def _check_finite(c: _Ctx, progress: bool) -> None:
    from tqdm.auto import tqdm

    keys = [k for k in c.ck.tensors.keys() if c.ck.tensors.dtype(k).is_floating_point]
    bad: list[str] = []
    total = sum(c.ck.tensors.nbytes(k) for k in keys)
    with tqdm(total=total, unit="B", unit_scale=True, desc="NaN/Inf scan", disable=not progress, leave=False) as bar:
        for k in keys:
            for part in _row_chunks(c.ck, k):
                if not _all_finite(part):
                    bad.append(k)
                    break
            bar.update(c.ck.tensors.nbytes(k))
    if bad:
        c.add("nonfinite-weights", "error",
              f"{len(bad)} tensor(s) hold NaN or Inf: " + ", ".join(bad[:4]) + (" ..." if len(bad) > 4 else ""),
              "use an earlier training checkpoint; NaN weights make every draft token garbage")


def diagnose(path, engine: str = "all", target_config=None, *, check_weights: bool = True,
             progress: bool = False) -> list[Finding]:
    """All findings for the draft checkpoint at `path`, errors first.

    `engine`: 'sglang', 'vllm' or 'all'. `target_config`: the target's config.json (path or dict),
    for the aux-layer and size checks. `check_weights=False` skips the NaN/Inf scan (the only
    check that reads every weight). Unreadable input raises `BadInputError`.
    """
    engines = _engines(engine)
    ck = path if isinstance(path, Checkpoint) else open_checkpoint(path)
    tcfg = None
    if target_config is not None:
        tcfg = target_config if isinstance(target_config, dict) else read_config(target_config)
    cfg = flat_config(ck.config) if ck.config else {}
    c = _Ctx(ck=ck, engines=engines, cfg=cfg)
    if ck.config is None:
        c.add("config-missing", "warning", "no config.json beside the weights: sizes cannot be checked",
              "copy the draft's config.json into the checkpoint folder")
    d2t, t2d, used = read_mapping_tensors(ck)
    if d2t is not None and not isinstance(d2t, torch.Tensor):
        d2t = torch.as_tensor(np.asarray(d2t))
    if t2d is not None and not isinstance(t2d, torch.Tensor):
        t2d = torch.as_tensor(np.asarray(t2d))
    n, v = _check_vocab(c, d2t, t2d, tcfg)
    _check_mapping(c, n, v, d2t, t2d, used)
    if ck.tensors.keys():
        _check_keys(c)
        _check_shapes(c, tcfg)
        _check_aux(c, tcfg)
        if check_weights:
            _check_finite(c, progress)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(c.findings, key=lambda f: order[f.severity])


# -- fixing -------------------------------------------------------------------------------------
# What each error needs that fix cannot supply (the refusal line names it).
CANNOT_REPAIR = {
    "d2t-missing": "needs the producer's d2t tensor",
    "d2t-arange": "needs the producer's d2t tensor",
    "d2t-invalid": "needs the producer's d2t tensor",
    "d2t-identity-reduced-vocab": "needs the producer's d2t tensor",
    "t2d-mismatch": "needs the t2d exported with this d2t",
    "vocab-size-mismatch": "needs config.json sizes that match the weights",
    "key-layout": "needs the missing or unknown weights re-exported",
    "lm-head-missing": "needs the draft's lm_head re-exported",
    "fc-shape": "needs the draft trained for this target, or target_hidden_size in config.json",
    "embed-missing": "needs the draft's own embed_tokens",
    "aux-layers": "needs aux layer ids the target has",
    "nonfinite-weights": "needs finite weights (an earlier training checkpoint)",
}


class _PlannedStore(TensorStore):
    """The fixed copy's tensors before anything is written: shapes known, data read on demand."""

    def __init__(self, file: Path) -> None:
        super().__init__()
        self._file = file  # where they will be written (named in the doctor's messages)
        self._load: dict[str, callable] = {}

    def put(self, name: str, shape, dtype: torch.dtype, load) -> None:
        self._where[name] = (self._file, "planned")
        self._meta[name] = (tuple(shape), dtype)
        self._load[name] = load

    def get(self, name: str, device="cpu", dtype: torch.dtype | None = None) -> torch.Tensor:
        t = self._load[name]()
        if dtype is not None and t.dtype.is_floating_point:
            return t.to(device=device, dtype=dtype)
        return t.to(device=device)

    def items(self) -> list[tuple[str, callable, int]]:
        """(name, loader, nbytes) in writing order, as `_write_shards` takes them."""
        return [(k, self._load[k], self.nbytes(k)) for k in self.keys()]


@dataclass
class _PlannedCopy:
    """Everything the copy will hold; writing it needs no further decision."""

    ck: Checkpoint
    tensors: _PlannedStore
    d2t: torch.Tensor | None
    t2d: torch.Tensor | None
    config: dict | None
    copied: list[Path]  # files and folders of `src` copied as they are


@dataclass
class FixPlan:
    """What `fix_checkpoint` would change in `src` for `engine`, worked out without writing.

    `changes`: what the copy would differ in; `fixes`: the error codes those changes resolve
    (judged by running the doctor on the planned copy); `unfixable`: the error findings that
    would remain. `matters` is False when no error would be resolved: then fix refuses (only
    cosmetic changes, or none) and `refusal` says why in one line.
    """

    src: Path
    engine: str
    changes: list[str]
    fixes: list[str]
    unfixable: list[Finding]
    before: list[Finding] = field(default_factory=list, repr=False)
    copy: _PlannedCopy | None = field(default=None, repr=False, compare=False)

    @property
    def matters(self) -> bool:
        return bool(self.fixes)

    @property
    def refusal(self) -> str | None:
        """Why fix writes nothing (one line, without the path), or None when it would fix something."""
        if self.matters:
            return None
        force = "pass --force to write a copy anyway"
        codes = list(dict.fromkeys(f.code for f in self.unfixable))
        if not codes:
            who = "sglang and vllm" if self.engine == "all" else self.engine
            return f"nothing to fix for {who}: the doctor finds no error in the keys, mapping or config ({force})"
        parts = [f"{c} ({CANNOT_REPAIR.get(c, 'not something fix changes')})" for c in codes]
        return f"cannot repair {', '.join(parts)}; nothing written ({force})"

    def as_dict(self) -> dict:
        return {"src": str(self.src), "engine": self.engine, "changes": list(self.changes),
                "fixes": list(self.fixes), "unfixable": list(dict.fromkeys(f.code for f in self.unfixable)),
                "matters": self.matters, "refusal": self.refusal}


@dataclass
class FixResult:
    dst: Path
    changes: list[str]
    findings: list[Finding]  # the doctor on the written copy
    plan: FixPlan | None = None

    @property
    def ok(self) -> bool:
        return not has_error(self.findings)


def _target_name(info: KeyInfo, engine: str) -> str:
    """The key a tensor gets in the fixed copy."""
    if not _known(info):
        return info.key
    if info.layout:
        layout = "layers.0" if engine == "vllm" else "midlayer"
        return f"{layout}.{info.name}"
    return info.name  # no "model." prefix: both engines accept the bare names


def _open_fix_source(src: Path) -> Checkpoint:
    ck = open_checkpoint(src)
    if not src.is_dir():
        raise BadInputError(src, "fix needs a checkpoint folder (config.json + weights), not a single file")
    if not ck.tensors.keys():
        raise BadInputError(src, "has no weight files to fix (only mapping files)")
    return ck


def _target_vocab(ck: Checkpoint, t2d) -> int | None:
    flat = flat_config(ck.config) if ck.config else {}
    v = flat.get("vocab_size") if isinstance(flat.get("vocab_size"), int) else (
        int(t2d.shape[0]) if t2d is not None else None)
    if v is not None and not 0 < v <= MAX_VOCAB:
        raise BadInputError(ck.config_path or ck.path, f"vocab_size={v} is not a plausible vocab size; "
                            "refusing to build a t2d of that length (correct config.json first)")
    return v


def _plan_mapping(ck: Checkpoint, codes: set[str], changes: list[str]):
    """(d2t, t2d) as the copy will hold them: offsets, t2d built when missing."""
    d2t, t2d, used = read_mapping_tensors(ck)
    if d2t is not None:
        d2t = torch.as_tensor(np.asarray(d2t)) if not isinstance(d2t, torch.Tensor) else d2t
        d2t = d2t.to(torch.int64)
    if t2d is not None and not isinstance(t2d, torch.Tensor):
        t2d = torch.as_tensor(np.asarray(t2d))
    if d2t is not None and "d2t-absolute" in codes:
        d2t = absolute_to_offsets(d2t)
        changes.append("d2t: absolute target ids converted to offsets (d2t - arange(N))")
    target_vocab = _target_vocab(ck, t2d)
    if d2t is not None and t2d is None and target_vocab is not None:
        try:
            t2d = VocabMapping(d2t, target_vocab_size=target_vocab).t2d_from("offset")
            changes.append("t2d: built from the offsets (it was missing)")
        except (BadInputError, IndexError):
            pass
    if d2t is not None and ck.tensors.find("d2t") is None:
        changes.append(f"d2t/t2d: copied from {Path(used[0]).name} into the weights (engines read them only there)")
    return d2t, t2d


def _plan_tensors(ck: Checkpoint, engine: str, d2t, t2d, file: Path, changes: list[str]) -> _PlannedStore:
    """The weights renamed for `engine`, then d2t/t2d (no tensor data read here)."""
    store = _PlannedStore(file)
    seen: dict[str, str] = {}
    for k in ck.tensors.keys():
        if _is_mapping_key(k):
            continue
        new = _target_name(parse_key(k), engine)
        if new in seen:
            raise BadInputError(ck.path, f"keys {seen[new]!r} and {k!r} would both become {new!r}")
        seen[new] = k
        store.put(new, ck.tensors.shape(k), ck.tensors.dtype(k), lambda key=k: ck.tensors.get(key))
    if any(p.suffix != ".safetensors" for p in ck.tensors.files):
        changes.append("weights written as safetensors (from " + ", ".join(p.name for p in ck.tensors.files) + ")")
    renamed = [(old, new) for new, old in seen.items() if old != new]
    if renamed:
        changes.append(f"renamed {len(renamed)} keys, e.g. {renamed[0][0]} -> {renamed[0][1]}")
    for short, t in (("d2t", d2t), ("t2d", t2d)):
        if t is not None:
            name = (ck.tensors.find(short) or short).removeprefix("model.")
            store.put(name, t.shape, t.dtype, lambda t=t: t)
    return store


def _plan_config(ck: Checkpoint, d2t, changes: list[str]) -> dict | None:
    """config.json as the copy will hold it: draft_vocab_size added when missing."""
    cfg = dict(ck.config) if ck.config else None
    if cfg is None or "draft_vocab_size" in flat_config(cfg):
        return cfg
    lm = next((ck.tensors.shape(k) for k in ("lm_head.weight", "model.lm_head.weight") if k in ck.tensors), None)
    n = int(d2t.shape[0]) if d2t is not None else (lm[0] if lm else None)
    if n is not None:
        cfg["draft_vocab_size"] = n
        changes.append(f"config.json: draft_vocab_size = {n} added (engines otherwise size lm_head from vocab_size)")
    return cfg


def _plan_other_files(ck: Checkpoint, changes: list[str]) -> list[Path]:
    """The entries of the folder copied as they are (not weights, index, mapping side files, config)."""
    weight_files = {p.resolve() for p in ck.tensors.files}
    side = {p.resolve() for p in ck.mapping_files.values()}
    entries = sorted(ck.path.iterdir())
    stale = [p.name for p in entries if p.is_file() and p.suffix in (".safetensors", ".bin")
             and p.resolve() not in weight_files]
    if stale:
        changes.append(f"not copied: {', '.join(stale)} (weight files the checkpoint does not load from)")
    return [p for p in entries if not (p.resolve() in weight_files or p.resolve() in side or p.name in stale
                                      or p.name.endswith(".index.json") or p.name == "config.json")]


def _error_counts(findings) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in findings:
        if f.severity == "error":
            counts[f.code] = counts.get(f.code, 0) + 1
    return counts


def plan_fix(src, engine: str = "all", target_config=None, *, check_weights: bool = False) -> FixPlan:
    """What `fix_checkpoint(src, ..., engine)` would change, and which errors that resolves.

    Nothing is written and no weight data is read (only headers, d2t/t2d and config.json; with
    `check_weights=True` the NaN/Inf scan runs on `src` too, so `unfixable` can list it). The
    doctor is run on `src` and on the planned copy (keys, mapping, config, shapes as they will
    be written); an error code whose count drops is in `fixes`, errors left are `unfixable`.
    """
    _engines(engine)
    src = Path(src)
    ck = _open_fix_source(src)
    if target_config is not None and not isinstance(target_config, dict):
        target_config = read_config(target_config)
    before = diagnose(ck, engine, target_config, check_weights=check_weights)
    changes: list[str] = []
    d2t, t2d = _plan_mapping(ck, {f.code for f in before if f.severity == "error"}, changes)
    store = _plan_tensors(ck, engine, d2t, t2d, src / "model.safetensors", changes)
    cfg = _plan_config(ck, d2t, changes)
    copy = _PlannedCopy(ck, store, d2t, t2d, cfg, _plan_other_files(ck, changes))
    planned = Checkpoint(path=src, config=cfg, tensors=store)
    after = diagnose(planned, engine, target_config, check_weights=False)
    if check_weights:  # fix never changes weight values: what the scan found stays
        after += [f for f in before if f.code == "nonfinite-weights"]
    was, now = _error_counts(before), _error_counts(after)
    fixes = [code for code in was if now.get(code, 0) < was[code]]
    unfixable = [f for f in after if f.severity == "error"]
    return FixPlan(src=src, engine=engine, changes=changes, fixes=fixes, unfixable=unfixable,
                   before=before, copy=copy)


# -- writing the copy ---------------------------------------------------------------------------
def _write_shards(tensors: list[tuple[str, callable, int]], folder: Path, max_shard: int = 2 << 30) -> list[str]:
    """Write (name, loader, nbytes) triples as safetensors, one shard at a time (loaders run lazily)."""
    from safetensors.torch import save_file

    groups: list[list[tuple[str, callable, int]]] = [[]]
    size = 0
    for name, load, nbytes in tensors:
        if groups[-1] and size + nbytes > max_shard:
            groups.append([])
            size = 0
        groups[-1].append((name, load, nbytes))
        size += nbytes
    names = ["model.safetensors"] if len(groups) == 1 else [
        f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    weight_map = {}
    for fname, group in zip(names, groups):
        data = {name: load().contiguous() for name, load, _ in group}
        save_file(data, str(folder / fname), metadata={"format": "pt"})
        weight_map.update({name: fname for name in data})
        del data
    if len(names) > 1:
        total = sum(nb for g in groups for *_, nb in g)
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return names


def _write_side_files(copy: _PlannedCopy, folder: Path) -> None:
    """Keep mapping files beside the weights, corrected, so no stale mapping remains."""
    d2t, t2d = copy.d2t, copy.t2d
    for kind, p in copy.ck.mapping_files.items():
        if kind == "dict":
            torch.save({"d2t": d2t, "t2d": t2d} if t2d is not None else {"d2t": d2t}, folder / p.name)
        elif kind in ("d2t", "t2d"):
            val = d2t if kind == "d2t" else t2d
            if val is None:
                continue
            if p.suffix == ".npy":
                np.save(folder / p.name, val.numpy())
            else:
                torch.save(val, folder / p.name)


def _write_copy(copy: _PlannedCopy, folder: Path) -> None:
    """Write the planned copy into the (empty, new) `folder`."""
    _write_shards(copy.tensors.items(), folder)
    for p in copy.copied:
        if p.is_dir():
            shutil.copytree(p, folder / p.name, symlinks=True)
        else:
            shutil.copy2(p, folder / p.name)
    _write_side_files(copy, folder)
    if copy.config is not None:
        (folder / "config.json").write_text(json.dumps(copy.config, indent=2) + "\n")


def _temp_folder_beside(dst: Path) -> Path:
    try:
        return Path(tempfile.mkdtemp(prefix=f".{dst.name}.tmp-", dir=dst.parent))
    except OSError as e:
        raise BadInputError(dst.parent, f"cannot create a folder here ({e.strerror or e})") from None


def _publish(tmp: Path, dst: Path) -> None:
    """Give the finished copy normal folder modes and rename it to `dst` (never over anything)."""
    if dst.exists() or dst.is_symlink():
        raise BadInputError(dst, "appeared while the fixed copy was written; nothing was overwritten")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp made it private; the copy gets normal folder modes
    os.rename(tmp, dst)


def fix_checkpoint(src, dst, engine: str = "all", target_config=None, *, check_weights: bool = True,
                   force: bool = False) -> FixResult:
    """Write a corrected copy of the checkpoint folder `src` to `dst` (which must not exist).

    `src` is only read. Fixes: absolute d2t ids -> offsets; d2t/t2d held only beside the weights
    -> into the weights; t2d added when missing; decoder-layer keys renamed for `engine`
    (`midlayer.*` for sglang/all, `layers.0.*` for vllm) and `model.` prefixes dropped;
    `draft_vocab_size` added to config.json when missing. Other files are copied.

    The changes are planned first (`plan_fix`). When they resolve no error finding for `engine`
    (a healthy checkpoint, or only errors fix cannot repair), `BadInputError` says why and
    nothing is written, not even a temporary folder; `force=True` writes the copy anyway.
    Otherwise everything is written into a temporary folder beside `dst`, checked by the doctor
    (with `target_config`; `check_weights` runs its NaN/Inf scan) and renamed at the end.
    """
    _engines(engine)
    dst = new_output_dir(dst, "fixed copy")
    plan = plan_fix(src, engine, target_config)
    if not plan.matters and not force:
        raise BadInputError(plan.src, plan.refusal)
    tmp = _temp_folder_beside(dst)
    try:
        _write_copy(plan.copy, tmp)
        after = diagnose(tmp, engine, target_config, check_weights=check_weights)
        _publish(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    changes = plan.changes or ["nothing needed changing; written as a plain copy"]
    return FixResult(dst=dst, changes=changes, findings=after, plan=plan)
