"""The doctor's weight checks: key names and layout, tensor shapes, NaN/Inf.

Each check takes the `CheckContext` and adds findings: `check_key_layout` asks, per engine release,
which stored names its loader would load, skip (SGLang) or fail on (vLLM), from the engine table; `check_shapes`
compares lm_head, fc and embed_tokens with the configs' hidden sizes (a missing lm_head per engine
release: shared from the target or left random, `_head_missing`), and reads a sample of a shipped
embed_tokens for the signature of a fresh initialisation (`check_embed_init`); `check_finite` reads every
floating-point tensor once, in row chunks (`row_chunks`), for NaN/Inf - the only check that reads weight data.
"""
from __future__ import annotations

import math
import re

import torch

from helpers.engines.registry import EngineAt, draft_family, key_fate
from helpers.engines.key_names import LAYER_PARAMS, MLA_LAYER_PARAMS, is_known_param, is_mapping_key, parse_key
from helpers.doctor.checks_variants import variant_of_key
from helpers.doctor.findings import CheckContext
from helpers.doctor.findings import fmt_number as _fmt
from helpers.io.checkpoint import Checkpoint
from helpers.io.tensor_files import torch_load
from helpers.model.fit import init_signature, text_config

CHUNK_BYTES = 32 << 20  # rows read at once by the NaN/Inf scan


def check_key_layout(c: CheckContext) -> None:
    """key-layout: the decoder layer complete, and every key loaded (not skipped, not fatal) by each
    engine release, from the engine table's layout, prefix and unknown-name rules."""
    # keys of a producer option are reported by helpers.doctor.checks_variants, per engine
    keys = [k for k in c.ck.tensors.keys() if not is_mapping_key(k) and not variant_of_key(k)]
    mla = draft_family(c.ck.config)["attention"] == "mla"
    infos = [parse_key(k) for k in keys]
    layouts = sorted({i.layout for i in infos if i.layout})
    present = {i.canonical for i in infos}
    if not _layer_complete(c, layouts, present, mla):
        return
    for at in c.engine_list:
        fates = {k: key_fate(at, k, mla) for k in keys}
        lost = [k for k, f in fates.items() if f in ("skips", "warns")]
        fatal = [k for k, f in fates.items() if f == "fails"]
        if lost:
            _skipped(c, at, lost, mla)
        if fatal:
            _refused(c, at, fatal)
    _layout_summary(c, layouts, mla)


def _layer_complete(c: CheckContext, layouts: list[str], present: set[str], mla: bool) -> bool:
    """Findings for a missing or partial decoder layer and final norm; False when there is no layer."""
    need = MLA_LAYER_PARAMS if mla else LAYER_PARAMS
    missing = [f"midlayer.{p}" for p in need if f"midlayer.{p}" not in present]
    if mla and not any(f"midlayer.self_attn.{q}.weight" in present for q in ("q_a_proj", "q_proj")):
        missing.append("midlayer.self_attn.q_a_proj.weight")
    if not layouts:
        c.add("key-layout", "error", "no decoder-layer weights (neither midlayer.* nor layers.0.*)",
              "point at the draft checkpoint folder (config.json + model.safetensors)", effect="keys.missing")
        return False
    if missing and len(missing) < len(need):
        shown = ", ".join(m.replace("midlayer.", "") for m in missing[:4])
        # norms alone: built at their init (ones), near the trained scale of a small RMSNorm weight
        norms = all(m.endswith("norm.weight") for m in missing)
        c.add("key-layout", "error", f"the decoder layer lacks {len(missing)} weight(s): {shown}"
              + (" (norms only: an engine that builds them at their init, ones, serves close to as trained)"
                 if norms else ""),
              "re-export the checkpoint with the whole layer", effect="keys.missing-norm" if norms else "keys.missing")
    if "norm.weight" not in present:
        c.add("key-layout", "error", "no final norm (norm.weight): the engines leave it at its init (ones)",
              "re-export the checkpoint with norm.weight", effect="keys.missing-norm")
    return True


def _why(at: EngineAt, rule: str) -> str:
    change = at.change(rule)
    return f" [{change}]" if change else ""


