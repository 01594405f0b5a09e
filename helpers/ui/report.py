"""The bug-report bundle: run the notebook sequence on one checkpoint and collect the results.

`run_report(settings, out)` validates every input first (a bad one is one `BadInputError`
line before any notebook starts), runs the notebooks with papermill, passing each the same
`RunSettings` under the same parameter names, exports each to HTML, and writes `summary.md` /
`summary.json`. The summary computes nothing of its own beyond the mapping verdict: it quotes the
numbers each notebook recorded (`helpers.ui.notebook.Outputs.record`), so a bundle never shows one
quantity with two values. Nothing but the user's inputs is read: every notebook parameter that
points at bundled sample data by default is overridden with the user's value or with None, and
a section whose input was not given says so and how to give it. A notebook that fails is
recorded with its error and the others still run. It writes only under `out`.

With --target, every check the standalone commands make runs before the first notebook: what
`speculate` refuses (the target's family, vocab, hidden size, the draft's embed_tokens against the
target's, from the files: `helpers.model.fit.check_target_fit`), the samples against the
draft and target their capture.json names (`check_samples`), and the doctor with the target, whose
errors follow the headline of the summary's conclusion (`target_doctor`). A conflict between
drafting flags and a log's start-up line (`helpers.commands.report`) is quoted there too
(`drafting_conflict`).
"""
from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from helpers.core.errors import BadInputError
from helpers.core.paths import checkout_root
from helpers.ui.notebook import DOCTOR, SEQUENCE, SPECULATE, read_numbers
from helpers.ui.settings import RunSettings, note_defaults


def notebook_dir() -> Path:
    """The notebooks: the checkout's notebooks/ folder, or the copy installed with the package."""
    checkout = checkout_root()
    if checkout is not None and (checkout / "notebooks").is_dir():
        return checkout / "notebooks"
    from importlib.util import find_spec

    spec = find_spec("helpers._notebooks")  # a namespace package: package data, no __init__.py
    return Path(next(iter(spec.submodule_search_locations)))


NOTEBOOK_DIR = notebook_dir()
# The notebooks it runs: `helpers.ui.notebook.SEQUENCE` (and SPECULATE with a target).
# Notebook parameters that only exist for a notebook opened by hand; in a report they take these
# values, so nothing is compared with bundled samples and no fixed copy is written.
REPORT_ONLY = {"write_fixed_copy": False, "accept_rate": None, "mapping_path": None, "misencoded_path": None,
               "misencoded_checkpoint": None}


@dataclass
class NotebookRun:
    name: str
    ok: bool
    seconds: float
    error: str | None = None
    figures: list[str] = field(default_factory=list)
    html: str | None = None
    notebook: str | None = None
    numbers: dict = field(default_factory=dict)


@dataclass
class ReportResult:
    out: str
    runs: list[NotebookRun]
    summary_path: str
    summary: dict

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)


def environment() -> dict:
    import torch

    from helpers import __version__

    cuda = torch.cuda.is_available()
    return {
        "d2t_lab": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
    }


def _error_line(exc) -> str:
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = getattr(exc, "evalue", str(exc))
    cell = getattr(exc, "exec_count", None)
    where = f" (cell {cell})" if cell is not None else ""
    return " ".join(f"{ename}: {evalue}".split()) + where


def run_notebook(name: str, out: Path, parameters: dict, timeout: int = 3600) -> NotebookRun:
    """Execute one notebook into `out/notebooks`, export it to `out/html`, collect what it saved."""
    import nbformat
    import papermill as pm

    from helpers.ui.html_export import write_notebook_html

    src = NOTEBOOK_DIR / f"{name}.ipynb"
    fig_dir = out / "figures" / name
    dest = out / "notebooks" / f"{name}.ipynb"
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not src.exists():
        return NotebookRun(name, False, 0.0, error=f"notebook {src} not found")
    t0 = time.perf_counter()
    error = None
    try:
        pm.execute_notebook(
            str(src), str(dest), parameters={**parameters, "output_dir": str(fig_dir)}, kernel_name="python3",
            cwd=str(NOTEBOOK_DIR), progress_bar=False, request_save_on_cell_execute=False,
            execution_timeout=timeout,
            # keep the kernels' start-up and shutdown chatter out of the one-line-per-notebook progress
            extra_arguments=["--IPKernelApp.log_level=CRITICAL"],
        )
    except Exception as e:  # a failed cell, a kernel that died, a timeout: record it, go on with the rest
        error = _error_line(e)
    run = NotebookRun(name, error is None, time.perf_counter() - t0, error=error)
    if dest.exists():
        nb = nbformat.read(str(dest), as_version=4)
        _drop_defaults(nb)
        nbformat.write(nb, str(dest))
        run.notebook = str(dest)
        (out / "html").mkdir(exist_ok=True)
        run.html = str(write_notebook_html(nb, out / "html" / f"{name}.html"))
        run.figures = sorted(str(p) for p in fig_dir.glob("*.png")) if fig_dir.is_dir() else []
        run.numbers = read_numbers(fig_dir) if fig_dir.is_dir() else {}
    return run


