"""The doctor's checks for a llama.cpp draft GGUF (`helpers.io.gguf_files`).

A GGUF is loaded by llama.cpp only, which reads its `d2t` as ABSOLUTE target ids (its converter writes
`d2t + arange(N)`); every HF checkpoint and every other engine keep offsets. So the mapping is judged the
other way round from an HF checkpoint: absolute ids are right (nothing to report), offsets are the bug
(`gguf-d2t-offsets`: llama.cpp takes each offset for a target id and proposes wrong tokens). `gguf-format`
says which engine the file was checked for when another was asked for.

A GGUF also meets llama.cpp's loader and draft graph directly, with no converter in between to cast, default
or refuse first, so some problems an HF checkpoint has (where the converter decides) are refusals at start-up
here, each its own finding (run in the llama.cpp release the engine table's `run` names: the `gguf-*` rows of docs/engine-truth.md): a d2t not stored as I64
(`gguf-d2t-type`) or naming an id outside the target vocab (`gguf-d2t-range`), a head whose rows are not d2t's
length (`gguf-head-rows`), no `eagle3.target_layers` (`gguf-target-layers`), `norm_before_fc` without
`enc_output_norm.weight` (`gguf-enc-norm-missing`). `check_gguf_loader` adds the last three and takes out
the general finding each one replaces (said for an HF checkpoint, whose engine outcome differs).
"""
from __future__ import annotations

import torch

from helpers.core.errors import BadInputError
from helpers.doctor.findings import CheckContext
from helpers.doctor.findings import fmt_number as _fmt
from helpers.doctor.registry import NO_EFFECT
from helpers.io.mapping import VocabMapping

LLAMACPP = "llamacpp"
_GGML_NAME = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
              torch.int8: "I8", torch.int16: "I16", torch.int32: "I32"}


def check_gguf_format(c: CheckContext, asked: list[str]) -> None:
    """An info finding when engines other than llama.cpp were asked for: they do not load a GGUF."""
    others = [a for a in asked if a != LLAMACPP]
    if others:
        c.add("gguf-format", "info",
              f"a GGUF draft is loaded by llama.cpp only ({', '.join(others)} asked for: they load HF checkpoints, "
              "not GGUF); checked as llama.cpp reads it, d2t as absolute target ids",
              "to serve with SGLang / vLLM / TensorRT-LLM, use the HF checkpoint the GGUF was converted from",
              effect=NO_EFFECT)


def check_gguf_mapping(c: CheckContext, n: int | None, v: int | None, d2t) -> None:
    """The d2t of a GGUF as llama.cpp reads it: absolute ids right, offsets an error."""
    if d2t is None:
        if n is not None and v is not None and n < v:
            c.add("d2t-missing", "error",
                  f"the GGUF has no d2t with a reduced draft vocab ({_fmt(n)} of {_fmt(v)}): llama.cpp then takes "
                  "the draft vocab for the target's and the stored head has too few rows",
                  "convert again from the HF checkpoint with its d2t (convert_hf_to_gguf.py --target-model-dir TARGET)")
        return
    if d2t.dtype != torch.int64:  # src/models/eagle3.cpp asserts an I64 d2t when it builds the draft graph
        kind = _GGML_NAME.get(d2t.dtype, str(d2t.dtype).replace("torch.", ""))
        c.add("gguf-d2t-type", "error",
              f"the GGUF stores d2t as {kind}, where llama.cpp's draft graph requires I64 "
              "(GGML_ASSERT(model.d2t->type == GGML_TYPE_I64) in src/models/eagle3.cpp): the server does not start "
              "(its converter casts an HF d2t to I64; a rewritten GGUF meets the assertion)",
              "store d2t as I64 absolute ids: convert again from the HF checkpoint (convert_hf_to_gguf.py "
              "--target-model-dir TARGET)", engine=LLAMACPP)
        return
    flat = d2t.reshape(-1)
    if v is not None and flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= v):
        i = int(torch.nonzero((flat < 0) | (flat >= v))[0])
        c.add("gguf-d2t-range", "error",
              f"the GGUF's d2t names ids outside the target vocab (d2t[{i}] = {int(flat[i])}, target vocab "
              f"{_fmt(v)}): llama.cpp scatters the draft logits to d2t's ids and stops at start-up "
              "(GGML_ASSERT(i1 >= 0 && i1 < ne1) in ggml-cpu ops.cpp; its converter refuses such ids in an HF d2t)",
              "convert again from the HF checkpoint with the target it was trained for "
              "(convert_hf_to_gguf.py --target-model-dir TARGET)", engine=LLAMACPP)
        return
    try:
        m = VocabMapping(d2t, None, target_vocab_size=v, sources=[])
    except BadInputError as e:
        c.add("d2t-invalid", "error", f"the GGUF's d2t cannot be a mapping: {e.problem}",
              "convert again from the HF checkpoint (convert_hf_to_gguf.py --target-model-dir TARGET)")
        return
    verdict = m.verdict()
    absolute = m.reading("absolute")
    if verdict.encoding == "absolute":
        return  # what llama.cpp reads: right
    if verdict.encoding == "offset" or (verdict.encoding == "ambiguous" and not _strictly_increasing(m)):
        c.add("gguf-d2t-offsets", "error",
              "the GGUF's d2t holds offsets (target = i + d2t[i]) where llama.cpp reads absolute target ids "
              f"(target = d2t[i]): llama.cpp proposes wrong tokens ({_fmt(absolute.distinct_targets)} distinct "
              f"ids of {_fmt(m.draft_vocab_size)}, the wrong ones); " + verdict.evidence[-1],
              "write absolute ids (d2t + arange(N)): d2t-lab fix SRC.gguf DST.gguf, or convert again with "
              "convert_hf_to_gguf.py --target-model-dir TARGET",
              effect="d2t.wrong-ids", engine=LLAMACPP)
    elif verdict.encoding == "inconsistent":
        c.add("d2t-invalid", "error",
              "the GGUF's d2t is no mapping llama.cpp can use: " + "; ".join(verdict.reasons or verdict.evidence),
              "convert again from the HF checkpoint (convert_hf_to_gguf.py --target-model-dir TARGET)")


