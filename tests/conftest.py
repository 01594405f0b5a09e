"""Shared fixtures: paths to the bundled samples, running the CLI, executing notebooks.

`cli(...)` calls the command line in this process (`helpers.__main__.main`, output captured), which
is what most tests need and costs no interpreter start; `cli_subprocess(...)` runs
`python -m helpers` in a fresh process, as a user would, for the tests about the entry point
itself. Both return a `subprocess.CompletedProcess` (returncode, stdout, stderr).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

# The suite runs one pytest worker per core (`-n auto`), and each worker starts notebook kernels and
# `python -m helpers` children: every process gets one compute thread unless the caller chose
# otherwise, so parallel workers do not oversubscribe the cores (the kit's models are tiny).
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data_samples"
NOTEBOOKS = ROOT / "notebooks"


# How `make test` spreads tests over its workers (`-n auto --dist loadgroup`): one test at a time,
# except that the tests of a file that defines a module-scoped fixture (a report bundle, loaded
# models, a built corpus) form one unit and run on one worker, so the fixture is built once.
# Files whose tests take the longest (real reports, torchrun, notebook runs, a wheel build) go
# first, so no worker is left running a long unit alone at the end.
#
# The units come from our own scheduler (below), not from `xdist_group` marks: pytest 9.2 stores
# node ids in a structure that pytest-xdist 3.8's loadgroup no longer renames, so marks added at
# collection are silently ignored there (pytest-dev/pytest-xdist#1386) and each worker rebuilt the
# report bundle. The scheduler sees only node ids, so it decides by file.
LONGEST_FIRST = ["test_report_truth.py", "test_torchrun.py", "test_notebooks.py", "test_speculate.py",
                 "test_wheel.py", "test_hostile_inputs.py", "test_metrics.py", "test_kimi_pair.py",
                 "test_speculate_sliding.py", "test_browser.py", "test_primer.py", "test_capture.py",
                 "test_hostile_commands.py"]
_MODULE_FIXTURE = re.compile(r"""@pytest\.fixture\([^)]*scope\s*=\s*["']module["']""")


def shared_fixture_files(folder: Path = Path(__file__).parent) -> set[str]:
    """The test files (by name) that define a module-scoped fixture."""
    return {p.name for p in folder.glob("test_*.py") if _MODULE_FIXTURE.search(p.read_text(encoding="utf-8"))}


def work_unit(nodeid: str, shared: set[str]) -> str:
    """The unit a test is scheduled in: its file when the file shares a module fixture, an explicit
    `@group` suffix when pytest-xdist managed to add one, else the test alone."""
    if nodeid.rfind("@") > nodeid.rfind("]"):
        return nodeid.rsplit("@", 1)[1]
    path = nodeid.split("::", 1)[0]
    return path if Path(path).name in shared else nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        shared = shared_fixture_files()

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid, self.shared)

    config.option.loadscopereorder = False  # keep the order below: longest files first
    return SharedFixtureScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a test module's tiny models (fastest on a shared CPU), restored after it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    return SAMPLES


@pytest.fixture(scope="session")
def notebooks_dir() -> Path:
    return NOTEBOOKS


