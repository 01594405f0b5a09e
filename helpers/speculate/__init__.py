"""Engine-free speculative decoding: the loop, what a run is set to do and what it counted, and
prediction against measurement.

Modules (import them by name; this file imports nothing):
- `loop`
- `target_cache`
- `result`
- `compare`
"""

__all__ = ["loop", "target_cache", "result", "compare"]
