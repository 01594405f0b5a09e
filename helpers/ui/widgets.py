"""ipywidgets front ends: pick a checkpoint and samples, press Run, see the draft's accuracy live.

`Dashboard` is a thin front over the library: every number it shows comes from a helper
(`helpers.io.checkpoint.find_checkpoints`, the `inspect` summary, `helpers.measure.evaluate.evaluate`,
`helpers.plots`); the widgets only collect arguments and lay out what the helpers return.

    from helpers.ui.widgets import Dashboard
    dash = Dashboard(root="../data_samples")
    dash.widget            # display this in a notebook cell
    dash.run()             # what the Run button calls; then dash.result / dash.error

Results and errors are written into `Output.outputs` directly, so the same code path works in a
kernel and in a plain Python process (the tests drive it with `dash.run_button.click()`); only
tqdm.auto's progress bars go through a `with output:` capture, into a separate Output shown
while `evaluate` runs. Bad input never raises out of a callback: the one-line
`BadInputError` message is shown in the output area and kept in `dash.error`; the controls stay
usable and the kernel lives.
"""
from __future__ import annotations

import html
import io
import os
import time
from pathlib import Path

import ipywidgets as W
import torch

from helpers.core.devices import get_device
from helpers.core.errors import BadInputError
from helpers.core.paths import find_samples
from helpers.core.terms import READINGS
from helpers.io.checkpoint import find_checkpoints
from helpers.io.samples import split_folders
from helpers.measure.evaluate import evaluate
from helpers.plots.accuracy import plot_accuracy, plot_step_accuracy
from helpers.ui.settings import RunSettings

DTYPES = ("auto", "float32", "bfloat16", "float16")
_SAMPLE_SUFFIXES = (".ckpt", ".ckpt.gz")


def _default_root() -> Path:
    """The bundled samples when they can be found, else the current folder (the root box is editable)."""
    return find_samples() or Path.cwd()


# -- listing what there is to pick ------------------------------------------------------------
def available_devices() -> list[str]:
    """Devices present on this machine, `get_device()`'s choice first (cuda, then mps, then cpu)."""
    devices = [str(get_device())]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(1, torch.cuda.device_count())]
    return list(dict.fromkeys(devices + ["cpu"]))


def find_sample_folders(root: str | os.PathLike, max_depth: int = 4) -> list[Path]:
    """Folders under `root` holding SpecForge hidden-state files (`rows_*/data_*.ckpt`).

    Lists the split folder (the parent of the `rows_*` folders, e.g. `.../val`) and, when the
    folder above holds both a train and a validation split (`samples.split_folders`), that one
    too: `evaluate` scores both splits side by side.
    """
    root = Path(root)
    found: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        depth = len(d.relative_to(root).parts)
        dirnames[:] = sorted(n for n in dirnames if not n.startswith(".")) if depth < max_depth else []
        if not any(f.startswith("data_") and f.endswith(_SAMPLE_SUFFIXES) for f in filenames):
            continue
        split = d.parent if d.name.startswith("rows_") else d
        found.add(split)
        if root in split.parent.parents and split_folders(split.parent):
            found.add(split.parent)
    return sorted(found)


def _as_html_pre(text: str) -> str:
    # pre-wrap: a long line wraps inside the summary's column instead of running past its right edge
    return ("<pre style='font-size:11px;line-height:1.3;margin:0;white-space:pre-wrap;overflow-wrap:anywhere'>"
            f"{html.escape(text)}</pre>")


