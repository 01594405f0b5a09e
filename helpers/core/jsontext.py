"""The one writer of the commands' JSON (`--json`, `-o OUT`): standard JSON, never NaN or Infinity.

Python's `json.dumps` writes a non-finite float as `NaN` / `Infinity`, which no strict parser
(JavaScript's JSON.parse, jq, Go, Rust's serde_json) reads. Here a non-finite float, numpy's
included, is written as null, the kit's "no figure" everywhere else (a per-token rate no drafting
implies, a figure a forced-acceptance source hides), and the text is made with allow_nan=False,
so a value that slipped past the conversion is a failure here, never a broken file.
"""
from __future__ import annotations

import json
import math


def finite(obj):
    """`obj` with every non-finite float (numpy's floats are floats) replaced by None, recursively
    through dicts, lists and tuples; everything else as it is."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def dumps(obj, indent: int | None = 2, **kw) -> str:
    """`json.dumps(finite(obj), indent=indent, allow_nan=False, **kw)`."""
    return json.dumps(finite(obj), indent=indent, allow_nan=False, **kw)
