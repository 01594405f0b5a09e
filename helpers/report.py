"""The bug-report bundle: run the notebook sequence on one checkpoint and collect the results.

`run_report(checkpoint, out, samples=..., engine=...)` executes the notebooks with papermill
(passing the checkpoint, samples and a figures folder as parameters), exports each to HTML,
collects every figure as PNG with its metadata, and writes `summary.md` / `summary.json`: the
verdict, the doctor's findings, accuracy per reading, predicted and replayed accept length and
the environment. A notebook that fails is recorded with its error and the others still run.
It writes only under `out`.
"""
from __future__ import annotations

import base64
import json
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import BadInputError

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
# The report runs the investigation notebooks; the primer (00) teaches and the dashboard (05)
# needs a person at the controls, so neither belongs in a bundle.
SEQUENCE = (
    "01_mapping_inspection",
    "02_d2t_offset_histograms",
    "03_accuracy_with_and_without_mapping",
    "04_accept_length_simulation",
    "06_checkpoint_doctor",
)
# Which notebook parameter receives which report input (the first name a notebook declares wins).
PARAMETER_NAMES = {
    "checkpoint": ("checkpoint", "mapping_path", "checkpoint_path"),
    "samples": ("samples", "samples_dir"),
    "engine": ("engine",),
    "output_dir": ("output_dir",),
    "embed_from": ("embed_from",),
    "target_config": ("target_config",),
    "target_head": ("target_head",),
    # The notebooks compare with a bundled misencoded sample by default; in a report the
    # comparison is derived from the checkpoint itself (or skipped), so these are emptied.
    "misencoded": ("misencoded_path", "misencoded_checkpoint"),
    # a report never leaves a (possibly multi-GB) fixed copy of the checkpoint in the bundle
    "keep_fixed_copy": ("keep_fixed_copy",),
}


@dataclass
class NotebookRun:
    name: str
    ok: bool
    seconds: float
    error: str | None = None
    figures: list[str] = field(default_factory=list)
    html: str | None = None
    notebook: str | None = None


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

    from . import __version__

    cuda = torch.cuda.is_available()
    return {
        "d2t_lab": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
    }


def notebook_parameters(nb_path: Path, values: dict) -> dict:
    """Map the report's inputs (`PARAMETER_NAMES` keys; None becomes "", paths become strings)
    onto the parameter names this notebook declares."""
    import papermill as pm

    declared = pm.inspect_notebook(str(nb_path))
    params = {}
    for what, names in PARAMETER_NAMES.items():
        for name in names:
            if name in declared:
                value = values.get(what)
                params[name] = "" if value is None else str(value) if isinstance(value, Path) else value
    return params


def _error_line(exc) -> str:
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = getattr(exc, "evalue", str(exc))
    cell = getattr(exc, "exec_count", None)
    where = f" (cell {cell})" if cell is not None else ""
    return " ".join(f"{ename}: {evalue}".split()) + where


def _inline_figures(nb, dest: Path, stem: str, checkpoint) -> list[str]:
    """Write the inline PNGs of an executed notebook that saved no figure of its own.

    They get the same provenance metadata as `plots.save_figure` writes.
    """
    from PIL import Image, PngImagePlugin

    from .plots import METADATA_KEY, figure_metadata

    meta = None
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = o.get("data", {})
            if "image/png" not in data:
                continue
            if meta is None:
                try:
                    meta = figure_metadata(source=checkpoint)
                except (BadInputError, OSError):
                    meta = figure_metadata()
            p = dest / f"{stem}_inline_{len(out) + 1:02d}.png"
            p.write_bytes(base64.b64decode(data["image/png"]))
            info = PngImagePlugin.PngInfo()
            info.add_text(METADATA_KEY, json.dumps(meta, sort_keys=True))
            with Image.open(p) as im:
                im.load()
                im.save(p, pnginfo=info)
            out.append(str(p))
    return out


