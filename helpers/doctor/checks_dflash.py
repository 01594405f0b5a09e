"""The doctor's checks for block-diffusion drafts (DFlash, DSpark, XPress), as vLLM loads them.

`check_dflash` replaces the EAGLE-3 key, layout, shape and aux checks for such a draft (its
`layers.1..N`, top-level `hidden_norm`, five-state `fc` and absent `lm_head` are right for it, not
bugs). What it checks, on the `dflash.*` rules of `helpers.engines.table` (read in vLLM's
wheels, none run; `helpers.model.dflash` says where each was read):

- the layer ids: where vLLM finds them, the +1 it adds to DFlash's 0-based ids, and, with a target
  config, the target layers captured: past the last layer, the ids written in the EAGLE-3 convention
  (already +1, so one layer late), EAGLE-3 ids that disagree with the DFlash ids they override, a
  draft trained for another depth, or no ids at all (the target's default three);
- `fc`'s width against the hidden states vLLM hands it;
- the vocab: identity when the draft keeps the target's vocab (or, for DSpark, a larger padded one),
  d2t offsets and an own lm_head when it is pruned, a d2t stored where vLLM builds no map, XPress's
  full vocab;
- the config fields vLLM needs (architecture, mask token, DSpark's top-level markov_rank, the method
  it picks) and the stored names (unknown names and a `model.` prefix stop vLLM's loader).

Each finding's predicted outcome comes from the engine's outcome table like any other: the
`dflash.*` effects are rows read (not run) in vLLM's code (`DFLASH_OUTCOMES` in
`helpers.engines.table`), the d2t findings of `helpers.doctor.checks_mapping` share the EAGLE-3
rows, whose scatter code is the same.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from helpers.engines.registry import EngineAt
from helpers.doctor.checks_mapping import check_mapping
from helpers.doctor.checks_weights import check_finite
from helpers.doctor.findings import CheckContext, Findings
from helpers.doctor.findings import fmt_number as _fmt
from helpers.doctor.registry import NO_EFFECT
from helpers.io.checkpoint import Checkpoint, read_mapping_tensors
from helpers.model.dflash import (
    LAYER_NORMS,
    LAYER_WEIGHTS,
    PLACE_NAMES,
    DFlashDraft,
    default_capture,
    default_layer_ids,
    dflash_draft,
    fc_inputs,
    layer_of,
    vllm_aux_ids,
)
from helpers.model.fit import text_config

# Top-level names the vLLM DFlash loaders take (qwen3_dflash.py, qwen3_dspark.py, qwen3_xpress.py,
# qwen3_dflash2.py; Muse Glimmer's encoder.* is renamed to fc / hidden_norm).
_TOP = ("fc.", "hidden_norm.", "norm.", "embed_tokens.", "lm_head.", "encoder.fc.", "encoder.output_norm_enc.")
_TOP_BY_KIND = {"dspark": ("markov_head.", "confidence_head."), "xpress": ("xpress_head.",),
                "dflash": ("candidate_selector.",)}
_IN_LAYER = ("self_attn.", "mlp.", "input_layernorm.", "post_attention_layernorm.", "attention_conv.", "mlp_conv.")


def check_dflash(c: CheckContext, target_cfg: dict | None, d2t=None, t2d=None, used=()) -> DFlashDraft:
    """Every DFlash finding for the draft in `c` (which `dflash_draft` recognised); returns what it is."""
    d = dflash_draft(c.ck.config, c.ck.tensors.keys())
    keys = [k for k in c.ck.tensors.keys()]
    _about(c, d)
    for at in c.engine_list:
        if not isinstance(at.value("dflash.aux.shift"), int):  # an engine whose DFlash path was not read
            c.add("dflash-draft", "info",
                  f"{at.label}: the kit has not read how this release serves {d.kind} drafts; its checks are vLLM's",
                  "check with --engine vllm", effect=NO_EFFECT, engine=at.key)
            continue
        _config_fields(c, d, at)
        _aux(c, d, at, target_cfg)
        _vocab(c, d, at, target_cfg, d2t, t2d, list(used))
        if keys:
            _keys(c, d, at, keys)
            _fc(c, d, at, target_cfg)
    return d


def _about(c: CheckContext, d: DFlashDraft) -> None:
    what = {"dflash": "DFlash", "dspark": "DSpark", "xpress": "XPress (a DFlash draft with a refiner head)"}[d.kind]
    parts = [f"a {what} block-diffusion draft" + (f" ({d.variant})" if d.variant else "")
             + f": {'; '.join(d.evidence)}"]
    parts.append(f"vLLM serves it with method {d.method}" + (f", built by {d.model_file}" if d.model_file else ""))
    if d.block_size is not None:
        parts.append(f"block {d.block_size} ({d.block_size_from})")
    if d.mask_token_id is not None:
        parts.append(f"mask token {d.mask_token_id} ({d.mask_token_from})")
    c.add("dflash-draft", "info", "; ".join(parts) + "; the EAGLE-3 key, layout and aux checks do not apply",
          "nothing to do", effect=NO_EFFECT)


# -- config fields -------------------------------------------------------------------------------------
def _config_fields(c: CheckContext, d: DFlashDraft, at: EngineAt) -> None:
    e, name = at.key, at.label
    if d.variant != "speculators":
        if d.architecture is None:
            c.add("dflash-config", "error", f"{name}: config.json names no architectures, so vLLM cannot pick the "
                  "draft model", "set architectures, e.g. [\"DFlashDraftModel\"]", engine=e)
        elif d.model_file is None:
            c.add("dflash-config", "error",
                  f"{name}: architectures[0] {d.architecture} is not a registered DFlash/DSpark draft; served with "
                  f"method {d.method} vLLM looks for DFlash{d.architecture} and does not start",
                  "set architectures to the draft class, e.g. [\"DFlashDraftModel\"]", effect="dflash.arch-unknown",
                  engine=e)
    if d.mask_token_id is None:
        c.add("dflash-config", "error",
              f"{name}: no mask token (dflash_config.mask_token_id or mask_token_id): vLLM fills the query slots "
              "with it and refuses a config without one", "write the mask token id the draft was trained with into "
              "dflash_config.mask_token_id", effect="dflash.mask-missing", engine=e)
    elif d.vocab_size is not None and d.mask_token_id >= d.vocab_size:
        c.add("dflash-config", "error",
              f"{name}: mask token {d.mask_token_id} is past the embedding's {_fmt(d.vocab_size)} rows",
              "use the mask token id of the target's tokenizer (the trainer added it)", engine=e)
    dspark_qwen3 = d.architecture in ("Qwen3DSparkModel", "Qwen3OmniDSparkModel") or (
        d.architecture == "DSparkDraftModel" and d.model_type == "qwen3")
    if d.kind == "dspark" and dspark_qwen3 and not isinstance((c.ck.config or {}).get("markov_rank"), int):
        dconf = (c.ck.config or {}).get("dflash_config")
        nested = isinstance(dconf, dict) and "markov_rank" in dconf
        c.add("dflash-config", "error",
              f"{name}: no top-level markov_rank" + (" (it is inside dflash_config, where qwen3_dspark.py does not "
                                                     "look)" if nested else "")
              + ": the Qwen3 DSpark model reads config.markov_rank to build its Markov head and does not start",
              "put markov_rank (and the other DSpark head fields) at the top level of config.json",
              effect="dflash.markov-rank", engine=e)
    if d.kind == "dspark":
        if d.block_size is None:
            c.add("dflash-config", "warning", f"{name}: no block_size: vLLM takes num_speculative_tokens from it for "
                  "DSpark, so it must be given at launch", "add block_size to config.json or pass "
                  "num_speculative_tokens in --speculative-config", effect=NO_EFFECT, engine=e)
    else:
        width = f" ({d.block_size - 1} for its block of {d.block_size}, as it was trained)" if d.block_size else ""
        c.add("dflash-config", "info",
              f"{name} does not read a DFlash draft's block size: give num_speculative_tokens in "
              f"--speculative-config{width}", "launch with --speculative-config '{\"method\": \"dflash\", "
              f"\"num_speculative_tokens\": {d.block_size - 1 if d.block_size else 'N'}, \"model\": ...}}'",
              effect=NO_EFFECT, engine=e)
    if at.value("dflash.method.detect") == "path-name" and d.variant != "speculators":
        path = str(c.ck.origin or c.ck.path).lower()
        auto = d.architecture in ("MuseGlimmerAssistantModel", "Qwen3DSparkModel", "Qwen3OmniDSparkModel",
                                  "MuseSparkDSparkModel", "Gemma4DSparkModel") or dspark_qwen3
        if d.method not in path and not auto:
            c.add("dflash-config", "warning",
                  f"{name} takes method {d.method} from '{d.method}' in the model path (or a few architectures); "
                  f"{Path(path).name} has none, so without a method it is served as a plain draft model",
                  f"pass --speculative-config '{{\"method\": \"{d.method}\", ...}}' ({at.name} "
                  f"{at.where('dflash.method.detect', 'architecture').since} reads the method from the architecture)",
                  engine=e)


# -- layer ids -------------------------------------------------------------------------------------------
def _aux(c: CheckContext, d: DFlashDraft, at: EngineAt, target_cfg: dict | None) -> None:
    e, name = at.key, at.label
    ids, place = vllm_aux_ids(d, at)
    t = text_config(target_cfg) if target_cfg is not None else {}
    n_layers = t.get("num_hidden_layers") if isinstance(t.get("num_hidden_layers"), int) else None
    trained = d.trained_ids
    fix_ids = "write the 0-based target layers the draft was trained on into dflash_config.target_layer_ids and drop " \
              "eagle_aux_hidden_state_layer_ids (vLLM adds 1 itself)"
    if ids is None:
        if not d.use_aux_hidden_state:
            return
        k = d.num_hidden_layers
        if n_layers is not None:
            dflt = default_capture(n_layers)
            where = f"the target's default aux ids {dflt} (the output of layers {[i - 1 for i in dflt]} of {n_layers})"
        else:
            where = "the target's default aux ids (2, L // 2, L - 3)"
        if k is not None and k != 3:
            c.add("dflash-aux", "error",
                  f"{name}: the config names no layer ids, so vLLM captures {where}: 3 hidden states, but it sizes fc "
                  f"for num_hidden_layers = {k} of them and raises 'DFlash drafter expects ...'", fix_ids,
                  effect="dflash.aux-count", engine=e)
        else:
            c.add("dflash-aux", "warning",
                  f"{name}: the config names no layer ids, so vLLM captures {where}; served as trained only if the "
                  "draft was trained on exactly these", fix_ids, effect="dflash.aux-default", engine=e)
        return
    written = d.layer_ids[place]
    shift = "as given" if ids == written else f"+{ids[0] - written[0]}"
    served = [i - 1 for i in ids]
    head = (f"{name} reads {PLACE_NAMES[place]} {written} ({shift}) and hands the target aux ids {ids}: the draft "
            f"reads the output of target layers {served}")
    problems = False
    if trained is not None and served != trained:
        problems = True
        late = "earlier" if all(s == t - 1 for s, t in zip(served, trained)) else "elsewhere"
        c.add("dflash-aux", "warning",
              f"{head}, but it was trained on {trained} (the DFlash ids, 0-based): the ids vLLM reads first override "
              f"them" + (" and are one layer earlier, written without DFlash's +1" if late == "earlier" else ""),
              f"make eagle_aux_hidden_state_layer_ids = [id + 1 for the DFlash ids] ({[t + 1 for t in trained]}), or "
              "drop it", effect="dflash.aux-shifted", engine=e)
    if n_layers is not None:
        bad = [i for i in ids if i < 0 or i > n_layers]
        if bad:
            problems = True
            hint = " (an id equal to the layer count is what the last layer's id looks like when it was already " \
                   "given EAGLE-3's +1)" if any(i - 1 == n_layers for i in bad) or n_layers in written else ""
            c.add("dflash-aux", "error",
                  f"{head}; aux ids {bad} are past the target's {n_layers} layers (aux id k is the output of layer "
                  f"k - 1, so at most {n_layers}){hint}: fewer hidden states reach fc and vLLM raises 'DFlash drafter "
                  "expects ...'", fix_ids, effect="dflash.aux-count", engine=e)
        elif place in ("dflash", "target", "dspark") and _looks_shifted(written, n_layers):
            problems = True
            c.add("dflash-aux", "warning",
                  f"{head}; {PLACE_NAMES[place]} {written} are z-lab's default ids for a {n_layers}-layer target "
                  f"({default_layer_ids(n_layers, len(written))}) plus 1, i.e. written in vLLM's EAGLE-3 convention: "
                  "vLLM adds 1 again and reads each layer one later than the trainer did",
                  f"write the 0-based ids {[i - 1 for i in written]} (vLLM adds the 1)", effect="dflash.aux-shifted",
                  engine=e)
        if d.num_target_layers is not None and d.num_target_layers != n_layers:
            problems = True
            c.add("dflash-aux", "warning",
                  f"{name}: the draft was trained for a target of num_target_layers = {d.num_target_layers} layers; "
                  f"this target has {n_layers}, so its layers {served} hold other features",
                  "serve the draft with the target it was trained for", effect="dflash.aux-default", engine=e)
    if not problems:
        tail = (f" of {n_layers} (the inputs of layers {ids}); z-lab trains on hidden_states[id + 1] of these ids, "
                "the same layers") if n_layers is not None else ""
        rule = f"; DFlash ids are 0-based and vLLM adds {at.value('dflash.aux.shift')}" \
            if place in ("dflash", "target", "dspark") else ""
        c.add("dflash-aux", "info", head + tail + rule,
              "nothing to do" if n_layers is not None else "pass --target-config TARGET/config.json to check them "
              "against the target", effect=NO_EFFECT, engine=e)


def _looks_shifted(written: list[int], n_layers: int) -> bool:
    """The ids are z-lab's default spread for this depth plus one (and not the default itself)."""
    dflt = default_layer_ids(n_layers, len(written))
    return written != dflt and written == [i + 1 for i in dflt]