def _skipped(c: CheckContext, at: EngineAt, lost: list[str], mla: bool) -> None:
    """Names the engine skips (silently, or with a log line it keeps starting after): head, layer, others."""
    infos = {k: parse_key(k) for k in lost}
    prefixed = [k for k in lost if infos[k].prefixed and is_known_param(infos[k], mla) and "lm_head" not in k]
    # decoder-layer weights the draft class has (an extra tensor under midlayer.* is one of the others)
    layer = [k for k in lost if infos[k].layout and is_known_param(infos[k], mla) and k not in prefixed]
    head = [k for k in lost if not infos[k].layout and is_known_param(infos[k], mla) and k not in prefixed]
    others = [k for k in lost if k not in prefixed + layer + head]
    how = "without a word" if at.value("mla.unknown" if mla else "unknown") != "warns" else "with one log line each"
    if prefixed:
        c.add("key-layout", "error",
              f"{at.label}: {len(prefixed)} model.* key(s) (e.g. {prefixed[0]}) would be skipped {how}: its MLA draft "
              "loader puts model. before every name, so model.X is looked up as model.model.X; those weights would "
              "keep their random init" + _why(at, "mla.prefix.model"),
              "strip the model. prefix: d2t-lab fix SRC DST", effect="keys.skipped", engine=at.key)
    if head:
        c.add("key-layout", "error",
              f"{at.label} would skip {', '.join(head)} {how}: it looks a name up as NAME or model.NAME "
              "and its head is lm_head.weight, so the draft-vocab head would keep random weights",
              "rename model.lm_head.weight to lm_head.weight: d2t-lab fix SRC DST", effect="keys.skipped", engine=at.key)
    if layer:
        lay = infos[layer[0]].layout
        c.add("key-layout", "error",
              f"{at.label}: {len(layer)} decoder-layer keys are {lay}.* (e.g. {layer[0]}); its EAGLE-3 loader has no "
              f"parameter for them and skips them {how}, so the layer would serve with random weights"
              + _why(at, f"layout.{lay}"),
              f"rename {lay}.* to {'midlayer' if lay == 'layers.0' else 'layers.0'}.*: d2t-lab fix SRC DST "
              f"--engine {at.key}", effect="keys.skipped", engine=at.key)
    if others:
        c.add("key-layout", "warning",
              f"{at.label} would skip {len(others)} key(s) it has no parameter for ({how}): " + ", ".join(others[:4]),
              "check whether these tensors matter; drop or rename them (d2t-lab fix renames known ones)",
              effect="keys.extra-skipped", engine=at.key)


def _refused(c: CheckContext, at: EngineAt, fatal: list[str]) -> None:
    """The engine's loader raises on a name it has no parameter for: the server does not start."""
    layer = [k for k in fatal if parse_key(k).layout and not parse_key(k).prefixed]
    if layer and len(layer) == len(fatal):
        lay = parse_key(layer[0]).layout
        c.add("key-layout", "error",
              f"{at.label}: {len(layer)} decoder-layer keys are {lay}.* (e.g. {layer[0]}), which its loader does not "
              f"map: loading fails at start-up" + _why(at, f"layout.{lay}"),
              f"rename {lay}.* to midlayer.*: d2t-lab fix SRC DST --engine {at.key}", engine=at.key)
        return
    prefixed = [k for k in fatal if parse_key(k).prefixed and is_known_param(parse_key(k), True)
                or parse_key(k).prefixed and is_known_param(parse_key(k))]
    why = (
        f"{at.name} prefixes model. to every name without lm_head, so model.* keys become model.model.*"
        if prefixed else f"{at.name}'s loader has no parameter for them"
    )
    c.add(
        "key-layout", "error",
        f"{at.label}: {len(fatal)} key(s) would make loading fail at start-up (e.g. {fatal[0]}): {why}",
        f"strip the model. prefix / drop unknown keys: d2t-lab fix SRC DST --engine {at.key}"
        if prefixed else f"drop or rename the unknown keys before serving with {at.name}", engine=at.key,
    )


