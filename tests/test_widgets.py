"""The dashboard without a browser: build it, set the controls, click Run, read what it shows.

`button.click()` calls the same handler a click in JupyterLab does; the output area is read from
the `Output` widget's `outputs` (what the browser renders). Runs on the bundled samples.
"""
from __future__ import annotations

import re

import pytest
import torch

from helpers.core.errors import BadInputError
from helpers.io.samples import load_sample, sample_files
from helpers.acceptance.drafting import DEFAULT_DRAFTING
from helpers.ui.settings import RunSettings
from helpers.ui.widgets import Dashboard, available_devices, find_sample_folders
from conftest import SAMPLES


CKPT = SAMPLES / "tiny_draft_sglang"
HS = SAMPLES / "tiny_hidden_states"


def _html(o) -> str:
    return o.get("data", {}).get("text/html", "")


def _shown(dash) -> list[str]:
    """Output area, one string per output: html, stream text, or the mime type of an image."""
    out = []
    for o in dash.output.outputs:
        if o["output_type"] == "stream":
            out.append(o["text"])
        elif "image/png" in o.get("data", {}):
            out.append("image/png")
        else:
            out.append(_html(o))
    return out


def _headline_top1(dash, reading: str) -> float:
    m = re.search(rf"<b>{reading}</b> reading: top-1 <b>([\d.]+) %</b>", _shown(dash)[0])
    assert m, _shown(dash)[0]
    return float(m.group(1))


def _dash(**settings) -> Dashboard:
    """The bundled draft and samples, 1 scored step unless `settings` (RunSettings' names) say otherwise."""
    return Dashboard(SAMPLES, RunSettings(**{"steps": 1, **settings}), checkpoint=CKPT, samples=HS)


@pytest.fixture
def dash():
    return _dash(max_samples=16)  # 16 per split keeps each Run to a second or two


def _assert_ran(dash, reading: str) -> None:
    """A successful run: no error, result set, headline + table + figure, button usable again."""
    assert dash.error is None, dash.error
    assert dash.result is not None and dash.result.readings == [reading]
    shown = _shown(dash)
    assert len(shown) == 3, shown
    assert shown[2] == "image/png" and dash.figure_png.startswith(b"\x89PNG")
    assert "<table" in shown[1] and reading in shown[1] and "top-1 %" in shown[1]
    assert not dash.run_button.disabled
    assert dash.status.value.startswith("done in")


def _assert_one_line_error(dash, *needles: str) -> str:
    assert dash.result is None
    assert dash.error and "\n" not in dash.error
    assert len(dash.output.outputs) == 1, dash.output.outputs
    o = dash.output.outputs[0]
    assert o["output_type"] == "stream" and o["text"] == dash.error + "\n"
    for n in needles:
        assert n in dash.error, dash.error
    assert not dash.run_button.disabled and dash.status.value == "error"
    return dash.error


# -- the controls -------------------------------------------------------------------------------
def test_pickers_list_what_is_under_the_root():
    d = Dashboard()  # default root: the repository's data_samples/
    assert d.root.value == str(SAMPLES)
    assert str(CKPT) in d.checkpoint.options
    assert str(SAMPLES / "kimi_k25_mapping") in d.checkpoint.options  # mapping-only folders too
    assert str(HS) in d.samples.options and str(HS / "val") in d.samples.options
    assert str(CKPT) not in d.samples.options
    # nothing preselected; Run says what is missing, in one line
    assert d.checkpoint.value == "" and d.samples.value == "" and d.summary.value == ""
    d.run_button.click()
    _assert_one_line_error(d, "choose a checkpoint")
    d.checkpoint.value = d.checkpoint.options[0]  # picking one shows its inspect summary
    assert "verdict:" in d.summary.value


