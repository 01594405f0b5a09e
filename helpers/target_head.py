"""The target model's own head (final RMSNorm + lm_head), for SpecForge-style accuracy.

SpecForge reports a draft's accuracy against the target's own argmax rather than the real next
token. `load_target_head` reads only those two tensors of a target folder or weights file;
`TargetHead.argmax` turns the samples' last hidden states into the target's choices, in chunks.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .checkpoint import flat_config, open_checkpoint
from .errors import BadInputError


@dataclass
class TargetHead:
    """The target model's final RMSNorm and lm_head: `argmax(lm_head(norm(hidden)))`."""

    lm_head: torch.Tensor  # [V, H]
    norm_weight: torch.Tensor | None  # [H]; None: hidden states are used as they are
    eps: float = 1e-6
    path: str | None = None

    @property
    def hidden_size(self) -> int:
        return int(self.lm_head.shape[1])

    @property
    def vocab_size(self) -> int:
        return int(self.lm_head.shape[0])

    @torch.inference_mode()
    def argmax(self, hidden: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
        """[..., H] hidden states -> [...] target argmax ids, `chunk` positions at a time."""
        flat = hidden.reshape(-1, hidden.shape[-1])  # [N, H]
        out = torch.empty(flat.shape[0], dtype=torch.int64, device=flat.device)
        w = self.lm_head.to(flat.device)
        for i in range(0, flat.shape[0], chunk):
            h = flat[i : i + chunk].to(w.dtype)  # [n, H]
            if self.norm_weight is not None:
                hf = h.float()
                hf = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + self.eps)
                h = (hf * self.norm_weight.to(hf.device).float()).to(w.dtype)
            out[i : i + chunk] = (h @ w.T).argmax(-1)  # [n]
        return out.reshape(hidden.shape[:-1])


def load_target_head(path, device=None, dtype=None) -> TargetHead:
    """Read only the final norm and lm_head of a target model folder or weights file."""
    ck = open_checkpoint(path)
    keys = ck.tensors.keys()
    head = next((k for k in ("lm_head.weight", "model.lm_head.weight") if k in keys), None)
    if head is None:
        head = ck.tensors.find("lm_head.weight")
    if head is None:
        raise BadInputError(ck.path, "has no lm_head.weight: cannot compute the target's own argmax")
    norm = next((k for k in ("model.norm.weight", "norm.weight", "final_norm.weight") if k in keys), None)
    cfg = flat_config(ck.config) if ck.config else {}
    eps = float(cfg.get("rms_norm_eps", 1e-6))
    device = device or "cpu"
    lm = ck.tensors.get(head, device=device, dtype=dtype)
    if lm.dim() != 2:
        raise BadInputError(ck.tensors.file_of(head), f"{head} has shape {list(lm.shape)}, expected [vocab, hidden]")
    nw = None if norm is None else ck.tensors.get(norm, device=device, dtype=torch.float32)
    if nw is not None and nw.shape != (lm.shape[1],):
        raise BadInputError(ck.tensors.file_of(norm), f"{norm} has shape {list(nw.shape)}, expected [{lm.shape[1]}]")
    return TargetHead(lm_head=lm, norm_weight=nw, eps=eps, path=str(ck.path))
