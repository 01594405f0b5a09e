"""evaluate and figures on a llama.cpp GGUF draft: its d2t holds absolute ids, so the conclusion judges the
absolute reading (llama.cpp's) and never tells the user to 'fix' a healthy GGUF; file names stay whole."""
from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.torch import load_file

from conftest import SAMPLES
from helpers.io.gguf_files import copy_gguf, stored_d2t, write_draft_gguf

PAIR = SAMPLES / "engine_llama"


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf-cmds")
    cfg = json.loads((PAIR / "draft" / "config.json").read_text())
    tcfg = json.loads((PAIR / "target" / "config.json").read_text())
    good = write_draft_gguf(d / "draft.gguf", load_file(str(PAIR / "draft" / "model.safetensors")), cfg, tcfg)
    ids = stored_d2t(good)
    bad = copy_gguf(good, d / "offsets.gguf", {"d2t": ids - np.arange(ids.size)})
    return {"good": good, "bad": bad}


def _evaluate(cli, path):
    r = cli("evaluate", str(path), "--samples", str(SAMPLES / "tiny_hidden_states"), "--max-samples", "6",
            "--readings", "offset,absolute", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_evaluate_a_converter_gguf_is_healthy_under_llamacpps_reading(ggufs, cli):
    out = _evaluate(cli, ggufs["good"])
    assert out["engine_reading"] == "absolute"
    assert out["diagnosis"] == "healthy" and "llama.cpp" in out["conclusion"] and "fix" not in out["conclusion"]


def test_evaluate_a_gguf_holding_offsets_names_that_bug(ggufs, cli):
    out = _evaluate(cli, ggufs["bad"])
    assert out["diagnosis"] == "mapping"
    assert "holds offsets where llama.cpp reads absolute ids" in out["conclusion"]


def test_figures_of_a_gguf_keep_one_file_per_figure(ggufs, cli, tmp_path):
    r = cli("figures", str(ggufs["good"]), "-o", str(tmp_path / "figs"), "--json")
    assert r.returncode == 0, r.stderr
    files = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert len(files) == 5 and all(f.startswith("draft_") for f in files), files


def test_a_dotted_prefix_keeps_its_figure_names(tmp_path):
    from helpers.plots.provenance import _out_path

    assert _out_path(tmp_path / "v1.2_readings", "png").name == "v1.2_readings.png"
    assert _out_path(tmp_path / "fig.png", "svg").name == "fig.svg"
