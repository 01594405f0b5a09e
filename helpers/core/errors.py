"""The one error type for bad input.

Every reader in the kit raises `BadInputError(path, problem)` when a file or folder cannot be
used. Its message is one line, `PATH: problem`, which is what the CLI prints (exit code 2), what
the widgets show in their output area and what a notebook shows instead of a traceback.
"""
from __future__ import annotations

import os


def _printable(text: str) -> str:
    """Escape control characters (a newline or terminal escape in a file name stays on one line)."""
    return text if text.isprintable() else "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def clip(text: str, limit: int = 160) -> str:
    """`text` on one line, at most about `limit` characters, cut after a whole word with " ..."
    (a library's message quoted in ours never ends mid-word or mid-sentence without saying so)."""
    one = " ".join(str(text).split())
    if len(one) <= limit:
        return one
    cut = one[:limit].rsplit(" ", 1)[0] if " " in one[:limit] else one[:limit]
    return cut.rstrip(" ,;:(") + " ..."


class BadInputError(ValueError):
    """A file or folder the kit was pointed at cannot be used as it is."""

    def __init__(self, path: str | os.PathLike | None, problem: str):
        self.path = None if path is None else os.fspath(path)
        # Keep the message on one line whatever the problem text holds.
        self.problem = _printable(" ".join(str(problem).split()))
        super().__init__(self.one_line())

    def one_line(self) -> str:
        return self.problem if self.path is None else f"{_printable(self.path)}: {self.problem}"

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.one_line()
