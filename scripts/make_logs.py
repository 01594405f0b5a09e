"""Write the sample serving logs in data_samples/logs/ (deterministic; a second or two).

python -m scripts.make_logs [--out data_samples/logs]

Three handwritten-by-script logs in the engines' own line formats (see helpers/logs.py), with
accept lengths drawn from the tree model of helpers.acceptance.chain (`build_tree`) so that the numbers
hang together:

- sglang.log: current SGLang, `--speculative-num-steps 5 --speculative-eagle-topk 4
  --speculative-num-draft-tokens 16`, one request at a time, serving the bundled tiny draft
  (data_samples/tiny_draft_sglang) with a MISCONFIGURATION the kit reproduces engine-free:
  `WIRING` (default: d2t read as absolute ids). Its accept lengths are drawn from the engine-free
  loop's own per-verify-step accept lengths under that wiring (`helpers.speculate.reproduce.run_wiring`
  on the bundled target and prompts), so `make demo` finds a deployment bug and `reproduce` names
  the wiring; throughput from the investigation's step cost (3.66 decode steps at 90 tok/s).
  Synthetic: no server wrote it.
- sglang_old.log: an older SGLang build (`Decode batch.`, no accept rate) serving a
  speculators-style (`layers.0.*`) draft it silently does not load: accept length ~1.0.
- vllm.log: vLLM V1 with the same draft loaded correctly, chain drafting with 3 speculative
  tokens, per-position conditional acceptance 0.75 / 0.72 / 0.70.

Each holds a few hundred lines, including unrelated lines (prefill, HTTP access, warnings) and a
few recognised lines with garbled numbers, which the reader must count and skip, and (SGLang) a
write cut after its accept length, whose readable fields the reader keeps.
"""
from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import numpy as np

from helpers.acceptance.tree import build_tree

BASELINE_TPS = 90.0
STEP_COST = 1.9 * 90.0 / 46.7  # decode steps per speculative step, from the investigation
ROOT = Path(__file__).resolve().parents[1]
TREE = (5, 4, 16)  # SGLang --speculative-num-steps / --speculative-eagle-topk / --speculative-num-draft-tokens
WIRING = "absolute"  # the misconfiguration sglang.log is made under (a key of helpers.speculate.reproduce)


def engine_free_lengths(wiring: str, prompts: int = 4, max_new_tokens: int = 16) -> np.ndarray:
    """P(accept length = 1 .. steps + 1) of the bundled tiny draft, tree TREE, under `wiring`,
    measured by the engine-free loop on the first `prompts` bundled prompts (fp32, CPU)."""
    import torch

    from helpers.acceptance.drafting import Drafting
    from helpers.io.prompts import read_prompts
    from helpers.model.draft import load_draft
    from helpers.model.target import load_target
    from helpers.speculate.reproduce import run_wiring
    from helpers.speculate.result import SpecSettings

    torch.set_num_threads(1)
    target = load_target(ROOT / "data_samples" / "tiny_target", device="cpu", dtype=torch.float32)
    draft = load_draft(ROOT / "data_samples" / "tiny_draft_sglang", device="cpu", dtype=torch.float32)
    steps, topk, ntok = TREE
    settings = SpecSettings(drafting=Drafting.tree(steps, topk, ntok), max_new_tokens=max_new_tokens)
    records = list(read_prompts(ROOT / "data_samples" / "prompts.jsonl", prompts))
    run = run_wiring(target, draft, records, settings, wiring)
    return histogram_law(run.histogram_counts, steps)


def histogram_law(counts, steps: int) -> np.ndarray:
    """A run's verify-step histogram [steps + 2] (index = accept length) as P(L = 1 .. steps + 1)."""
    c = np.asarray(counts, dtype=float)[1: steps + 2]
    return c / c.sum()