def test_the_dashboard_starts_from_run_settings():
    """One parameter object: the dashboard's starting values are a RunSettings, the controls read back as one,
    the paths named by keyword replace the settings' own, and no settings is the kit's one default shape."""
    import inspect

    assert len(inspect.signature(Dashboard.__init__).parameters) - 1 <= 12
    given = RunSettings(checkpoint=str(CKPT), samples=str(HS), steps=2, device="cpu", dtype="float32",
                        max_samples=3, embed_from=str(SAMPLES / "tiny_target"), target=str(SAMPLES / "tiny_target"),
                        engine="vllm", max_new_tokens=7)
    d = Dashboard(SAMPLES, given)
    assert (d.steps.value, d.max_samples.value, d.dtype.value, d.device.value) == (2, 3, "float32", "cpu")
    assert (d.spec.drafted.value, d.spec.engine.value, d.spec.max_new_tokens.value) == (2, "vllm", 7)
    assert d.settings() == given  # read back: the same object the report and the notebooks take
    assert d.kwargs()["steps"] == 2 and d.kwargs()["max_samples"] == 3
    other = Dashboard(SAMPLES, given, checkpoint=SAMPLES / "tiny_draft_absolute", mode="speculate")
    assert other.settings() == given.with_(checkpoint=str(SAMPLES / "tiny_draft_absolute"))
    plain = Dashboard(SAMPLES)
    assert plain.steps.value == plain.spec.drafted.value == DEFAULT_DRAFTING.steps  # the one default shape
    assert plain.dtype.value == "auto" and plain.checkpoint.value == ""
    with pytest.raises(BadInputError, match="topk 4: the dashboard drafts a chain"):
        Dashboard(SAMPLES, RunSettings(steps=3, topk=4, draft_tokens=8))


def test_sample_folders_are_found_from_their_files(tmp_path):
    (tmp_path / "a" / "rows_0-2").mkdir(parents=True)
    (tmp_path / "a" / "rows_0-2" / "data_0.ckpt").write_bytes(b"")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "data_7.ckpt.gz").write_bytes(b"")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("x")
    assert find_sample_folders(tmp_path) == [tmp_path / "a", tmp_path / "b"]


def test_root_rescan(tmp_path):
    d = _dash()
    d.root.value = str(tmp_path)  # an empty folder: nothing to pick, but the typed values stay
    assert d.checkpoint.options == () and d.samples.options == ()
    assert d.checkpoint.value == str(CKPT)
    d.root.value = str(SAMPLES)
    assert str(CKPT) in d.checkpoint.options


def test_device_list_only_has_present_devices():
    devs = available_devices()
    assert devs[-1] == "cpu" and len(devs) == len(set(devs))
    assert (devs[0] == "cuda") == torch.cuda.is_available()
    assert all(not d.startswith("cuda") for d in devs) or torch.cuda.is_available()
    assert list(Dashboard(root=SAMPLES).device.options) == devs


def test_summary_follows_the_chosen_checkpoint(dash):
    assert "verdict: OFFSET" in dash.summary.value and "key layout: midlayer" in dash.summary.value
    dash.checkpoint.value = str(SAMPLES / "tiny_draft_absolute")
    assert "verdict: ABSOLUTE" in dash.summary.value
    dash.checkpoint.value = str(HS)  # a samples folder is not a checkpoint: one line, in red
    assert str(HS) in dash.summary.value and "<pre" not in dash.summary.value


# -- running ------------------------------------------------------------------------------------
def test_offset_then_absolute_replaces_the_output():
    dash = _dash()  # every bundled sample
    seen = []
    dash.run_button.observe(lambda ch: seen.append(ch["new"]), names="disabled")
    dash.reading.value = "offset"
    dash.run_button.click()
    assert seen == [True, False]  # disabled while running, usable afterwards
    _assert_ran(dash, "offset")
    offset = dash.result.overall.readings["offset"].top1
    assert offset >= 0.60
    assert _headline_top1(dash, "offset") == pytest.approx(100 * offset, abs=0.05)
    first_png = dash.figure_png

    dash.reading.value = "absolute"
    dash.run_button.click()
    _assert_ran(dash, "absolute")  # three outputs again: replaced, not appended
    absolute = dash.result.overall.readings["absolute"].top1
    assert absolute <= 0.05
    assert _headline_top1(dash, "absolute") == pytest.approx(100 * absolute, abs=0.05)
    assert "offset" not in _shown(dash)[1] and dash.figure_png != first_png


