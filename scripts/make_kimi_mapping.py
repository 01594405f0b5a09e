"""Write data_samples/kimi_k25_mapping{,_absolute}/ : a d2t/t2d pair at Kimi-K2.5's sizes.

Target vocab 163,840, draft vocab 32,000. The mapping is synthetic but built so that every number
printed in the investigation (docs/eagle3-facts.md, 'Investigation') comes out exactly:

- the first 124 entries of d2t are 0 (target ids 0..123 kept), the other 31,876 are non-zero;
- 20,954 distinct values;
- d2t[1000:1010] and d2t[31990:] equal the printed slices;
- t2d has 32,000 True entries, the first ten at 0..9, equal to `arange + d2t`.

Kept ids are dense at low ids and sparse in the tail, as a frequency-built vocab is. The
`_absolute` copy stores the same mapping as absolute target ids (the misencoding).
Deterministic: run it again and the files are identical.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

DRAFT, TARGET = 32_000, 163_840
LEAD = 124
SLICE_1000 = [787, 787, 787, 788, 792, 792, 792, 792, 793, 794]
SLICE_END = [131446, 131464, 131465, 131529, 131530, 131530, 131586, 131589, 131608, 131608]
DISTINCT = 20_954


def _segment(rng, n_pairs: int, total: int, n_steps: int, first_forced: bool, power: float) -> np.ndarray:
    """Increments for n_pairs consecutive pairs: n_steps of them positive, summing to total."""
    inc = np.zeros(n_pairs, dtype=np.int64)
    pool = np.arange(1 if first_forced else 0, n_pairs)
    pos = rng.choice(pool, size=n_steps - int(first_forced), replace=False)
    if first_forced:
        pos = np.concatenate([[0], pos])
    pos.sort()
    # Bigger jumps later in the vocab: weights grow with position.
    w = ((pos + 1) / n_pairs) ** power
    extra = rng.multinomial(total - n_steps, w / w.sum())
    inc[pos] = 1 + extra
    return inc


def build() -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(20251)
    d2t = np.zeros(DRAFT, dtype=np.int64)
    d2t[1000:1010] = SLICE_1000
    d2t[31990:] = SLICE_END
    fixed_steps = int((np.diff(SLICE_1000) > 0).sum() + (np.diff(SLICE_END) > 0).sum())
    steps_left = DISTINCT - 1 - fixed_steps
    # segment A: pairs (123,124) .. (999,1000); segment C: pairs (1009,1010) .. (31989,31990)
    n_a, n_c = 1000 - (LEAD - 1), 31990 - 1009
    k_a = 520
    inc_a = _segment(rng, n_a, SLICE_1000[0], k_a, first_forced=True, power=1.0)
    inc_c = _segment(rng, n_c, SLICE_END[0] - SLICE_1000[-1], steps_left - k_a, first_forced=False, power=1.6)
    d2t[LEAD - 1 : 1001] = np.cumsum(np.concatenate([[0], inc_a]))
    d2t[1009:31991] = SLICE_1000[-1] + np.cumsum(np.concatenate([[0], inc_c]))
    d2t[31990:] = SLICE_END  # the last increment of C lands exactly on 131446
    assert d2t[31989] <= d2t[31990]
    d2t_t = torch.from_numpy(d2t)
    targets = d2t_t + torch.arange(DRAFT)
    t2d = torch.zeros(TARGET, dtype=torch.bool)
    t2d[targets] = True
    return d2t_t, t2d


def check(d2t: torch.Tensor, t2d: torch.Tensor) -> None:
    assert d2t.dtype == torch.int64 and d2t.shape == (DRAFT,)
    assert int((d2t[:LEAD] == 0).sum()) == LEAD and int((d2t != 0).sum()) == DRAFT - LEAD
    assert torch.unique(d2t).numel() == DISTINCT, torch.unique(d2t).numel()
    assert d2t[1000:1010].tolist() == SLICE_1000 and d2t[31990:].tolist() == SLICE_END
    assert bool((d2t[1:] >= d2t[:-1]).all())
    assert int(t2d.sum()) == DRAFT and torch.nonzero(t2d).flatten()[:10].tolist() == list(range(10))
    assert torch.equal(torch.nonzero(t2d).flatten(), d2t + torch.arange(DRAFT))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "data_samples"))
    args = ap.parse_args(argv)
    d2t, t2d = build()
    check(d2t, t2d)
    out = Path(args.out)
    good, bad = out / "kimi_k25_mapping", out / "kimi_k25_mapping_absolute"
    for folder, d in ((good, d2t), (bad, d2t + torch.arange(DRAFT))):
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(d.clone(), folder / "d2t.pt")
        torch.save(t2d.clone(), folder / "t2d.pt")
        print(f"wrote {folder}/d2t.pt, t2d.pt")


if __name__ == "__main__":
    main()
