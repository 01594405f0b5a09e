"""RunSettings: drafting settings resolved from flags, then a log's start-up line, then defaults."""
from __future__ import annotations

import argparse

import pytest

from helpers.core.errors import BadInputError
from helpers.serving.startup import drafting_from_line
from helpers.speculate.builder import spec_drafting
from helpers.acceptance.drafting import DEFAULT_DRAFTING
from helpers.ui.settings import RunSettings, default_source, note_defaults, resolve_drafting
from conftest import SAMPLES

LOGS = SAMPLES / "logs"


def test_start_up_lines_of_both_engines():
    sgl = ("[2026-01-05 10:00:00 TP0] server_args=ServerArgs(model_path='m', speculative_algorithm='EAGLE3', "
           "speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)")
    assert drafting_from_line(sgl) == {"steps": 3, "topk": 1, "draft_tokens": 4, "source": "server_args"}
    vllm = "INFO [utils.py:326] non-default args: {'speculative_config': {'method': 'eagle3', 'num_speculative_tokens': 7}}"
    assert drafting_from_line(vllm) == {"steps": 7, "topk": 1, "draft_tokens": 8, "source": "num_speculative_tokens"}
    assert drafting_from_line("Decode batch, #running-req: 1, accept len: 1.90") == {}


def test_flags_win_over_the_log_and_the_log_over_defaults():
    from_log = resolve_drafting(RunSettings(logs=(str(LOGS / "sglang.log"),)))
    assert (from_log.steps, from_log.topk, from_log.num_draft_tokens) == (5, 4, 16)
    assert from_log.sources["steps"].startswith("server_args in ") and from_log.drafting.label.startswith("tree 5/4/16")
    # flags that make a chain: the log's 16 draft tokens belong to its tree, a 2-token chain verifies 3
    flagged = resolve_drafting(RunSettings(logs=(str(LOGS / "sglang.log"),)), topk=1, steps=2)
    assert (flagged.steps, flagged.topk, flagged.num_draft_tokens) == (2, 1, 3)
    assert flagged.sources["topk"] == "--topk" and flagged.sources["draft_tokens"] == "steps + 1 (a chain)"
    assert flagged.drafting.label == "chain, 2 tokens"
    # a tree's size from the flag, its depth and width from the log
    wide = resolve_drafting(RunSettings(logs=(str(LOGS / "sglang.log"),)), draft_tokens=8)
    assert (wide.steps, wide.topk, wide.num_draft_tokens) == (5, 4, 8)
    default = resolve_drafting(RunSettings())
    assert default.drafting == DEFAULT_DRAFTING  # the speculate run builder's one default shape
    assert default.sources["steps"] == default_source() and default.sources["topk"] == "default: a chain"
    assert default.sources["steps"].startswith("default") and DEFAULT_DRAFTING.label in default.sources["steps"]


def test_one_default_shape_for_settings_reports_and_speculate():
    """RunSettings' default shape is the speculate builder's (`spec_drafting(None)`), not a copy of it."""
    assert RunSettings().drafting == DEFAULT_DRAFTING == spec_drafting(None)
    assert RunSettings().to_dict()["sglang"] == DEFAULT_DRAFTING.sglang()
    # a report's settings made in Python say where the default stands in; a shape given is not called one
    noted = note_defaults(RunSettings(checkpoint="/c"))
    assert noted.sources == {"steps": default_source(), "topk": "default: a chain", "draft_tokens": "steps + 1 (a chain)"}
    other = DEFAULT_DRAFTING.steps + 1
    assert "steps" not in note_defaults(RunSettings(steps=other)).sources
    assert note_defaults(RunSettings(steps=other)).sources["topk"] == "default: a chain"
    assert note_defaults(resolve_drafting(RunSettings(), steps=other)).sources["steps"] == "--steps"
    # `d2t-lab report --help` states the same default
    from helpers.commands import report

    p = argparse.ArgumentParser()
    report.add_arguments(p)
    for text in (report.DESCRIPTION, p.format_help()):
        assert f"default chain of {DEFAULT_DRAFTING.steps}, speculate's" in " ".join(text.split())


def test_draft_tokens_alone_is_a_chain_of_one_less():
    s = resolve_drafting(RunSettings(), draft_tokens=6)
    assert (s.steps, s.topk, s.num_draft_tokens) == (5, 1, 6) and s.drafting.label == "chain, 5 tokens"
    assert s.sources["steps"] == "draft tokens - 1 (a chain)"
    with pytest.raises(BadInputError, match="--draft-tokens 8"):
        resolve_drafting(RunSettings(), steps=3, topk=1, draft_tokens=8)
    with pytest.raises(ValueError, match="--draft-tokens 8"):
        RunSettings(steps=3, topk=1, draft_tokens=8)


def test_a_tree_needs_its_draft_tokens():
    with pytest.raises(BadInputError, match="needs --draft-tokens"):
        resolve_drafting(RunSettings(), topk=4, steps=5)


def test_notebooks_get_only_the_parameters_they_declare():
    s = RunSettings(checkpoint="/c", logs=("/a.log",), compare_with=("/x",))
    got = s.notebook_parameters({"checkpoint": {}, "logs": {}, "compare_with": {}, "window_start": {}},
                                write_fixed_copy=False)
    assert got == {"checkpoint": "/c", "logs": ["/a.log"], "compare_with": ["/x"]}
