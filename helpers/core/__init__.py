"""The shared words and plumbing every other package stands on: the terms, the one-line input error,
output-path checks, devices, torchrun ranks, and the engines as data (a table per engine, rules by release).

Modules (import them by name; this file imports nothing):
- `terms`
- `errors`
- `jsontext`: the one writer of the commands' JSON (never NaN or Infinity)
- `outputs`
- `paths`: where the bundled samples (data_samples/) and the checkout are
- `devices`
- `distributed`
- `engine_outcomes`
- `engine_table`
- `engines`
- `key_names`: how a stored draft tensor name reads (prefix, layer layout, parameter)
- `engine_docs`
- `acceptance_rules`: how each engine accepts a drafted token under sampling, by release, with source lines
"""

__all__ = ["terms", "errors", "jsontext", "outputs", "paths", "devices", "distributed", "engine_outcomes", "engine_table", "engines", "key_names", "engine_docs", "acceptance_rules"]
