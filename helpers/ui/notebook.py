"""Notebook conveniences: one call at the top of every notebook.

`setup()` makes a `BadInputError` show as one readable line instead of a traceback (the cell
still fails, so papermill and `report` see the failure), and sets the kit's plot style when
`helpers.plots` provides one.
"""
from __future__ import annotations

from helpers.core.errors import BadInputError


def _one_line(shell, etype, value, tb, tb_offset=None):  # IPython custom-exception signature
    """Show the error as an ordinary error output whose whole traceback is one line."""
    msg = f"BadInputError: {value}"
    shell._showtraceback(etype, value, [msg])
    return [msg]


def setup() -> None:
    """Install the one-line error display in the running IPython kernel (no-op elsewhere)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return
    ip = get_ipython()
    if ip is not None:
        ip.set_custom_exc((BadInputError,), _one_line)
    try:
        from helpers import plots

        if hasattr(plots, "set_style"):
            plots.set_style()
    except ImportError:
        pass


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
        from helpers.plots import save_figure

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
