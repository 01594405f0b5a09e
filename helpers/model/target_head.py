"""The target model's own head (final RMSNorm + lm_head), for SpecForge-style accuracy.

SpecForge reports a draft's accuracy against the target's own argmax rather than the real next
token. `load_target_head` reads only those two tensors of a target folder or weights file;
`TargetHead.argmax` turns the samples' last hidden states into the target's choices, in chunks.

SpecForge stores `hidden_state` AFTER the target's final norm, and its own target head is
`lm_head` only (`specforge/modeling/target/target_head.py: TargetHead.forward`). So the head
applies only what the samples still need: `hidden_normed=True` (the default) gives
`lm_head(hidden)`, `False` gives `lm_head(norm(hidden))`. `detect_hidden_normed` tells the two
apart from the states themselves (docs/eagle3-facts.md, 'Offline hidden states'):

    a state h that left the final RMSNorm is h = w * x / rms(x), so RMS(h / w) over the hidden
    dim is 1 (up to eps and bf16 rounding) at every position, whatever x was. Dims where
    |w| < 1e-3 * max|w| are left out. A position is "normed" when |RMS(h / w) - 1| <= 2 %.
    At least 90 % normed positions: already normed; at most 10 %: not normed; in between the
    states are mixed or odd and the caller must say which (no guess).

A pre-norm residual state matching this by chance would need RMS(h / w) = 1 at nearly every
position, which the residual stream's growing and varying scale does not give.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.core.errors import BadInputError
from helpers.io.checkpoint import open_checkpoint
from helpers.io.configs import flat_config


@dataclass
class TargetHead:
    """The target model's final RMSNorm and lm_head: `argmax(lm_head(hidden))` for states already
    normed (`hidden_normed`, SpecForge's layout), else `argmax(lm_head(norm(hidden)))`."""

    lm_head: torch.Tensor  # [V, H]
    norm_weight: torch.Tensor | None  # [H]; None: hidden states are used as they are
    eps: float = 1e-6
    path: str | None = None
    hidden_normed: bool = True  # the samples' states are after the final norm (SpecForge): lm_head only

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
            if self.norm_weight is not None and not self.hidden_normed:
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


HIDDEN_NORMED = ("yes", "no", "auto")
NORMED_TOLERANCE = 0.02  # |RMS(h / w) - 1| at most this: the position left the final norm
NORMED_SHARE = 0.90  # this share of positions or more: normed; at most 1 - this: not normed


def normed_share(hidden: torch.Tensor, norm_weight: torch.Tensor | None, tol: float = NORMED_TOLERANCE) -> tuple[float, int]:
    """(share of positions whose RMS(h / w) is within `tol` of 1, positions looked at); hidden [..., H].

    Without a norm weight, w = 1. Positions that are all zero (padding) are left out.
    """
    h = hidden.reshape(-1, hidden.shape[-1]).float()  # [N, H]
    h = h[h.abs().amax(-1) > 0]
    if h.shape[0] == 0:
        return 0.0, 0
    if norm_weight is not None:
        w = norm_weight.float().to(h.device)
        keep = w.abs() >= 1e-3 * float(w.abs().max())
        h = h[:, keep] / w[keep]
    rms = h.pow(2).mean(-1).sqrt()  # [N]
    return float(((rms - 1).abs() <= tol).float().mean()), int(rms.numel())


def detect_hidden_normed(head: TargetHead, states) -> tuple[bool, str]:
    """(True if the states are already after the final norm, the evidence in words) - see the module docstring.

    `states`: an iterable of [.., H] hidden-state tensors (a few samples are enough). A
    `BadInputError` when the states are mixed, so that no guess is made.
    """
    hid = [s.reshape(-1, s.shape[-1]) for s in states]
    if not hid:
        raise BadInputError(head.path, "no hidden states to tell whether they are already normed: pass hidden_normed")
    share, n = normed_share(torch.cat(hid), head.norm_weight)
    what = f"{100 * share:.1f} % of {n} positions have RMS(hidden_state / norm.weight) within {100 * NORMED_TOLERANCE:.0f} % of 1"
    if head.norm_weight is None:
        what += " (the target has no final norm weight: w = 1)"
    if share >= NORMED_SHARE:
        return True, f"auto: {what}, so they are already normed (lm_head only)"
    if share <= 1 - NORMED_SHARE:
        return False, f"auto: {what}, so they are not normed (final norm, then lm_head)"
    raise BadInputError(
        head.path, f"cannot tell whether the samples' hidden states are already normed ({what}): "
        "pass hidden_normed='yes' (after the final norm, SpecForge's layout) or 'no' (CLI: --hidden-normed)",
    )