def sglang_log(rng: np.random.Generator, old: bool, p_len: np.ndarray | None = None) -> list[str]:
    """`p_len`: P(accept length = 1 .. steps + 1) per verify step (current format); the old-format
    log draws from the tree model at per-token acceptance 0.02 (a draft it does not load)."""
    (steps, topk, ntok), interval = TREE, 40
    t = dt.datetime(2026, 1, 5, 10, 0, 0) if not old else dt.datetime(2025, 6, 2, 14, 30, 0)
    lines, max_tokens = [], 1_048_576
    tag = "" if old else " TP0"

    def stamp():
        return f"[{t:%Y-%m-%d %H:%M:%S}{tag}]"

    model = ("model_path='moonshotai/Kimi-K2.5'" if old else
             "model_path='data_samples/tiny_target', speculative_draft_model_path='data_samples/tiny_draft_sglang'")
    lines.append(f"{stamp()} server_args=ServerArgs({model}, speculative_algorithm='EAGLE3', "
                 f"speculative_num_steps={steps}, speculative_eagle_topk={topk}, speculative_num_draft_tokens={ntok}, "
                 f"decode_log_interval={interval})")
    if old:
        lines.append(f"{stamp()} Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, avail mem=21.30 GB")
    lines.append(f"{stamp()} The server is fired up and ready to roll!")
    if p_len is None:
        # accept-length law of the tree: P(L >= d + 1) = sum of the path probabilities at depth d
        tree = build_tree(0.02, steps, topk, ntok)
        reach = np.array([1.0] + [tree.prob[tree.depth == d].sum() for d in range(1, steps + 1)])  # [steps + 1]
        p_len = reach - np.append(reach[1:], 0.0)  # P(L = 1 .. steps + 1)
    for req in range(9):
        t += dt.timedelta(seconds=float(rng.uniform(1, 4)))
        prompt = int(rng.integers(300, 1500))
        lines.append(f"{stamp()} Prefill batch, #new-seq: 1, #new-token: {prompt}, #cached-token: 0, token usage: "
                     f"{prompt / max_tokens:.2f}, #running-req: 0, #queue-req: 0, ")
        used = prompt
        for _ in range(int(rng.integers(25, 40))):
            acc = float(rng.choice(np.arange(1, steps + 2), size=interval, p=p_len).mean())  # one log interval
            step_time = STEP_COST / BASELINE_TPS * float(rng.normal(1.0, 0.03))  # seconds per spec step
            t += dt.timedelta(seconds=interval * step_time)
            used += int(acc * interval)
            tps = acc * interval / (interval * step_time)
            head = f"{stamp()} Decode batch. " if old else f"{stamp()} Decode batch, "
            body = f"#running-req: 1, #token: {used}, token usage: {used / max_tokens:.2f}, accept len: {acc:.2f}, "
            if not old:
                body += f"accept rate: {acc / ntok:.2f}, cuda graph: True, "
            body += f"gen throughput (token/s): {tps:.2f}, #queue-req: 0"
            lines.append(head + body + (", " if old else ""))
        lines.append(f"{stamp()} INFO:     127.0.0.1:{40000 + req} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK")
    # a write cut after the accept length (kept, marked cut), then garbled: a corrupted digit, a doubled dot
    n = len(lines)
    i = next(j for j in range(n // 5, n) if "gen throughput" in lines[j])
    lines[i] = lines[i][: lines[i].index("gen throughput") + len("gen throughput (token/s): 4")]
    i = next(j for j in range(n // 2, n) if "accept len" in lines[j])
    lines[i] = lines[i].replace("accept len: ", "accept len: 1O.", 1)
    i = next(j for j in range(3 * n // 4, n) if "gen throughput" in lines[j])
    lines[i] = lines[i].replace("gen throughput (token/s): ", "gen throughput (token/s): 4..", 1)
    lines.insert(n // 3, f"{stamp()} WARNING: KV cache pool is nearly full; consider --mem-fraction-static")
    return lines


def vllm_log(rng: np.random.Generator) -> list[str]:
    rates = [0.75, 0.72, 0.70]
    k, every = len(rates), 10.0  # vLLM logs metrics every 10 s
    t = dt.datetime(2026, 1, 5, 11, 0, 0)
    step_time = 1.0 / BASELINE_TPS * 1.35  # a k=3 chain step costs ~1.35 decode steps
    lines = [
        f"INFO {t:%m-%d %H:%M:%S} [__init__.py:239] Automatically detected platform cuda.",
        f"(APIServer pid=4121) INFO {t:%m-%d %H:%M:%S} [api_server.py:1896] vLLM API server version 0.10.1",
        f"(APIServer pid=4121) INFO {t:%m-%d %H:%M:%S} [utils.py:326] non-default args: {{'model': "
        f"'moonshotai/Kimi-K2.5', 'speculative_config': {{'method': 'eagle3', 'num_speculative_tokens': {k}}}}}",
    ]
    for i in range(150):
        t += dt.timedelta(seconds=every)
        drafts = int(every / step_time * float(rng.uniform(0.85, 1.0)))
        u = rng.random((drafts, k))
        accepted_pos = np.cumprod(u < np.asarray(rates), axis=1)  # [drafts, k]
        per_pos = accepted_pos.mean(axis=0)
        accepted = int(accepted_pos.sum())
        drafted = drafts * k
        mal = 1 + accepted / drafts
        gen = (accepted + drafts) / every
        pre = f"(APIServer pid=4121) INFO {t:%m-%d %H:%M:%S} [loggers.py:123] "
        lines.append(pre + f"Engine 000: Avg prompt throughput: {float(rng.uniform(0, 80)):.1f} tokens/s, Avg generation "
                     f"throughput: {gen:.1f} tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.4%, "
                     f"Prefix cache hit rate: 12.5%")
        lines.append(pre + "SpecDecoding metrics: "
                     f"Mean acceptance length: {mal:.2f}, Accepted throughput: {accepted / every:.2f} tokens/s, "
                     f"Drafted throughput: {drafted / every:.2f} tokens/s, Accepted: {accepted} tokens, Drafted: "
                     f"{drafted} tokens, Per-position acceptance rate: {', '.join(f'{p:.3f}' for p in per_pos)}, "
                     f"Avg Draft acceptance rate: {100 * accepted / drafted:.1f}%")
        if i % 37 == 5:
            lines.append(f"(APIServer pid=4121) INFO:     127.0.0.1:5{i:04d} - \"POST /v1/completions HTTP/1.1\" 200 OK")
    n = len(lines)
    i = next(j for j in range(n // 3, n) if "SpecDecoding" in lines[j])
    lines[i] = lines[i].replace("Mean acceptance length: ", "Mean acceptance length: 2.6.", 1)
    i = next(j for j in range(2 * n // 3, n) if "SpecDecoding" in lines[j])
    lines[i] = lines[i][: lines[i].index("Avg Draft acceptance rate:") + len("Avg Draft acceptance rate: ")] + "5x.1%"
    lines.insert(n // 2, "(EngineCore_0 pid=4180) WARNING 01-05 11:12:03 [gpu_model_runner.py:2410] CUDA graph "
                 "capture is skipped for batch size 513")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "data_samples" / "logs"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "sglang.log": sglang_log(np.random.default_rng(1), old=False, p_len=engine_free_lengths(WIRING)),
        "sglang_old.log": sglang_log(np.random.default_rng(2), old=True),
        "vllm.log": vllm_log(np.random.default_rng(3)),
    }
    for name, lines in files.items():
        (out / name).write_text("\n".join(lines) + "\n")
        print(f"{out / name}: {len(lines)} lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
