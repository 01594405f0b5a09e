"""Real vLLM logs written with terminal colour codes (vLLM colours its log when started from a
Jupyter kernel) read the same as plain ones: rows, times, the error line of a crash."""
from __future__ import annotations

import shutil
from pathlib import Path

from helpers.serving.log_lines import ANSI_COLOUR
from helpers.serving.logs import read_log
from helpers.ui.checkpoint_debug import engine_log_lines

FIX = Path(__file__).parent / "fixtures" / "serving"


def test_a_coloured_vllm_log_reads_as_its_plain_text(tmp_path):
    coloured = FIX / "vllm_0.32.0_colour.log"
    assert "\x1b[" in coloured.read_text(errors="replace")
    plain = tmp_path / "plain.log"
    plain.write_text(ANSI_COLOUR.sub("", coloured.read_text(errors="replace")))
    a, b = read_log(coloured), read_log(plain)
    assert a.parsed == b.parsed >= 1
    assert a.summary()["pooled_accept_length"] == b.summary()["pooled_accept_length"] > 2
    assert all(r.get("time") for r in a.rows), a.rows  # the time sits between colour codes
    assert [r.get("time") for r in a.rows] == [r.get("time") for r in b.rows]
    assert a.drafting.get("steps") == 3


def test_the_error_line_of_a_coloured_crash_log_is_found(tmp_path):
    run = tmp_path / "runs" / "d2t-absolute"
    run.mkdir(parents=True)
    shutil.copy(FIX / "vllm_0.32.0_colour_crash.log", run / "server.log")
    lines = engine_log_lines(tmp_path / "runs", "d2t-absolute")
    assert any("IndexError: index 4098 is out of bounds" in ln for ln in lines), lines
    assert all("\x1b" not in ln for ln in lines)