def run_notebook(name: str, out: Path, params_for, checkpoint, timeout: int = 600) -> NotebookRun:
    import nbformat
    import papermill as pm
    from nbconvert import HTMLExporter

    src = NOTEBOOK_DIR / f"{name}.ipynb"
    fig_dir = out / "figures" / name
    fig_dir.mkdir(parents=True, exist_ok=True)
    dest = out / "notebooks" / f"{name}.ipynb"
    dest.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    error = None
    if not src.exists():
        return NotebookRun(name, False, 0.0, error=f"notebook {src} not found")
    try:
        pm.execute_notebook(
            str(src), str(dest), parameters=params_for(src, str(fig_dir)), kernel_name="python3",
            cwd=str(NOTEBOOK_DIR), progress_bar=False, request_save_on_cell_execute=False,
            execution_timeout=timeout,
            # keep the kernels' start-up chatter (a transport warning per notebook) out of the
            # one-line-per-notebook progress
            extra_arguments=["--IPKernelApp.log_level=ERROR"],
        )
    except pm.PapermillExecutionError as e:
        error = _error_line(e)
    except Exception as e:  # a kernel that died, a timeout: record it, keep going with the rest
        error = _error_line(e)
    seconds = time.perf_counter() - t0
    run = NotebookRun(name, error is None, seconds, error=error)
    if dest.exists():
        nb = nbformat.read(str(dest), as_version=4)
        run.notebook = str(dest)
        html_dir = out / "html"
        html_dir.mkdir(exist_ok=True)
        body, _ = HTMLExporter().from_notebook_node(nb)
        (html_dir / f"{name}.html").write_text(body)
        run.html = str(html_dir / f"{name}.html")
        saved = sorted(str(p) for p in fig_dir.rglob("*.png") if "_inline_" not in p.name)
        run.figures = saved or _inline_figures(nb, fig_dir, name, checkpoint)
    return run


# -- the numbers for summary.md -------------------------------------------------------------------
def collect_numbers(checkpoint, samples, engine: str, max_samples: int | None = None, embed_from=None,
                    target_config=None) -> dict:
    """Verdict, doctor findings, accuracy per reading and accept length, each section guarded."""
    from .checkpoint import inspect_path

    numbers: dict = {"skipped": {}, "errors": {}}
    try:
        numbers["inspect"] = inspect_path(checkpoint)
    except BadInputError as e:
        numbers["errors"]["inspect"] = e.one_line()
    try:
        from .doctor import diagnose

        numbers["doctor"] = [f.as_dict() for f in diagnose(checkpoint, engine=engine, target_config=target_config)]
    except BadInputError as e:
        numbers["errors"]["doctor"] = e.one_line()
    if not samples:
        why = "no --samples given: the draft cannot be run without hidden states"
        numbers["skipped"]["accuracy"] = why
        numbers["skipped"]["replayed accept length"] = why
        return numbers
    try:
        from .draft import load_draft
        from .evaluate import evaluate

        model = load_draft(checkpoint, embed_from=embed_from)
        numbers["accuracy"] = evaluate(model, samples, steps=3, max_samples=max_samples, progress=False).to_dict()
        from .simulate import replay

        reps = {}
        for reading in ("offset", "absolute"):
            if model.mapping is None and reading != "none":
                continue
            reps[reading] = replay(model, samples, steps=5, reading=reading, max_samples=max_samples, progress=False).to_dict()
        numbers["replay"] = reps
        from .simulate import chain_expected

        top1 = (numbers["accuracy"].get("readings", {}).get("offset") or {}).get("top1")
        if top1 is not None:
            # per-token acceptance ~ step-0 top-1 accuracy; chain of 5, as replayed
            numbers["predicted_accept_length"] = {"accept_rate": top1, "draft_tokens": 5,
                                                  "expected": chain_expected(top1, 5)}
    except BadInputError as e:
        numbers["errors"]["accuracy"] = e.one_line()
    return numbers


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def summary_markdown(checkpoint, samples, engine, runs: list[NotebookRun], numbers: dict, env: dict) -> str:
    L = [f"# d2t-lab report: `{checkpoint}`", ""]
    L += [f"samples: `{samples or '(none)'}` · engine: {engine} · made {time.strftime('%Y-%m-%d %H:%M')}", ""]
    ins = numbers.get("inspect")
    L += ["## Verdict", ""]
    if ins:
        L.append(f"**{ins['verdict'].upper()}** — draft vocab {ins['draft_vocab_size']:,}, target vocab "
                 f"{ins['target_vocab_size'] if ins['target_vocab_size'] is None else format(ins['target_vocab_size'], ',')}, "
                 f"key layout {ins['key_layout']}")
        L.append("")
        L += [f"- {e}" for e in ins["evidence"]] + [f"- **{r}**" for r in ins["reasons"]]
    else:
        L.append(f"could not read the mapping: {numbers['errors'].get('inspect')}")
    L += ["", "## Doctor findings", ""]
    if "doctor" in numbers:
        if not numbers["doctor"]:
            L.append("no findings")
        else:
            L += ["| severity | code | what is wrong | how to fix |", "|---|---|---|---|"]
            L += [f"| {f['severity']} | `{f['code']}` | {f['message']} | {f['fix']} |" for f in numbers["doctor"]]
    else:
        L.append(f"doctor could not run: {numbers['errors'].get('doctor')}")
    L += ["", "## Accuracy per reading", ""]
    acc = numbers.get("accuracy")
    if acc:
        splits = acc.get("splits") or {"all": acc}
        L += ["| split | reading | top-1 | top-k | per step top-1 | tokens |", "|---|---|---|---|---|---|"]
        for split, res in splits.items():
            for reading, r in (res.get("readings") or {}).items():
                steps = ", ".join(_pct(x) for x in r.get("step_top1", []))
                L.append(f"| {split} | {reading} | {_pct(r.get('top1'))} | {_pct(r.get('topk'))} | {steps} | {res.get('tokens', '-')} |")
        if acc.get("conclusion"):
            L += ["", f"**Conclusion:** {acc['conclusion']}"]
        for w in acc.get("warnings", []):
            L.append(f"> warning: {w}")
    L += ["", "## Accept length", ""]
    rep = numbers.get("replay")
    if rep:
        L += ["| reading | replayed mean accept length (5 draft tokens, chain) | positions |", "|---|---|---|"]
        for reading, r in rep.items():
            L.append(f"| {reading} | {r['mean']:.2f} ± {r['stderr']:.2f} | {r['positions']:,} |")
        pred = numbers.get("predicted_accept_length")
        if pred:
            L.append(f"\npredicted (closed form, per-token acceptance = offset top-1 {_pct(pred['accept_rate'])}, "
                     f"{pred['draft_tokens']} draft tokens): **{pred['expected']:.2f}**")
    for what, why in numbers["skipped"].items():
        L.append(f"- skipped **{what}**: {why}")
    for what, err in numbers["errors"].items():
        if what not in ("inspect", "doctor"):
            L.append(f"- **{what}** failed: {err}")
    L += ["", "## Notebooks", "", "| notebook | result | seconds | figures |", "|---|---|---|---|"]
    for r in runs:
        res = "ok" if r.ok else f"FAILED: {r.error}"
        L.append(f"| {r.name} | {res} | {r.seconds:.1f} | {len(r.figures)} |")
    L += ["", "## Environment", ""] + [f"- {k}: {v}" for k, v in env.items()]
    return "\n".join(L) + "\n"


