"""Notebook conveniences: one call at the top of every notebook.

`setup()` makes a `BadInputError` show as one readable line instead of a traceback (the cell
still fails, so papermill and `report` see the failure), and sets the kit's plot style when
`helpers.plots` provides one.
"""
from __future__ import annotations

from .errors import BadInputError


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
        from . import plots

        if hasattr(plots, "set_style"):
            plots.set_style()
    except ImportError:
        pass
