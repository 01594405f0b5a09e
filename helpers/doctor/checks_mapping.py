"""The doctor's mapping checks: vocab sizes, and whether d2t/t2d are present, well formed and
read as the engines read them.

Each check takes the `CheckContext` and adds findings: `check_vocab` compares every stated draft
and target vocab size (d2t, lm_head, config, t2d, embed_tokens, target config); `check_mapping`
finds d2t missing or kept only beside the weights, stored as arange, as absolute ids, all zeros
with a reduced vocab, or with a t2d that does not match it.
"""
from __future__ import annotations

from pathlib import Path

import torch

from helpers.core.errors import BadInputError
from helpers.doctor.findings import CheckContext
from helpers.doctor.findings import fmt_number as _fmt
from helpers.io.mapping import VocabMapping
from helpers.model.fit import text_config


def check_full_vocab_param(c: CheckContext) -> None:
    """d2t-full-vocab: a d2t stored in the weights of a draft whose head the engine sizes to the whole target vocab
    (draft_vocab_size equal to vocab_size, or absent / null: the engine then takes vocab_size), per release whose
    rule `d2t.param` builds the mapping parameter only for a reduced vocab (its loader finds no parameter for the
    stored tensor)."""
    if c.ck.tensors.find("d2t") is None or "draft_vocab_size" in c.invalid:
        return
    vocab = c.cfg.get("vocab_size")
    declared = c.cfg.get("draft_vocab_size")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or (declared is not None and declared != vocab):
        return
    why = (f"draft_vocab_size equals vocab_size ({_fmt(vocab)})" if declared is not None else
           f"config.json has no draft_vocab_size, so the draft vocab is taken as vocab_size ({_fmt(vocab)})")
    for at in c.engine_list:
        if at.value("d2t.param") == "reduced-only":
            c.add("d2t-full-vocab", "error",
                  f"{at.label}: {why}: a full-vocab draft gets no draft_id_to_target_id parameter in this release, "
                  "and the stored d2t has nowhere to load: it refuses to start",
                  "drop d2t / t2d from a full-vocab export, or set draft_vocab_size to the reduced vocab the head "
                  "was trained on", engine=at.key)


def check_vocab(c: CheckContext, d2t, t2d, target_cfg: dict | None) -> tuple[int | None, int | None]:
    """vocab-size-mismatch; returns (draft_vocab, target_vocab) as best known."""
    check_full_vocab_param(c)  # first: the refusal that comes first at load names the prediction's words
    lm = c.shape("lm_head.weight")
    emb = c.shape("embed_tokens.weight")
    cfg_draft = c.cfg.get("draft_vocab_size") if isinstance(c.cfg.get("draft_vocab_size"), int) else None
    cfg_target = c.cfg.get("vocab_size") if isinstance(c.cfg.get("vocab_size"), int) else None
    draft = {
        "d2t": int(d2t.shape[0]) if d2t is not None and d2t.dim() == 1 else None,
        "lm_head rows": lm[0] if lm else None,
        "config draft_vocab_size": cfg_draft,
    }
    t2d_rows = int(t2d.shape[0]) if t2d is not None and t2d.dim() == 1 else None
    target = {  # t2d is not among them: no engine reads it (a t2d of the wrong length is a warning, `_usable_t2d`)
        "embed_tokens rows": emb[0] if emb else None,
        "config vocab_size": cfg_target,
    }
    if target_cfg is not None:
        tv = text_config(target_cfg).get("vocab_size")
        target["target config vocab_size"] = tv if isinstance(tv, int) else None
    fix_cfg = "correct config.json (draft_vocab_size = lm_head rows = len(d2t); vocab_size = target vocab) or rebuild the mapping for this draft"
    for what, sizes in (("draft", draft), ("target", target)):
        known = {k: v for k, v in sizes.items() if v is not None}
        if len(set(known.values())) > 1:
            # only the two configs disagree (no embedding stored: the engine shares the target's)
            configs_only = what == "target" and known.get("embed_tokens rows") is None
            # only config.json's draft_vocab_size is the odd one (d2t and the head agree): an engine that sizes the
            # draft vocab from d2t never reads it, one that sizes the head from it refuses
            config_draft = what == "draft" and len({v for k, v in known.items() if k != "config draft_vocab_size"}) == 1
            c.add(
                "vocab-size-mismatch", "error",
                f"{what} vocab sizes disagree: " + ", ".join(f"{k} {_fmt(v)}" for k, v in known.items())
                + (" (no embed_tokens is stored: the engine shares the target's, and no weight is sized from the "
                   "draft's vocab_size)" if configs_only else ""),
                fix_cfg, effect="vocab-size-mismatch.configs" if configs_only else
                "vocab-size-mismatch.config-draft" if config_draft else
                "vocab-size-mismatch.target" if what == "target" else None,
            )
    n = next((v for v in draft.values() if v is not None), None)
    v = cfg_target or next((v for v in target.values() if v is not None), None) or t2d_rows
    # absent, not present and wrong (that is config-invalid, helpers.doctor.checks_config)
    if cfg_draft is None and "draft_vocab_size" not in c.invalid and lm and cfg_target is not None and lm[0] != cfg_target:
        c.add(
            "vocab-size-mismatch", "error",
            f"config.json has no draft_vocab_size: SGLang and vLLM then size lm_head from vocab_size "
            f"({_fmt(cfg_target)}) but it has {_fmt(lm[0])} rows, so loading fails or the head is not loaded",
            f"set draft_vocab_size = {lm[0]} in config.json (d2t-lab fix SRC DST does it)",
            effect="vocab-size-mismatch.config-draft",
        )
    if n is not None and v is not None and n > v:
        c.add("vocab-size-mismatch", "error", f"draft vocab {_fmt(n)} is larger than the target vocab {_fmt(v)}", fix_cfg)
    return n, v


