"""Where the bundled samples (`data_samples/`) and the checkout are: the one place that says so.

The samples are not shipped in the wheel (about 30 MB); defaults that need them find them, in
order, in `$D2T_LAB_SAMPLES`, in `./data_samples` (the current folder) and beside the checkout
this package runs from. When none holds them, a default that needs them is one line naming
where it looked and how to point at samples (`BadInputError`), never a traceback.
"""
from __future__ import annotations

import os
from pathlib import Path

from helpers.core.errors import BadInputError

ENV = "D2T_LAB_SAMPLES"
FOLDER = "data_samples"


def checkout_root() -> Path | None:
    """The repository this package runs from (pyproject.toml beside `helpers/`), else None (an installed wheel)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "helpers").is_dir() else None


def sample_candidates() -> list[Path]:
    """Where the samples are looked for, in order: $D2T_LAB_SAMPLES, ./data_samples, the checkout's data_samples."""
    found = [Path(os.environ[ENV]).expanduser()] if os.environ.get(ENV) else []
    found.append(Path.cwd() / FOLDER)
    root = checkout_root()
    if root is not None:
        found.append(root / FOLDER)
    return found


def find_samples() -> Path | None:
    """The first candidate folder that exists, else None."""
    return next((p for p in sample_candidates() if p.is_dir()), None)


def bundled_samples(needed_by: str = "the default", item: str | None = None) -> Path:
    """The samples folder (or `item` inside it); a missing one raises one line naming the places looked in.

    `needed_by` names what asked (a flag such as "--target"), so the line says what to pass instead.
    With $D2T_LAB_SAMPLES set, only that folder counts: a wrong setting is not silently replaced.
    """
    places = sample_candidates()
    if os.environ.get(ENV):
        places = places[:1]
    where = next((p for p in places if p.is_dir()), None)
    wanted = where / item if where is not None and item else where
    if wanted is None or not wanted.exists():
        looked = ", ".join(str(p / item if item else p) for p in places)
        instead = f"pass {needed_by} or " if needed_by.startswith("--") else ""
        raise BadInputError(needed_by, f"needs the bundled samples{f' ({item})' if item else ''}, which are not "
                            f"installed with the package; looked in {looked}; {instead}set {ENV} to a "
                            f"data_samples folder (a checkout's data_samples/)")
    return wanted
