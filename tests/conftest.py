"""Shared fixtures: paths to the bundled samples, running the CLI, executing notebooks.

`cli(...)` calls the command line in this process (`helpers.__main__.main`, output captured), which
is what most tests need and costs no interpreter start; `cli_subprocess(...)` runs
`python -m helpers` in a fresh process, as a user would, for the tests about the entry point
itself. Both return a `subprocess.CompletedProcess` (returncode, stdout, stderr).
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data_samples"
NOTEBOOKS = ROOT / "notebooks"


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    return SAMPLES


@pytest.fixture(scope="session")
def notebooks_dir() -> Path:
    return NOTEBOOKS


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