def result_figure(result):
    """The dashboard's figure: accuracy per reading and split, and per step when steps > 1.

    A bare `matplotlib.figure.Figure` (not pyplot): nothing is shown or kept by the backend.
    """
    from matplotlib.figure import Figure

    n = 2 if result.steps > 1 else 1
    fig = Figure(figsize=(6.5 * n, 3.6), layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    plot_accuracy(result, ax=axes[0])
    if n == 2:
        plot_step_accuracy(result, ax=axes[1])
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()


def headline(result) -> str:
    """One HTML line per scored reading (pooled over splits), then the result's warnings.

    (No `result.conclusion()`: the dashboard scores one reading at a time, and the conclusion
    compares readings; call `evaluate` with all three readings for it, as notebook 05 does.)
    """
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f} %"  # noqa: E731
    sc = result.overall
    lines = [
        f"<b>{html.escape(r)}</b> reading: top-1 <b>{pct(s.top1)}</b>, top-{result.topk} {pct(s.topk)} "
        f"on {s.tokens:,} tokens from {sc.samples} samples ({html.escape(result.device)}, {html.escape(result.dtype)})"
        for r, s in sc.readings.items()
    ]
    pred = prediction_line(result)
    if pred:
        lines.append(pred)
    lines += [f"<span style='color:#b60'>{html.escape(w)}</span>" for w in result.warnings]
    return "<br>".join(lines)


def prediction_line(result) -> str | None:
    """The accept length the result's rank table predicts for a chain of its steps (the prediction
    notebook 04 and the report show, `EvalResult.prediction`), with what it assumes; None when
    nothing was scored."""
    from helpers.acceptance.drafting import Drafting

    try:
        p = result.prediction(Drafting(result.steps))
    except ValueError:
        return None
    return (f"{html.escape(p.text())}; it assumes {html.escape(', '.join(p.assumptions))} "
            "(check it with the target in the loop: speculate mode)")


def speculate_ladder(runs: dict, serving: float):
    """The evidence ladder (`helpers.speculate.ladder`) for speculate mode: the serving accept length
    typed in (0: none) against the loop's run with the engines' reading, on the same chain."""
    from helpers.speculate.ladder import Figure, evidence_ladder, figure_from_run

    ref = next((r for r in ("offset", "none") if r in runs), None)
    if ref is None:
        return None
    run = runs[ref]
    ef = figure_from_run(run.to_dict(prompts=False), f"engine-free, this prompt, {ref} reading")
    fig = Figure(serving, None, "serving, as typed in", ef.shape) if serving >= 1.0 else None
    return evidence_ladder(serving=fig, engine_free=ef, per_position=run.per_position_conditional)


def ladder_html(ladder) -> str:
    """The ladder's conclusion and rungs as HTML lines."""
    lines = ladder.lines()
    return "<b>" + html.escape(lines[0]) + "</b><br>" + "<br>".join(html.escape(x) for x in lines[1:])