def _drop_defaults(nb) -> None:
    """Blank the notebook's own `parameters` cell (its defaults for a run by hand name bundled
    samples); papermill's injected cell after it holds every value this run used."""
    for cell in nb.cells:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            cell.source = "# The defaults for a run by hand are replaced by this report's values (next cell)."


def all_parameters(declared: dict, values: dict) -> dict:
    """`values` plus the notebook's own default for every other parameter it declares, so the
    injected cell alone defines them all (the defaults cell is blanked in the bundle)."""
    import ast

    out = dict(values)
    for name, info in declared.items():
        if name not in out:
            try:
                out[name] = ast.literal_eval(info["default"])
            except (ValueError, SyntaxError):
                pass  # not a literal: the notebook's default stays in effect
    return out


# -- inputs, checked before anything runs ----------------------------------------------------------
def _existing(path, what: str) -> str | None:
    if path is None or str(path) == "":
        return None
    from helpers.io.origin import Origin  # the remote layer: imported when a report checks its inputs

    if Origin(path).is_remote:  # hf:// or http(s)://: read where it lives (helpers.io.remote)
        return str(path).strip()
    p = Path(path).resolve()
    if not p.exists():
        raise BadInputError(p, f"no such {what}")
    return str(p)


def _check_samples(samples: str, aux_width: int | None) -> None:
    from helpers.io.samples import load_sample, sample_files, split_folders

    for folder in (split_folders(samples) or {"all": samples}).values():
        files = sample_files(folder)
        load_sample(files[0], expect_aux_width=aux_width)


def _aux_width(checkpoint: str) -> int | None:
    from helpers.io.checkpoint import open_checkpoint
    from helpers.io.configs import flat_config

    ck = open_checkpoint(checkpoint)
    cfg = flat_config(ck.config) if ck.config else {}
    h = cfg.get("target_hidden_size") or cfg.get("hidden_size")
    return 3 * h if isinstance(h, int) and h > 0 else None


def serving_inputs(logs, metrics: str | None, checkpoint: str | None, engine: str = "all") -> list[str]:
    """The --log files and a --metrics file, before any notebook: a forced-acceptance one is refused
    (BadInputError, one line); the eagle3-as-eagle finding of each log's algorithm against the
    checkpoint (`helpers.doctor.served_algorithm`) comes back as lines to print."""
    from helpers.doctor.served_algorithm import algorithm_findings, finding_lines
    from helpers.serving.startup import forced_line, read_setup

    lines = []
    for log in logs:
        if not Path(log).is_file():
            continue  # the report's own check names a missing path
        setup = read_setup(log)
        if setup.forced:
            raise BadInputError(log, forced_line(setup.forced) + " (drop this --log)")
        found = algorithm_findings(setup, checkpoint, engine)
        if found:
            lines += [f"{log}:", *finding_lines(found)]
    if metrics and Path(metrics).is_file():
        from helpers.serving.metrics import read_metrics

        table = read_metrics(metrics)
        if table.forced:
            raise BadInputError(metrics, forced_line(table.forced) + " (drop --metrics)")
    return lines


