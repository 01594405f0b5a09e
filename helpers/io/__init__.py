"""Reading what users hand us: tensor files, `.pt` contents, remote checkpoints, finding a checkpoint
and its mapping in any producer's layout, offline samples, prompt files, chat templates, and the
d2t/t2d mapping itself.

Modules (import them by name; this file imports nothing):
- `tensor_files`
- `pt_files`
- `remote_access`
- `remote`
- `origin`
- `inputs`
- `gguf_files`
- `layout`
- `configs`
- `checkpoint`
- `samples`
- `prompts`
- `chat`
- `mapping`
"""

__all__ = ["tensor_files", "pt_files", "remote_access", "remote", "origin", "inputs", "gguf_files", "layout", "configs", "checkpoint", "samples", "prompts", "chat", "mapping"]
