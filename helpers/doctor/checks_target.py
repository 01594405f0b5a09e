"""The doctor's second-wave checks: algorithm flag, borrowed heads, aux-id placement, the target fit.

Each served without an error and an accept length near 1 in public issue threads; the engine
behaviour each rests on was read in the source (docs/doctor-findings.md names files and commits):

- `eagle3-as-eagle`: an EAGLE-3 draft (fc takes 3 x the target hidden size) whose `architectures`
  names a non-3 EAGLE class (or that is served with the EAGLE flag, `--algorithm eagle`): no aux
  states are captured, and SGLang's draft applies fc only when the hidden width differs from the
  embedding's, so fc is skipped.
- `lm-head-borrowed`: SGLang (and TokenSpeed) borrow the target's lm_head exactly when
  `draft_vocab_size` is absent (`load_lm_head_from_target`): a trained head is then replaced, and a
  draft that ships no head but states `draft_vocab_size == vocab_size` keeps a random one (SGLang
  #27829, nvidia/Kimi-K2.6-Eagle3); per engine release, with its predicted outcome.
- `aux-layers` (config and fc): a count of aux ids that does not match fc's input width, a
  5-layer (any non-3) aux draft that older engines cannot build, and ids that the two config
  places (`eagle_config` / top level) give differently.
- with `--target`: `helpers.model.fit.compare_to_target` -> `embed-mismatch` (another revision,
  or a constant factor such as Gemma's sqrt(hidden)), `context-length` (max_position_embeddings /
  RoPE shorter than the target's), and vocab / hidden / aux mismatches under their usual codes.
"""
from __future__ import annotations

from helpers.engines.registry import EAGLE3_FLAGS, ENGINE_NAMES, aux_layer_ids, engine_at
from helpers.core.errors import BadInputError
from helpers.doctor.checks_weights import head_rule_tail
from helpers.doctor.findings import CheckContext
from helpers.doctor.findings import fmt_number as _fmt
from helpers.doctor.registry import NO_EFFECT
from helpers.io.checkpoint import open_checkpoint
from helpers.model.config_fields import eagle_config
from helpers.model.fit import (
    UNCORRELATED_COS,
    compare_embeddings,
    compare_to_target,
    init_signature,
    row_cosine,
    text_config,
)

EMBED_SAMPLE_ROWS = 4096  # rows of each embedding compared (in 16 evenly spaced blocks) beyond this size


def _target_hidden(c: CheckContext, target_cfg: dict | None) -> int | None:
    if target_cfg is not None and isinstance(text_config(target_cfg).get("hidden_size"), int):
        return text_config(target_cfg)["hidden_size"]
    h = c.cfg.get("target_hidden_size") or c.cfg.get("hidden_size")
    return h if isinstance(h, int) else None


def check_algorithm(c: CheckContext, target_cfg: dict | None, algorithm: str | None = None) -> None:
    """eagle3-as-eagle: an EAGLE-3 draft named, or served, as EAGLE (1/2)."""
    fc, h = c.shape("fc.weight"), _target_hidden(c, target_cfg)
    if not fc or len(fc) != 2 or not h or fc[1] != 3 * h:
        return
    arch = [a for a in (c.ck.config or {}).get("architectures") or [] if isinstance(a, str)]
    # an EAGLE (1/2) class name; P-EAGLE's (PEagle*) is parallel-drafting EAGLE-3 (helpers.doctor.checks_method)
    non3 = [a for a in arch if "eagle" in a.lower() and "eagle3" not in a.lower() and "peagle" not in a.lower()]
    why = f"fc takes {_fmt(fc[1])} = 3 x {_fmt(h)} inputs (an EAGLE-3 draft)"
    if (algorithm or "").lower() == "eagle":
        c.add("eagle3-as-eagle", "error",
              f"{why} but it is served with the EAGLE (1/2) algorithm: the target captures no aux hidden states "
              "and SGLang's EAGLE-3 draft skips fc when the hidden width equals the embedding's; accept length ~1",
              f"serve with {EAGLE3_FLAGS}", effect="algorithm.eagle-flag")
    elif eagle_config(c.ck.config).get("use_aux_hidden_state") is False and (
            honour := [at for at in c.engine_list if at.value("aux.flag_off")]):
        for at in honour:  # the engines whose loader honours the switch (the engine table's aux.flag_off)
            c.add("eagle3-as-eagle", "error",
                  f"{why} but eagle_config.use_aux_hidden_state is false: {at.name} then captures no aux hidden "
                  "states and skips fc (the hidden width equals the embedding's); accept length ~1",
                  "remove use_aux_hidden_state: false from eagle_config (it is for heads trained on the last layer "
                  "only)", engine=at.key)
    elif non3:
        c.add("eagle3-as-eagle", "error",
              f"{why} but config.json architectures is {non3}, an EAGLE (1/2) class: the engine builds the EAGLE "
              "draft, feeds it no aux hidden states and never applies fc",
              f"set architectures to [\"LlamaForCausalLMEagle3\"] in config.json and serve with {EAGLE3_FLAGS}")


