"""Notebook conveniences: one call at the top of every notebook.

`setup()` makes a `BadInputError` show as one readable line instead of a traceback (the cell
still fails, so papermill and `report` see the failure), sets the kit's plot style when
`helpers.plots` provides one, and checks the notebook's input parameters at the door
(`helpers.model.preflight`, the same checks the CLI and the report run): called after the
`parameters` cell, it reads `checkpoint`, `target`, `target_config`, `prompts`, `embed_from`,
`target_head` and `max_prompts` from the notebook's namespace (or takes them as keywords), so a
bad path or prompt file is one line in the first cell, before anything heavy loads.
"""
from __future__ import annotations

from helpers.core.errors import BadInputError


def _one_line(shell, etype, value, tb, tb_offset=None):  # IPython custom-exception signature
    """Show the error as an ordinary error output whose whole traceback is one line."""
    msg = f"BadInputError: {value}"
    shell._showtraceback(etype, value, [msg])
    return [msg]


# The numbered notebooks a report runs (`helpers.ui.report.run_report`); the primer (00) teaches and
# the dashboard (05) needs a person at the controls, so neither belongs in a bundle. With a target
# (--target and --prompts) the report also runs speculative decoding with it (07).
SEQUENCE = (
    "01_mapping_inspection",
    "02_d2t_offset_histograms",
    "03_accuracy_with_and_without_mapping",
    "04_accept_length_simulation",
    "06_checkpoint_doctor",
)
SPECULATE = "07_speculative_decoding"
DOCTOR = "06_checkpoint_doctor"

CHECKED = ("checkpoint", "target", "target_config", "prompts", "embed_from", "target_head", "max_prompts")


def setup(*, notebook: str | None = None, **inputs) -> None:
    """Install the one-line error display in the running IPython kernel (no-op elsewhere), then
    check the parameters: every one `helpers.ui.parameters.RULES` knows by name (type, range,
    choices, lists, the drafting shape; `notebook` ("05", "07", "08") for one whose parameter
    means something else under a shared name: `helpers.ui.parameters.NOTEBOOKS`), then the input paths (keywords, else the notebook's own `CHECKED` names).
    A bad one is one line naming the parameter."""
    from helpers.ui.parameters import NOTEBOOKS, check_values, declared_values

    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        get_ipython = None
    ip = get_ipython() if get_ipython else None
    if ip is not None:
        ip.set_custom_exc((BadInputError,), _one_line)
    values = dict(inputs) if inputs or ip is None else declared_values(ip.user_ns)
    own = NOTEBOOKS.get(notebook or "", {})
    check_values(values, own.get("rules"), shape_alone=own.get("shape_alone", False))
    if not inputs and ip is not None:
        inputs = {k: ip.user_ns[k] for k in CHECKED if k in ip.user_ns}
    check_parameters(**inputs)
    try:
        from helpers.plots.style import set_style

        set_style()
    except ImportError:
        pass


def check_parameters(*, checkpoint=None, target=None, target_config=None, prompts=None, embed_from=None,
                     target_head=None, max_prompts=None, **_ignored) -> None:
    """A notebook's inputs at the door. Only string paths are checked (a notebook may hold other
    objects under these names); with a target and prompts (notebook 07) the draft must be whole
    and fit the target."""
    from helpers.model.preflight import Door, Inputs, preflight

    def s(x):
        return x if isinstance(x, str) and x.strip() else None

    runs_draft = bool(s(target) and s(prompts) and s(checkpoint))
    preflight(Inputs(checkpoint=s(checkpoint), target=s(target), target_config=s(target_config), prompts=s(prompts),
                        embed_from=s(embed_from), target_head=s(target_head),
                        max_prompts=max_prompts if isinstance(max_prompts, int) and s(prompts) else None),
              Door(what="this notebook", target_flag="target", max_prompts_flag="max_prompts",
                   need_weights=runs_draft, fit=runs_draft))


NUMBERS_FILE = "numbers.json"


class Outputs:
    """Where a notebook saves what it shows: figures (PNG/SVG with provenance) and named numbers.

    `Outputs(output_dir)` with an empty `output_dir` saves nothing (a notebook opened by hand);
    the report passes a folder per notebook and reads `numbers.json` back for its summary, so
    the summary quotes exactly the numbers the notebook printed. `figure(fig, name, ...)` saves
    one figure under `name`; the inline backend still shows it once when the cell ends.
    """

    def __init__(self, output_dir=None, *, svg: bool = False):
        from pathlib import Path

        self.dir = Path(output_dir) if output_dir else None
        self.formats = ("png", "svg") if svg else ("png",)
        self.numbers: dict = {}
        self.saved: list = []
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)

    def figure(self, fig, name: str, *, source=None, verdict=None, caption: str | None = None) -> list:
        """Save `fig` (a Figure or an Axes) as `name`.png when there is an output folder."""
        if self.dir is None:
            return []
        from helpers.plots.provenance import save_figure

        written = save_figure(fig, self.dir / name, source=source, verdict=verdict, caption=caption,
                              formats=self.formats)
        self.saved += written
        return written

    def record(self, **values) -> None:
        """Keep named numbers (JSON-able) for the report; written at once when there is a folder."""
        import json

        self.numbers.update(values)
        if self.dir is not None:
            (self.dir / NUMBERS_FILE).write_text(json.dumps(self.numbers, indent=2, default=_jsonable))


def _jsonable(x):
    """JSON for numpy scalars, paths and objects with `to_dict`."""
    if hasattr(x, "to_dict"):
        return x.to_dict()
    if hasattr(x, "item"):
        return x.item()
    return str(x)


def read_numbers(output_dir) -> dict:
    """The numbers a notebook recorded with `Outputs.record` ({} when none)."""
    import json
    from pathlib import Path

    p = Path(output_dir) / NUMBERS_FILE
    return json.loads(p.read_text()) if p.is_file() else {}
