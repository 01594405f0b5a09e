"""The bundled samples are found in one place (`helpers.core.paths`), and a missing one is one line."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.core import paths
from helpers.core.errors import BadInputError
from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]


def test_the_checkout_is_found_and_its_samples_are_the_default(monkeypatch, tmp_path):
    monkeypatch.delenv(paths.ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./data_samples here
    assert paths.checkout_root() == ROOT
    assert paths.bundled_samples() == SAMPLES
    assert paths.bundled_samples("--target", "tiny_target") == SAMPLES / "tiny_target"


def test_the_current_folder_comes_before_the_checkout(monkeypatch, tmp_path):
    monkeypatch.delenv(paths.ENV, raising=False)
    (tmp_path / "data_samples" / "tiny_target").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert paths.bundled_samples("--target", "tiny_target") == tmp_path / "data_samples" / "tiny_target"


def test_the_environment_variable_wins_and_is_not_silently_replaced(monkeypatch, tmp_path):
    mine = tmp_path / "mine"
    (mine / "prompts.jsonl").parent.mkdir()
    (mine / "prompts.jsonl").write_text("{}\n")
    monkeypatch.setenv(paths.ENV, str(mine))
    monkeypatch.chdir(tmp_path)
    assert paths.bundled_samples("--prompts", "prompts.jsonl") == mine / "prompts.jsonl"
    # the variable names a folder without the item: one line naming only that place, though the
    # checkout has one
    with pytest.raises(BadInputError) as e:
        paths.bundled_samples("--target", "tiny_target")
    line = e.value.one_line()
    assert "\n" not in line and line.startswith("--target: ")
    assert f"looked in {mine / 'tiny_target'};" in line and "pass --target or set D2T_LAB_SAMPLES" in line


def test_the_command_line_says_where_it_looked(monkeypatch, tmp_path, cli):
    monkeypatch.setenv(paths.ENV, str(tmp_path / "nowhere"))
    r = cli("speculate", str(SAMPLES / "tiny_draft_sglang"), "--max-prompts", "1")
    assert r.returncode == 2 and r.stdout == ""
    assert re.fullmatch(r"error: --target: needs the bundled samples \(tiny_target\).*D2T_LAB_SAMPLES.*\n", r.stderr)
    assert str(tmp_path / "nowhere" / "tiny_target") in r.stderr