# -- fc --------------------------------------------------------------------------------------------------
def _fc(c: CheckContext, d: DFlashDraft, at: EngineAt, target_cfg: dict | None) -> None:
    fc = c.shape("fc.weight")
    if fc is None or len(fc) != 2 or not d.use_aux_hidden_state:
        return
    ids, _ = vllm_aux_ids(d, at)
    k = fc_inputs(d, ids)
    th = d.target_hidden_size or d.hidden_size
    if th is None and target_cfg is not None:
        th = text_config(target_cfg).get("hidden_size")
    if isinstance(k, int) and isinstance(th, int) and fc[1] != k * th:
        why = f"{k} aux ids" if ids else f"num_hidden_layers = {k} (no ids in the config)"
        c.add("dflash-fc-shape", "error",
              f"{at.label}: fc.weight takes {_fmt(fc[1])} inputs, but vLLM sizes fc for {why} x hidden {_fmt(th)} = "
              f"{_fmt(k * th)} and refuses to load it", "state the layer ids the draft was trained on "
              "(dflash_config.target_layer_ids), as many as fc takes", effect="dflash.fc-width", engine=at.key)


# -- vocab and d2t ------------------------------------------------------------------------------------------
def _vocab(c: CheckContext, d: DFlashDraft, at: EngineAt, target_cfg, d2t, t2d, used) -> None:
    e, name = at.key, at.label
    tv = text_config(target_cfg).get("vocab_size") if target_cfg is not None else None
    v = tv if isinstance(tv, int) else d.vocab_size
    n = int(d2t.shape[0]) if d2t is not None and d2t.dim() == 1 else (d.draft_vocab_size or d.vocab_size)
    has_head = c.key("lm_head.weight") is not None or (c.ck.config or {}).get("has_own_lm_head") is True
    weights = bool(c.ck.tensors.keys())
    if n is None or v is None:
        c.add("dflash-vocab", "warning", f"{name}: the draft or target vocab size is unknown (no vocab_size)",
              "pass --target-config TARGET/config.json", effect=NO_EFFECT, engine=e)
        return
    sizes = f"draft vocab {_fmt(n)}, target vocab {_fmt(v)}"
    if d.kind == "xpress":
        if n != v:
            c.add("dflash-vocab", "error", f"{name}: {sizes}: XPress takes only a full-vocab draft (its refiner bias "
                  "spans the target vocab) and refuses this one", "serve the full-vocab export of the draft",
                  effect="dflash.xpress-vocab", engine=e)
        elif d2t is not None or t2d is not None:
            c.add("dflash-vocab", "info", f"{name}: XPress drops d2t and t2d at load ({sizes}: identity)",
                  "nothing to do", effect=NO_EFFECT, engine=e)
        return
    rule = at.value("dflash.dspark.vocab.map" if d.kind == "dspark" else "dflash.vocab.map")
    mapped = n < v if rule == "smaller" else n != v
    if not mapped:
        padded = " (a padded draft: vLLM treats it as identity, vllm#55133)" if n > v else ""
        if d2t is not None:
            c.add("dflash-vocab", "error",
                  f"{name}: {sizes}{padded}: vLLM builds no draft-to-target map for it, so the stored d2t is a name "
                  "its loader has no parameter for", "drop d2t (and t2d) from the weights: the identity is right",
                  effect="dflash.no-map", engine=e)
        else:
            c.add("dflash-vocab", "info", f"{name}: {sizes}{padded}: no d2t, and vLLM maps draft id = target id, "
                  "which is right", "nothing to do", effect=NO_EFFECT, engine=e)
        return
    if n > v:  # DFlash's `!=`: a larger draft gets a map (zeros: identity), scattered into a row of vocab_size
        c.add("dflash-vocab", "warning",
              f"{name}: {sizes}: qwen3_dflash.py builds a d2t for any size other than the target's (zeros when none "
              f"is stored: identity) and scatters {_fmt(n)} logits into a row of vocab_size {_fmt(d.vocab_size)}; "
              "ids past the target's vocab are never accepted", "export the draft with the target's vocab size",
              effect=NO_EFFECT, engine=e)
        return
    if d2t is None:
        dspark = d.kind == "dspark"
        guard = dspark and at.value("dflash.dspark.reduced") == "refuses"
        c.add("dflash-vocab", "error",
              f"{name}: {sizes} (pruned) and no d2t: " + (
                  "the Qwen3 DSpark loader refuses a pruned draft without d2t" if guard else
                  f"vLLM's d2t stays zeros, so draft id i is proposed as target id i and only ids 0..{_fmt(n - 1)} "
                  "are ever drafted"),
              "add the d2t (offsets, target = i + d2t[i]) the draft was trained with to the weights",
              effect="dflash.dspark-reduced" if dspark else "dflash.d2t-needed", engine=e)
    else:
        check_mapping(c, n, v, d2t, t2d, used)
    if weights and not has_head:
        dspark = d.kind == "dspark"
        guard = dspark and at.value("dflash.dspark.reduced") == "refuses"
        c.add("dflash-vocab", "error",
              f"{name}: a pruned draft ({sizes}) without its own lm_head: vLLM shares the target's "
              f"{_fmt(v)}-row head, whose logits do not fit the {_fmt(n)}-entry d2t"
              + (" (the Qwen3 DSpark loader refuses it)" if guard else ""),
              "export the draft's own lm_head (draft_vocab_size rows) with the weights",
              effect="dflash.dspark-reduced" if guard else None if dspark else "dflash.head-needed", engine=e)


