"""A checkpoint's `config.json`: read (local or remote, every problem one `BadInputError` naming the
file), flattened over the two config styles (speculators nests the layer config), and the vocab
sizes it states. `helpers.io.checkpoint` reads a checkpoint's config with it; the model and doctor
layers read the fields from the flat dict.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from helpers.core.errors import BadInputError
from helpers.core.terms import MAX_VOCAB
from helpers.io import remote
from helpers.io.tensor_files import check_readable_file, short_message


def read_config(path: str | os.PathLike) -> dict:
    """Parse a `config.json` (or the one inside a folder, local or remote) into a dict."""
    if not remote.is_remote(path):
        return read_config_file(path)
    return remote.via_mirror(path, read_config)  # fetched into the cache once, then read as a local file


def read_config_file(path: str | os.PathLike) -> dict:
    """`read_config` of a local file or folder."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    check_readable_file(path)
    try:
        cfg = json.loads(path.read_text())
    except UnicodeDecodeError:
        raise BadInputError(path, "is not text (expected a JSON config)") from None
    except json.JSONDecodeError as e:
        raise BadInputError(path, f"is not valid JSON (line {e.lineno}: {e.msg})") from None
    except RecursionError:
        raise BadInputError(path, "is not a usable JSON config (nested too deeply)") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise BadInputError(path, f"is not a usable JSON config ({short_message(str(e), 100)})") from None
    except OSError as e:
        raise BadInputError(path, f"cannot be read ({e.strerror or e})") from None
    if not isinstance(cfg, dict):
        raise BadInputError(path, "is JSON but not an object")
    return cfg


def flat_config(cfg: dict) -> dict:
    """One flat dict for both config styles.

    speculators nests the Llama layer config under `transformer_layer_config`, with the EAGLE-3
    fields (`draft_vocab_size`, `target_hidden_size`, `norm_before_residual`) at the top level.
    """
    nested = cfg.get("transformer_layer_config")
    out = dict(nested) if isinstance(nested, dict) else {}
    for k, v in cfg.items():
        if k == "transformer_layer_config" or (k in out and k in ("vocab_size", "hidden_size")):
            continue  # the nested layer config is the authority for the layer's own sizes
        out[k] = v
    return out


def vocab_sizes(cfg: dict | None, path: str | os.PathLike | None = None) -> tuple[int | None, int | None]:
    """(draft_vocab_size, target_vocab_size) from a config, where it states them.

    With `path` (the config file), a size field that is present but not a positive integer is a
    `BadInputError`; without it such a field is treated as absent.
    """
    if not cfg:
        return None, None
    flat = flat_config(cfg)
    if path is not None:
        for key in ("draft_vocab_size", "target_vocab_size", "vocab_size"):
            v = flat.get(key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise BadInputError(path, f"{key} is {v!r}, expected a positive integer")
            if v is not None and v > MAX_VOCAB:  # engines hold token ids in int32
                raise BadInputError(path, f"{key} = {v:,} is not a plausible vocab size (more than {MAX_VOCAB:,})")
    draft = flat.get("draft_vocab_size")
    target = flat.get("target_vocab_size", flat.get("vocab_size"))
    return (int(draft) if isinstance(draft, int) else None, int(target) if isinstance(target, int) else None)
