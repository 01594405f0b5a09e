"""What a serving log states at start-up: the drafting settings the server ran with and the
engine's release, each read from the first line within a log's head that states it.
"""
from __future__ import annotations

import re
from pathlib import Path

from helpers.core.errors import BadInputError

# -- drafting settings from a log's start-up lines ----------------------------------------------
_SGL_ARG = re.compile(r"(?<![\w])['\"]?(speculative_num_steps|speculative_eagle_topk|speculative_num_draft_tokens)"
                      r"['\"]?\s*[:=]\s*(\d+)\b")
_VLLM_TOKENS = re.compile(r"['\"]?(?:num_speculative_tokens|num_spec_tokens)['\"]?\s*[:=]\s*(\d+)")


def drafting_from_line(line: str) -> dict:
    """Drafting settings stated on one start-up line, in the kit's names (see `helpers.ui.settings`).

    SGLang's `server_args=ServerArgs(... speculative_num_steps=5, speculative_eagle_topk=4,
    speculative_num_draft_tokens=16 ...)` (0.5.18 and before) or the dict form of later builds,
    `server_args={... 'speculative_num_steps': 5, ...}`, gives steps / topk / draft_tokens as the server ran
    them; vLLM's `non-default args: {... 'num_speculative_tokens': 3 ...}` (or a
    `SpeculativeConfig(... num_spec_tokens=3 ...)`) is a chain: steps 3, topk 1, draft_tokens 4.
    Returns {} for any other line; `source` names the line's kind.
    """
    from helpers.acceptance.drafting import (  # numpy: only when a line is read
        SGLANG_NAMES,
        Drafting,
    )

    if "server_args=" in line:
        found = {SGLANG_NAMES[k]: int(v) for k, v in _SGL_ARG.findall(line)}
        return {**found, "source": "server_args"} if found else {}
    if "speculative" in line.lower() or "num_spec_tokens" in line:
        m = _VLLM_TOKENS.search(line)
        if m:
            try:
                return {**Drafting.from_vllm(int(m.group(1))).kit(), "source": "num_speculative_tokens"}
            except ValueError:
                return {}
    return {}


# -- the engine's release from a log's start-up lines ----------------------------------------------
# vLLM prints its version at start-up ("vLLM API server version X" up to 0.14, "vLLM server version
# X, serving model M" and "Initializing a V1 LLM engine (vX) with config" later). SGLang prints none
# in any release read (0.4.6-0.5.23): its version is read from `python -m sglang.check_env` output
# ("sglang: X") or a `pip freeze` line ("sglang==X") kept at the top of the log.
_VERSION = r"v?(\d+(?:\.\d+)+(?:[.+-]?[A-Za-z0-9]+)*)"
_ENGINE_VERSION = (
    ("vllm", re.compile(r"vLLM (?:API )?server version " + _VERSION)),
    ("vllm", re.compile(r"Initializing an? (?:V1 )?LLM engine \(" + _VERSION + r"\)")),
    ("sglang", re.compile(r"^\s*sglang\s*:\s*" + _VERSION + r"\s*$")),
    ("sglang", re.compile(r"^\s*sglang==" + _VERSION + r"\s*$")),
    ("vllm", re.compile(r"^\s*vllm\s*:\s*" + _VERSION + r"\s*$")),
    ("vllm", re.compile(r"^\s*vllm==" + _VERSION + r"\s*$")),
)


def engine_version_from_line(line: str) -> tuple[str, str] | None:
    """(engine, version) when one start-up line states the serving engine's release, else None."""
    for engine, pattern in _ENGINE_VERSION:
        m = pattern.search(line)
        if m:
            return engine, m.group(1).rstrip(".,")
    return None


def _first_in_head(path, read_line, max_lines: int):
    """`read_line`'s answer for the first line within `max_lines` that gives one (truthy), else None."""
    p = Path(path)
    if not p.is_file():
        raise BadInputError(p, "no such log file" if not p.exists() else "not a file")
    try:
        with open(p, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh):
                if n >= max_lines:
                    break
                found = read_line(line)
                if found:
                    return found
    except OSError as e:
        raise BadInputError(p, f"cannot read: {e.strerror or e}") from None
    return None


def read_engine_version(path, max_lines: int = 5000) -> tuple[str, str] | None:
    """(engine, version) from the first line within `max_lines` that states one, or None."""
    return _first_in_head(path, engine_version_from_line, max_lines)


def read_drafting(path, max_lines: int = 5000) -> dict:
    """The drafting settings a log states at start-up (first such line within `max_lines`), or {}."""
    return _first_in_head(path, drafting_from_line, max_lines) or {}