def _layout_summary(c: CheckContext, layouts: list[str], mla: bool) -> None:
    """One layout (info: which producers use it, which engine releases load it) or a split one (warning)."""
    if len(layouts) > 1:
        c.add("key-layout", "warning", "the layer is split across midlayer.* and layers.0.* keys",
              "rename to one layout: d2t-lab fix SRC DST")
    else:
        who = "SGLang/SpecForge/EAGLE" if layouts[0] == "midlayer" else "speculators/vLLM/NeMo Automodel"
        rule = ("mla." if mla else "") + f"layout.{layouts[0]}"
        ok = [at.label for at in c.engine_list
              if at.value(rule if at.has(rule) else f"layout.{layouts[0]}") in ("loads", None)]
        c.add("key-layout", "info", f"layer keys use the {layouts[0]}.* layout ({who})"
              + (f"; loads in {' and '.join(ok)}" if ok else ""), "nothing to do")


def check_shapes(c: CheckContext, target_cfg: dict | None) -> None:
    """lm-head-missing, fc-shape, embed-missing: the head, the aux projection and the embedding
    against the config's (and the target config's) hidden sizes."""
    h = c.cfg.get("hidden_size")
    ht = c.cfg.get("target_hidden_size") or h
    where = "config target_hidden_size" if c.cfg.get("target_hidden_size") else "config hidden_size"
    if target_cfg is not None:
        tcfg_h = text_config(target_cfg).get("hidden_size")
        if isinstance(tcfg_h, int):
            if isinstance(ht, int) and ht != tcfg_h:
                c.add("fc-shape", "error", f"the draft config says target hidden size {_fmt(ht)} but the target config "
                      f"says hidden_size {_fmt(tcfg_h)}", "use the draft trained for this target")
            ht, where = tcfg_h, "target hidden_size"
    lm = c.shape("lm_head.weight")
    if lm is None:
        _head_missing(c)
    elif isinstance(h, int) and lm[-1] != h:
        c.add("lm-head-missing", "error", f"lm_head is {list(lm)}, its width is not hidden_size {_fmt(h)}",
              "re-export the checkpoint with a matching lm_head", effect="lm-head-missing.width")
    fc = c.shape("fc.weight")
    if fc is None:
        c.add("fc-shape", "error", "no fc.weight (the 3 x target-hidden -> hidden projection of the aux states)",
              "re-export the checkpoint with fc.weight", effect="fc-shape.missing")
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
        shared_h = target_cfg is not None and isinstance(h, int) and text_config(target_cfg).get("hidden_size") not in (None, h)
        if shared_h:
            c.add("embed-missing", "error",
                  f"no embed_tokens and the target's hidden size differs from the draft's {_fmt(h)}: the target's "
                  "embedding cannot be borrowed (SGLang skips the sharing and keeps random weights)",
                  "export the draft's own embed_tokens with the checkpoint")
        else:
            c.add("embed-missing", "info",
                  "no embed_tokens: the engine borrows the target's embedding (fine when the draft was trained with "
                  "the target's frozen embedding; the kit's own commands need --embed-from TARGET)",
                  "nothing to do for serving; pass --embed-from TARGET to d2t-lab evaluate / report")
    else:
        check_embed_init(c)


# What each engine release does when the draft ships no lm_head (rule `lm_head.borrow`); the SGLang
# family ("never", "no-draft-vocab") is reported by helpers.doctor.checks_target.check_head_borrow.
_HEAD_SGLANG_STYLE = ("never", "no-draft-vocab")
_HEAD_WORDS = {"never": "never takes the target's head", "not-read": "was not read",
               "no-draft-vocab": "takes the target's head when draft_vocab_size is absent",
               "no-own-head": "takes the target's head whenever the checkpoint has none",
               "same-shape": "takes the target's head when the two heads' shapes are equal",
               "when-absent": "takes the target's head when the draft ships none"}


def head_rule_tail(at: EngineAt) -> str:
    """' [up to vLLM X it takes ...; from Y (#PR) it ...]': where the release's lm_head.borrow
    rule starts and what the next one does ('' when the rule never changed)."""
    spans = at.engine.rules.get("lm_head.borrow") or ()
    sp = at.span("lm_head.borrow")
    if sp is None or len(spans) < 2:
        return ""
    i = spans.index(sp)
    parts = [f"since {at.name} {sp.since}" + (f" ({sp.pr})" if sp.pr else "")] if i > 0 else []
    if i + 1 < len(spans):
        nxt = spans[i + 1]
        parts.append(f"from {nxt.since}" + (f" ({nxt.pr})" if nxt.pr else "")
                     + f" it {_HEAD_WORDS.get(nxt.value, nxt.value)}")
    return f" [{'; '.join(parts)}]"


