"""The doctor's producer-option check: what each engine does with fc_norm, input_norm /
norm_before_fc, norm_output, norm_before_residual, q_norm/k_norm, attention biases and sliding
windows (docs/producer-variants.md). The engine knowledge is `helpers.core.engines.variant_rules`;
each finding names the engine file and the commit it was read at.
"""
from __future__ import annotations

from helpers.core.engines import ENGINE_FILES, variant_of_key
from helpers.core.engines import variant_rules as _rules
from helpers.doctor.findings import CheckContext

_FIX = {
    "error": "serve with an engine that models this option, or re-train/re-export without it",
    "warning": "expect lower acceptance than training reports; serve with an engine that models it",
    "info": "nothing to do",
}


def check_variants(c: CheckContext) -> None:
    """variant-*: one finding per producer option used and engine, naming the engine file read."""
    keys = list(c.ck.tensors.keys())
    for code, per_engine in _rules(c.ck.config or {}, keys):
        shown = ", ".join(sorted({k for k in keys if variant_of_key(k) == code})[:4])
        what = f" ({shown})" if shown else ""
        for e in c.engines:
            sev, msg = per_engine[e]
            c.add(code, sev, f"{ENGINE_FILES[e]}{what}: {msg}", _FIX[sev])
