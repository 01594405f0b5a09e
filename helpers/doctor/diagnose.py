"""The checkpoint doctor: every known EAGLE-3 deployment bug as a finding.

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

The checks live beside this module: `helpers.doctor.checks_config` (config-invalid: every config
field the loaders would refuse, first; the other checks then read the configs without those fields
and with null as absent), `helpers.doctor.checks_mapping` (vocab sizes, d2t/t2d) and
`helpers.doctor.checks_weights` (keys, shapes, aux layers, NaN/Inf) and `helpers.doctor.checks_variants`
(what each engine does with the producers' options: fc_norm, input_norm, norm_output,
norm_before_residual, q_norm/k_norm, attention bias, sliding window), on the rules in
`helpers.engines.registry`, and `helpers.doctor.checks_target` (EAGLE-3 served as EAGLE, borrowed lm_head,
aux-id counts and places, and with `target=` the target's embedding and context, compared by
`helpers.model.fit`); `previous=` adds mapping drift (`helpers.doctor.diff`). The engine files
and issue threads behind that second wave are in docs/doctor-findings.md. Findings are
`helpers.doctor.findings.Finding`. The fixer (`plan_fix`,
`fix_checkpoint`: a corrected copy, planned first, checked after) is `helpers.doctor.fix`.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from helpers.engines.registry import ENGINES, engines_at, gguf_engines
from helpers.core.errors import BadInputError
from helpers.doctor.checks_capture import check_capture
from helpers.doctor.checks_config import check_config, check_loadable
from helpers.doctor.checks_dflash import diagnose_dflash
from helpers.doctor.checks_gguf import check_gguf_format, check_gguf_loader, check_gguf_mapping
from helpers.doctor.checks_mapping import check_mapping, check_vocab
from helpers.doctor.checks_method import check_method
from helpers.doctor.checks_target import (
    check_algorithm,
    check_aux_config,
    check_head_borrow,
    check_target,
)
from helpers.doctor.checks_variants import (
    check_draft_class,
    check_layer_count,
    check_speculators_config,
    check_variants,
)
from helpers.doctor.checks_aux import check_aux
from helpers.doctor.checks_engine_config import check_engine_config
from helpers.doctor.checks_weights import (
    check_finite,
    check_key_layout,
    check_param_shapes,
    check_shapes,
)
from helpers.doctor.findings import CheckContext, Findings, has_error
from helpers.doctor.registry import NO_EFFECT
from helpers.io.checkpoint import Checkpoint, open_checkpoint, read_mapping_tensors
from helpers.io.configs import flat_config, read_config
from helpers.model.config_fields import draft_problems, target_problems, without_problems
from helpers.model.dflash import dflash_draft
from helpers.model.target import transformers_refusal


def findings_table(findings):
    """The findings as a pandas DataFrame (columns code, severity, message, fix)."""
    import pandas as pd

    return pd.DataFrame([f.as_dict() for f in findings], columns=["code", "severity", "message", "fix"])


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
    """(findings for `engine`, {engine: findings} for each engine it covers, keyed by the `--engine` value
    naming it, e.g. "vllm==X.Y.Z"), weights scanned once.

    The per-engine lists share the NaN/Inf finding of the one scan instead of reading every
    weight again per engine (a draft's weights are gigabytes). `scanned`: findings of an earlier
    scan of the same weight values (a fixed copy keeps its source's values); then none is made.
    """
    main = diagnose(path, engine, target_config, check_weights=check_weights and scanned is None)
    scanned = [f for f in (main if scanned is None else scanned) if f.code in WEIGHT_SCAN_CODES]
    if scanned and not any(f.code in WEIGHT_SCAN_CODES for f in main):
        main = Findings(scanned + main, path=main.path, engine=engine, versions=main.versions)
    each = {}
    for at in engines_at(engine):
        one = diagnose(path, at.spec, target_config, check_weights=False)
        each[at.spec] = Findings(one + scanned, path=main.path, engine=at.spec, versions=one.versions)
    return main, each


def diagnose(path, engine: str = "all", target_config=None, *, check_weights: bool = True,
             progress: bool = False, target=None, previous=None, algorithm: str | None = None,
             samples=None) -> Findings:
    """All findings for the draft checkpoint at `path`, errors first (a `Findings` list, whose
    `to_dict()` is the `doctor --json` object and `report()` the doctor's text).

    `engine`: an engine key of the table ('sglang', 'vllm', ...) or 'all', with an optional version
    ('sglang==X.Y.Z', 'vllm>=X.Y'): the rules of that release apply (`helpers.engines.registry.engines_at`; none given:
    the newest release read, said in `Findings.versions`). `target_config`: the target's config.json (path or dict),
    for the aux-layer and size checks. `check_weights=False` skips the NaN/Inf scan (the only
    check that reads every weight). `target`: the target's folder (config.json and, when there,
    its weights: only embed_tokens is read) for the target checks (`helpers.doctor.checks_target`).
    `previous`: an earlier checkpoint of the same draft, for the mapping-drift check
    (`helpers.doctor.diff`). `samples` (with `target`): the draft's training samples, for the
    target-drift check (`helpers.doctor.checks_drift`: the target loaded and run on their token ids). `algorithm`: 'eagle' / 'eagle3', the flag the draft is served with.
    Paths may be hf:// or http(s):// locations. Unreadable input raises `BadInputError`.
    """
    c, ats, asked, dprobs, config_only, dflash = _draft_context(path, engine)
    ck = c.ck
    tcfg = None
    if target_config is None and target is not None:
        target_config = target
    if target_config is not None:
        tcfg = target_config if isinstance(target_config, dict) else read_config(target_config)
    # the target's: with --target (a model to load) as speculate reads it, transformers' own checks too
    tprobs = target_problems(tcfg, loaded=target is not None) if isinstance(tcfg, dict) else []
    target_refusal = transformers_refusal(tcfg) if target is not None and isinstance(tcfg, dict) and not tprobs \
        else None
    tcfg = without_problems(tcfg, tprobs) if isinstance(tcfg, dict) else tcfg
    if ck.config is None:
        c.add("config-missing", "warning", "no config.json beside the weights: sizes cannot be checked",
              "copy the draft's config.json into the checkpoint folder")
    if ck.format == "gguf":
        check_gguf_format(c, asked)
    check_config(c, dprobs, tprobs, target_refusal)
    _trainer_files(c)
    check_method(c, tcfg, algorithm)  # vLLM: P-EAGLE, serving options, the method, a packed target
    if dflash:  # DFlash / DSpark / XPress: not EAGLE-3 checks
        return diagnose_dflash(c, ats, engine, path, tcfg, check_weights=check_weights, progress=progress)
    if config_only:  # a draft's config.json alone: what the config decides, before any weight is fetched
        c.add("config-only", "info", f"only {ck.config_path.name} was read: the aux-layer, variant and config checks ran; "
              "keys, shapes, the mapping and the NaN/Inf scan need the weights",
              "point at the folder holding the weights for the full check", effect=NO_EFFECT)
        check_speculators_config(c)
        check_draft_class(c)
        check_aux(c, tcfg)
        check_capture(c, tcfg)
        check_aux_config(c, tcfg)
        return Findings([f.with_outcomes(ats) for f in c.findings], path=ck.config_path, engine=engine, versions=ats)
    d2t, t2d, used = read_mapping_tensors(ck)
    if d2t is not None and not isinstance(d2t, torch.Tensor):
        d2t = torch.as_tensor(np.asarray(d2t))
    if t2d is not None and not isinstance(t2d, torch.Tensor):
        t2d = torch.as_tensor(np.asarray(t2d))
    if ck.tensors.keys() and ck.format != "gguf":
        check_engine_config(c)  # first: the engine builds the config before it loads a weight
    n, v = check_vocab(c, d2t, t2d, tcfg)
    if ck.d2t_convention == "absolute":  # a GGUF: llama.cpp reads absolute ids
        check_gguf_mapping(c, n, v, d2t)
    else:
        check_mapping(c, n, v, d2t, t2d, used)
    check_speculators_config(c)
    check_draft_class(c)
    if ck.tensors.keys():
        if ck.format != "gguf":  # a GGUF's names are llama.cpp's own (read back under the midlayer layout)
            check_key_layout(c)
        check_layer_count(c)
        check_variants(c)
        check_shapes(c, tcfg)
        check_param_shapes(c)
        check_aux(c, tcfg)
        check_capture(c, tcfg)
        check_algorithm(c, tcfg, algorithm)
        check_head_borrow(c)
        check_aux_config(c, tcfg)
        check_target(c, tcfg, target)
        if ck.format == "gguf":  # what llama.cpp's loader refuses in the file itself (after the general checks)
            check_gguf_loader(c)
        if previous is not None:
            from helpers.doctor.diff import check_drift

            check_drift(c, previous)
        if samples is not None and target is not None and not {f.code for f in c.findings if f.severity == "error"} & _NO_FORWARD:
            from helpers.doctor.checks_drift import check_target_drift

            check_target_drift(c, target, samples)
        check_loadable(c)  # last: what evaluate / speculate refuse that no other error has named
        if check_weights:
            check_finite(c, progress)
    return Findings([f.with_outcomes(ats) for f in c.findings], path=path if not isinstance(path, Checkpoint) else ck.path,
                    engine=engine, versions=ats)


def served_as_eagle(path, engine: str = "all") -> Findings:
    """`diagnose(path, engine, algorithm="eagle")`'s `eagle3-as-eagle` alone, none of the other
    checks run: what `probe`, `logs --checkpoint` and `report --log` ask when a server ran the
    EAGLE (1/2) algorithm (the draft's fc width against its hidden size decides,
    `helpers.doctor.checks_target.check_algorithm`). Empty for a draft that is not EAGLE-3's."""
    c, ats, _, _, config_only, dflash = _draft_context(path, engine)
    if not (config_only or dflash) and c.ck.tensors.keys():  # where diagnose runs it: an EAGLE-3 draft's weights
        check_algorithm(c, None, "eagle")
    return Findings([f.with_outcomes(ats) for f in c.findings], path=path if not isinstance(path, Checkpoint)
                    else c.ck.path, engine=engine, versions=ats)


class _Draft(NamedTuple):
    c: CheckContext  # the checkpoint (its config without the fields in `problems`), the releases' rules
    ats: list  # the releases whose rules apply (a GGUF: llama.cpp's)
    asked: list  # the engine keys --engine asked for
    problems: list  # the config fields the loaders would refuse (config-invalid)
    config_only: bool  # a draft's config.json alone
    dflash: bool  # a DFlash / DSpark / XPress draft


def _draft_context(path, engine: str) -> _Draft:
    """What every check of the draft starts from, in the order diagnose reads it: the release rules
    of `engine`, the checkpoint opened (or a config alone), and the config fields the loaders would
    refuse, taken out of the config the checks read."""
    try:
        ats = engines_at(engine)
    except ValueError as e:
        raise BadInputError(None, f"--engine: {e}") from None
    ck, config_only = _open(path)
    asked = [a.key for a in ats]
    if ck.format == "gguf":  # a GGUF is loaded by llama.cpp only: its rules, at the release asked for if any
        readers = gguf_engines()
        ats = [a for a in ats if a.key in readers] or [a for r in readers for a in engines_at(r)]
    # every field the loaders would refuse, named once (config-invalid); the other checks read the
    # configs without those fields, and with null as absent (`"eagle_config": null`, as exports carry it)
    dprobs = draft_problems(ck.config)
    if ck.config is not None:
        ck = replace(ck, config=without_problems(ck.config, dprobs))
    dflash = dflash_draft(ck.config, ck.tensors.keys()) is not None
    if dflash or not any(k in ck.tensors for k in ("fc.weight", "model.fc.weight")) or _layerless(ck.config):
        # the EAGLE-3 sizes only where an EAGLE-3 draft's weights are, and not where config-incomplete names them
        dprobs = [p for p in dprobs if not p.missing]
    c = CheckContext(ck=ck, engines=tuple(a.key for a in ats), cfg=flat_config(ck.config) if ck.config else {},
                     at={a.key: a for a in ats}, invalid=frozenset(p.field for p in dprobs))
    return _Draft(c, ats, asked, dprobs, config_only, dflash)


# errors under which the draft cannot be run on the target's states: the drift check is left out
_NO_FORWARD = {"vocab-size-mismatch", "fc-shape", "aux-layers", "config-invalid", "key-layout", "lm-head-missing"}


def _layerless(cfg: dict | None) -> bool:
    """A speculators config without its layer section (config-incomplete, `check_speculators_config`)."""
    return bool(cfg) and "speculators_model_type" in cfg and not isinstance(cfg.get("transformer_layer_config"), dict)


def _trainer_files(c: CheckContext) -> None:
    """A trainer's own save (weights in a .pt training state) and the .pt files set aside as foreign."""
    pts = [f for f in c.ck.tensors.files if f.suffix in (".pt", ".pth")]
    if any(f.name.startswith("training_state") for f in pts):
        c.add(
            "training-checkpoint", "warning",
            f"the weights are a trainer's training state ({pts[0].name}, weights under draft_state_dict): "
            "SGLang and vLLM cannot load this file",
            "export it for serving: python -m specforge.export.to_sglang --checkpoint STEP_DIR "
            "--draft-config CONFIG --output-dir OUT",
        )
    for f, why in c.ck.ignored.items():
        c.add("foreign-file", "info", f"{Path(f).name} is not part of the draft and was not read as one: it holds {why}",
              "nothing to do")
    _shard_files(c)


def _shard_files(c: CheckContext) -> None:
    """A sharded checkpoint whose shards overlap, or a single-file checkpoint left beside its index: a loader
    reads one copy and nothing says which (loaders differ: the index's shard, or the last file read)."""
    dup = c.ck.tensors.duplicates
    if dup:
        names = sorted(dup)
        files = sorted({f.name for k in names for f in dup[k]})
        c.add("shards-overlap", "warning",
              f"{len(names)} tensor(s) stored in more than one shard ({', '.join(names[:4])}"
              f"{', ...' if len(names) > 4 else ''}: in {' and '.join(files)}); the kit read the copy the index names, "
              "a loader that reads every shard may keep the other",
              "write each tensor into one shard only, the one model.safetensors.index.json names")
    for f, why in c.ck.tensors.unread.items():
        c.add("weights-beside-index", "warning", f"{Path(f).name}: {why}",
              f"remove {Path(f).name} or the index (a loader picks one of them; which one differs)")


def _open(path) -> tuple[Checkpoint, bool]:
    """(the checkpoint, whether it is a draft's config.json alone). A config alone is `DRAFT/config.json`
    or a local folder holding it and no weights: the doctor then runs the checks the config decides
    (aux layers against a target config, variants, the draft class), as a user would before fetching
    gigabytes of weights."""
    if isinstance(path, Checkpoint):
        return path, False
    try:
        return open_checkpoint(path), False
    except BadInputError:
        alone = _config_alone(path)
        if alone is None:
            raise
        return Checkpoint(path=alone.parent, config=read_config(alone), config_path=alone), True


def _config_alone(path) -> Path | None:
    if isinstance(path, str) and "://" in path:
        return None
    p = Path(path)
    if p.is_file() and p.name == "config.json":
        return p
    if p.is_dir() and (p / "config.json").is_file() and not any(
            f.suffix in _WEIGHTS_LIKE or f.name.endswith(".index.json") for f in p.iterdir()):
        return p / "config.json"
    return None


_WEIGHTS_LIKE = (".safetensors", ".bin", ".pt", ".pth", ".npy", ".gguf")  # a folder with these is not a config alone