def _head_missing(c: CheckContext) -> None:
    """lm-head-missing, per engine release: whether it shares the target's head or keeps a random one."""
    cfg = c.cfg
    v, declared = cfg.get("vocab_size"), cfg.get("draft_vocab_size")
    dv = declared if isinstance(declared, int) else v
    full = isinstance(dv, int) and dv == v
    tied = bool((c.ck.config or {}).get("tie_word_embeddings"))
    fix = "re-export the checkpoint with lm_head.weight [draft_vocab, hidden]"
    for at in c.engine_list:
        rule = at.value("lm_head.borrow")
        if rule in _HEAD_SGLANG_STYLE and not tied:
            continue
        tail = head_rule_tail(at)
        if rule in ("no-own-head", "when-absent") or (rule == "same-shape" and full):
            how = ("shares the target model's lm_head (the checkpoint has none: has_own_lm_head stays False)"
                   if rule == "no-own-head" else "shares the target model's lm_head")
            if full:
                c.add("lm-head-missing", "warning",
                      f"{at.label}: no lm_head.weight, and the draft vocab is the target's ({_fmt(v)}): it {how}, so "
                      "the draft is served with the target's head - as trained only if the draft was trained on that "
                      f"head (frozen), as drafts shipped without a head usually are{tail}",
                      "nothing to do if the draft was trained on the target's head; else re-export lm_head.weight",
                      effect="lm-head-missing.borrowed", engine=at.key)
            elif rule == "no-own-head":
                c.add("lm-head-missing", "error",
                      f"{at.label}: no lm_head.weight: it {how}, but the draft vocab is {_fmt(dv)} "
                      f"(draft_vocab_size): its logits processor keeps the first {_fmt(dv)} of the target head's "
                      f"{_fmt(v)} scores and scatters them through d2t, so draft slot i scores target token i, not the "
                      f"token d2t names: accept length about 1{tail}", fix, engine=at.key)
            else:
                c.add("lm-head-missing", "error",
                      f"{at.label}: no lm_head.weight: it {how} ({_fmt(v)} rows), but the draft vocab is {_fmt(dv)} "
                      f"(draft_vocab_size): the target's rows do not line up with the draft's d2t{tail}", fix,
                      engine=at.key)
        elif rule in _HEAD_SGLANG_STYLE or rule == "same-shape":
            c.add("lm-head-missing", "error",
                  f"{at.label}: no lm_head.weight: the draft-vocab head ({_fmt(dv)} rows) keeps its random init, "
                  f"and no draft token is ever accepted (accept length about 1){tail}", fix,
                  effect="lm-head-missing.random", engine=at.key)
        else:
            c.add("lm-head-missing", "error",
                  f"{at.label}: no lm_head.weight; the kit has not read whether this release shares the target's "
                  "head: without it the draft-vocab head keeps its random init", fix, engine=at.key)


EMBED_INIT_ROWS = 2048  # rows of a larger embed_tokens read (in 16 evenly spaced blocks) for its init signature


def embed_sample(ck: Checkpoint, key: str, rows: int = EMBED_INIT_ROWS) -> torch.Tensor:
    """Rows of a stored table: all of them up to 2 x `rows`, else `rows` in 16 evenly spaced blocks."""
    store = ck.tensors
    n = store.shape(key)[0]
    if n <= 2 * rows:
        return store.get(key)
    block = rows // 16
    starts = [int(i * (n - block) / 15) for i in range(16)]
    return torch.cat([store.get_rows(key, s, s + block) for s in starts])