# the first vLLM release that serves a draft's own head (rule lm_head.borrow), quoted in lm-head-borrowed
_VLLM_OWN_HEAD = engine_at("vllm").where("lm_head.borrow", "no-own-head").since


def check_head_borrow(c: CheckContext) -> None:
    """lm-head-borrowed / lm-head-missing, per engine release whose loader decides by draft_vocab_size whether
    to take the target's lm_head (rule `lm_head.borrow` "no-draft-vocab": when draft_vocab_size is
    absent, `load_lm_head_from_target`; "never": it keeps the draft's). The other engines' missing head
    is `helpers.doctor.checks_weights._head_missing`."""
    if (c.ck.config or {}).get("tie_word_embeddings"):
        return
    lm, dv, v = c.shape("lm_head.weight"), c.cfg.get("draft_vocab_size"), c.cfg.get("vocab_size")
    fix = "re-export the checkpoint with lm_head.weight [draft_vocab, hidden]"
    for at in c.engine_list:
        rule = at.value("lm_head.borrow")
        if rule not in ("never", "no-draft-vocab"):
            continue
        borrows = rule == "no-draft-vocab"
        tail = head_rule_tail(at)
        if lm is not None:
            if dv is None and isinstance(v, int) and lm[0] == v and borrows:
                c.add("lm-head-borrowed", "warning",
                      f"{at.label}: config.json has no draft_vocab_size: it then loads the TARGET's lm_head over this "
                      f"checkpoint's trained {_fmt(lm[0])}-row head (load_lm_head_from_target); "
                      f"vLLM ({_VLLM_OWN_HEAD} on) "
                      f"serves the trained one{tail}",
                      f"set draft_vocab_size = {lm[0]} in config.json to serve the trained head", engine=at.key)
            continue
        if dv is None and borrows:
            c.add("lm-head-missing", "warning",
                  f"{at.label}: no lm_head.weight and no draft_vocab_size: it loads the target's full-vocab lm_head "
                  "(load_lm_head_from_target), as trained only if the draft was trained on that head (frozen)"
                  + tail, "nothing to do if the draft was trained on the target's head; else re-export lm_head.weight",
                  effect="lm-head-missing.borrowed", engine=at.key)
        elif isinstance(dv, int) and dv == v:
            c.add("lm-head-borrowed", "error",
                  f"{at.label}: no lm_head and draft_vocab_size = vocab_size = {_fmt(dv)}: the head is meant to be "
                  "the target's, but it " + ("borrows it only when draft_vocab_size is absent" if borrows else
                                             "never borrows it in this release")
                  + ", so the draft head keeps its random init and no draft token is accepted (accept length about "
                  f"1; SGLang #27829: nvidia/Kimi-K2.6-Eagle3 at 'accept len: 1.00, accept rate: 0.00'){tail}",
                  "delete draft_vocab_size from config.json (the engine then loads the target's lm_head), or export "
                  "lm_head" if borrows else "export lm_head with the checkpoint",
                  effect="lm-head-missing.random", engine=at.key)
        else:
            c.add("lm-head-missing", "error",
                  f"{at.label}: no lm_head.weight: the draft-vocab head ({_fmt(dv if dv is not None else v)} rows) "
                  "keeps its random init"
                  + (", since draft_vocab_size is set (it takes the target's head only without it)" if borrows else "")
                  + f": accept length about 1{tail}", fix, effect="lm-head-missing.random", engine=at.key)