# -- stored names ---------------------------------------------------------------------------------------------
def _keys(c: CheckContext, d: DFlashDraft, at: EngineAt, keys: list[str]) -> None:
    e, name = at.key, at.label
    prefixed = [k for k in keys if k.startswith("model.")]
    if prefixed:
        c.add("dflash-keys", "error",
              f"{name}: {len(prefixed)} stored names start with 'model.' ({prefixed[0]}): the DFlash loader puts "
              "'model.' before every name but lm_head, so these become model.model.* and stop it",
              "strip the 'model.' prefix from the stored names", effect="dflash.unknown-key", engine=e)
    if any("mask_hidden" in k for k in keys):
        c.add("dflash-keys", "error", f"{name}: a mask_hidden weight: the DFlash loader asserts that none is shipped "
              "(it embeds mask slots via mask_token_id)", "drop mask_hidden from the weights",
              effect="dflash.mask-hidden", engine=e)
    n_layers = d.num_hidden_layers
    unknown, present = [], set()
    extra = _TOP_BY_KIND.get(d.kind, ()) + (("candidate_selector.",) if d.variant == "dflash2" else ())
    for k in keys:
        k = k[len("model."):] if k.startswith("model.") else k
        if k.startswith("midlayer."):
            k = "layers.0." + k[len("midlayer."):]
        if k in ("d2t", "t2d") or "mask_hidden" in k or not k.endswith((".weight", ".bias")):
            continue  # the mapping is checked by _vocab; quantization scales are not judged here
        i, rest = layer_of(k)
        if i is not None:
            if (n_layers is not None and i >= n_layers) or not rest.startswith(_IN_LAYER):
                unknown.append(k)
            present.add(k)
        elif not k.startswith(_TOP + extra):
            unknown.append(k)
        else:
            present.add(k)
    if unknown:
        c.add("dflash-keys", "error",
              f"{name}: {len(unknown)} stored names the {d.model_file or 'DFlash'} loader has no parameter for "
              f"({', '.join(unknown[:3])}{', ...' if len(unknown) > 3 else ''}): it raises and vLLM does not start",
              "drop them, or serve the draft with the class that has them", effect="dflash.unknown-key", engine=e)
    if n_layers is None or d.model_file is None or "qwen3" not in d.model_file:
        return  # the expected names below are the Qwen3 DFlash layer's
    need = [f"layers.{i}.{p}" for i in range(n_layers) for p in LAYER_WEIGHTS]
    need += ["hidden_norm.weight", "norm.weight"] + (["fc.weight"] if d.use_aux_hidden_state else [])
    missing = [k for k in need if k not in present]
    if not missing:
        return
    norms_only = all(k.endswith(LAYER_NORMS) or k in ("hidden_norm.weight", "norm.weight") for k in missing)
    c.add("dflash-keys", "warning" if norms_only else "error",
          f"{name}: {len(missing)} weights the draft needs are not stored ({', '.join(missing[:3])}"
          f"{', ...' if len(missing) > 3 else ''}): vLLM does not complain and keeps them at their initial values",
          "export every weight of the draft", effect="dflash.norms-missing" if norms_only else "dflash.weights-missing",
          engine=e)