def check_embed_init(c: CheckContext) -> None:
    """embed-untrained: the draft's own embed_tokens looks like a fresh initialisation (TorchSpec #38: an
    export that saved the random table of a freshly built model), per engine: an engine that keeps a
    draft's own copy when it differs from the target's runs on it; one that replaces it does not."""
    key = c.key("embed_tokens.weight")
    if key is None or len(c.ck.tensors.shape(key)) != 2:
        return
    sig = init_signature(embed_sample(c.ck, key))
    if sig is None or not sig.untrained:
        return
    what = (f"embed_tokens ({_fmt(sig.rows)} rows read) looks untrained: "
            + sig.words(c.cfg.get("initializer_range")))
    for at in c.engine_list:
        rule = at.value("embed.borrow")
        change = at.change("embed.borrow")
        tail = f" [{change}]" if change else ""
        if rule == "keeps":
            c.add("embed-untrained", "warning",
                  f"{at.label}: {what}; it keeps a draft's own embed_tokens whenever it is not bit-identical to the "
                  "target's, so unless the target's embedding is this very table the draft runs on random token "
                  f"vectors it was never trained with: accept length about 1{tail}",
                  "drop embed_tokens.weight from the checkpoint (the engine then shares the target's), or copy the "
                  "target's embed_tokens in; d2t-lab doctor --target TARGET compares the two",
                  effect="embed.untrained-kept", engine=at.key)
        elif rule == "replaces":
            c.add("embed-untrained", "info",
                  f"{at.label}: {what}; it replaces the draft's embed_tokens with the target's at load, so the "
                  f"table is never used{tail}",
                  "nothing to do for this engine; drop embed_tokens.weight for engines that keep a draft's own",
                  effect="embed.untrained-replaced", engine=at.key)
        else:
            c.add("embed-untrained", "warning",
                  f"{at.label}: {what}; the kit has not read whether this release uses a draft's own embedding",
                  "drop embed_tokens.weight from the checkpoint, or copy the target's embed_tokens in",
                  engine=at.key)


def row_chunks(ck: Checkpoint, key: str, max_bytes: int = CHUNK_BYTES):
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
    if path.suffix == ".safetensors":  # local (a fresh mapping per chunk) or remote (one range per chunk)
        for a in range(0, rows, step):
            part = store.get_rows(key, a, a + step)
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


def all_finite(t: torch.Tensor) -> bool:
    """No NaN/Inf in `t`: one min/max pass (NaN propagates through both), no bool temporary."""
    if t.numel() == 0:
        return True
    try:
        lo, hi = torch.aminmax(t)
    except (RuntimeError, NotImplementedError):  # dtypes aminmax lacks (float8)
        return bool(torch.isfinite(t.float()).all())
    return bool(torch.isfinite(lo)) and bool(torch.isfinite(hi))


# Tables a token's row is looked up in: a NaN, Inf or zero there spoils only the tokens whose rows hold it, so
# the accept length drops by an amount the files cannot tell (the mutation runs of docs/engine-truth.md: one NaN
# in embed_tokens served as trained, one Inf in lm_head at 1.62 of 2.46); anywhere else every draft token
# passes through it. Zeros in the MLP (or the norm before it) only take the MLP out: the attention path
# still drafts (2.05 of 2.46).
ROW_TABLES = ("embed_tokens.weight", "lm_head.weight")
MLP_PART = ("mlp.", "post_attention_layernorm.weight")


