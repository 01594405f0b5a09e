"""Record real vLLM runs as bundled artefacts: data_samples/engine_runs/vllm-0.32.0/<run>/.

    python -m scripts.record_engine_runs [--out data_samples/engine_runs]   # needs make engine-env

Each run starts vLLM's CPU build (scripts/vllm_cpu.py) on the bundled engine pair
(data_samples/engine_llama) with a draft, sends the 16 bundled prompts (token ids through the
target's chat template, greedy, 32 tokens, one at a time), waits for the engine's own
`SpecDecoding metrics` log line, scrapes `/metrics`, and keeps what the engine wrote:

- `server.log`: the server's log (absolute paths of this machine replaced by repository paths);
- `metrics.txt`: its `/metrics` page after the prompts (the `vllm:` lines);
- `responses.jsonl`: its `/v1/completions` responses, one per prompt (with the per-request
  `metrics.speculative_decoding` that `--per-request-spec-decode-metrics summary` adds);
- `run.json`: engine, release, the exact command, the draft, the date.

Runs: `healthy` (the draft as made), `d2t-missing` (the same draft without d2t/t2d: it serves at
accept length 1.0), and the start-up refusal and first-request crash of two broken copies
(`prefix-model`, `d2t-absolute`: only their logs). Copies come from scripts/engine_truth.py.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path

from scripts import engine_truth as et
from scripts import vllm_cpu

ROOT = vllm_cpu.ROOT
RUNS = ("healthy", "d2t-missing", "prefix-model", "d2t-absolute")


def scrub(text: str, draft: Path) -> str:
    return text.replace(str(draft), "DRAFT").replace(str(ROOT) + "/", "").replace(str(ROOT), ".")


def record(name: str, draft: Path, ids: list[list[int]], out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    server = vllm_cpu.Server(et.TARGET, draft, num_speculative_tokens=et.K, dtype="bfloat16",
                             log_path=out / "server.log", extra=("--enforce-eager",))
    info = {"engine": "vllm", "release": vllm_cpu.RELEASE, "package": f"vllm-cpu=={vllm_cpu.RELEASE}",
            "real": True, "run": name, "change": et.CASES[name][0],
            "target": "data_samples/engine_llama/target",
            "draft": "data_samples/engine_llama/draft" if name == "healthy" else
                     f"data_samples/engine_llama/draft, changed: {et.CASES[name][0]} (python -m scripts.engine_truth make OUT)",
            "command": scrub(server.command_line(), draft),
            "prompts": f"data_samples/prompts.jsonl, first {len(ids)}, token ids via the target's chat template, "
                       f"greedy, {et.MAX_TOKENS} tokens, one request at a time",
            "recorded": datetime.date.today().isoformat(), "made_by": "python -m scripts.record_engine_runs"}
    with server:
        start = server.start()
        info["started"] = start.started
        if start.started:
            try:
                responses = vllm_cpu.complete(server, ids, et.MAX_TOKENS)
                drafted = sum(r["metrics"]["speculative_decoding"]["num_draft_tokens"] for r in responses)
                info["log_complete"] = vllm_cpu.wait_until_logged(server, drafted)
                metrics = vllm_cpu.get_text(server.url + "/metrics")
                (out / "metrics.txt").write_text("".join(ln + "\n" for ln in metrics.splitlines()
                                                         if ln.startswith(("vllm:", "# HELP vllm:", "# TYPE vllm:"))))
                (out / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in responses))
                info["accept_length"] = round(vllm_cpu.served_accept_length(responses)[0], 4)
            except Exception:  # the crash is what this run records
                time.sleep(2)
                info["crashed"] = True
        info["error"] = et.short(vllm_cpu.last_error(server.log()))
    time.sleep(1)
    (out / "server.log").write_text(scrub(server.log(), draft))
    (out / "run.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "data_samples" / "engine_runs")
    ap.add_argument("--runs", default=",".join(RUNS))
    args = ap.parse_args(argv)
    names = args.runs.split(",")
    ids = vllm_cpu.prompt_token_ids(et.TARGET, et.PROMPTS, et.N_PROMPTS)
    with tempfile.TemporaryDirectory() as tmp:
        copies = et.make(Path(tmp), names)
        for name in names:
            info = record(name, copies[name], ids, args.out / f"vllm-{vllm_cpu.RELEASE}" / name)
            print(f"{name}: started {info['started']}, accept length {info.get('accept_length')}, "
                  f"error {info.get('error')}", file=sys.stderr)


if __name__ == "__main__":
    main()
