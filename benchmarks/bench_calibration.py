"""Calibration of the predicted accept length against the engine-free loop, on both bundled pairs.

For each pair (the tiny Llama pair: `tiny_draft_sglang` + `tiny_target`, samples
`tiny_hidden_states`; the Kimi-shaped pair: `kimi_draft_mla` + `kimi_target`, samples
`kimi_hidden_states`) and each drafting shape (chain 3, chain 5, SGLang trees 3/2/6 and 5/4/16):

- **predicted, one rate**: the older figure, step-0 top-1 a for every depth and a (1 - a)^r for a
  tree's rank r (`Drafting.expected(a)`);
- **predicted, rank table**: `EvalResult.prediction`, the exact expectation of the rank table
  `evaluate --steps 5 --topk 4` measures (validation split when there is one), what notebook 04,
  the report, the dashboard and `evaluate --predict` show;
- **replay** (chains): the real draft replayed greedily from every counted position of the same
  samples split (`helpers.measure.replay`), i.e. rates given the earlier depths' hits, position by
  position: what the prediction would say without the independence assumption;
- **engine-free**: `helpers.speculate.loop.speculate` with the target in the loop, greedy, fp32 on
  the CPU, every bundled prompt (`data_samples/prompts.jsonl`, 32), each answer as long as the
  samples' answers (`max_new_tokens` of their capture.json: 24), offset reading;
- gap = predicted / engine-free - 1.

A second table runs the tiny pair's loop past the samples' answer length (48 tokens, the report's
default) and splits its verify steps at that length (`helpers.speculate.compare.by_answer_position`):
the gap there lies in text the samples do not hold.

Usage (about half a minute on one CPU core):
    .venv/bin/python -m benchmarks.bench_calibration            # print the tables
    .venv/bin/python -m benchmarks.bench_calibration --write    # also put them into docs/prediction-calibration.md
"""
from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data_samples"
DOC = ROOT / "docs" / "prediction-calibration.md"
START, END = "<!-- calibration:start -->", "<!-- calibration:end -->"
PAIRS = {
    "tiny (Llama)": dict(draft=SAMPLES / "tiny_draft_sglang", target=SAMPLES / "tiny_target",
                         samples=SAMPLES / "tiny_hidden_states"),
    "Kimi-shaped (MLA)": dict(draft=SAMPLES / "kimi_draft_mla", target=SAMPLES / "kimi_target",
                              samples=SAMPLES / "kimi_hidden_states"),
}
SHAPES = ((3, 1, 4), (5, 1, 6), (3, 2, 6), (5, 4, 16))  # SGLang's steps / topk / num_draft_tokens
SCORED = (5, 4)  # evaluate --steps 5 --topk 4: deep and wide enough for every shape


def drafting(shape):
    from helpers.acceptance.drafting import Drafting

    s, k, n = shape
    return Drafting.chain(s) if k == 1 else Drafting.tree(s, k, n)


def shape_name(shape) -> str:
    s, k, n = shape
    return f"chain {s}" if k == 1 else f"tree {s}/{k}/{n}"


def engine_free(tgt, draft, records, shape, max_new_tokens: int):
    from helpers.speculate.loop import speculate
    from helpers.speculate.result import SpecSettings

    settings = SpecSettings(reading="offset", drafting=drafting(shape), max_new_tokens=int(max_new_tokens))
    return speculate(tgt, draft, records, settings)


def calibrate(name: str, pair: dict, prompts: Path, max_prompts: int | None, max_new_tokens: int | None) -> list[dict]:
    """One row per shape: predicted (one rate, rank table), engine-free, gaps."""
    from helpers.io.prompts import read_prompts
    from helpers.io.samples import split_folders
    from helpers.measure.evaluate import evaluate
    from helpers.measure.replay import replay
    from helpers.model.pair import load_pair
    from helpers.speculate.ladder import samples_answer_tokens

    tgt, draft = load_pair(str(pair["target"]), str(pair["draft"]), device="cpu", dtype=torch.float32)
    ev = evaluate(draft, pair["samples"], readings=("offset",), steps=SCORED[0], accuracy_topk=SCORED[1], progress=False)
    length = max_new_tokens or samples_answer_tokens(pair["samples"]) or 24
    records = list(read_prompts(prompts, max_prompts))
    split = (split_folders(pair["samples"]) or {}).get("val", pair["samples"])  # where the rank table was measured
    rows = []
    for shape in SHAPES:
        p = ev.prediction(drafting(shape))
        rp = replay(draft, split, steps=shape[0], progress=False).mean if shape[1] == 1 else None
        run = engine_free(tgt, draft, records, shape, length)
        rows.append({"pair": name, "shape": shape_name(shape), "old": p.one_rate_value, "new": p.value, "replay": rp,
                     "measured": run.mean, "stderr": run.stderr, "steps": run.verify_steps,
                     "prompts": len(records), "tokens": length, "source": p.source})
    return rows