def check_aux_config(c: CheckContext, target_cfg: dict | None) -> None:
    """aux-layers from config.json and fc: the id count against fc's inputs, and the two places disagreeing."""
    cfg = c.ck.config or {}
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    nested, top = eagle.get("eagle_aux_hidden_state_layer_ids"), cfg.get("eagle_aux_hidden_state_layer_ids")
    ids = aux_layer_ids(cfg)
    fc, h = c.shape("fc.weight"), _target_hidden(c, target_cfg)
    k = fc[1] // h if fc and len(fc) == 2 and h and fc[1] % h == 0 else None  # hidden states fc takes
    for at in c.engine_list:
        e = at.key
        n = None if ids[e] is None else len(ids[e])
        built = _fc_built(at, cfg, nested)  # the hidden states the engine sizes fc for (None: as many as it captures)
        if built is not None and k is not None and built != k:
            c.add("aux-layers", "error",
                  f"{at.label} builds fc for {built} hidden states ({_FC_FROM[at.value('aux.count')]}), but the "
                  f"stored fc takes {k} x {_fmt(h)} inputs: the weights do not load",
                  f"name the {k} aux layers the draft was trained on in eagle_config (or set num_aux_hidden_states "
                  f"{k})", effect="aux.fc-width", engine=e)
        elif built is not None and n is not None and k is not None and n != built:
            c.add("aux-layers", "error",
                  f"{at.label} captures {n} hidden states (ids {ids[e]}) but builds fc for {built} "
                  f"({_FC_FROM[at.value('aux.count')]}): the weights load, then the first request fails on the shape "
                  "(as in vllm#54526)",
                  f"keep one list of the {k} ids the draft was trained on, in eagle_config and at the top level",
                  effect="aux.capture-count", engine=e)
        elif built is None and n is not None and k is not None and n != k:
            c.add("aux-layers", "error",
                  f"{ENGINE_NAMES[e]} reads {n} aux layer ids {ids[e]}, but fc takes {k} x {_fmt(h)} inputs "
                  f"({k} hidden states): the captured states do not fit fc",
                  f"name the {k} aux layers the draft was trained on", effect="aux.fc-width", engine=e)
        elif n is not None and n != 3 and k is None and target_cfg is None:
            c.add("aux-layers", "error", f"{ENGINE_NAMES[e]} reads {n} aux layer ids {ids[e]}; EAGLE-3 feeds fc 3 "
                  "hidden states", "name exactly three aux layers (those the draft was trained on)",
                  effect="aux.fc-width", engine=e)
    named = {len(x) for x in (nested, top) if isinstance(x, list) and x}  # counts named in either place
    if k is not None and k != 3 and k in named:
        for at in c.engine_list:
            if at.value("aux.count") != "three":
                continue
            change = at.change("aux.count")
            c.add("aux-layers", "warning",
                  f"{at.label}: a {k}-layer aux draft (fc takes {k} hidden states), but this release builds fc for 3 "
                  f"hidden states and cannot load it" + (f" [{change}]" if change else ""),
                  "serve with a release that sizes fc from the aux id count, or use a 3-layer draft",
                  effect="aux.fc-width", engine=at.key)
    if isinstance(nested, list) and isinstance(top, list) and nested and top and list(nested) != list(top):
        c.add("aux-layers", "warning",
              f"eagle_config.eagle_aux_hidden_state_layer_ids {nested} and the top-level "
              f"eagle_aux_hidden_state_layer_ids {top} differ: SGLang reads the first, vLLM the second",
              "keep one list (the one the draft was trained on) in both places", effect=NO_EFFECT)


_FC_FROM = {"from-nested": "num_aux_hidden_states, else eagle_config's ids, else 3",
            "from-top-ids": "the top-level ids, else 3"}


def _fc_built(at, cfg: dict, nested) -> int | None:
    """How many hidden states the engine release sizes fc for when it is not simply the ids it captures
    (rule `aux.count` "from-nested": num_aux_hidden_states, else eagle_config's list, else 3 (vLLM);
    "from-top-ids": the top-level list, else 3 (TokenSpeed)); None otherwise."""
    rule = at.value("aux.count")
    if rule == "from-top-ids":
        top = cfg.get("eagle_aux_hidden_state_layer_ids")
        return len(top) if isinstance(top, list) and top else 3
    if rule != "from-nested":
        return None
    n = cfg.get("num_aux_hidden_states")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n
    return len(nested) if isinstance(nested, list) and nested else 3


