"""Record a real llama-server run for the kit's llama.cpp serving readers (about 15 s).

python -m scripts.record_llamacpp_serving [--out data_samples]

Needs the llama.cpp environment (`make engine-env`, scripts/llamacpp.py). Converts the bundled engine
pair (data_samples/engine_llama) with llama.cpp's own converter, starts `llama-server` (EAGLE-3, a
3-token draft, one slot, one thread) and sends the first 16 bundled prompts as token ids, one at a
time, greedy, 32 tokens each, with exactly the body `d2t-lab probe` sends (`probe_client.llamacpp_body`).
Twice, on two fresh servers:

- with `-lv 4` (the per-request `acc per pos` line and the speculative statistics): its log, stripped
  of the lines nothing reads (model-loader key dumps, sampler dumps, per-step scheduling lines), is
  `logs/llamacpp.log`; its `/metrics` after the last answer is `metrics/llamacpp_metrics.txt`; what
  the server answered (GET /props, /v1/models, /metrics before and after, each /completion answer
  with the prompt ids it answered) is `engine_runs/llamacpp-b11434/replay.json`, which the tests'
  replay server serves;
- at the default verbosity: its log, stripped the same way, is `logs/llamacpp_info.log` (no `acc per
  pos` line, no statistics).

Prints the counters of each run (drafts = verify steps, draft tokens, accepted, per position) and
1 + accepted / drafts.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PAIR = ROOT / "data_samples" / "engine_llama"
PROMPTS = ROOT / "data_samples" / "prompts.jsonl"
N_PROMPTS, MAX_TOKENS, N_MAX = 16, 32, 3

# lines nobody reads, dropped from the kept logs (everything else stays, unrecognised lines included)
_DROP = re.compile(r" I (llama_model_loader: - |load: |print_info: |srv +update: |srv +get_availabl|slot get_availabl|"
                   r"srv +prompt_save|srv +server_strea|common_memory_breakdown_print|sched_reserve|"
                   r"resolve_fused_ops|llama_context: |llama_kv_cache|graph_reserve|slot operator\(\)|"
                   r"slot init_sampler|srv +load:)|^\s*(\S+ = \S+, )+|^\s*$")


def strip_log(text: str, replace: dict[str, str]) -> str:
    for old, new in replace.items():
        text = text.replace(old, new)
    return "".join(line for line in text.splitlines(keepends=True) if not _DROP.search(line))


def run(llamacpp, gguf: tuple[Path, Path], ids, verbosity: int | None, log: Path) -> dict:
    from helpers.serving.probe_client import llamacpp_body

    server = llamacpp.Server(*gguf, n_max=N_MAX, verbosity=verbosity, log_path=log)
    with server:
        outcome = server.start()
        if not outcome.started:
            sys.exit(f"llama-server did not start: {outcome.error}\n" + "\n".join(outcome.log_tail))
        got = {p: llamacpp.get_text(server.url + p) for p in ("/props", "/v1/models", "/metrics")}
        answers = []
        for p in ids:
            answers.append({"prompt": p, "answer": llamacpp.post(server.url + "/completion",
                                                                 llamacpp_body(p, MAX_TOKENS))})
        after = llamacpp.get_text(server.url + "/metrics")
        counters = llamacpp.spec_counters(server)
        command = server.command_line()
    return {"props": json.loads(got["/props"]), "models": json.loads(got["/v1/models"]),
            "metrics_before": got["/metrics"], "metrics_after": after, "completions": answers,
            "counters": counters, "command": command}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "data_samples")
    a = ap.parse_args()
    from scripts import llamacpp, vllm_cpu

    ids = vllm_cpu.prompt_token_ids(PAIR / "target", PROMPTS, N_PROMPTS)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t, d = tmp / "target.gguf", tmp / "draft.gguf"
        for done in (llamacpp.convert(PAIR / "target", t), llamacpp.convert(PAIR / "draft", d, target=PAIR / "target")):
            if not done.ok:
                sys.exit(f"the converter refused: {done.error}")
        replace = {str(tmp): "/models"}  # the temporary folder's name, the same in every recording
        runs = {}
        for name, verbosity in (("llamacpp.log", 4), ("llamacpp_info.log", None)):
            log = tmp / name
            runs[name] = run(llamacpp, (t, d), ids, verbosity, log)
            (a.out / "logs").mkdir(parents=True, exist_ok=True)
            (a.out / "logs" / name).write_text(strip_log(log.read_text(errors="replace"), replace))
    lv4 = runs["llamacpp.log"]
    (a.out / "metrics").mkdir(parents=True, exist_ok=True)
    (a.out / "metrics" / "llamacpp_metrics.txt").write_text(lv4["metrics_after"])
    replay = {"engine": "llamacpp", "release": llamacpp.RELEASE, "package": llamacpp.PACKAGE, "real": True,
              "made_by": "python -m scripts.record_llamacpp_serving",
              "command": lv4["command"].replace(str(tmp), "/models"),
              "prompts": f"data_samples/prompts.jsonl, first {N_PROMPTS}, token ids via the target's chat template, "
                         f"greedy, {MAX_TOKENS} tokens, one request at a time to /completion",
              "log": "data_samples/logs/llamacpp.log", "counters": lv4["counters"],
              **{k: lv4[k] for k in ("props", "models", "metrics_before", "metrics_after", "completions")}}
    text = json.dumps(replay, separators=(",", ":")).replace(str(tmp), "/models")
    folder = a.out / "engine_runs" / f"llamacpp-{llamacpp.RELEASE}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "replay.json").write_text(text + "\n")
    for name, r in runs.items():
        c = r["counters"]
        print(f"{name}: drafts {c['num_drafts']}, draft tokens {c['num_draft_tokens']}, accepted "
              f"{c['num_accepted_tokens']}, per position {c['per_pos']}: accept length "
              f"{1 + c['num_accepted_tokens'] / c['num_drafts']:.6f}")


if __name__ == "__main__":
    main()
