"""The shared words and plumbing every other package stands on: the terms, the one-line input error,
output-path checks, devices, torchrun ranks, and the engines' rules as data.

Modules (import them by name; this file imports nothing):
- `terms`
- `errors`
- `outputs`
- `devices`
- `distributed`
- `engines`
"""

__all__ = ["terms", "errors", "outputs", "devices", "distributed", "engines"]
