"""Checks on the paths a command writes to, so a bad one is one line (exit 2), not a traceback.

`output_file(path)` is for a file the command writes (a plot): its folder must exist, be a
folder and be writable, and the path must not be an existing folder. `output_dir(path)` is for a
folder the command fills (figures, a report): it must not be an existing file, and it is created
with any missing parents, which must be creatable. `new_output_dir(path)` is for a folder that
must not exist yet (fix's DST, written elsewhere and renamed into place): its parent must exist.
Each raises `BadInputError` naming the path and the problem; none of them leaves anything behind
when it refuses.

Writability is tried, not only read from the mode bits: root passes every permission check, yet
cannot create files in /proc or on a read-only mount. The try opens an unnamed temporary file
(O_TMPFILE on Linux: no name ever appears in the folder; elsewhere a named one, removed at once).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from helpers.core.errors import BadInputError


def _kind(path: Path) -> str | None:
    """'folder', 'file' (anything else that exists) or None when nothing is there."""
    try:
        if path.is_dir():
            return "folder"
        if path.exists() or path.is_symlink():
            return "file"
    except OSError as e:  # a path component we may not look into, a name too long
        raise BadInputError(path, f"cannot be checked ({e.strerror or e})") from None
    return None


def _writable(folder: Path) -> str | None:
    """None when files can be created in `folder`, else why not (one short phrase)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return "is not writable"
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        return f"is not writable ({e.strerror or type(e).__name__})"
    return None


def _check_parent(path: Path, what: str) -> None:
    """The folder `path` would be created in must exist, be a folder and be writable."""
    parent = path.parent
    kind = _kind(parent)
    if kind is None:
        raise BadInputError(path, f"cannot write the {what}: folder {parent} does not exist")
    if kind != "folder":
        raise BadInputError(path, f"cannot write the {what}: {parent} is a file, not a folder")
    why = _writable(parent)
    if why:
        raise BadInputError(path, f"cannot write the {what}: folder {parent} {why}")


def output_file(path, what: str = "output file") -> Path:
    """`path` as a Path, after checking that a file can be written there (an existing file is replaced)."""
    given = os.fspath(path)
    path = Path(path)
    if given.endswith(("/", os.sep)) or path.name in ("", ".", ".."):
        raise BadInputError(given, f"is not a file name (the {what} needs one)")
    if _kind(path) == "folder":
        raise BadInputError(path, f"is a folder; the {what} must be a file name")
    _check_parent(path, what)
    return path


def output_dir(path, what: str = "output folder", *, create: bool = True) -> Path:
    """`path` as a Path, checked (and created with its missing parents unless `create=False`).

    An existing folder must be writable; a missing one must be creatable: the nearest existing
    folder above it must be a writable folder, and no part of the path may be a file.
    """
    path = Path(path)
    kind = _kind(path)
    if kind == "file":
        raise BadInputError(path, f"is a file; the {what} must be a folder")
    if kind == "folder":
        why = _writable(path)
        if why:
            raise BadInputError(path, f"cannot write the {what}: the folder {why}")
        return path
    above = path.absolute().parent
    while _kind(above) is None and above != above.parent:
        above = above.parent
    if _kind(above) != "folder":
        raise BadInputError(path, f"cannot create the {what}: {above} is a file, not a folder")
    why = _writable(above)
    if why:
        raise BadInputError(path, f"cannot create the {what}: folder {above} {why}")
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BadInputError(path, f"cannot create the {what} ({e.strerror or e})") from None
    return path


def new_output_dir(path, what: str = "output folder") -> Path:
    """`path` as a Path, after checking it does not exist and its parent is a writable folder.

    Nothing is created: the caller writes elsewhere and renames into place.
    """
    path = Path(path)
    if _kind(path) is not None:
        raise BadInputError(path, f"already exists; the {what} must be a new folder (nothing is overwritten)")
    if path.name in ("", ".", ".."):
        raise BadInputError(path, f"is not a folder name (the {what} needs one)")
    _check_parent(path, what)
    return path


def umask() -> int:
    """The process's umask (read without changing it for longer than the call)."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def normal_modes(path) -> None:
    """Give what the kit wrote at `path` (a file, or a folder and everything in it) the modes a plain
    `open()` / `mkdir()` gives under the umask: files 0666 & ~umask (0777 & ~umask when they were
    executable), folders 0777 & ~umask. Some writers create private files (safetensors' `save_file`
    writes 0600, `mkdtemp` makes 0700), which an engine running as another user could not read.
    Symlinks are left alone (their targets are not the kit's)."""
    import os
    import stat

    mask = umask()
    p = Path(path)

    def one(q: Path) -> None:
        st = q.lstat()
        if stat.S_ISLNK(st.st_mode):
            return
        if stat.S_ISDIR(st.st_mode):
            os.chmod(q, 0o777 & ~mask)
        elif stat.S_ISREG(st.st_mode):
            os.chmod(q, (0o777 if st.st_mode & 0o111 else 0o666) & ~mask)

    one(p)
    if p.is_dir() and not p.is_symlink():
        for root, dirs, files in os.walk(p):
            for name in dirs + files:
                one(Path(root) / name)