def side_file_draft(dst: Path) -> Path:
    """The bundled speculators-layout draft with its d2t / t2d moved out of model.safetensors into d2t.npy / t2d.npy
    beside it and its speculators_config dropped: the shape the older bundled sample had (SGLang and vLLM never
    read side files; vLLM refuses a speculators config without speculators_config)."""
    import json

    shutil.copytree(SAMPLES / "tiny_draft_speculators", dst)
    script_module("make_broken_drafts").side_files(dst)
    cfg = json.loads((dst / "config.json").read_text())
    for k in ("speculators_config", "speculators_version", "auto_map"):
        cfg.pop(k, None)
    (dst / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return dst


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python -m helpers ARGS...` in a subprocess, as a user would."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", TQDM_DISABLE="1")
    return subprocess.run(
        [sys.executable, "-m", "helpers", *map(str, args)],
        capture_output=True, text=True, cwd=cwd or ROOT, env=env, timeout=timeout,
    )


def run_main(*args, cwd: Path | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`helpers.__main__.main(ARGS)` in this process, stdout and stderr captured.

    An exception that escapes `main` is not caught: the calling test fails with it, as a user
    would have seen a traceback. `cwd` and `timeout` are accepted for the subprocess runner's
    signature; `cwd` is honoured.
    """
    from helpers.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    argv = [str(a) for a in args]
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        try:
            code = main(argv)
        except SystemExit as e:  # argparse: --help, --version, usage errors
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return subprocess.CompletedProcess(["d2t-lab", *argv], code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def cli():
    return run_main


@pytest.fixture(scope="session")
def cli_subprocess():
    return run_cli


def execute_notebook(path: Path, out_dir: Path, parameters: dict | None = None):
    """Execute a notebook top to bottom in a fresh kernel with papermill; return the executed nb."""
    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / path.name
    return pm.execute_notebook(
        str(path), str(out), parameters=parameters or {}, kernel_name="python3",
        cwd=str(path.parent), progress_bar=False, request_save_on_cell_execute=False,
    )


@pytest.fixture(scope="session")
def run_notebook():
    return execute_notebook


def script_module(name: str):
    """scripts/NAME.py imported as the module `scripts.NAME` (its `__main__` block not run), to call its
    functions in this process rather than pay an interpreter start."""
    import importlib

    return importlib.import_module(f"scripts.{name}")


def check_executed(executed, out: Path | None) -> None:
    """An executed notebook ran clean: no error output, no stray `<Axes ...>` repr, and (when it was
    given an output folder `out`) every figure it showed inline was saved there once."""
    outputs = [o for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert not [o for o in outputs if "<Axes" in str(o.get("data", {}).get("text/plain", ""))]
    if out is not None:
        images = sum("image/png" in o.get("data", {}) for o in outputs)
        saved = len(list(out.glob("*.png")))
        assert images == saved, f"{images} figures shown, {saved} saved"


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def same_up_to_rounding(a, b, where) -> None:
    """Equal, except where a CPU's fp32 summation order moved a value across one bf16 rounding
    boundary: then it differs by one bf16 step, and only in a handful of elements. The bundled
    samples were made on another machine; on one with the same CPU kernels they are torch.equal."""
    import torch

    if torch.equal(a, b):
        return
    diff = (a.float() - b.float()).abs()
    step = torch.maximum(a.float().abs(), b.float().abs()) * 2.0 ** -7  # one bf16 step at that size (upper bound)
    assert bool((diff <= step + 1e-5).all()), f"{where}: differs by more than one bf16 step ({diff.max():.3g})"
    assert (diff > 0).float().mean().item() < 1e-2, f"{where}: {(diff > 0).float().mean():.2%} of the values differ"


def chromium_path() -> str | None:
    """Debian's Chromium (or $D2T_CHROMIUM); browser tests skip, saying why, when there is none."""
    import shutil

    for p in (os.environ.get("D2T_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if p and Path(p).is_file() and os.access(p, os.X_OK):
            return p
    return None


def open_offline(path: Path | list[Path]) -> dict | list[dict]:
    """Open a local HTML file in headless Chromium with the network off (every request that is not
    a file: or data: URL is aborted and counted). Returns img widths (0 = not rendered), the
    blocked URLs, the page errors and the page's text. Given a list of files, one browser opens
    each in its own offline context and a list of those dicts comes back."""
    from playwright.sync_api import sync_playwright

    def visit(browser, page_path: Path) -> dict:
        blocked: list[str] = []

        def only_files(route):
            if route.request.url.startswith(("file:", "data:")):
                route.continue_()
            else:
                blocked.append(route.request.url)
                route.abort()

        context = browser.new_context(offline=True)
        try:
            context.route("**/*", only_files)
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(Path(page_path).as_uri(), wait_until="load", timeout=30_000)
            page.wait_for_load_state("networkidle", timeout=30_000)
            widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)")
            text = page.inner_text("body")
        finally:
            context.close()
        return {"widths": widths, "blocked": blocked, "errors": errors, "text": text}

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
        try:
            if isinstance(path, (list, tuple)):
                return [visit(browser, p) for p in path]
            return visit(browser, path)
        finally:
            browser.close()


@pytest.fixture
def chromium() -> dict:
    """{"path", "args"} of the headless Chromium to drive, or a skip naming what is missing."""
    if chromium_path() is None:
        pytest.skip("Chromium not found (/usr/bin/chromium); install the Debian package `chromium` to run this test")
    pytest.importorskip("playwright", reason="the Python package `playwright` is not installed")
    return {"path": chromium_path(), "args": list(CHROMIUM_ARGS)}


@pytest.fixture
def offline_browser(chromium):
    """`open_offline` (skipped, saying why, without Chromium or playwright)."""
    return open_offline


# -- the real engine (make test-engine) -----------------------------------------------------------------
@pytest.fixture(scope="session")
def vllm_cpu():
    """scripts/vllm_cpu.py, the harness that starts vLLM's CPU build from .venv-engine. Without the
    engine environment the engine tests skip with the command that builds it, except where the
    engine is required (`make test-engine` and CI set D2T_REQUIRE_ENGINE=1): there they fail."""
    return _engine_harness("vllm_cpu", "engine_python")


def _engine_harness(name: str, *checks: str):
    """scripts/NAME.py once each of its `checks` (functions raising its EngineMissing) passes; else skip with
    the command that builds the environment, or fail where the engine is required (D2T_REQUIRE_ENGINE=1)."""
    mod = script_module(name)
    try:
        for check in checks:
            getattr(mod, check)()
    except mod.EngineMissing as e:
        if os.environ.get("D2T_REQUIRE_ENGINE") == "1":
            pytest.fail(str(e))
        pytest.skip(str(e))
    return mod


@pytest.fixture(scope="session")
def llamacpp():
    """scripts/llamacpp.py, the harness that converts with llama.cpp's own converter and starts
    llama-server from .venv-llamacpp (built by `make engine-env`). Skips or fails as `vllm_cpu` does."""
    return _engine_harness("llamacpp", "llamacpp_python", "server_binary")


@pytest.fixture(scope="session")
def llamacpp_pair(llamacpp, tmp_path_factory):
    """The bundled tiny engine pair (data_samples/engine_llama) converted to GGUF by llama.cpp's own
    converter, in f32: {"target": Path, "draft": Path, "hf": the HF pair's folder}."""
    out = tmp_path_factory.mktemp("llamacpp-pair")
    pair = SAMPLES / "engine_llama"
    made = {"target": llamacpp.convert(pair / "target", out / "target.gguf"),
            "draft": llamacpp.convert(pair / "draft", out / "draft.gguf", target=pair / "target")}
    for what, c in made.items():
        assert c.ok, f"llama.cpp's converter refused the engine pair's {what}: {c.error}"
    return {"target": made["target"].path, "draft": made["draft"].path, "hf": pair}


class JSONHandler(BaseHTTPRequestHandler):
    """A quiet request handler for the tests' fake servers: `_send` writes a status and a body (bytes,
    text, or an object sent as JSON) with its Content-Type and Content-Length."""

    def log_message(self, *a):
        pass

    def _send(self, code, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class LoopbackServer:
    """A real HTTP server on a free loopback port, serving a `BaseHTTPRequestHandler` class in a thread for
    the `with` block (the replay and fake servers of the serving tests subclass it and call `serve`)."""

    def serve(self, handler) -> None:
        from http.server import ThreadingHTTPServer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        import threading

        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
