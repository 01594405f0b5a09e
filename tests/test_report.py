"""`python -m helpers report`: the bug-report bundle."""
from __future__ import annotations

import json

import pytest

from conftest import SAMPLES


@pytest.mark.slow
def test_report_on_mapping_only_folder_says_what_was_skipped(cli, tmp_path):
    out = tmp_path / "kimi"
    r = cli("report", SAMPLES / "kimi_k25_mapping", "-o", out)
    assert r.returncode == 0, r.stdout + r.stderr
    # one line of progress per notebook
    assert sum(line.startswith("[") for line in r.stdout.splitlines()) == 5
    md = (out / "summary.md").read_text()
    assert "**OFFSET**" in md
    assert "skipped **accuracy**" in md and "no --samples given" in md
    summary = json.loads((out / "summary.json").read_text())
    assert all(nb["ok"] for nb in summary["notebooks"])
    for nb in summary["notebooks"]:
        assert (out / "html" / f"{nb['name']}.html").exists()
        assert (out / "notebooks" / f"{nb['name']}.ipynb").exists()


@pytest.mark.slow
def test_report_on_misencoded_checkpoint_names_the_problem(cli, tmp_path):
    ck = SAMPLES / "tiny_draft_absolute"
    if not ck.exists():
        pytest.skip("tiny_draft_absolute sample missing")
    out = tmp_path / "bad"
    r = cli("report", ck, "--samples", SAMPLES / "tiny_hidden_states", "--max-samples", "8", "-o", out)
    md = (out / "summary.md").read_text()
    assert "**ABSOLUTE**" in md
    assert "`d2t-absolute`" in md
    figures = list((out / "figures").rglob("*.png"))
    assert figures
    from helpers import __version__
    from helpers.plots import read_figure_metadata

    for fig in figures:
        assert read_figure_metadata(fig)["kit_version"] == __version__, fig

    assert r.returncode in (0, 1)


def test_report_refuses_to_write_inside_the_checkpoint(cli, tmp_path):
    r = cli("report", SAMPLES / "kimi_k25_mapping", "-o", SAMPLES / "kimi_k25_mapping" / "report")
    assert r.returncode == 2 and "must not be written inside" in r.stderr
    assert not (SAMPLES / "kimi_k25_mapping" / "report").exists()
