"""Checks on the paths a command reads, before anything is opened for real.

`input_path(path, what, kind=...)` is the door every input path goes through (see
`helpers.model.preflight`, which runs these checks for every front end): it must exist (a
missing local path that looks like a Hub location gets "did you mean hf://...?"), be a file or a
folder as the input needs (a file given where a folder is wanted says which folder to give; a
folder given where a file is wanted says so), be readable, and, for text inputs, be UTF-8 (the
message names the line and column of the first byte that is not). `hf://` and `http(s)://`
locations pass through unchanged where the input may be remote, and are refused in one line where
it may not. Every problem is one `BadInputError` naming the path; nothing is written.

The sibling for paths a command writes is `helpers.core.outputs`.
"""
from __future__ import annotations

import codecs
import os
from pathlib import Path

from helpers.core.errors import BadInputError
from helpers.io import remote

KINDS = ("any", "file", "folder")


def _shown(path) -> str:
    return path if isinstance(path, str) else os.fspath(path)


def input_path(path, what: str, *, kind: str = "any", text: bool = False, remote_ok: bool = False,
               flag: str | None = None) -> str | None:
    """`path` checked as an input (None or "" -> None; a remote location returned as given).

    `what` names the input in messages ("prompt file", "target folder"); `kind` is "file",
    "folder" or "any"; `text=True` also checks the file is UTF-8; `flag` (e.g. "--target") is
    named in the hints of messages about the wrong kind.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    if path is None or str(path).strip() == "":
        return None
    shown = _shown(path)
    if remote.is_remote(shown):
        if not remote_ok:
            raise BadInputError(shown.strip(), f"the {what} must be a local path (download it first); "
                                "only checkpoints are read from hf:// or http(s)://")
        return shown.strip()
    p = Path(path)
    try:
        exists, is_dir = p.exists(), p.is_dir()
    except OSError as e:  # a component we may not look into, a name too long
        raise BadInputError(shown, f"cannot be checked ({e.strerror or e})") from None
    if not exists:
        if p.is_symlink():
            raise BadInputError(shown, "is a broken or looping symbolic link")
        tip = remote.hint(shown) if remote_ok else None
        raise BadInputError(shown, f"no such {what}" + (f" (not a local path nor a URL; {tip})" if tip else ""))
    named = f"{flag} takes" if flag else "give"
    if kind == "file" and is_dir:
        raise BadInputError(shown, f"is a folder, not a {what}")
    if kind == "folder" and not is_dir:
        if p.name == "config.json":
            raise BadInputError(shown, f"is a config file: {named} the {what} that holds it ({p.parent})")
        raise BadInputError(shown, f"is a file, not a {what}")
    if not os.access(p, os.R_OK | (os.X_OK if is_dir else 0)):
        raise BadInputError(shown, f"cannot be read (permission denied): the {what} must be readable")
    if text and not is_dir:
        check_utf8(p, what, shown)
    return shown


def check_utf8(path, what: str = "file", shown: str | None = None) -> None:
    """Raise one line naming the first line and column that is not UTF-8 (a BOM is allowed)."""
    shown = shown or _shown(path)
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, col = 1, 1
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 16), b""):
                try:
                    text = decoder.decode(block)
                except UnicodeDecodeError as e:
                    good = decoder.decode(block[:e.start]) if e.start else ""
                    line += good.count("\n")
                    col = (len(good) - good.rfind("\n")) if "\n" in good else col + len(good)
                    raise BadInputError(shown, f"is not UTF-8 text: byte 0x{block[e.start]:02x} at line {line}, "
                                        f"column {col}; save the {what} as UTF-8") from None
                n = text.count("\n")
                line += n
                col = (len(text) - text.rfind("\n")) if n else col + len(text)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise BadInputError(shown, f"is not UTF-8 text: it ends inside a character (line {line}); save the {what} "
                            "as UTF-8") from None
    except OSError as e:
        raise BadInputError(shown, f"cannot be read ({e.strerror or e})") from None


def conflicting(given: dict, why: str) -> None:
    """Flags that say one thing two ways: at most one of `given` ({flag: value}) may be set.

    `conflicting({"--target": a, "--target-config": b}, "both name the target")` refuses the two
    together in one line (the second must never silently replace the first)."""
    named = [k for k, v in given.items() if v not in (None, "", (), [])]
    if len(named) > 1:
        raise BadInputError(None, f"{' and '.join(named)} given together: {why}")
