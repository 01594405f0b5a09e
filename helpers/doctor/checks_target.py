"""The doctor's second-wave checks: algorithm flag, borrowed heads, aux-id placement, the target fit.

Each served without an error and an accept length near 1 in public issue threads; the engine
behaviour each rests on was read in the source (docs/doctor-findings.md names files and commits):

- `eagle3-as-eagle`: an EAGLE-3 draft (fc takes 3 x the target hidden size) whose `architectures`
  names a non-3 EAGLE class (or that is served with the EAGLE flag, `--algorithm eagle`): no aux
  states are captured, and SGLang's draft applies fc only when the hidden width differs from the
  embedding's, so fc is skipped.
- `lm-head-borrowed`: SGLang borrows the target's lm_head exactly when `draft_vocab_size` is absent
  (`load_lm_head_from_target`): a trained head is then replaced, and a draft that ships no head
  but states `draft_vocab_size == vocab_size` keeps a random one.
- `aux-layers` (config and fc): a count of aux ids that does not match fc's input width, a
  5-layer (any non-3) aux draft that older engines cannot build, and ids that the two config
  places (`eagle_config` / top level) give differently.
- with `--target`: `helpers.model.fit.compare_to_target` -> `embed-mismatch` (another revision,
  or a constant factor such as Gemma's sqrt(hidden)), `context-length` (max_position_embeddings /
  RoPE shorter than the target's), and vocab / hidden / aux mismatches under their usual codes.
"""
from __future__ import annotations

from helpers.core.engines import ENGINE_NAMES, aux_layer_ids
from helpers.core.errors import BadInputError
from helpers.doctor.findings import CheckContext
from helpers.doctor.findings import fmt_number as _fmt
from helpers.io import remote
from helpers.io.checkpoint import open_checkpoint
from helpers.model.fit import compare_embeddings, compare_to_target, text_config

EMBED_SAMPLE_ROWS = 4096  # rows of each embedding compared (in 16 evenly spaced blocks) beyond this size
_FLAGS = "SGLang --speculative-algorithm EAGLE3; vLLM speculative_config method \"eagle3\""


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
    non3 = [a for a in arch if "eagle" in a.lower() and "eagle3" not in a.lower()]
    why = f"fc takes {_fmt(fc[1])} = 3 x {_fmt(h)} inputs (an EAGLE-3 draft)"
    if (algorithm or "").lower() == "eagle":
        c.add("eagle3-as-eagle", "error",
              f"{why} but it is served with the EAGLE (1/2) algorithm: the target captures no aux hidden states "
              "and SGLang's EAGLE-3 draft skips fc when the hidden width equals the embedding's; accept length ~1",
              f"serve with {_FLAGS}")
    elif (c.ck.config or {}).get("eagle_config", {}).get("use_aux_hidden_state") is False and "sglang" in c.engines:
        c.add("eagle3-as-eagle", "error",
              f"{why} but eagle_config.use_aux_hidden_state is false: SGLang then captures no aux hidden states and "
              "skips fc (the hidden width equals the embedding's); accept length ~1",
              "remove use_aux_hidden_state: false from eagle_config (it is for heads trained on the last layer only)")
    elif non3:
        c.add("eagle3-as-eagle", "error",
              f"{why} but config.json architectures is {non3}, an EAGLE (1/2) class: the engine builds the EAGLE "
              "draft, feeds it no aux hidden states and never applies fc",
              f"set architectures to [\"LlamaForCausalLMEagle3\"] in config.json and serve with {_FLAGS}")


def check_head_borrow(c: CheckContext) -> None:
    """lm-head-borrowed: what SGLang does with the head, keyed on draft_vocab_size (from 0.5.2; never before)."""
    if "sglang" not in c.engines or (c.ck.config or {}).get("tie_word_embeddings"):
        return
    at = next(a for a in c.engine_list if a.key == "sglang")
    borrows = at.value("lm_head.borrow") == "no-draft-vocab"
    change = at.change("lm_head.borrow")
    tail = f" [{change}]" if change else ""
    lm, dv, v = c.shape("lm_head.weight"), c.cfg.get("draft_vocab_size"), c.cfg.get("vocab_size")
    if dv is None and lm is not None and isinstance(v, int) and lm[0] == v and borrows:
        c.add("lm-head-borrowed", "warning",
              f"{at.label}: config.json has no draft_vocab_size: SGLang then loads the TARGET's lm_head over this "
              f"checkpoint's trained {_fmt(lm[0])}-row head (load_lm_head_from_target); vLLM loads the trained one{tail}",
              f"set draft_vocab_size = {lm[0]} in config.json to serve the trained head in SGLang")
    elif lm is None and isinstance(dv, int) and dv == v:
        c.add("lm-head-borrowed", "error",
              f"{at.label}: no lm_head and draft_vocab_size = vocab_size = {_fmt(dv)}: the head is meant to be the "
              "target's, but SGLang " + ("borrows it only when draft_vocab_size is absent" if borrows else
                                         "never borrows it in this release") + f", so its head stays at random init{tail}",
              "delete draft_vocab_size from config.json (SGLang then loads the target's lm_head), or export lm_head"
              if borrows else "export lm_head with the checkpoint")


