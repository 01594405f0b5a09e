"""Saving a figure with its provenance, and reading it back.

`save_figure` writes PNG (and SVG on request; any other format matplotlib writes, with what
metadata that format holds) with metadata naming the source files (path, size, SHA-256), the kit
version and the time, and draws a caption line naming the checkpoint and the verdict under the
figure; `read_figure_metadata` reads the record back from a PNG or SVG. `figure_metadata` and
`caption_line` are the record and the caption on their own.

A source file is hashed once per (path, size, mtime), so a multi-GB checkpoint is not hashed
again for every figure saved from it. This module draws nothing of its own but the caption.
"""
from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import os
from pathlib import Path

import matplotlib as mpl

from helpers.core.errors import BadInputError
from helpers.io.origin import Origin
from helpers.io.mapping import VocabMapping
from helpers.plots.style import DPI

METADATA_KEY = "d2t-lab"  # the PNG text chunk holding the JSON metadata
CAPTION_COLOR = "#555555"


def mapping_label(m: VocabMapping) -> str:
    """A short name for a mapping: the folder its files came from."""
    if not m.sources:
        return "d2t"
    parents = {Origin(s).parent_name for s in m.sources}
    return parents.pop() if len(parents) == 1 else ", ".join(m.sources)


# -- the record ---------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    st = Path(path).stat()
    return _sha256_cached(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    """SHA-256 of a file, computed once per (path, size, mtime): multi-GB checkpoints are
    hashed once, not once per saved figure."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _source_files(source) -> tuple[str | None, list[Path]]:
    """(checkpoint name, files) from a path, a list of paths or a VocabMapping."""
    if source is None:
        return None, []
    if isinstance(source, VocabMapping):
        return mapping_label(source), [_file(s) for s in source.sources]
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if p.is_dir():
            return str(p), sorted(f for f in p.iterdir() if f.is_file())
        if not p.exists():
            raise BadInputError(p, "source file for the figure metadata does not exist")
        return str(p), [p]
    files = [_file(s) for s in source]
    parents = {str(f).rsplit("/", 1)[0] if isinstance(f, str) else str(f.parent) for f in files}
    return (parents.pop() if len(parents) == 1 else ", ".join(map(str, files))), files


def _file(s):
    """A source as a Path, or as the URL string it is (a remote file is recorded by its URL only)."""
    return Origin(s).as_file()


def _file_records(files: list[Path]) -> list[dict]:
    """Path, size and SHA-256 of each file (a remote file: its URL)."""
    recs = []
    for f in files:
        if isinstance(f, str):
            recs.append({"path": f, "size": None, "sha256": None})
            continue
        try:
            recs.append({"path": str(f), "size": f.stat().st_size, "sha256": _sha256(f)})
        except OSError as e:
            raise BadInputError(f, f"cannot be read for the figure metadata ({e.strerror or e})") from None
    return recs


def figure_metadata(source=None, verdict=None, caption: str | None = None) -> dict:
    """The provenance recorded by `save_figure`."""
    from helpers import __version__

    name, files = _source_files(source)
    recs = _file_records(files)
    verdict = getattr(verdict, "encoding", verdict)
    return {
        "kit": "d2t-lab",
        "kit_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "checkpoint": name,
        "verdict": verdict,
        "caption": caption,
        "sources": recs,
        "source": recs[0]["path"] if recs else None,
        "source_size": recs[0]["size"] if recs else None,
        "source_sha256": recs[0]["sha256"] if recs else None,
    }


LOG_SUFFIXES = (".log", ".txt", ".out", ".err")  # a figure drawn from serving logs names them, not a checkpoint


def caption_line(meta: dict) -> str:
    """The one line drawn under a saved figure: checkpoint (and hash), verdict, caption, kit and time."""
    parts = []
    if meta.get("checkpoint"):
        sha = f" (sha256 {meta['source_sha256'][:12]}…)" if meta.get("source_sha256") else ""
        logs = meta.get("sources") and all(str(r["path"]).endswith(LOG_SUFFIXES) for r in meta["sources"])
        what = ", ".join(r["path"] for r in meta["sources"]) if logs else meta["checkpoint"]
        parts.append(f"{'log' if logs else 'checkpoint'}: {what}{sha}")
    if meta.get("verdict"):
        parts.append(f"verdict: {str(meta['verdict']).upper()}")
    if meta.get("caption"):
        parts.append(str(meta["caption"]))
    parts.append(f"d2t-lab {meta['kit_version']}, {meta['created'][:16].replace('T', ' ')} UTC")
    return " · ".join(parts)


# -- writing ------------------------------------------------------------------------------------
def _file_metadata(fmt: str, fig, meta: dict) -> dict | None:
    """What `savefig(metadata=...)` takes for this format: the whole record where the format
    holds text (PNG, SVG, SVGZ, PDF), the kit's name where it holds only that (PS, EPS), else None."""
    blob = json.dumps(meta, sort_keys=True)
    software = f"d2t-lab {meta['kit_version']}"
    if fmt == "png":
        return {
            METADATA_KEY: blob,
            "Title": (fig.axes[0].get_title().splitlines() or [""])[0] if fig.axes else "",
            "Software": f"{software} (matplotlib {mpl.__version__})",
            "Source": meta["source"] or "",
            "Description": caption_line(meta),
        }
    if fmt in ("svg", "svgz"):
        return {"Description": blob, "Creator": software, "Title": caption_line(meta)}
    if fmt == "pdf":
        return {"Subject": blob, "Creator": software, "Title": caption_line(meta)}
    if fmt in ("ps", "eps"):
        return {"Creator": software}
    return None


def _out_path(path: Path, fmt: str) -> Path:
    """The file for one format: `path` itself when its suffix names the format, else its stem + the format."""
    if path.suffix.lower() == f".{fmt}":
        return path
    stem = path.with_suffix("") if path.suffix.lower() in (".png", ".svg") else path
    return stem.with_name(f"{stem.name}.{fmt}")  # a dot inside the name (v1.2_readings, draft.gguf_x) stays


def _draw_caption(fig, meta: dict):
    """Draw the caption line under everything already drawn (rotated tick labels and x labels
    reach below the figure's bottom edge), so it never overlaps them; return the Text."""
    lowest = fig.get_tightbbox().y0 / fig.get_figheight()
    return fig.text(0.005, min(0.0, lowest) - 0.01, caption_line(meta), fontsize=7.5, color=CAPTION_COLOR,
                    ha="left", va="top")


def save_figure(fig, path, *, source=None, verdict=None, caption: str | None = None, formats=("png",),
                dpi: float = DPI) -> list[Path]:
    """Write `fig` as PNG (and SVG when 'svg' is in `formats`) with provenance; return the paths.

    `source`: the checkpoint folder, a file, a list of files or a `VocabMapping` (its files);
    each file's path, size and SHA-256 are recorded. `verdict`: a string or a `Verdict`. A
    caption line naming the checkpoint and the verdict is drawn under the figure.
    Other formats matplotlib writes (pdf, jpg, ...) get the caption line and whatever metadata
    the format holds; `read_figure_metadata` reads PNG and SVG. A `path` whose suffix names a
    format is written as given for that format.
    """
    if hasattr(fig, "figure") and not isinstance(fig, mpl.figure.Figure):
        fig = fig.figure  # an Axes
    fmts = [f.lower().lstrip(".") for f in formats]
    known = fig.canvas.get_supported_filetypes()
    for fmt in fmts:
        if fmt not in known:
            raise ValueError(f"unsupported format {fmt!r}; use 'png', 'svg' or one of {', '.join(sorted(known))}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = figure_metadata(source, verdict, caption)
    text = _draw_caption(fig, meta)
    written = []
    try:
        for fmt in fmts:
            out = _out_path(path, fmt)
            fig.savefig(out, format=fmt, dpi=dpi, bbox_inches="tight", pad_inches=0.12,
                        metadata=_file_metadata(fmt, fig, meta))
            written.append(out)
    finally:
        text.remove()
    return written


# -- reading back -------------------------------------------------------------------------------
def _svg_metadata(p: Path) -> dict:
    import re
    import xml.sax.saxutils as su

    m = re.search(r"<dc:description>(.*?)</dc:description>", p.read_text(), re.S)
    if not m:
        raise BadInputError(p, "holds no d2t-lab metadata")
    return json.loads(su.unescape(m.group(1)))


def read_figure_metadata(png_path) -> dict:
    """The metadata `save_figure` wrote into a PNG (or the Description of an SVG)."""
    p = Path(png_path)
    if p.suffix.lower() == ".svg":
        return _svg_metadata(p)
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(p) as im:
            text = dict(getattr(im, "text", {}) or {})
    except FileNotFoundError:
        raise BadInputError(p, "no such file") from None
    except (UnidentifiedImageError, OSError) as e:
        raise BadInputError(p, f"not a readable image ({e})") from None
    if METADATA_KEY not in text:
        raise BadInputError(p, "holds no d2t-lab metadata (not written by save_figure)")
    return json.loads(text[METADATA_KEY])