def validate(settings: RunSettings) -> RunSettings:
    """Every input checked and paths made absolute; a bad one raises one `BadInputError` line."""
    from helpers.core.devices import parse_dtype, resolve_device
    from helpers.doctor.inspection import inspect_path
    from helpers.model.preflight import Door, Inputs, preflight
    from helpers.serving.logs import read_log

    s = settings
    if not s.checkpoint:
        raise BadInputError(None, "no checkpoint given")
    if s.target and not s.prompts:
        raise BadInputError(None, "--target needs --prompts FILE (the prompts to run speculative decoding on)")
    if s.prompts and not s.target:
        raise BadInputError(None, "--prompts needs --target DIR (the Hugging Face target that verifies the draft)")
    for name in ("max_samples", "max_prompts", "max_new_tokens", "batch_size"):
        value = getattr(s, name)
        if value is not None and value < 1:
            raise BadInputError(None, f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if not s.temperature >= 0:
        raise BadInputError(None, f"--temperature must be 0 or more, got {s.temperature}")
    # the door every front end shares: paths, prompt records, the draft's fit to the target (notebook 07
    # runs the draft, so it needs its weights), --target and --target-config not both
    c = preflight(s.inputs(),
                  Door(what="the report's notebook 07", need_weights=bool(s.target), fit=bool(s.target)))
    checkpoint = c.checkpoint
    inspect_path(checkpoint)  # the mapping reads (or the one line says why not)
    paths = {"samples": c.samples, "embed_from": c.embed_from, "target_head": c.target_head, "target": c.target,
             "prompts": c.prompts, "target_config": c.target_config}
    logs = tuple(_existing(p, "log file") for p in s.logs)
    for p in logs:
        read_log(p)  # a file with no line the kit reads is refused here, not in notebook 04
    if paths["samples"]:
        _check_samples(paths["samples"], _aux_width(checkpoint))
    if paths["samples"] or paths["target"]:  # notebooks 03/04/07 load the draft: the loader's config checks now
        from helpers.model.draft import estimate_load_bytes

        estimate_load_bytes(c.opened or checkpoint, embed_from=paths["embed_from"])
    if paths["target"]:  # what `speculate` checks before and after loading the pair, from the files alone
        from helpers.model.fit import check_target_fit
        from helpers.model.target import check_speculation_config

        check_speculation_config(paths["target"], c.target_cfg)
        check_target_fit(c.opened, paths["target"], c.target_cfg, shown=s.checkpoint)
    if paths["samples"]:  # samples captured from another target than the draft's or --target (their capture.json)
        from helpers.model.preflight import check_samples

        check_samples(checkpoint, paths["samples"], target=paths["target"], opened=c.opened)
    if s.device:
        resolve_device(s.device)
    if s.dtype:
        try:
            parse_dtype(s.dtype)
        except ValueError as e:
            raise BadInputError(None, f"--dtype: {e}") from None
    for name in ("baseline_tps", "spec_tps"):
        value = getattr(s, name)
        if value is not None and not value > 0:
            raise BadInputError(None, f"--{name.replace('_', '-')} must be a positive tokens/s figure, got {value}")
    metrics = s.metrics
    if metrics:
        from helpers.serving.metrics import is_url, read_metrics

        metrics = metrics if is_url(metrics) else _existing(metrics, "metrics file")
        read_metrics(metrics)  # a source with no figure that reads is refused here, not in notebook 04
    return s.with_(checkpoint=checkpoint, logs=logs, metrics=metrics, **paths)


def _check_out(out: Path, s: RunSettings) -> None:
    for name in ("checkpoint", "samples", "target"):
        p = getattr(s, name)
        if p and (out == Path(p) or Path(p) in out.parents):
            raise BadInputError(out, "the report must not be written inside the checkpoint or samples folder")
    if out.exists() and not out.is_dir():
        raise BadInputError(out, "exists and is not a folder")


def target_doctor(s: RunSettings) -> list[str]:
    """The doctor with --target (`d2t-lab doctor CHECKPOINT --target T`: the target's config and
    embed_tokens), run before any notebook: its errors, one line each (notebook 06 checks the
    target's config only, so the summary would not show them otherwise)."""
    if not s.target:
        return []
    from helpers.doctor.diagnose import diagnose

    found = diagnose(s.checkpoint, s.engine, s.target_config or None, check_weights=False, target=s.target)
    return [f"doctor --target {s.target}: error {f.code}: {f.message}" for f in found if f.severity == "error"]


def run_report(settings: RunSettings, out, *, notebooks=SEQUENCE, progress=print) -> ReportResult:
    """Validate `settings`, run `notebooks` on them into `out`, write summary.md / summary.json."""
    from helpers.ui.summary import summary_dict, summary_markdown

    s = note_defaults(validate(settings))  # the summary says where the default shape stands in
    if s.target and SPECULATE not in notebooks:
        notebooks = (*notebooks, SPECULATE)
    out = Path(out).resolve()
    _check_out(out, s)
    doctor_lines = target_doctor(s)  # before any notebook, as the standalone doctor would say it
    for line in doctor_lines if progress else ():
        progress(line)
    out.mkdir(parents=True, exist_ok=True)
    import papermill as pm

    runs = []
    for i, name in enumerate(notebooks, 1):
        src = NOTEBOOK_DIR / f"{name}.ipynb"
        declared = pm.inspect_notebook(str(src)) if src.exists() else {}
        params = all_parameters(declared, s.notebook_parameters(declared, **REPORT_ONLY))
        if name == DOCTOR and s.target and not s.target_config:  # the doctor checks against --target's config
            params["target_config"] = s.target
        if name == SPECULATE and "max_samples" in params:  # 07's older name for max_prompts: not files per split
            params["max_samples"] = None
        run = run_notebook(name, out, params)
        runs.append(run)
        if progress:
            status = "ok" if run.ok else f"FAILED ({run.error})"
            progress(f"[{i}/{len(notebooks)}] {name}: {status} in {run.seconds:.1f} s, {len(run.figures)} figure(s)")
    env = environment()
    summary = summary_dict(s, runs, env)
    # what the checks before the notebooks found, right after the headline (conclusion[0] stays the verdict)
    conflict = s.sources.get("drafting_conflict")  # flags against a log's start-up line (commands/report.py)
    if conflict:
        summary["drafting_conflict"] = conflict
    if s.target:
        summary["target_doctor"] = doctor_lines
    found = ([conflict] if conflict else []) + doctor_lines
    if found:
        head = list(summary.get("conclusion") or [])
        summary["conclusion"] = head[:1] + found + head[1:]
    summary["notebooks"] = [asdict(r) for r in runs]
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "summary.md").write_text(summary_markdown(s, runs, summary, env))
    return ReportResult(str(out), runs, str(out / "summary.md"), summary)
