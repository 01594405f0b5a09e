"""The doctor's checks for a llama.cpp draft GGUF (`helpers.io.gguf_files`).

A GGUF is loaded by llama.cpp only, which reads its `d2t` as ABSOLUTE target ids (its converter writes
`d2t + arange(N)`); every HF checkpoint and every other engine keep offsets. So the mapping is judged the
other way round from an HF checkpoint: absolute ids are right (nothing to report), offsets are the bug
(`gguf-d2t-offsets`: llama.cpp takes each offset for a target id and proposes wrong tokens). `gguf-format`
says which engine the file was checked for when another was asked for.
"""
from __future__ import annotations

import torch

from helpers.core.errors import BadInputError
from helpers.doctor.findings import CheckContext
from helpers.doctor.findings import fmt_number as _fmt
from helpers.doctor.registry import NO_EFFECT
from helpers.io.mapping import VocabMapping

LLAMACPP = "llamacpp"


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


def _strictly_increasing(m: VocabMapping) -> bool:
    return m.draft_vocab_size > 1 and bool((m.d2t[1:] > m.d2t[:-1]).all()) and not torch.equal(
        m.d2t, torch.zeros_like(m.d2t))