def past_the_samples(prompts: Path, max_prompts: int | None, length: int) -> list[dict]:
    """The tiny pair's loop run `length` tokens deep, its verify steps split at the samples' answer length."""
    from helpers.io.prompts import read_prompts
    from helpers.measure.evaluate import evaluate
    from helpers.model.pair import load_pair
    from helpers.speculate.compare import by_answer_position
    from helpers.speculate.ladder import samples_answer_tokens

    pair = PAIRS["tiny (Llama)"]
    tgt, draft = load_pair(str(pair["target"]), str(pair["draft"]), device="cpu", dtype=torch.float32)
    ev = evaluate(draft, pair["samples"], readings=("offset",), steps=SCORED[0], accuracy_topk=SCORED[1], progress=False)
    first = samples_answer_tokens(pair["samples"]) or 24
    records = list(read_prompts(prompts, max_prompts))
    rows = []
    for shape in ((5, 1, 6), (5, 4, 16)):
        run = engine_free(tgt, draft, records, shape, length)
        split = by_answer_position(run.prompts, first, shape[0])
        rows.append({"shape": shape_name(shape), "new": ev.prediction(drafting(shape)).value, "all": run.mean,
                     "all_se": run.stderr, "first": first, "length": length, **split})
    return rows


def _gap(pred: float, measured: float) -> str:
    return f"{100 * (pred / measured - 1):+.0f} %"


def table(rows: list[dict]) -> str:
    out = ["| pair | shape | predicted, one rate (old) | predicted, rank table (new) | replay (chains) | engine-free "
           "± s.e. (verify steps) | gap, new | gap, old |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rp = "-" if r["replay"] is None else f"{r['replay']:.2f}"
        out.append(f"| {r['pair']} | {r['shape']} | {r['old']:.2f} | **{r['new']:.2f}** | {rp} | {r['measured']:.2f} ± "
                   f"{r['stderr']:.2f} ({r['steps']}) | **{_gap(r['new'], r['measured'])}** | "
                   f"{_gap(r['old'], r['measured'])} |")
    return "\n".join(out)


def past_table(rows: list[dict]) -> str:
    f = lambda d: "-" if d["mean"] is None else f"{d['mean']:.2f} ± {d['stderr']:.2f} ({d['verify_steps']})"  # noqa: E731
    out = ["| shape | predicted, rank table | engine-free, all | steps within the first "
           f"{rows[0]['first']} tokens | steps past them |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['shape']} | {r['new']:.2f} | {r['all']:.2f} ± {r['all_se']:.2f} | {f(r['within'])} | "
                   f"{f(r['past'])} |")
    return "\n".join(out)


def write(doc: Path, text: str) -> None:
    body = doc.read_text()
    if START not in body or END not in body:
        raise SystemExit(f"{doc}: no {START} ... {END} markers to write the tables between")
    new = re.sub(re.escape(START) + r".*?" + re.escape(END), lambda _: f"{START}\n{text}\n{END}", body, flags=re.S)
    doc.write_text(new)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=Path, default=SAMPLES / "prompts.jsonl", help="prompt file (default: the bundled 32)")
    ap.add_argument("--max-prompts", type=int, default=None, help="use the first N prompts (default: all)")
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="tokens per answer in the loop (default: the samples' answer length, from capture.json)")
    ap.add_argument("--past", type=int, default=48, help="the longer run of the second table (default 48)")
    ap.add_argument("--write", action="store_true", help=f"write the tables into {DOC.relative_to(ROOT)}")
    args = ap.parse_args()
    torch.manual_seed(0)
    t0 = time.perf_counter()
    rows = [r for name, pair in PAIRS.items()
            for r in calibrate(name, pair, args.prompts, args.max_prompts, args.max_new_tokens)]
    past = past_the_samples(args.prompts, args.max_prompts, args.past)
    r0 = rows[0]
    whose = "" if args.max_new_tokens else " (the samples' answer length)"
    text = "\n".join([
        f"Engine-free: {r0['prompts']} prompts x {r0['tokens']} tokens{whose}, greedy, fp32, "
        f"CPU, offset reading. Predictions: `evaluate --steps {SCORED[0]} --topk {SCORED[1]}` on each pair's samples "
        f"(tiny: {rows[0]['source']}; Kimi-shaped: {rows[-1]['source']}). Gap = predicted / engine-free - 1.", "",
        table(rows), "",
        f"The tiny pair's loop run {args.past} tokens deep, its verify steps split at the samples' answer length "
        f"({past[0]['first']} tokens; a step counts as within when every token it drafts lies inside it):", "",
        past_table(past), "",
        f"Regenerate: `.venv/bin/python -m benchmarks.bench_calibration --write` ({time.perf_counter() - t0:.0f} s "
        "on this machine's CPU).",
    ])
    print(text)
    if args.write:
        write(DOC, text)
        print(f"\nwritten into {DOC}")


if __name__ == "__main__":
    main()