def check_finite(c: CheckContext, progress: bool) -> None:
    """nonfinite-weights and weights-zero: every floating-point tensor read once, in row chunks, for NaN/Inf and
    for a tensor that is all zeros."""
    from tqdm.auto import tqdm

    keys = [k for k in c.ck.tensors.keys() if c.ck.tensors.dtype(k).is_floating_point]
    bad: list[str] = []
    zero: list[str] = []
    total = sum(c.ck.tensors.nbytes(k) for k in keys)
    with tqdm(total=total, unit="B", unit_scale=True, desc="NaN/Inf scan", disable=not progress, leave=False) as bar:
        for k in keys:
            nonzero = False
            for part in row_chunks(c.ck, k):
                if not all_finite(part):
                    bad.append(k)
                    break
                nonzero = nonzero or bool(part.any())
            else:
                if not nonzero and math.prod(c.ck.tensors.shape(k)) > 0:
                    zero.append(k)
            bar.update(c.ck.tensors.nbytes(k))
    if bad:
        # NaN in anything every token passes through poisons every draft; an Inf alone, or either only in a token
        # row of the embedding / head, spoils the drafts it reaches (measured: 1.38-1.62 for an Inf in lm_head, q_b
        # or kv_b; 1.0 for a NaN anywhere but embed_tokens)
        nan = [k for k in bad if parse_key(k).name not in ROW_TABLES
               and any(bool(torch.isnan(part).any()) for part in row_chunks(c.ck, k))]
        rows_only = not nan
        head_nan = rows_only and all(parse_key(k).name == "lm_head.weight" for k in bad) and any(
            bool(torch.isnan(part).any()) for k in bad for part in row_chunks(c.ck, k))
        # only rows of the embedding: the tokens whose rows hold them are spoilt as inputs, no draft's head is
        c.add("nonfinite-weights", "warning" if all(parse_key(k).name == "embed_tokens.weight" for k in bad) else "error",
              f"{len(bad)} tensor(s) hold NaN or Inf: " + ", ".join(bad[:4]) + (" ..." if len(bad) > 4 else "")
              + (" (Inf only, or only in token rows of the embedding / head: the drafts it reaches are spoilt, how "
                 "many the files cannot tell)" if rows_only else " (NaN where every draft token passes)"),
              "use an earlier training checkpoint; NaN weights make every draft token garbage",
              effect="nonfinite-weights.head-nan" if head_nan else "nonfinite-weights.rows" if rows_only else None)
    # a parameter the draft has (an extra name is the key checks'; d2t / t2d the mapping checks')
    zero = [k for k in zero if not is_mapping_key(k)
            and (is_known_param(parse_key(k), "kv_lora_rank" in c.cfg) or variant_of_key(k))]
    if zero:
        mlp_only = all(parse_key(k).layout and parse_key(k).name.startswith(MLP_PART) for k in zero)
        # EAGLE-3.1's fc_norm.i scales one of the three aux states: zeros drop that state, and the draft drafts
        # from the other two, better or worse (measured: either side of the healthy accept length)
        aux_norm = all(re.fullmatch(r"fc_norm\.\d+\.weight", parse_key(k).name) for k in zero)
        c.add("weights-zero", "warning" if aux_norm else "error",
              f"{len(zero)} tensor(s) are all zeros: " + ", ".join(zero[:4]) + (" ..." if len(zero) > 4 else "")
              + (" (only the MLP: the attention path still drafts, below what it was trained for)" if mlp_only
                 else " (an aux state's norm: the draft is fed two of its three aux states; measured on the "
                 "Kimi-shaped pair: as trained or above, so a warning)" if aux_norm
                 else " (every draft token passes through it: almost nothing is accepted)"),
              "re-export from the trained weights: an all-zero tensor was never trained or was lost in the export",
              effect="weights-zero.mlp" if mlp_only else "weights-zero.aux-norm" if aux_norm else None)


def check_param_shapes(c: CheckContext) -> None:
    """weight-shape: each stored draft parameter against the shape its config gives it (helpers.model.param_shapes);
    the head, fc and the embedding's rows are judged by check_shapes / check_vocab, so only what they leave is here."""
    from helpers.model.param_shapes import expected_shapes, sized_by

    want = expected_shapes(c.cfg)
    judged = {"fc.weight", "lm_head.weight"}
    wrong = []
    for k in c.ck.tensors.keys():
        info = parse_key(k)
        name = info.canonical
        if name in judged or name not in want:
            continue
        got = tuple(c.ck.tensors.shape(k))
        exp = want[name]
        if name == "embed_tokens.weight":  # its rows are the vocab check's; its width is this one's
            got, exp = got[1:], exp[1:]
        if got != exp:
            extra = len(got) == len(exp) and got[0] > exp[0] and got[1:] == exp[1:] and bool(info.layout)
            by = sized_by(name)
            wrong.append((f"{k} is {list(c.ck.tensors.shape(k))}, the config gives {list(want[name])}"
                          + (f" ({by})" if by else ""), info.name if extra else None))
    if not wrong:
        return
    words = ("; ".join(w for w, _ in wrong[:3]) + (" ..." if len(wrong) > 3 else ""))
    fix = "re-export the checkpoint with the config it was trained with"
    for at in c.engine_list:
        narrowed = at.value("weights.narrowed") or ()
        if all(name in narrowed for _, name in wrong):  # only extra rows its loaders drop
            c.add("weight-shape", "warning", f"{at.label}: {words}: its loader takes the first rows of "
                  "each and drops the extra one, so it loads as trained (the kit's own loader refuses it)", fix,
                  effect="weight-shape.extra-rows", engine=at.key)
        else:
            c.add("weight-shape", "error", f"{len(wrong)} tensor(s) do not have the shape config.json gives them: "
                  f"{words} (one row more or less, transposed, or the config of another draft)", fix, engine=at.key)