def check_gguf_loader(c: CheckContext) -> None:
    """What llama.cpp's loader (src/models/eagle3.cpp load_arch_hparams / load_arch_tensors) refuses in a GGUF
    that a converter would have settled: each a refusal at start-up, replacing the general finding said for an
    HF checkpoint (a config number the converter ignores, a default it writes, a module left at its init)."""
    cfg, store = c.ck.config or {}, c.ck.tensors
    replaced: set[tuple[str, str | None]] = set()  # (code, effect) of the general findings taken out
    d2t, head = store.shape("d2t") if "d2t" in store else None, store.shape("lm_head.weight") \
        if "lm_head.weight" in store else None
    if d2t is not None and head is not None and len(head) == 2 and head[0] != d2t[0]:
        c.add("gguf-head-rows", "error",
              f"output.weight has {_fmt(head[0])} rows where d2t has {_fmt(d2t[0])} entries: llama.cpp takes the "
              "draft vocab from d2t's length and its loader checks the head's shape against it (check_tensor_dims: "
              "'output.weight' has wrong shape): the server does not start",
              "convert again from the HF checkpoint whose lm_head and d2t belong together "
              "(convert_hf_to_gguf.py --target-model-dir TARGET)", engine=LLAMACPP)
        replaced.add(("vocab-size-mismatch", None))
    if not isinstance(cfg.get("eagle_aux_hidden_state_layer_ids"), list):
        c.add("gguf-target-layers", "error",
              "the GGUF has no eagle3.target_layers: llama.cpp's loader requires the key (\"EAGLE3 model requires "
              "'extract_layers' in GGUF metadata\"), it takes no default (its converter writes one: the draft's "
              "top-level eagle_aux_hidden_state_layer_ids, else 2, L//2, L-3): the server does not start",
              "convert again from the HF checkpoint, or write the three layer ids the draft was trained on into "
              "eagle3.target_layers", engine=LLAMACPP)
        replaced.add(("aux-layers", "aux.unstated"))
    if cfg.get("norm_before_fc") is True and "input_norm.weight" not in store:
        c.add("gguf-enc-norm-missing", "error",
              "eagle3.norm_before_fc is true but the GGUF holds no enc_output_norm.weight: llama.cpp's loader "
              "requires the norm it applies before fc (check_tensor_dims: tensor 'enc.output_norm.weight' not "
              "found): the server does not start",
              "set eagle3.norm_before_fc false for a draft trained without input_norm, or convert again from an "
              "HF checkpoint that stores input_norm.weight", engine=LLAMACPP)
        replaced.add(("variant-norm-before-fc", None))
    if replaced:
        c.findings[:] = [f for f in c.findings if not any(
            f.code == code and (effect is None or f.effect == effect) and f.engine in (None, LLAMACPP)
            for code, effect in replaced)]


def _strictly_increasing(m: VocabMapping) -> bool:
    return m.draft_vocab_size > 1 and bool((m.d2t[1:] > m.d2t[:-1]).all()) and not torch.equal(
        m.d2t, torch.zeros_like(m.d2t))
