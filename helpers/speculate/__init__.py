"""Engine-free speculative decoding: the loop, what a run is set to do and what it counted, and
prediction against measurement, the evidence ladder, and which wiring bug reproduces a serving number.

Modules (import them by name; this file imports nothing):
- `loop`
- `verify`: one verify step's decisions, shared by the loop and the batched loop
- `batched`: chains of a batch of prompts verified together (`--batch-size`)
- `target_cache`
- `result`
- `builder`: the one speculate-run builder every front end calls (default shape, engine honoured)
- `compare`
- `ladder`: the evidence ladder (serving vs engine-free vs prediction) every front end concludes with
- `reproduce`: the engine-free loop under each known misconfiguration, ranked against a serving number
"""

__all__ = ["loop", "verify", "batched", "target_cache", "result", "compare", "ladder", "reproduce", "builder"]