def test_controls_reach_evaluate(dash):
    dash.steps.value = 2
    dash.max_samples.value = 1
    dash.dtype.value = "bfloat16"
    dash.run_button.click()
    _assert_ran(dash, "offset")
    r = dash.result
    assert r.steps == 2 and len(r.overall.readings["offset"].step_top1) == 2
    assert r.dtype == "bfloat16" and r.device == dash.device.value
    assert all(sc.samples == 1 for sc in r.splits.values())  # max samples per split
    assert "step 1 top-1 %" in _shown(dash)[1]  # steps numbered from 0: two steps are 0 and 1


def test_not_a_checkpoint_shows_one_line_and_controls_keep_working(dash):
    dash.checkpoint.value = str(HS)  # typed: a folder that is not a checkpoint
    dash.run_button.click()
    _assert_one_line_error(dash, str(HS))
    dash.checkpoint.value = str(CKPT)  # fix it and press Run again
    dash.run_button.click()
    _assert_ran(dash, "offset")


def test_missing_path_shows_one_line(dash):
    dash.samples.value = str(SAMPLES / "no_such_folder")
    dash.run_button.click()
    _assert_one_line_error(dash, "no_such_folder")
    dash.samples.value = ""
    dash.run_button.click()
    _assert_one_line_error(dash, "samples")


@pytest.fixture
def wide_samples(tmp_path):
    """A real sample file whose hidden states are twice as wide as the checkpoint expects."""
    s = load_sample(sample_files(HS / "val")[0])
    folder = tmp_path / "wide_hidden_states"
    (folder / "rows_0-1").mkdir(parents=True)
    torch.save({
        "input_ids": s.input_ids, "loss_mask": s.loss_mask,
        "hidden_state": torch.cat([s.hidden_state] * 2, -1)[None],  # [1, T, 2H]
        "aux_hidden_state": torch.cat([s.aux_hidden_state] * 2, -1)[None],  # [1, T, 6H]
    }, folder / "rows_0-1" / "data_0.ckpt")
    return folder, 2 * s.aux_hidden_state.shape[-1]


def test_mismatched_samples_show_one_line_and_controls_keep_working(dash, wide_samples):
    folder, width = wide_samples
    dash.samples.value = str(folder)
    dash.run_button.click()
    _assert_one_line_error(dash, "data_0.ckpt", f"width {width}")
    dash.samples.value = str(HS)
    dash.reading.value = "none"
    dash.run_button.click()
    _assert_ran(dash, "none")


def test_draft_without_embed_tokens_needs_embed_from(dash):
    dash.checkpoint.value = str(SAMPLES / "tiny_draft_speculators")  # layers.0.*, no embed_tokens
    dash.run_button.click()
    _assert_one_line_error(dash, "embed_from")
    dash.embed_from.value = str(SAMPLES / "tiny_target")
    dash.run_button.click()
    _assert_ran(dash, "offset")
    assert dash.result.overall.readings["offset"].top1 >= 0.60


def test_memory_estimate_refusal_shows_one_line(dash, tmp_path):
    from test_hostile_inputs import (
        sparse_huge_draft,  # ~257 GiB declared, sparse on disk
    )

    huge = sparse_huge_draft(tmp_path)
    dash.checkpoint.value = str(huge)
    dash.run_button.click()
    _assert_one_line_error(dash, str(huge), "GiB")
    dash.checkpoint.value = str(CKPT)
    dash.run_button.click()
    _assert_ran(dash, "offset")


def test_status_says_when_torchrun_would_help(dash):
    """A run on part of a folder: the status line tells how long all of it would take, and with torchrun."""
    dash.max_samples.value = 1
    dash.HINT_AFTER_S = 0.0  # any run is "long" here
    dash.run_button.click()
    _assert_ran(dash, "offset")
    assert dash.hint and "all 384 samples would take about" in dash.hint
    assert dash.hint in dash.status.value
    dash.HINT_AFTER_S = 1e9
    dash.run_button.click()
    assert dash.hint is None and dash.status.value.startswith("done in")