def check_mapping(c: CheckContext, n: int | None, v: int | None, d2t, t2d, used: list[str]) -> None:
    """The d2t/t2d findings, given the draft and target vocab sizes `check_vocab` settled on."""
    in_weights = c.ck.tensors.find("d2t") is not None
    if d2t is None:
        _d2t_absent(c, n, v)
        return
    if not in_weights:
        _d2t_beside_weights(c, used)
    d2t = _integral_d2t(c, d2t)
    t2d = _usable_t2d(c, t2d, v)
    try:
        m = VocabMapping(d2t, t2d, target_vocab_size=v, sources=used)
    except BadInputError as e:
        c.add("d2t-invalid", "error", f"d2t cannot be a mapping: {e.problem}",
              "re-export d2t from the producer's vocab mapping (int64 offsets, target = i + d2t[i])")
        return
    if _d2t_is_arange(c, m):
        return
    verdict = m.verdict()
    off = m.reading("offset")
    if verdict.encoding == "absolute":
        c.add(
            "d2t-absolute", "error",
            "d2t holds absolute target ids, but every engine reads offsets (target = i + d2t[i]): "
            + verdict.evidence[-1],
            "convert to offsets (d2t - arange(N)): d2t-lab fix SRC DST",
            effect=_served_ids(off),
        )
    elif verdict.encoding == "inconsistent":
        _d2t_inconsistent(c, m, v, verdict, off)
    elif verdict.encoding == "ambiguous":
        _d2t_ambiguous(c, m)
    if verdict.encoding in ("offset", "identity") and m.t2d is not None and off.matches_t2d is False:
        c.add("t2d-mismatch", "error", "t2d does not match d2t read as offsets" + _t2d_count_words(m),
              "rebuild t2d from the offsets (t2d[arange(N) + d2t] = True)", effect=_t2d_effect(m))


def _d2t_absent(c: CheckContext, n: int | None, v: int | None) -> None:
    """No d2t anywhere: an error with a reduced draft vocab, a warning when the sizes are unknown."""
    reduced = n is not None and v is not None and n < v
    if reduced:
        c.add(
            "d2t-missing", "error",
            f"no d2t with a reduced draft vocab ({_fmt(n)} of {_fmt(v)}): SGLang then proposes draft id i as "
            "target id i and vLLM scatters to zeros + arange, so only target ids 0.."
            f"{_fmt(n - 1)} are ever drafted (the accept length falls towards 1)",
            "add the d2t (and t2d) the draft was trained with to the weights; never rebuild it from guesses",
        )
    elif n is not None and n == v:
        c.add(
            "d2t-absent-full-vocab", "info",
            f"no d2t, and the draft keeps the full target vocab ({_fmt(n)} ids): the engines' identity mapping "
            "(draft id = target id) is right (speculators writes no d2t in this case)",
            "nothing to do",
        )
    elif n is None or v is None:
        c.add(
            "d2t-missing", "warning",
            "no d2t found and the vocab sizes are unknown: if the draft vocab is reduced the engines will use "
            "an identity mapping",
            "add the d2t the draft was trained with, and draft_vocab_size / vocab_size to config.json",
        )


def _d2t_beside_weights(c: CheckContext, used: list[str]) -> None:
    """d2t only in a side file: the engines never read it there."""
    c.add(
        "d2t-missing", "error",
        f"d2t is only in {Path(used[0]).name}, beside the weights: SGLang and vLLM read d2t only from the "
        "weight files, so they would serve with an identity mapping",
        "move d2t/t2d into the weights: d2t-lab fix SRC DST",
    )


def _integral_d2t(c: CheckContext, d2t):
    """A floating-point d2t whose values are whole numbers, read as the integers it holds (an engine copies it into
    its int64 mapping parameter), with a finding; anything else unchanged (d2t-invalid judges it)."""
    # float32 / float64 hold every id of a real vocab exactly; bf16 / fp16 round them (d2t-invalid judges those)
    if d2t.dtype not in (torch.float32, torch.float64) or not bool(torch.isfinite(d2t).all()) \
            or not bool((d2t == d2t.round()).all()):
        return d2t
    c.add("d2t-invalid", "error", f"d2t is stored as {d2t.dtype}, not an integer type (its values are whole numbers: "
          "an engine that copies it into an int64 parameter reads the same mapping; one that indexes with it fails)",
          "store d2t as int64 (d2t.long())", effect="d2t-invalid.float")
    return d2t.round().long()


