"""The models: the draft's config, keys, decoder layer, forward and KV-cached drafter; the Hugging Face
target, its head, the draft's fit to it, and hidden-state capture.

Modules (import them by name; this file imports nothing):
- `config`
- `config_fields`
- `keys`
- `param_shapes`
- `layer`
- `draft`
- `drafter`
- `target`
- `target_head`
- `pair`
- `fit`
- `preflight`
- `capture`
- `dflash`
- `drift`
"""

__all__ = ["config", "config_fields", "keys", "param_shapes", "layer", "draft", "drafter", "target", "target_head", "pair", "fit", "preflight",
           "capture", "dflash", "drift"]