def check_vl_target(c: CheckContext, target_cfg: dict | None) -> None:
    """A vision-language target (its config nests `text_config`): per engine release, whether its wrapper
    implements the EAGLE-3 capture (the aux ids then read as for a text target, on the language model's
    layers), or refuses at start-up (rule `vl.refuses`)."""
    if not isinstance(target_cfg, dict) or not isinstance(target_cfg.get("text_config"), dict):
        return
    mtype = str(target_cfg.get("model_type") or "")
    for at in c.engine_list:
        refuses = at.value("vl.refuses") if at.has("vl.refuses") else None
        if isinstance(refuses, tuple) and mtype in refuses:
            c.add("vl-target-unsupported", "error",
                  f"{at.label}: the target is a {mtype} vision-language model, whose wrapper has no EAGLE-3 capture "
                  "in this release: it refuses to start with the draft",
                  f"serve a vision-language target whose wrapper {at.name} captures for (Qwen2.5-VL and Qwen3-VL in "
                  "the releases read), or the text model alone", effect="vl.unsupported", engine=at.key)


def check_target(c: CheckContext, target_cfg: dict | None, target=None) -> None:
    """The draft against the target (config, and its embedding when `target` is a folder holding it)."""
    if target_cfg is None:
        return
    check_vl_target(c, target_cfg)
    fc = c.shape("fc.weight")
    d_emb = t_emb = None
    if target is not None and c.key("embed_tokens.weight") is not None:
        d_emb, t_emb = _embeddings(c, target)
    found = {f.code for f in c.findings}
    for m in compare_to_target(c.ck.config or {}, target_cfg, fc_in=fc[1] if fc and len(fc) == 2 else None):
        code = {"vocab_size": "vocab-size-mismatch", "hidden_size": "fc-shape", "aux_layer_ids": "aux-layers"}.get(m.field)
        if code is not None:
            if code not in found:
                c.add(code, "error", f"against the target: {m.detail}", "use the draft trained for this target")
        else:
            _context(c, m)
    if d_emb is not None:
        m = compare_embeddings(d_emb, t_emb, text_config(target_cfg).get("hidden_size"))
        if m is not None:
            _embed(c, m, d_emb, t_emb)


def _context(c: CheckContext, m) -> None:
    c.add("context-length", "warning",
          f"{m.detail}: past the draft's range its attention positions are ones it never saw, and acceptance falls "
          "at long context (reported from ~2.3 to ~1.1)",
          "serve with a context no longer than the draft's, or retrain / extend the draft's RoPE settings "
          f"({m.field} = {m.target!r} in the target)")


def _embed(c: CheckContext, m, d_emb, t_emb) -> None:
    """embed-mismatch per engine release; when the draft's table is an untrained one (the signature of a
    fresh init, rows unrelated to the target's: TorchSpec #38), what each engine does with THAT table."""
    rows = d_emb.shape[0]
    sig = init_signature(d_emb) if d_emb.device.type != "meta" else None
    cos = row_cosine(d_emb, t_emb) if sig is not None and tuple(d_emb.shape) == tuple(t_emb.shape) else None
    if sig is not None and sig.untrained and cos is not None and abs(cos) < UNCORRELATED_COS:
        _embed_untrained(c, m, rows, sig, cos)
        return
    for at in c.engine_list:
        v = at.value("embed.borrow")
        if v is None:
            continue
        sev = "error" if v == "replaces" else "warning"
        change = at.change("embed.borrow")
        what = (f"{at.name} replaces the draft's embedding with the target's at load, so the draft runs on "
                "an embedding it was not trained with" if v == "replaces" else
                f"{at.name} keeps the draft's own embedding; it matches neither the target's tokens' vectors nor the "
                "ones a capture with the target produced") + (f" [{change}]" if change else "")
        c.add("embed-mismatch", sev, f"{at.label}: {m.detail} (compared on {_fmt(rows)} rows); {what}",
              "use the target revision the draft was trained on"
              + (f", or capture / train again with the target's scaled embedding (factor {m.scale:.4g})" if m.scale else ""),
              effect="embed.differs", engine=at.key)