def _usable_t2d(c: CheckContext, t2d, v: int | None):
    """t2d when it can be judged against d2t, else None (a non-bool t2d is reported here)."""
    if t2d is not None and (t2d.dim() != 1 or (v is not None and t2d.shape[0] != v) or t2d.dtype != torch.bool):
        if t2d.dtype == torch.bool:  # no engine reads t2d: a warning, and d2t is judged alone
            c.add("t2d-mismatch", "warning", f"t2d has shape {list(t2d.shape)}, expected [{_fmt(v)}] (the target vocab)",
                  "rebuild t2d from the offsets: t2d[arange(N) + d2t] = True")
        else:
            # no engine reads t2d (its values are judged against d2t where it is bool): a warning
            c.add("t2d-mismatch", "warning", f"t2d has dtype {t2d.dtype}, expected bool [target_vocab]",
                  "rebuild t2d from the offsets: t2d[arange(N) + d2t] = True")
        return None  # already reported; judge d2t alone
    return t2d


def _d2t_is_arange(c: CheckContext, m: VocabMapping) -> bool:
    """d2t == arange(N): draft ids were stored, not the mapping (reported; nothing else to judge)."""
    if not (m.draft_vocab_size > 1 and torch.equal(m.d2t, torch.arange(m.draft_vocab_size))):
        return False
    c.add(
        "d2t-arange", "error",
        "d2t equals arange(N): as offsets it sends draft id i to target id 2i"
        + (f", up to {_fmt(2 * (m.draft_vocab_size - 1))} (out of range)" if m.reading("offset").in_range is False else "")
        + "; someone stored draft ids, not the mapping",
        "re-export d2t from the producer's vocab mapping (offsets: d2t = sorted_kept_ids - arange(N))",
        effect=_served_ids(m.reading("offset")),
    )
    return True


def _served_ids(off) -> str:
    """The effect of a misencoded d2t as engines read it (offsets): ids past the target vocab, or the wrong ids."""
    return "d2t.past-vocab" if off.in_range is False else "d2t.wrong-ids"


def _d2t_inconsistent(c: CheckContext, m: VocabMapping, v: int | None, verdict, off) -> None:
    """Neither reading works: all zeros with a reduced vocab, a t2d that disagrees, or no mapping."""
    reasons = "; ".join(verdict.reasons)
    if m.is_all_zero:
        c.add(
            "d2t-identity-reduced-vocab", "error",
            f"d2t is all zeros with a reduced vocab ({_fmt(m.draft_vocab_size)} draft vs {_fmt(v)} target ids): "
            f"only target ids 0..{_fmt(m.draft_vocab_size - 1)} can ever be drafted",
            "restore the d2t the draft was trained with (an all-zero d2t is only right when draft vocab = target vocab)",
        )
    elif m.t2d is not None and off.valid:
        c.add("t2d-mismatch", "error", f"t2d does not match d2t read as offsets: {reasons}" + _t2d_count_words(m),
              "rebuild t2d from the offsets (t2d[arange(N) + d2t] = True) or take both from the same export",
              effect=_t2d_effect(m))
    else:
        c.add("d2t-invalid", "error", f"d2t is not a usable mapping under either reading: {reasons}",
              "re-export d2t from the producer's vocab mapping")


def _d2t_ambiguous(c: CheckContext, m: VocabMapping) -> None:
    """Both readings plausible and no t2d to decide: say which one it looks like."""
    if m.is_all_zero:
        c.add("d2t-unverified", "warning", "d2t is all zeros and the target vocab size is unknown",
              "add vocab_size to config.json")
        return
    strictly = bool((m.d2t[1:] > m.d2t[:-1]).all()) if m.draft_vocab_size > 1 else False
    if strictly:
        c.add(
            "d2t-absolute", "warning",
            "no t2d to decide, and d2t is strictly increasing with no repeated value: that is what absolute ids "
            "look like (offsets of a frequency-built vocab repeat wherever kept ids are adjacent)",
            "check with d2t-lab inspect; if absolute, convert: d2t-lab fix SRC DST",
        )
    else:
        c.add("d2t-unverified", "info", "no t2d: both readings of d2t give distinct in-range ids; the offset "
              "reading is assumed (non-decreasing, repeated values)", "ship t2d with the checkpoint so it can be checked")


def _t2d_broken(m: VocabMapping) -> bool:
    """t2d keeps a different number of ids than d2t has entries: t2d is the broken one (no engine reads it)."""
    return m.t2d is not None and int(m.t2d.sum()) != m.draft_vocab_size


def _t2d_effect(m: VocabMapping) -> str | None:
    return "t2d-mismatch.t2d-broken" if _t2d_broken(m) else None


def _t2d_count_words(m: VocabMapping) -> str:
    if not _t2d_broken(m):
        return " (either may be the stale one: the files cannot tell)"
    return (f" (t2d keeps {int(m.t2d.sum()):,} ids, d2t has {m.draft_vocab_size:,} entries: t2d is the broken one, and "
            "no engine reads it)")
