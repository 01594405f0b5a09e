"""The shared words and plumbing every other package stands on: the terms, the one-line input error,
output-path checks, devices and torchrun ranks.
The engines' facts live one package up, in `helpers.engines`.

Modules (import them by name; this file imports nothing):
- `terms`
- `errors`
- `jsontext`: the one writer of the commands' JSON (never NaN or Infinity)
- `outputs`
- `paths`: where the bundled samples (data_samples/) and the checkout are
- `devices`
- `distributed`
"""

__all__ = ["terms", "errors", "jsontext", "outputs", "paths", "devices", "distributed"]
