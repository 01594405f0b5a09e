"""One speculate-run builder (`helpers.speculate.builder`): every front end - the CLI's `speculate` and
`reproduce`, the dashboard's speculate mode, `checkpoint_debug.speculate_once`, notebook 07 - builds its
run through it, so with no shape given they all run the same default and the engine named is the one read."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers.acceptance.drafting import Drafting
from helpers.core.errors import BadInputError
from helpers.model.target import draft_aux_ids
from helpers.speculate.builder import build_run, spec_drafting, spec_engine, spec_settings
from helpers.acceptance.drafting import DEFAULT_DRAFTING
from helpers.speculate.result import SpecSettings
from helpers.ui.settings import RunSettings
from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]
TARGET = SAMPLES / "tiny_target"
DRAFT = SAMPLES / "tiny_draft_sglang"
PROMPTS = SAMPLES / "prompts.jsonl"
NB07 = ROOT / "notebooks" / "07_speculative_decoding.ipynb"


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def target():
    from helpers.model.target import load_target

    return load_target(TARGET, "cpu", "float32")


def _settings_of(run_settings: dict) -> dict:
    """A run's settings JSON without the reading (each front end runs several readings)."""
    return {k: v for k, v in run_settings.items() if k != "reading"}


# -- the builder itself -------------------------------------------------------------------------------
def test_one_default_shape_and_engine():
    s = spec_settings()
    assert s.drafting == DEFAULT_DRAFTING == SpecSettings().drafting
    assert s.drafting.is_chain and s.drafting.steps == 5 and s.drafting.num_draft_tokens == 6
    assert spec_engine(None) == spec_engine("all") == SpecSettings().engine == "sglang"
    assert spec_drafting(3) == Drafting.chain(3)
    tree = Drafting.tree(3, 2, 5)
    assert spec_settings(tree, engine="vllm").drafting == tree
    assert spec_settings(engine="vllm").engine == "vllm"


def test_bad_input_is_one_line_before_anything_loads(tmp_path):
    missing = tmp_path / "no_target"
    for kw, word in ((dict(engine="trtllm"), "engine"), (dict(engine="nonsense"), "engine"),
                     (dict(temperature=-1.0), "temperature"), (dict(max_new_tokens=0), "max new tokens"),
                     (dict(drafting="five"), "drafting")):
        with pytest.raises(BadInputError) as e:
            build_run(DRAFT, missing, **kw)  # the target folder does not exist: the settings are refused first
        assert word in e.value.one_line() and "\n" not in e.value.one_line()


def test_build_run_loads_the_pair_with_the_settings(target):
    (tgt, draft), settings = build_run(DRAFT, target, 2, engine="vllm", max_new_tokens=4)
    assert tgt is target and draft.d2t is not None
    assert settings == spec_settings(2, engine="vllm", max_new_tokens=4)


# -- every front end goes through it ------------------------------------------------------------------
def test_cli_speculate_runs_the_builders_settings(cli):
    base = ["--max-prompts", "1", "--max-new-tokens", "3", "--reading", "offset", "--device", "cpu", "--json"]
    r = cli("speculate", DRAFT, *base)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)["readings"]["offset"]["settings"]
    assert _settings_of(got) == _settings_of(spec_settings(max_new_tokens=3).to_dict())  # no shape: the default
    r = cli("speculate", DRAFT, *base, "--engine", "vllm", "--num-speculative-tokens", "2")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)["readings"]["offset"]["settings"]
    assert _settings_of(got) == _settings_of(spec_settings(2, engine="vllm", max_new_tokens=3).to_dict())


def test_cli_reproduce_runs_the_builders_settings(cli):
    r = cli("reproduce", DRAFT, "--target", TARGET, "--prompts", PROMPTS, "--accept-length", "2.0",
            "--max-prompts", "1", "--max-new-tokens", "2", "--engine", "vllm", "--device", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)["settings"]
    assert _settings_of(got) == _settings_of(spec_settings(engine="vllm", max_new_tokens=2).to_dict())


def test_checkpoint_debug_runs_the_builders_settings(target):
    from helpers.ui.checkpoint_debug import speculate_once

    run = speculate_once(DRAFT, target, PROMPTS, max_prompts=1, max_new_tokens=3)
    assert run.settings == spec_settings(max_new_tokens=3).to_dict()
    run = speculate_once(DRAFT, target, PROMPTS, max_prompts=1, max_new_tokens=3, draft_tokens=2, engine="vllm")
    assert run.settings == spec_settings(2, engine="vllm", max_new_tokens=3).to_dict()


def test_notebook_07_builds_its_run_with_the_builder():
    cells = [c for c in json.loads(NB07.read_text())["cells"] if c["cell_type"] == "code"]
    params = {}
    exec("".join(cells[0]["source"]), {}, params)  # the parameters cell (papermill's)
    code = "".join("".join(c["source"]) for c in cells[1:])
    assert "build_run(" in code and "SpecSettings(" not in code and "load_pair(" not in code
    shape = Drafting.from_flags(params["steps"], params["topk"], params["draft_tokens"], lone="sglang")
    assert spec_drafting(shape) == DEFAULT_DRAFTING  # its parameters as shipped: the one default
    assert spec_engine(params["engine"]) == "sglang"


def test_dashboard_default_shape_and_engine_choice():
    from helpers.ui.widgets import Dashboard

    dash = Dashboard(root=SAMPLES, checkpoint=DRAFT, mode="speculate", target=TARGET)
    assert dash.spec.settings() == spec_settings(max_new_tokens=dash.spec.max_new_tokens.value)
    assert dash.steps.value == DEFAULT_DRAFTING.steps and dash.steps.layout.display == "none"  # the same default, hidden
    dash.spec.engine.value = "vllm"
    dash.spec.drafted.value = 2
    assert dash.spec.settings() == spec_settings(2, engine="vllm", max_new_tokens=dash.spec.max_new_tokens.value)
    assert Dashboard(settings=RunSettings(steps=3, engine="vllm")).spec.settings() == spec_settings(
        3, engine="vllm", max_new_tokens=RunSettings().max_new_tokens)


def test_dashboard_engine_choice_changes_the_run(target):
    """The engine picked in speculate mode is the one the loop reads the aux layers as: the speculators
    draft states explicit aux ids, which SGLang shifts by one and vLLM does not, so the two runs feed
    the draft different target layers (on this tiny pair the decoded tokens happen to agree)."""
    from helpers.ui.widgets import Dashboard

    draft = SAMPLES / "tiny_draft_speculators"
    dash = Dashboard(SAMPLES, RunSettings(embed_from=str(TARGET), max_new_tokens=12, device="cpu",
                                                        dtype="float32"), checkpoint=draft, mode="speculate", target=TARGET)
    runs = {}
    for engine in ("sglang", "vllm"):
        dash.spec.engine.value = engine
        dash.run_button.click()
        assert dash.error is None, dash.error
        reading, runs[engine] = next(iter(dash.spec.runs.items()))
        assert runs[engine].settings == spec_settings(engine=engine, reading=reading, max_new_tokens=12).to_dict()
    same = [p.output_ids for p in runs["sglang"].prompts] == [p.output_ids for p in runs["vllm"].prompts]
    assert same  # greedy verification: the text is the target's either way
    layers = {e: target.aux_layers(runs[e].settings["engine"], draft_aux_ids(draft, runs[e].settings["engine"]))
              for e in runs}  # what the loop reads for the engine each run was given
    assert layers["sglang"] == [i + 1 for i in layers["vllm"]]  # the engine chosen is the convention read
