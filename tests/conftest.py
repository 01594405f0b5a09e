"""Shared fixtures: paths to the bundled samples, running the CLI, executing notebooks."""
from __future__ import annotations

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


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python -m helpers ARGS...` in a subprocess, as a user would."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", TQDM_DISABLE="1")
    return subprocess.run(
        [sys.executable, "-m", "helpers", *map(str, args)],
        capture_output=True, text=True, cwd=cwd or ROOT, env=env, timeout=timeout,
    )


@pytest.fixture(scope="session")
def cli():
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