def check_aux_config(c: CheckContext, target_cfg: dict | None) -> None:
    """aux-layers from config.json and fc: the id count against fc's inputs, and the two places disagreeing."""
    cfg = c.ck.config or {}
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    nested, top = eagle.get("eagle_aux_hidden_state_layer_ids"), cfg.get("eagle_aux_hidden_state_layer_ids")
    ids = aux_layer_ids(cfg)
    fc, h = c.shape("fc.weight"), _target_hidden(c, target_cfg)
    k = fc[1] // h if fc and len(fc) == 2 and h and fc[1] % h == 0 else None  # hidden states fc takes
    for e in c.engines:
        n = None if ids[e] is None else len(ids[e])
        if n is not None and k is not None and n != k:
            c.add("aux-layers", "error",
                  f"{ENGINE_NAMES[e]} reads {n} aux layer ids {ids[e]}, but fc takes {k} x {_fmt(h)} inputs "
                  f"({k} hidden states): the captured states do not fit fc",
                  f"name the {k} aux layers the draft was trained on", effect="aux.fc-width", engine=e)
        elif n is not None and n != 3 and k is None and target_cfg is None:
            c.add("aux-layers", "error", f"{ENGINE_NAMES[e]} reads {n} aux layer ids {ids[e]}; EAGLE-3 feeds fc 3 "
                  "hidden states", "name exactly three aux layers (those the draft was trained on)",
                  effect="aux.fc-width", engine=e)
    if k is not None and k != 3 and any(ids.get(e) is not None and len(ids[e]) == k for e in c.engines):
        for at in c.engine_list:
            if at.value("aux.count") != "three":
                continue
            change = at.change("aux.count")
            c.add("aux-layers", "warning",
                  f"{at.label}: a {k}-layer aux draft (fc takes {k} hidden states), but this release builds fc for 3 "
                  f"hidden states and cannot load it" + (f" [{change}]" if change else ""),
                  "serve with a release that sizes fc from the aux id count, or use a 3-layer draft")
    if isinstance(nested, list) and isinstance(top, list) and nested and top and list(nested) != list(top):
        c.add("aux-layers", "warning",
              f"eagle_config.eagle_aux_hidden_state_layer_ids {nested} and the top-level "
              f"eagle_aux_hidden_state_layer_ids {top} differ: SGLang reads the first, vLLM the second",
              "keep one list (the one the draft was trained on) in both places")


def check_target(c: CheckContext, target_cfg: dict | None, target=None) -> None:
    """The draft against the target (config, and its embedding when `target` is a folder holding it)."""
    if target_cfg is None:
        return
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
            _embed(c, m, d_emb.shape[0])


def _context(c: CheckContext, m) -> None:
    c.add("context-length", "warning",
          f"{m.detail}: past the draft's range its attention positions are ones it never saw, and acceptance falls "
          "at long context (reported from ~2.3 to ~1.1)",
          "serve with a context no longer than the draft's, or retrain / extend the draft's RoPE settings "
          f"({m.field} = {m.target!r} in the target)")


def _embed(c: CheckContext, m, rows: int) -> None:
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
              + (f", or capture / train again with the target's scaled embedding (factor {m.scale:.4g})" if m.scale else ""))


def _embeddings(c: CheckContext, target):
    """The same rows of the draft's and the target's embed_tokens (all rows when small), or (None, None)."""
    try:  # a remote target's .bin weights are not fetched whole for one tensor: safetensors only
        tck = open_checkpoint(remote.mirror(target, whole_limit=remote.WHOLE_LIMIT) if remote.is_remote(target) else target)
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
        return c.ck.tensors.get(dk), tck.tensors.get(tk)

    block = EMBED_SAMPLE_ROWS // 16
    starts = [int(i * (n - block) / 15) for i in range(16)]
    d = torch.cat([c.ck.tensors.get_rows(dk, s, s + block) for s in starts])
    t = torch.cat([tck.tensors.get_rows(tk, s, s + block) for s in starts])
    return d, t