def _existing(path, what: str) -> Path | None:
    if not path:
        return None
    p = Path(path).resolve()
    if not p.exists():
        raise BadInputError(p, f"no such {what}")
    return p


def run_report(
    checkpoint,
    out,
    *,
    samples=None,
    engine: str = "all",
    embed_from=None,
    target_config=None,
    target_head=None,
    notebooks=SEQUENCE,
    max_samples: int | None = None,
    progress=print,
) -> ReportResult:
    checkpoint = _existing(checkpoint, "file or folder")
    if checkpoint is None:
        raise BadInputError(None, "no checkpoint given")
    samples = _existing(samples, "samples folder")
    embed_from = _existing(embed_from, "embed_tokens file or folder")
    target_config = _existing(target_config, "target config")
    target_head = _existing(target_head, "target head folder")
    out = Path(out).resolve()
    if out == checkpoint or checkpoint in out.parents or (samples is not None and (out == samples or samples in out.parents)):
        raise BadInputError(out, "the report must not be written inside the checkpoint or samples folder")
    out.mkdir(parents=True, exist_ok=True)

    values = {
        "checkpoint": checkpoint, "samples": samples, "engine": engine, "embed_from": embed_from,
        "target_config": target_config, "target_head": target_head, "misencoded": None,
        "keep_fixed_copy": False,
    }

    def params_for(nb_path, fig_dir):
        return notebook_parameters(nb_path, {**values, "output_dir": fig_dir})

    runs = []
    for i, name in enumerate(notebooks, 1):
        run = run_notebook(name, out, params_for, checkpoint)
        runs.append(run)
        if progress:
            status = "ok" if run.ok else f"FAILED ({run.error})"
            progress(f"[{i}/{len(notebooks)}] {name}: {status} in {run.seconds:.1f} s, {len(run.figures)} figure(s)")
    numbers = collect_numbers(checkpoint, samples, engine, max_samples=max_samples, embed_from=embed_from,
                              target_config=target_config)
    env = environment()
    summary = {
        "checkpoint": str(checkpoint), "samples": str(samples) if samples else None, "engine": engine,
        "notebooks": [asdict(r) for r in runs], "numbers": numbers, "environment": env,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    md = summary_markdown(checkpoint, samples, engine, runs, numbers, env)
    (out / "summary.md").write_text(md)
    return ReportResult(str(out), runs, str(out / "summary.md"), summary)
