"""Where a checkpoint or a model folder lives, as the rest of the package asks it.

An `Origin` is a location as the user gave it: a local path, or a `hf://` / `http(s)://` URL whose
cached local stand-in (`helpers.io.remote`) is what the readers open. Modules outside `helpers.io`
ask an `Origin` (or an open `Checkpoint`, which keeps its own, with its local folder) whether it
is remote and how to name it and its parent; they never call `helpers.io.remote` themselves
(`tests/test_io_owns_remote.py`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from helpers.io import remote


@dataclass(frozen=True)
class Origin:
    """A location as given: `path` is the string or `Path` the user handed over."""

    path: str | os.PathLike

    @property
    def is_remote(self) -> bool:
        """A `hf://`, `http://` or `https://` location (only a string can be one)."""
        return remote.is_remote(self.path)

    @property
    def display_name(self) -> str:
        """The URL as given (stripped), or the local path (as `Path` writes it)."""
        return str(self.path).strip() if self.is_remote else os.fspath(Path(self.path))

    @property
    def parent_name(self) -> str:
        """The folder holding it, named as it is named: the URL up to its last '/', or the local parent."""
        return self.display_name.rsplit("/", 1)[0] if self.is_remote else str(Path(self.path).parent)

    def as_file(self) -> str | Path:
        """A local `Path`, or the URL string as given (`Path` would collapse its '//')."""
        return self.path if self.is_remote else Path(self.path)

    def resolved(self) -> str:
        """The absolute local path, or the URL as given."""
        return self.path if self.is_remote else str(Path(self.path).resolve())


def resolved_path(path: str | os.PathLike | None) -> str | None:
    """`Origin(path).resolved()` of a path that may be absent (None stays None): how the door hands
    its paths on."""
    return None if path is None else Origin(path).resolved()
