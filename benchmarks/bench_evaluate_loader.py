"""`evaluate` with sample files read ahead by a reader thread, against reading alone and computing alone.

Target: evaluate with the loader takes at most 1.1x the larger of (read-only time, compute-only
time) on the same files, i.e. reading is hidden behind compute (or the reverse).

Files: `--files` samples of about `--seq` tokens, each the concatenation of bundled training
samples (the bundled draft's shapes: aux 192 wide, hidden 64), gzip-compressed like the bundled
validation split so reading (decompression + unpickling) costs about as much as the draft's
forward. Measured in one run, best of `--repeats`:

- read only: every file loaded and checked (`stream_samples`, no workers), nothing computed;
- compute only: the same samples already in memory, scored by `evaluate`;
- loader: `evaluate` on the folder with `--workers 1` (one thread reads ahead while the draft
  computes);
- no loader: `evaluate` on the folder with `--workers 0` (read, then compute, in turn);
- for the record, the same with a `DataLoader` worker process reading ahead
  (`stream_samples(processes=True)`).

The page cache is dropped before each timed pass when /proc/sys/vm/drop_caches is writable (root
on a normal machine); otherwise the files stay cached and "read" is decompression + unpickling.

Usage: .venv/bin/python -m benchmarks.bench_evaluate_loader [--files 64 --seq 1024 --steps 1]
"""
from __future__ import annotations

import argparse
import gzip
import io
import os
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data_samples"
DRAFT = SAMPLES / "tiny_draft_sglang"


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def make_files(folder: Path, n: int, seq: int) -> None:
    from helpers.io.samples import iter_samples, sample_path

    src = list(iter_samples(SAMPLES / "tiny_hidden_states" / "train"))
    k = 0
    for i in range(n):
        parts = []
        while sum(p.length for p in parts) < seq:
            parts.append(src[k % len(src)])
            k += 1
        item = {"input_ids": torch.cat([p.input_ids for p in parts]), "loss_mask": torch.cat([p.loss_mask for p in parts]),
                "hidden_state": torch.cat([p.hidden_state for p in parts])[None],
                "aux_hidden_state": torch.cat([p.aux_hidden_state for p in parts])[None]}
        buf = io.BytesIO()
        torch.save(item, buf)
        path = sample_path(folder, i)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(buf.getvalue(), compresslevel=6))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    from helpers.model.draft import load_draft
    from helpers.measure.evaluate import evaluate
    from helpers.io.samples import stream_samples

    model = load_draft(DRAFT, device="cpu", dtype=torch.float32)
    kw = dict(steps=args.steps, readings=["offset"], progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "samples"
        make_files(folder, args.files, args.seq)
        mb = sum(p.stat().st_size for p in folder.rglob("*.gz")) / 2**20
        dropped = drop_caches()

        def timed(fn) -> float:
            best = float("inf")
            for _ in range(args.repeats):
                drop_caches()
                t0 = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t0)
            return best

        t_read = timed(lambda: sum(1 for _ in stream_samples(folder, expect_aux_width=192)))
        loaded = list(stream_samples(folder, expect_aux_width=192))
        t_compute = timed(lambda: evaluate(model, loaded, **kw))
        t_loader = timed(lambda: evaluate(model, folder, workers=1, **kw))
        t_plain = timed(lambda: evaluate(model, folder, workers=0, **kw))
        import helpers.io.samples as hs

        threads = hs.stream_samples
        hs.stream_samples = lambda *a, **k: threads(*a, **{**k, "processes": True})
        try:
            t_proc = timed(lambda: evaluate(model, folder, workers=1, **kw))
        finally:
            hs.stream_samples = threads
        a, b = evaluate(model, folder, workers=1, **kw), evaluate(model, folder, workers=0, **kw)
        same = a.to_dict()["readings"] == b.to_dict()["readings"]
    tokens = sum(s.length for s in loaded)
    print(f"{args.files} files, {tokens:,} tokens, {mb:.1f} MB gzip; draft {DRAFT.name}, {args.steps} steps, CPU; "
          f"page cache {'dropped before each pass' if dropped else 'NOT dropped (no permission): reads come from RAM'}")
    print(f"read only     {t_read:6.2f} s")
    print(f"compute only  {t_compute:6.2f} s")
    print(f"no loader     {t_plain:6.2f} s  (read, then compute, in turn)")
    print(f"loader        {t_loader:6.2f} s  (1 thread reading ahead); same scores as without: {same}")
    print(f"DataLoader    {t_proc:6.2f} s  (1 worker process reading ahead: fork + inter-process copies)")
    ratio = t_loader / max(t_read, t_compute)
    print(f"loader / max(read, compute) = {ratio:.2f} (target <= 1.10) -> {'met' if ratio <= 1.10 else 'NOT met'}")


if __name__ == "__main__":
    main()