# -- the dashboard ----------------------------------------------------------------------------
class Dashboard:
    """Checkpoint + samples pickers, device/dtype/reading/steps controls, Run, output area."""

    HINT_AFTER_S = 60.0  # say how long the whole folder would take when that is longer than this

    def __init__(self, root: str | os.PathLike | None = None, settings: RunSettings | None = None, *,
                 checkpoint: str | os.PathLike | None = None, samples: str | os.PathLike | None = None,
                 target: str | os.PathLike | None = None, mode: str = "accuracy", reading: str = "offset",
                 prompt: str | None = None):
        """`settings`: the starting values, a `helpers.ui.settings.RunSettings` (the names every notebook
        and the report use; default `RunSettings()`): checkpoint, samples, embed_from, device (None: the
        best present), dtype (None: "auto"), max_samples, steps, target, engine (whose aux-layer convention
        speculate mode feeds the draft; 'all': the speculate builder's) and max_new_tokens. Its `steps` is
        accuracy mode's scored steps and speculate mode's chain, so both start from the kit's one default
        shape, the speculate builder's chain (a tree is refused in one line: the dashboard drafts chains).
        `checkpoint`, `samples`, `target`: the paths most calls name, each replacing the settings' own.
        `mode`, `reading` and `prompt` are the dashboard's alone. `dash.settings()` reads the controls
        back as a `RunSettings`."""
        s = (settings or RunSettings()).with_(**{name: str(value) for name, value in (
            ("checkpoint", checkpoint), ("samples", samples), ("target", target)) if value is not None})
        if s.topk != 1:
            raise BadInputError(None, f"topk {s.topk}: the dashboard drafts a chain (vLLM num_speculative_tokens K), "
                                      "not a tree")
        self.result = None  # last EvalResult, or None
        self.ladder = None  # speculate mode: the evidence ladder of the last run, or None
        self.hint = None  # after a run: how long the whole folder would take, and with torchrun
        self.error: str | None = None  # last one-line error, or None
        self.figure_png: bytes | None = None  # last figure, as PNG bytes
        self._make_inputs(Path(root) if root is not None else _default_root(), s, reading)
        self._make_outputs()
        from helpers.ui.spec_panel import SpeculatePanel

        self.spec = SpeculatePanel(s.target, prompt, s.max_new_tokens, s.steps, s.engine)
        self.mode = W.ToggleButtons(options=("accuracy", "speculate"), value=mode, description="mode",
                                    style={"description_width": "110px", "button_width": "90px"},
                                    tooltips=["the draft's accuracy on the samples",
                                              "speculative decoding of the prompt with the target, token by token"])
        self.mode.add_class("d2t-mode")
        self.mode.observe(lambda _: self._show_mode(), names="value")
        self.root.observe(lambda _: self.rescan(), names="value")
        self.checkpoint.observe(lambda _: self.show_summary(), names="value")
        self.run_button.on_click(lambda _: self.run())

        controls = W.VBox([
            self.mode, self.root, self.checkpoint, self.embed_from, self.samples,
            W.HBox([self.device, self.dtype]),
            self.reading,
            W.HBox([self.max_samples, self.steps]),
            self.spec.controls,
            self.serving,
            W.HBox([self.run_button, self.status]),
        ])
        self.widget = W.VBox([
            W.HTML("<b>EAGLE-3 draft: live forward pass</b>"),
            W.HBox([controls, self.summary], layout=W.Layout(flex_flow="row wrap", align_items="flex-start",
                                                             width="100%")),
            self.progress,
            self.spec.live,
            self.output,
        ])
        self.widget.add_class("d2t-dashboard")

        self.rescan()  # nothing is preselected unless asked: the first folder found may be no draft
        self.checkpoint.value = s.checkpoint or ""
        self.samples.value = s.samples or ""
        self._show_mode()

    def _show_mode(self) -> None:
        """Speculate mode shows the target and prompt controls instead of the samples picker."""
        spec = self.mode.value == "speculate"
        self.spec.controls.layout.display = None if spec else "none"
        self.serving.layout.display = None if spec else "none"
        self.samples.layout.display = "none" if spec else None
        self.steps.layout.display = "none" if spec else None  # speculate mode: the panel's drafted tokens
        self.run_button.tooltip = ("decode the prompt with the target verifying the draft, two readings side by side"
                                   if spec else "load the draft, run it on the samples, show accuracy")

    def _make_inputs(self, root: Path, s: RunSettings, reading: str) -> None:
        """The pickers and settings (left column), set to `s`'s values and `reading`."""
        style = {"description_width": "110px"}
        wide = W.Layout(width="460px")

        self.root = W.Text(value=str(root), description="root folder", style=style, layout=wide,
                           continuous_update=False)
        self.checkpoint = W.Combobox(description="checkpoint", placeholder="pick or type a path",
                                     ensure_option=False, continuous_update=False, style=style, layout=wide)
        self.embed_from = W.Combobox(description="embed from", value=s.embed_from or "",
                                     placeholder="only for drafts without embed_tokens: the target",
                                     ensure_option=False, continuous_update=False, style=style, layout=wide)
        self.samples = W.Combobox(description="samples", placeholder="pick or type a folder",  # own layout: hidden
                                  ensure_option=False, continuous_update=False, style=style,  # in speculate mode
                                  layout=W.Layout(width=wide.width))
        devices = available_devices()
        self.device = W.Dropdown(options=devices, value=s.device if s.device in devices else devices[0],
                                 description="device", style=style, layout=W.Layout(width="240px"))
        self.dtype = W.Dropdown(options=DTYPES, value=s.dtype or "auto", description="dtype",
                                style={"description_width": "50px"}, layout=W.Layout(width="210px"))
        self.reading = W.ToggleButtons(options=READINGS, value=reading, description="d2t reading",
                                       style={**style, "button_width": "90px"},
                                       tooltips=["target = i + d2t[i] (what the engines do)",
                                                 "target = d2t[i] (the common bug)",
                                                 "target = draft id (no mapping)"])
        self.max_samples = W.BoundedIntText(value=s.max_samples or 0, min=0, max=1_000_000,
                                            description="max samples", style=style,
                                            layout=W.Layout(width="240px"),
                                            tooltip="0 = every sample in the folder")
        self.serving = W.BoundedFloatText(value=0.0, min=0.0, max=1000.0, step=0.01, description="serving accept len",
                                          style=style, layout=W.Layout(width="300px"),
                                          tooltip="the accept length your server reports for the same drafting "
                                                  "(0: not given); speculate mode weighs it against the loop's")
        self.steps = W.IntSlider(value=s.steps, min=1, max=8, description="draft steps",
                                 style={"description_width": "80px"}, layout=W.Layout(width="300px"))

    def _make_outputs(self) -> None:
        """The Run button, status, inspect summary, progress and output area."""
        self.run_button = W.Button(description="Run", button_style="primary", icon="play",
                                   tooltip="load the draft, run it on the samples, show accuracy")
        self.status = W.Label(value="")
        # shrinks with the window (min_width 0 lets a flex item narrower than its text); wraps below the
        # controls when there is less than 320 px beside them
        self.summary = W.HTML(value="", layout=W.Layout(flex="1 1 320px", min_width="0", max_width="100%",
                                                        overflow="auto"))
        self.progress = W.VBox()  # holds a fresh Output for tqdm's bars while evaluate runs
        self.output = W.Output(layout=W.Layout(border="1px solid #ddd", padding="4px", min_height="40px"))
        for w, cls in ((self.run_button, "d2t-run"), (self.output, "d2t-output"),
                       (self.summary, "d2t-summary"), (self.status, "d2t-status"),
                       (self.progress, "d2t-progress")):
            w.add_class(cls)

    def _ipython_display_(self):  # `dash` alone in a cell shows the dashboard
        from IPython.display import display

        display(self.widget)

    # -- callbacks ------------------------------------------------------------------------------
    def rescan(self) -> None:
        """List the checkpoints and sample folders under the root folder."""
        root = Path(self.root.value).expanduser()
        self.checkpoint.options = tuple(str(p) for p in find_checkpoints(root)) if root.is_dir() else ()
        self.samples.options = tuple(str(p) for p in find_sample_folders(root)) if root.is_dir() else ()
        self.embed_from.options = self.checkpoint.options
        self.spec.rescan(root)

    def show_summary(self) -> None:
        """Show the `inspect` summary (verdict, sizes, key layout) of the chosen checkpoint."""
        path = self.checkpoint.value.strip()
        if not path:
            self.summary.value = ""
            return
        try:
            from helpers.doctor.inspection import inspect

            self.summary.value = _as_html_pre(inspect(path).report())
        except BadInputError as e:
            self.summary.value = f"<span style='color:#b00'>{html.escape(e.one_line())}</span>"

    def _show_error(self, line: str) -> None:
        self.error, self.result = line, None
        self.output.outputs = ()
        self.output.append_stderr(line + "\n")

    def settings(self) -> RunSettings:
        """The controls as a `RunSettings` (the names every notebook and the report use; what
        `Dashboard(root, settings)` starts from): `steps` is the shown mode's (the draft steps slider,
        or speculate mode's drafted tokens)."""
        path = lambda w: os.path.expanduser(w.value.strip()) if w.value.strip() else None  # noqa: E731
        steps = self.spec.drafted if self.mode.value == "speculate" else self.steps
        return RunSettings(checkpoint=path(self.checkpoint), samples=path(self.samples), steps=int(steps.value),
                           device=self.device.value, dtype=None if self.dtype.value == "auto" else self.dtype.value,
                           max_samples=int(self.max_samples.value) or None, embed_from=path(self.embed_from),
                           target=path(self.spec.target), engine=self.spec.engine.value,
                           max_new_tokens=int(self.spec.max_new_tokens.value))

    def kwargs(self) -> dict:
        """The arguments `evaluate` gets from the controls: the settings' ones and the reading."""
        s = self.settings()
        kw = {**s.evaluate_kwargs(), "checkpoint": s.checkpoint or "", "samples": s.samples or ""}
        kw.pop("target_head")
        return {**kw, "readings": (self.reading.value,)}

    def run(self) -> None:
        """What the Run button does: evaluate with the chosen settings, show table and figure."""
        self.run_button.disabled = True
        self.status.value = "running..."
        self.error = None
        t0 = time.perf_counter()
        try:
            args = self.kwargs()
            spec = self.mode.value == "speculate"
            for name in ("checkpoint",) if spec else ("checkpoint", "samples"):
                if not args[name]:
                    raise BadInputError(None, f"choose a {name} first")
            from helpers.model.preflight import Door, Inputs, preflight

            target = self.spec.target.value.strip() or None if spec else None
            preflight(Inputs(checkpoint=args["checkpoint"], embed_from=args["embed_from"], target=target,
                                samples=None if spec else args["samples"]),
                      Door(what="the dashboard", target_flag="target", need_weights=True,
                           fit=bool(target)))  # the door, before the draft loads
            self.output.outputs = ()
            if self.mode.value == "speculate":
                self._speculate(args)
            else:
                self.spec.live.children = ()
                result = self._evaluate(args)
                self.result = result
                self._show_result(result)
                self._torchrun_hint(args["samples"], result, time.perf_counter() - t0)
            self.status.value = f"done in {time.perf_counter() - t0:.1f} s" + (f"; {self.hint}" if self.hint else "")
        except BadInputError as e:
            self._show_error(e.one_line())
            self.status.value = "error"
        except (RuntimeError, MemoryError, OSError, ValueError) as e:  # e.g. CUDA OOM, shape errors
            first = (str(e).strip().splitlines() or [""])[0]
            self._show_error(f"{type(e).__name__}: {first}")
            self.status.value = "error"
        finally:
            self.run_button.disabled = False

    def _speculate(self, args: dict) -> None:
        """Speculate mode: the panel streams the token view; the headline goes to the output area."""
        from IPython.display import HTML

        headline = self.spec.run(args["checkpoint"], device=args["device"], dtype=args["dtype"],
                                 embed_from=args["embed_from"], reading=self.reading.value)
        self.result = self.spec.runs
        self.output.outputs = ()
        self.output.append_display_data(HTML(headline))
        self.ladder = speculate_ladder(self.spec.runs, float(self.serving.value or 0.0))
        if self.ladder is not None:
            self.output.append_display_data(HTML(ladder_html(self.ladder)))

    def _evaluate(self, args: dict):
        """`evaluate(**args)`, with tqdm.auto's progress bars shown above the output area.

        The bars are captured (`with bars:`) into a fresh `Output` that is dropped afterwards:
        an Output the frontend captures into syncs its outputs back, and ipywidgets 8 echoes
        that back late, so the results area itself is only ever set from the kernel. The
        capture shows and swallows exceptions raised inside it, so the exception is carried out
        of the block and raised again for `run` to show as one line.
        """
        bars = W.Output()
        self.progress.children = (bars,)
        failure = None
        try:
            with bars:
                try:
                    result = evaluate(**args, progress=True)
                except Exception as e:  # noqa: BLE001 - re-raised below, outside the capture
                    failure = e
        finally:
            self.progress.children = ()
        if failure is not None:
            raise failure
        return result

    def _torchrun_hint(self, samples, result, seconds: float) -> None:
        """For the status line: how long all the folder's samples would take, and with torchrun."""
        from helpers.core.distributed import torchrun_hint
        from helpers.io.samples import sample_files, split_folders

        try:
            total = sum(len(sample_files(f)) for f in (split_folders(samples) or {"all": samples}).values())
        except BadInputError:
            return
        self.hint = torchrun_hint(total, result.overall.samples, seconds, worth=self.HINT_AFTER_S)

    def _show_result(self, result) -> None:
        from IPython.display import HTML, Image

        self.figure_png = _png(result_figure(result))
        self.output.outputs = ()
        self.output.append_display_data(HTML(headline(result)))
        self.output.append_display_data(result.table())
        self.output.append_display_data(Image(data=self.figure_png, format="png"))
