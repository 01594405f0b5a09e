"""Run many drafts through vLLM's CPU build in ONE engine process, one `vllm.LLM` after another.

This file runs under the engine environment's interpreter (`.venv-engine/bin/python`), never under the
kit's: `scripts/vllm_cpu.py:run_in_process` starts it. A server start costs 30-80 s here, most of it
importing vLLM and PyTorch again in two processes; an offline `LLM` in a process that has already
imported vLLM starts in about 3 s (`VLLM_ENABLE_V1_MULTIPROCESSING=0`: the engine core runs in this
process). The model loader, the draft classes and the speculative decoding are the server's own; only
the HTTP front end is left out.

    <engine venv>/bin/python scripts/vllm_inprocess.py JOBS.json RESULTS.jsonl   # by path: it imports nothing of the repository

JOBS.json: {"prompt_ids": [[...], ...], "max_tokens": N, "k": K, "dtype": "bfloat16",
            "jobs": [{"case": NAME, "target": DIR, "draft": DIR or null, "method": "eagle3", "log": FILE}, ...]}
Each job appends one JSON line to RESULTS.jsonl as soon as it is done:
  {"case", "outcome": "refuses" | "crashes" | "serves", "seconds", and for `serves`: "drafts",
   "draft_tokens", "accepted", "accepted_per_position", "output_ids"}
Everything the engine prints for a job (its log and, on failure, the traceback) goes to the job's "log"
file; the caller reads the engine's own error line from it. Jobs already in RESULTS.jsonl are skipped,
so the caller restarts this process after a crash and it carries on with the next job.
"""
import json
import os
import sys
import time
import traceback

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def _redirect(path):
    """Send this process's stdout and stderr (file descriptors, so the engine's own logging too) to `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _metrics(llm) -> dict:
    out = {}
    for m in llm.get_metrics():
        name = m.name.replace("vllm:spec_decode_", "")
        if name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
            out[name] = int(m.value)
        elif name == "num_accepted_tokens_per_pos":
            out[name] = [int(v) for v in m.values]
    return out


def run_job(job: dict, spec: dict) -> dict:
    import gc

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.time()
    kwargs = {}
    if job.get("draft"):
        kwargs["speculative_config"] = {"method": job.get("method", "eagle3"), "model": job["draft"],
                                        "num_speculative_tokens": spec["k"]}
    try:
        llm = LLM(model=job["target"], dtype=spec["dtype"], max_model_len=512, enforce_eager=True, seed=0,
                  max_num_seqs=16, disable_log_stats=False, **kwargs)
    except BaseException:  # noqa: BLE001 - whatever the engine raised at start is the outcome
        traceback.print_exc()
        return {"outcome": "refuses", "seconds": round(time.time() - t0, 1)}
    started = time.time() - t0
    try:
        params = SamplingParams(temperature=0.0, max_tokens=spec["max_tokens"])
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in spec["prompt_ids"]], params, use_tqdm=False)
        row = {"outcome": "serves", "seconds": round(started, 1),
               "output_ids": [list(o.outputs[0].token_ids) for o in outs]}
        m = _metrics(llm)
        if job.get("draft"):
            row.update({"drafts": m.get("num_drafts", 0), "draft_tokens": m.get("num_draft_tokens", 0),
                        "accepted": m.get("num_accepted_tokens", 0),
                        "accepted_per_position": m.get("num_accepted_tokens_per_pos", [])})
    except BaseException:  # noqa: BLE001 - it started and failed while serving
        traceback.print_exc()
        row = {"outcome": "crashes", "seconds": round(started, 1)}
    del llm
    gc.collect()
    return row


def main(jobs_path: str, results_path: str) -> None:
    spec = json.load(open(jobs_path))
    done = set()
    if os.path.exists(results_path):
        done = {json.loads(line)["case"] for line in open(results_path) if line.strip()}
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    for job in spec["jobs"]:
        if job["case"] in done:
            continue
        # a marker first: if the engine kills this process, the caller knows which job did it
        with open(results_path + ".current", "w") as f:
            f.write(job["case"])
        _redirect(job["log"])
        row = {"case": job["case"]} | run_job(job, spec)
        with open(results_path, "a") as f:
            f.write(json.dumps(row) + "\n")
    if os.path.exists(results_path + ".current"):
        os.remove(results_path + ".current")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