# -- the doctor's branch for these drafts ------------------------------------------------------------------
def diagnose_dflash(c: CheckContext, ats, engine: str, path, target_cfg: dict | None, *, check_weights: bool = True,
                    progress: bool = False) -> Findings:
    """`diagnose` for a block-diffusion draft: these checks, the mapping's when it stores one, the NaN/Inf
    scan, each finding with its predicted outcome. A config.json alone gets the checks the config decides."""
    ck = c.ck
    alone = not ck.tensors.keys() and not ck.mapping_files
    if alone:
        c.add("config-only", "info", f"only {ck.config_path.name if ck.config_path else 'config.json'} was read: the "
              "layer-id, vocab and config checks ran; stored names, fc's width, d2t and the NaN/Inf scan need the "
              "weights",
              "point at the folder holding the weights for the full check", effect=NO_EFFECT)
    d2t, t2d, used = read_mapping_tensors(ck)
    d2t = None if d2t is None else torch.as_tensor(np.asarray(d2t)) if not isinstance(d2t, torch.Tensor) else d2t
    t2d = None if t2d is None else torch.as_tensor(np.asarray(t2d)) if not isinstance(t2d, torch.Tensor) else t2d
    check_dflash(c, target_cfg, d2t, t2d, used)
    if check_weights and ck.tensors.keys():
        check_finite(c, progress)
    shown = ck.config_path if alone and ck.config_path else path if not isinstance(path, Checkpoint) else ck.path
    return Findings([f.with_outcomes(ats) for f in c.findings], path=shown, engine=engine, versions=ats)
