"""Replay: the real draft on hidden-state samples, measured as accept lengths.

From each position the draft drafts a greedy chain of `steps` tokens (`helpers.measure.predict`), and
the accept length is 1 + the number of leading drafted tokens that equal the real continuation:
what a chain would get in serving with this draft, these samples and this reading of d2t.
`ReplayResult` holds the counts per accept length and the per-step acceptance they imply, which
`helpers.acceptance.chain.chain_expected` turns back into a predicted accept length.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from helpers.acceptance.chain import chain_expected, histogram_mean, histogram_stderr
from helpers.core.errors import BadInputError
from helpers.io.samples import split_folders
from helpers.measure.predict import Loading, as_model, draft_predictions


@dataclass
class ReplayResult:
    """Accept lengths of the real draft, drafted greedily for `steps` tokens from each position.

    counts[L] = positions with accept length L (1 .. steps + 1; counts[0] == 0). Positions are
    those whose whole window t+2 .. t+1+steps lies inside the sequence and whose first label
    (token t+2) has loss_mask 1.
    """

    checkpoint: str
    samples: str
    reading: str
    steps: int
    counts: np.ndarray  # [steps + 2]
    samples_read: int
    splits: dict = field(default_factory=dict)  # split name -> ReplayResult (when train/ and val/)

    @property
    def positions(self) -> int:
        return int(self.counts.sum())

    @property
    def mean(self) -> float:
        return histogram_mean(self.counts)

    @property
    def stderr(self) -> float:
        """Standard error of the mean, treating positions as independent (they are not quite)."""
        return histogram_stderr(self.counts)

    @property
    def distribution(self) -> np.ndarray:
        return self.counts / max(self.positions, 1)

    @property
    def histogram(self) -> dict[int, int]:
        """{accept length: positions}, for `helpers.plots.speculation.plot_accept_lengths`."""
        return {int(i): int(c) for i, c in enumerate(self.counts) if i > 0}

    @property
    def step_rates(self) -> list[float]:
        """Per drafted position j: P(token j accepted | tokens 0..j-1 accepted)."""
        reached = self.counts[::-1].cumsum()[::-1]  # reached[L] = positions with length >= L
        return [float(reached[j + 2] / reached[j + 1]) if reached[j + 1] else float("nan") for j in range(self.steps)]

    def to_dict(self) -> dict:
        d = {
            "checkpoint": self.checkpoint, "samples": self.samples, "reading": self.reading,
            "steps": self.steps, "mean": self.mean, "stderr": self.stderr, "positions": self.positions,
            "samples_read": self.samples_read, "histogram": self.histogram, "step_rates": self.step_rates,
            "predicted_chain": chain_expected(np.nan_to_num(self.step_rates), self.steps) if self.positions else None,
        }
        if self.splits:
            d["splits"] = {k: {"mean": v.mean, "stderr": v.stderr, "positions": v.positions} for k, v in self.splits.items()}
        return d


def accept_lengths(pred, labels, mask):
    """Accept length per position from drafted ids and the real continuation.

    pred [T, K] (or [T, K, topk]: rank 0 used) target ids drafted at steps 0..K-1 from position t;
    labels [T, K] tokens t+2+j (-1 past the end); mask [T, K] loss_mask of each label.
    Returns (lengths [T'] int64, positions [T'] index t) for the positions counted: whole window
    inside the sequence and mask[t, 0]. Length = 1 + leading j with pred == label.
    """
    pred = torch.as_tensor(pred)
    if pred.dim() == 3:
        pred = pred[..., 0]
    labels, mask = torch.as_tensor(labels), torch.as_tensor(mask).bool()
    keep = (labels[:, -1] >= 0) & mask[:, 0]  # [T]
    hit = (pred == labels) & (labels >= 0)  # [T, K]
    leading = hit.long().cumprod(dim=1).sum(dim=1)  # [T]
    idx = keep.nonzero().flatten()
    return (1 + leading[idx]).numpy().astype(np.int64), idx.numpy()


def replay(checkpoint_or_model, samples_dir, steps: int = 4, reading: str = "offset", max_samples: int | None = None,
           device=None, dtype=None, embed_from=None, progress: bool = True, batch_size: int = 8) -> ReplayResult:
    """Replay the real draft on samples: accept length against the real continuation.

    From each position t the draft drafts `steps` tokens greedily (`model.draft_steps`, step j
    fed with step j-1's draft mapped to a target id under `reading`), as a chain would in
    serving; accept length = 1 + the number of leading drafted tokens equal to tokens t+2, t+3,
    .... A samples folder with `train/` and `val/` is replayed per split (up to `max_samples`
    each) and pooled. `checkpoint_or_model`: a path (loaded with `helpers.model.draft.load_draft`) or
    a loaded `Eagle3Draft` (load once, replay under several readings).
    """
    if int(steps) < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    model = as_model(checkpoint_or_model, Loading(device, dtype, embed_from))
    parts = split_folders(samples_dir) or {"all": samples_dir}
    results = {}
    for split, folder in parts.items():
        counts = np.zeros(int(steps) + 2, dtype=np.int64)
        n = 0
        for p in draft_predictions(model, folder, steps=int(steps), reading=reading, topk=1, batch_size=batch_size,
                                   max_samples=max_samples, progress=progress):
            lengths, _ = accept_lengths(p.pred, p.labels, p.mask)
            counts += np.bincount(lengths, minlength=counts.size)
            n += 1
        if n == 0:
            raise BadInputError(folder if _where(folder) != "(samples)" else None, "holds no samples to replay")
        results[split] = ReplayResult(_name(checkpoint_or_model), _where(folder), reading, int(steps), counts, n)
    if "all" in results:
        return results["all"]
    total = sum(r.counts for r in results.values())
    return ReplayResult(_name(checkpoint_or_model), _where(samples_dir), reading, int(steps), total,
                        sum(r.samples_read for r in results.values()), splits=results)


def _where(samples) -> str:
    return str(samples) if isinstance(samples, (str, bytes)) or hasattr(samples, "__fspath__") else "(samples)"


def _name(checkpoint_or_model) -> str:
    if isinstance(checkpoint_or_model, (str, bytes)) or hasattr(checkpoint_or_model, "__fspath__"):
        return str(checkpoint_or_model)
    return str(getattr(checkpoint_or_model, "source", None) or "(loaded draft)")