def _embed_untrained(c: CheckContext, m, rows: int, sig, cos: float) -> None:
    """The draft ships an untrained embed_tokens, shown against the target's: the engines that keep a
    draft's own copy run on it (about 1), those that replace it serve as trained. Supersedes the
    no-target `embed-untrained` findings (`helpers.doctor.checks_weights.check_embed_init`)."""
    c.findings[:] = [f for f in c.findings if f.code != "embed-untrained"]
    what = (f"{m.detail} (compared on {_fmt(rows)} rows): the draft's embed_tokens is untrained - its rows are "
            f"unrelated to the target's (mean cosine {cos:.3f}) and it is " + sig.words(c.cfg.get("initializer_range")))
    for at in c.engine_list:
        v = at.value("embed.borrow")
        change = at.change("embed.borrow")
        tail = f" [{change}]" if change else ""
        if v == "keeps":
            c.add("embed-mismatch", "error",
                  f"{at.label}: {what}; it keeps a draft's own embed_tokens that differs from the target's, so the "
                  f"draft runs on random token vectors: accept length about 1{tail}",
                  "drop embed_tokens.weight from the checkpoint (the engine then shares the target's), or copy the "
                  "target's embed_tokens in", effect="embed.untrained-kept", engine=at.key)
        elif v == "replaces":
            c.add("embed-mismatch", "info",
                  f"{at.label}: {what}; it replaces the draft's embed_tokens with the target's at load - the one "
                  f"the draft was trained with - so the table is never used{tail}",
                  "nothing to do for this engine; drop embed_tokens.weight for engines that keep a draft's own",
                  effect="embed.untrained-replaced", engine=at.key)
        elif v is not None:
            c.add("embed-mismatch", "warning",
                  f"{at.label}: {what}; the kit has not read whether this release uses a draft's own embedding",
                  "drop embed_tokens.weight from the checkpoint, or copy the target's embed_tokens in", engine=at.key)


def _same_table(c: CheckContext, rows: int) -> None:
    """The draft's embed_tokens is the target's own (on the rows compared): an untrained-looking table is
    then the target's, which every engine shares or replaces alike; the no-target warning is withdrawn."""
    if not any(f.code == "embed-untrained" for f in c.findings):
        return
    c.findings[:] = [f for f in c.findings if f.code != "embed-untrained"]
    c.add("embed-untrained", "info",
          f"embed_tokens looks like a fresh initialisation, but it is the target's own table (equal on "
          f"{_fmt(rows)} rows compared): the engines share or replace it as the target's, as trained (the target's "
          "own embedding looks untrained: a toy or freshly built target?)", "nothing to do", effect=NO_EFFECT)


def _embeddings(c: CheckContext, target):
    """The same rows of the draft's and the target's embed_tokens (all rows when small), or (None, None)."""
    try:  # a remote target's .bin weights are not fetched whole for one tensor: safetensors only
        tck = open_checkpoint(target, fetch_whole=True)
    except BadInputError:  # a folder with only config.json: nothing to compare
        return None, None
    tk, dk = tck.tensors.find("embed_tokens.weight"), c.key("embed_tokens.weight")
    if tk is None:
        return None, None
    import torch

    ds, ts = c.ck.tensors.shape(dk), tck.tensors.shape(tk)
    if ds != ts or len(ds) != 2:  # compare_embeddings reports the shapes; nothing is read
        return torch.empty(ds, device="meta"), torch.empty(ts, device="meta")
    n = ds[0]
    if n <= EMBED_SAMPLE_ROWS:
        d, t = c.ck.tensors.get(dk), tck.tensors.get(tk)
    else:
        block = EMBED_SAMPLE_ROWS // 16
        starts = [int(i * (n - block) / 15) for i in range(16)]
        d = torch.cat([c.ck.tensors.get_rows(dk, s, s + block) for s in starts])
        t = torch.cat([tck.tensors.get_rows(tk, s, s + block) for s in starts])
    if compare_embeddings(d, t) is None:
        _same_table(c, d.shape[0])
    return d, t
