"""The figures: what each plotting function draws, on the bundled samples, and the saved metadata."""
from __future__ import annotations

import matplotlib

from conftest import SAMPLES

matplotlib.use("Agg")

import datetime as dt
import hashlib
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.colors import to_hex

import helpers
from helpers.core.errors import BadInputError
from helpers.io.checkpoint import load_mapping
from helpers.plots import mapping as plot_mapping
from helpers.plots.accuracy import accuracy_table, plot_accuracy, plot_step_accuracy
from helpers.plots.findings import plot_findings
from helpers.plots.mapping import (STANDARD, plot_coverage_strip, plot_gap_histogram, plot_offset_histogram,
                                   plot_readings, plot_staircase, save_mapping_figures)
from helpers.plots.provenance import read_figure_metadata, save_figure
from helpers.plots.speculation import (plot_accept_length_over_time, plot_accept_lengths, plot_prediction_curve,
                                       plot_throughput)
from helpers.plots.style import BAD as BAD_COLOUR
from helpers.plots.style import DPI, set_style, style
from helpers.plots.tokens import plot_token_view, token_style


GOOD = SAMPLES / "kimi_k25_mapping"
BAD = SAMPLES / "kimi_k25_mapping_absolute"


@pytest.fixture(scope="module")
def good():
    return load_mapping(GOOD)


@pytest.fixture(scope="module")
def bad():
    return load_mapping(BAD)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _red(artist) -> bool:
    fc = artist.get_facecolor() if hasattr(artist, "get_facecolor") else None
    return fc is not None and to_hex(fc if np.ndim(fc) == 1 else fc[0]) == BAD_COLOUR.lower()


# -- staircase ------------------------------------------------------------------------------------
def test_staircase_draws_d2t_and_its_first_step(good):
    ax = plot_staircase(good, zoom=None)
    line = ax.lines[0]
    y = np.asarray(line.get_ydata())
    assert np.array_equal(y, good.d2t.numpy())
    assert np.array_equal(np.asarray(line.get_xdata()), np.arange(32_000))
    # the first step: target ids 0..123 are kept, so d2t is 0 up to draft id 123 and rises at 124
    assert int(np.flatnonzero(np.diff(y) != 0)[0]) + 1 == 124
    assert "draft id" in ax.get_xlabel() and "token ids" in ax.get_ylabel()
    assert "20,954 distinct values" in ax.get_title()
    # the V - N line sits at 163,840 - 32,000, and nothing of a valid d2t lies above it
    hlines = [l for l in ax.lines if np.allclose(l.get_ydata(), 131_840)]
    assert len(hlines) == 1
    assert not any(to_hex(l.get_color()) == BAD_COLOUR.lower() and l.get_linewidth() > 2 for l in ax.lines)


def test_staircase_of_the_absolute_copy_is_the_offset_staircase_plus_arange(good, bad):
    a = np.asarray(plot_staircase(good, zoom=None).lines[0].get_ydata())
    b = np.asarray(plot_staircase(bad, zoom=None).lines[0].get_ydata())
    assert np.array_equal(b, a + np.arange(a.size))


def test_staircase_marks_entries_above_v_minus_n_only_for_the_misencoded_copy(good, bad):
    ax = plot_staircase(bad, zoom=(1000, 1010))
    red = [l for l in ax.lines if to_hex(l.get_color()) == BAD_COLOUR.lower() and l.get_linewidth() > 2]
    assert len(red) == 1
    drawn = np.asarray(red[0].get_ydata(), dtype=float)
    expected = int((bad.d2t > 163_840 - 32_000).sum())
    assert int(np.isfinite(drawn).sum()) == expected > 0
    inset = ax.child_axes[0]
    assert np.array_equal(np.asarray(inset.lines[0].get_ydata()), bad.d2t[1000:1010].numpy())


def test_staircase_on_a_given_axes_returns_it(good):
    fig, ax = plt.subplots()
    assert plot_staircase(good, ax=ax) is ax


@pytest.mark.parametrize("fn", ["plot_staircase", "plot_offset_histogram", "plot_gap_histogram", "plot_coverage_strip",
                                "plot_reading", "plot_readings", "mapping_figures", "reading_stats"])
def test_mapping_figures_take_a_loaded_mapping_not_a_path(fn):
    args = ("offset",) if fn == "reading_stats" else ()
    for given in (GOOD, str(GOOD)):
        with pytest.raises(TypeError, match=r"takes a VocabMapping.*helpers\.io\.checkpoint\.load_mapping"):
            getattr(plot_mapping, fn)(given, *args)
    assert not plt.get_fignums()  # refused before drawing anything


def test_save_mapping_figures_refuses_a_path_before_writing(tmp_path):
    with pytest.raises(TypeError, match="save_mapping_figures takes a VocabMapping, not a PosixPath"):
        save_mapping_figures(GOOD, tmp_path / "figs")
    assert not (tmp_path / "figs").exists()
    assert not hasattr(plot_mapping, "as_mapping")


def test_plots_modules_import_one_way():
    """Within plots: style <- provenance <- mapping / serving (which save their figures), and style <- accuracy /
    speculation / findings / tokens.
    Outside: only helpers.io.mapping, helpers.core.errors (and the kit version); never the CLI or widgets/report."""
    import ast

    allowed = {
        "style": set(), "provenance": {"style"}, "mapping": {"style", "provenance"},
        "accuracy": {"style"}, "speculation": {"style"}, "serving": {"style", "provenance"}, "findings": {"style"}, "tokens": {"style"},
        "draft_diff": {"style"}, "__init__": set(),
    }
    outside_ok = {"helpers", "helpers.io", "helpers.io.mapping", "helpers.io.origin", "helpers.core.errors",
                  "helpers.io.checkpoint"}
    folder = helpers.__path__[0] + "/plots"
    for name, ok in allowed.items():
        tree = ast.parse(open(f"{folder}/{name}.py").read())
        inside, outside = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                inside.add((node.module or "").split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.level == 2:
                outside.add("helpers" + ("." + node.module if node.module else ""))
            elif isinstance(node, ast.ImportFrom | ast.Import):
                mods = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                inside |= {m.split(".")[2] for m in mods if m.startswith("helpers.plots.")}
                outside |= {m for m in mods if m.split(".")[0] == "helpers" and not m.startswith("helpers.plots.")}
        assert inside <= ok, (name, inside - ok)
        assert outside <= outside_ok, (name, outside - outside_ok)


# -- histograms ------------------------------------------------------------------------------------
def test_offset_histogram_counts_every_draft_id_and_reds_the_impossible(good, bad):
    ax = plot_offset_histogram(good, bins=60)
    bars = ax.containers[0].patches
    heights = np.array([p.get_height() for p in bars])
    assert heights.sum() == 32_000
    assert 55 <= len(bars) <= 70  # bins are aligned on V - N, so the count is close to 60
    assert not any(_red(p) and p.get_height() > 0 for p in bars)
    assert "d2t" in ax.get_xlabel() and "token ids" in ax.get_xlabel()

    ax = plot_offset_histogram(bad, bins=60)
    red = sum(p.get_height() for p in ax.containers[0].patches if _red(p))
    assert red == int((bad.d2t > 131_840).sum()) > 0
    assert f"{int(red):,} above V − N" in ax.get_title()


def test_offset_histogram_log_option(good):
    assert plot_offset_histogram(good, log=True).get_yscale() == "log"


def test_gap_histogram_bars_equal_the_gaps_between_kept_ids(good):
    ax = plot_gap_histogram(good, max_gap=30)
    heights = np.array([p.get_height() for p in ax.patches])
    assert len(heights) == 32  # gaps 0..30 and one overflow bar
    kept = np.sort(good.d2t.numpy() + np.arange(32_000))
    g = np.diff(kept)
    expected = [int((g == k).sum()) for k in range(31)] + [int((g > 30).sum())]
    assert heights.tolist() == expected
    assert heights[0] == 0 and heights[1] == 11_046  # no duplicates; 11,046 consecutive pairs
    assert "offset reading" in ax.get_xlabel() and "token ids" in ax.get_xlabel()


def test_gap_histogram_shows_duplicates_under_the_wrong_reading(good, bad):
    wrong = plot_gap_histogram(good, reading="absolute", log=True)
    assert wrong.get_yscale() == "log"
    assert wrong.patches[0].get_height() == 32_000 - 20_954  # draft ids sharing a target id
    assert _red(wrong.patches[0])
    assert "absolute reading" in wrong.get_xlabel()
    # the misencoded copy read as offsets: every gap is one too large, no gap of 1 at all
    shifted = plot_gap_histogram(bad, reading="offset", max_gap=30)
    right = plot_gap_histogram(good, reading="offset", max_gap=30)
    hs = [p.get_height() for p in shifted.patches]
    hr = [p.get_height() for p in right.patches]
    assert hs[1] == 0 and hs[2:31] == hr[1:30]


# -- coverage strip --------------------------------------------------------------------------------
def _stairs(ax):
    from matplotlib.patches import StepPatch

    return [p for p in ax.patches if isinstance(p, StepPatch)]


def test_coverage_strip_shares_add_up_to_the_kept_ids(good):
    ax = plot_coverage_strip(good, bin_size=320)
    kept, t2d = _stairs(ax)[0], _stairs(ax)[-1]
    values, edges = kept.get_data()[0], kept.get_data()[1]
    assert np.isclose(values.sum() * 320, 32_000)
    assert edges[-1] >= 163_840 and len(values) == 512
    # the first bin holds ids 0..319: 124 prefix ids plus whatever else is kept there
    ids = good.targets("offset").numpy()
    assert np.isclose(values[0], (ids < 320).sum() / 320)
    assert np.allclose(t2d.get_data()[0], values)  # the right reading lies on t2d
    assert "target id" in ax.get_xlabel() and "per 320 ids" in ax.get_ylabel()
    inset = ax.child_axes[0]
    assert "0–123 all kept" in inset.get_title("left")


def test_coverage_strip_puts_the_misencoded_ids_past_the_vocab_end(bad):
    ax = plot_coverage_strip(bad, bin_size=320, prefix=None)
    red = [p for p in _stairs(ax) if _red(p)]
    assert len(red) == 1
    out = int(((bad.d2t + torch.arange(32_000)) >= 163_840).sum())
    assert np.isclose(red[0].get_data()[0].sum() * 320, out) and out > 0
    assert f"{out:,} out of range" in ax.get_title()
    assert ax.get_xlim()[1] > 163_840


# -- the readings side by side --------------------------------------------------------------------
def test_readings_side_by_side_make_the_wrong_one_look_wrong(good):
    fig = plot_readings(good)
    off, ab = fig.axes[:2]
    assert "offset reading" in off.get_title() and "absolute reading" in ab.get_title()
    assert "0 of 32,000 ids ≠ t2d" in off.get_title() and "0 duplicates" in off.get_title()
    mism = int((good.d2t != good.d2t + torch.arange(32_000)).sum())
    assert f"{mism:,} of 32,000 ids ≠ t2d" in ab.get_title() and "11,046 duplicates" in ab.get_title()
    assert off.title.get_color() != ab.title.get_color()
    # drawn data: the reading's line is its target ids, the dashed line is t2d's True ids
    kept = torch.nonzero(good.t2d).flatten().numpy()
    assert np.array_equal(off.lines[1].get_ydata(), kept) and np.array_equal(off.lines[0].get_ydata(), kept)
    assert np.array_equal(ab.lines[1].get_ydata(), good.d2t.numpy())
    assert len(off.collections) == 0 and len(ab.collections) == 1  # red dots only where wrong
    assert off.get_ylim() == ab.get_ylim()
    assert "draft id" in off.get_xlabel() and "offset reading" in off.get_ylabel()


def test_readings_mirror_between_the_sample_and_its_misencoded_copy(good, bad):
    g, b = plot_readings(good), plot_readings(bad)
    # the misencoded copy's absolute reading draws exactly what the sample's offset reading draws
    assert np.array_equal(b.axes[1].lines[1].get_ydata(), g.axes[0].lines[1].get_ydata())
    assert "✓" in b.axes[1].get_title() and "✗" in b.axes[0].get_title()
    out = int(((bad.d2t + torch.arange(32_000)) >= 163_840).sum())
    assert f"{out:,} out of range" in b.axes[0].get_title()


def test_readings_accept_given_axes(good):
    fig, axes = plt.subplots(1, 3)
    got = plot_readings(good, ax=axes, readings=("offset", "absolute", "none"))
    assert got is fig and "no mapping" in axes[2].get_title()
    with pytest.raises(ValueError):
        plot_readings(good, ax=axes[:2], readings=("offset",))


# -- accuracy -------------------------------------------------------------------------------------
EVAL = {
    "readings": {
        "offset": {"top1": 0.747, "topk": 0.912, "step_top1": [0.747, 0.61, 0.52]},
        "absolute": {"top1": 0.0, "topk": 0.004, "step_top1": [0.0, 0.0, 0.0]},
        "none": {"top1": 0.012, "topk": 0.03, "step_top1": [0.012, 0.004, 0.001]},
    },
    "coverage": 0.95,
    "tokens": 4096,
}


class _Result:  # what evaluate() returns: only to_dict() matters here
    def to_dict(self):
        return EVAL


@pytest.mark.parametrize("result", [EVAL, EVAL["readings"], _Result()], ids=["to_dict", "plain", "object"])
def test_accuracy_bars_per_reading(result):
    ax = plot_accuracy(result)
    heights = [round(p.get_height(), 6) for p in ax.patches]
    assert len(heights) == 6  # top-1 and top-k for three readings
    assert heights[:3] == [74.7, 0.0, 1.2] and heights[3:] == [91.2, 0.4, 3.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["offset", "absolute", "none"]
    assert "%" in ax.get_ylabel()
    has_cov = any(np.allclose(l.get_ydata(), 95.0) for l in ax.lines)
    assert has_cov == (result is not EVAL["readings"])  # the coverage ceiling, when the result has it


@pytest.mark.parametrize("topk", [1, 3])
def test_accuracy_bars_draw_top_k_only_when_more_than_one_candidate_was_scored(topk, samples_dir):
    from helpers.measure.evaluate import evaluate

    r = evaluate(samples_dir / "tiny_draft_sglang", samples_dir / "tiny_hidden_states" / "val",
                 readings=("offset", "absolute"), steps=1, topk=topk, max_samples=2, progress=False)
    ax = plot_accuracy(r)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(ax.patches) == (2 if topk == 1 else 4)  # one bar per reading, plus top-k when k > 1
    assert ("top-3" in labels) == (topk == 3) and "top-k" not in labels
    assert not any("top-1" != l and l.startswith("top-1") for l in labels)


def test_accuracy_per_step_lines_and_splits():
    ax = plot_step_accuracy(EVAL)
    assert len(ax.lines) == 3
    assert np.allclose(ax.lines[0].get_ydata(), [74.7, 61.0, 52.0])
    assert list(ax.lines[0].get_xdata()) == [0, 1, 2]
    assert "step" in ax.get_xlabel() and "%" in ax.get_ylabel()
    split = {"train": {"offset": {"top1": 80.0, "step_top1": [80.0, 70.0]}},
             "val": {"offset": {"top1": 75.0, "step_top1": [75.0, 60.0]}}}
    df = accuracy_table(split)
    assert df["split"].tolist() == ["train", "val"] and df["top1"].tolist() == [80.0, 75.0]  # percent kept
    ax = plot_accuracy(split)
    assert [round(p.get_height(), 6) for p in ax.patches] == [80.0, 75.0]
    with pytest.raises(BadInputError):
        accuracy_table({"coverage": 0.9})


def test_accuracy_from_the_evaluate_json_layout_pooled_and_per_split():
    # helpers.measure.evaluate's to_dict(): pooled "readings" at the top level, per split under "splits"
    d = {
        "coverage": 0.9, "tokens": 100,
        "readings": {"offset": {"top1": 0.7, "topk": 0.9, "step_top1": [0.7, 0.5]},
                     "absolute": {"top1": None, "topk": None, "step_top1": [None, None]}},
        "splits": {"train": {"coverage": 0.9, "readings": {"offset": {"top1": 0.72, "topk": 0.91, "step_top1": [0.72, 0.5]}}},
                   "val": {"coverage": 0.9, "readings": {"offset": {"top1": 0.68, "topk": 0.88, "step_top1": [0.68, 0.45]}}}},
    }
    df = accuracy_table(d)
    assert df["split"].isna().tolist() == [True, True, False, False] and df["split"].tolist()[2:] == ["train", "val"]
    assert np.isnan(df["top1"][1])  # nothing scored stays NaN, not 0
    pooled = plot_accuracy(d)
    assert [round(p.get_height(), 6) for p in pooled.patches] == [70.0, 0.0, 90.0, 0.0]
    per_split = plot_accuracy(d, splits=True)
    assert [round(p.get_height(), 6) for p in per_split.patches] == [72.0, 68.0, 91.0, 88.0]
    assert [t.get_text() for t in per_split.get_xticklabels()] == ["offset\n(train)", "offset\n(val)"]
    steps = plot_step_accuracy(d, splits=True)
    assert [list(l.get_ydata()) for l in steps.lines] == [[72.0, 50.0], [68.0, 45.0]]


# -- accept length and throughput -------------------------------------------------------------------
def test_accept_length_distribution_from_lengths_and_from_a_histogram():
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.geometric(0.55, 5000), 8)
    ax = plot_accept_lengths(lengths)
    vals, counts = np.unique(lengths, return_counts=True)
    assert [p.get_height() for p in ax.patches] == counts.tolist()
    assert [p.get_x() + p.get_width() / 2 for p in ax.patches] == pytest.approx(vals.tolist())
    mean_line = [l for l in ax.lines if "mean" in l.get_label()][0]
    assert mean_line.get_xdata()[0] == pytest.approx(lengths.mean())
    assert "accept length" in ax.get_xlabel() and "bonus" in ax.get_xlabel()

    hist = dict(zip(vals.tolist(), counts.tolist()))
    ax2 = plot_accept_lengths(hist, share=True)
    assert [p.get_height() for p in ax2.patches] == pytest.approx((counts / counts.sum()).tolist())
    assert "share" in ax2.get_ylabel()


def test_accept_length_distribution_from_a_replay_histogram():
    # what helpers.acceptance.chain.ReplayResult.histogram / to_dict()["histogram"] hold (JSON keys are strings)
    hist = {"1": 700, "2": 200, "3": 80, "4": 20}
    ax = plot_accept_lengths({"histogram": hist, "mean": 1.42})
    assert [p.get_height() for p in ax.patches] == [700, 200, 80, 20]
    mean = [l for l in ax.lines if "mean" in l.get_label()][0].get_xdata()[0]
    assert mean == pytest.approx((700 + 400 + 240 + 80) / 1000)
    assert "P(length = 1) = 70.0%" in ax.get_title()


def test_throughput_curve_and_break_even_with_the_investigation_numbers():
    cost = 90 * 1.9 / 46.7  # the step cost that puts 1.9 at 46.7 tok/s
    ax = plot_throughput(90, cost, measured=[(1.9, 46.7)])
    x, y = np.asarray(ax.lines[0].get_xdata()), np.asarray(ax.lines[0].get_ydata())
    assert np.allclose(y, 90 * x / cost)
    be = [l for l in ax.lines if "break-even" in l.get_label()][0]
    assert be.get_xdata()[0] == pytest.approx(3.661, abs=1e-3) and be.get_ydata()[0] == 90
    assert np.interp(cost, x, y) == pytest.approx(90)
    pts = ax.collections[-1].get_offsets()
    assert np.allclose(pts, [[1.9, 46.7]])
    assert "tokens/s" in ax.get_ylabel() and "accept length" in ax.get_xlabel()
    from helpers.acceptance.throughput import throughput_model

    model = throughput_model(90, 1.9, 46.7)  # the simulate module's model draws the same curve
    ax2 = plot_throughput(model)
    assert np.allclose(ax2.lines[0].get_ydata(), 90 * np.asarray(ax2.lines[0].get_xdata()) / model.step_cost)


def test_accept_length_over_time_from_a_log_table():
    t = pd.date_range("2026-01-01 10:00", periods=30, freq="10s")
    df = pd.DataFrame({"time": t, "accept_length": np.linspace(1.5, 2.1, 30)})
    ax = plot_accept_length_over_time(df, prediction=3.2)
    assert np.allclose(ax.lines[0].get_ydata(), df["accept_length"])
    assert any(np.allclose(l.get_ydata(), 3.2) for l in ax.lines[1:])
    assert ax.get_xlabel() == "time" and "accept length" in ax.get_ylabel()
    by_line = pd.DataFrame({"line": [3, 9, 15], "accept_length": [1.9, 1.8, 2.0]})
    ax = plot_accept_length_over_time(by_line, prediction=[2.0, 2.0, 2.0])
    assert list(ax.lines[0].get_xdata()) == [3, 9, 15] and ax.get_xlabel() == "log line number"
    gaps = pd.DataFrame({"line": [1, 2, 3], "accept_length": [1.5, np.nan, 2.5]})  # a stats row without one
    ax = plot_accept_length_over_time(gaps, prediction=[1.0, 9.0, 2.0])
    assert list(ax.lines[0].get_xdata()) == [1, 3] and list(ax.lines[-1].get_ydata()) == [1.0, 2.0]
    with pytest.raises(BadInputError, match="accept-length column"):
        plot_accept_length_over_time(pd.DataFrame({"line": [1], "tps": [3.0]}))


def test_accept_length_over_time_from_a_bundled_sglang_log():
    from helpers.serving.logs import read_log

    log = read_log(SAMPLES / "logs" / "sglang.log")
    ax = plot_accept_length_over_time(log, prediction=2.5)
    rows = log.table[log.table["accept_length"].notna()]
    assert np.allclose(ax.lines[0].get_ydata(), rows["accept_length"]) and len(rows) > 10
    assert f"over {len(rows):,} log records" in ax.get_title()


# -- saving with provenance ---------------------------------------------------------------------------
def test_save_figure_metadata_round_trip(tmp_path, good):
    ax = plot_staircase(good)
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    written = save_figure(ax.figure, tmp_path / "stair.png", source=GOOD, verdict=good.verdict(),
                                caption="bug report", formats=("png", "svg"))
    assert [p.suffix for p in written] == [".png", ".svg"] and all(p.exists() for p in written)
    meta = read_figure_metadata(written[0])
    d2t_file = GOOD / "d2t.pt"
    assert meta["source"] == str(d2t_file)
    assert meta["source_size"] == d2t_file.stat().st_size
    assert meta["source_sha256"] == hashlib.sha256(d2t_file.read_bytes()).hexdigest()
    assert [s["path"] for s in meta["sources"]] == [str(GOOD / "d2t.pt"), str(GOOD / "t2d.pt")]
    assert meta["sources"][1]["sha256"] == hashlib.sha256((GOOD / "t2d.pt").read_bytes()).hexdigest()
    assert meta["kit_version"] == helpers.__version__
    created = dt.datetime.fromisoformat(meta["created"])
    assert before <= created <= dt.datetime.now(dt.timezone.utc)
    assert meta["verdict"] == "offset" and meta["checkpoint"] == str(GOOD) and meta["caption"] == "bug report"
    assert read_figure_metadata(written[1]) == meta  # the SVG carries the same record
    # the caption line is drawn in the saved image, and removed from the figure afterwards
    from PIL import Image

    with Image.open(written[0]) as im:
        assert "verdict: OFFSET" in im.text["Description"] and str(GOOD) in im.text["Description"]
        h_saved = im.size[1]
    assert not any("verdict" in t.get_text() for t in ax.figure.texts)
    plain = tmp_path / "plain.png"
    ax.figure.savefig(plain, bbox_inches="tight", pad_inches=0.12, dpi=DPI)
    with Image.open(plain) as im:
        assert h_saved > im.size[1]  # room for the caption line


def test_save_figure_with_a_mapping_as_source_and_unreadable_metadata(tmp_path, bad):
    fig = plot_readings(bad)
    (png,) = save_figure(fig, tmp_path / "r", source=bad, verdict="absolute")
    meta = read_figure_metadata(png)
    assert meta["checkpoint"] == str(BAD) and meta["verdict"] == "absolute"
    assert meta["source_sha256"] == hashlib.sha256((BAD / "d2t.pt").read_bytes()).hexdigest()
    other = tmp_path / "other.png"
    fig.savefig(other)
    with pytest.raises(BadInputError, match="no d2t-lab metadata"):
        read_figure_metadata(other)
    with pytest.raises(BadInputError, match="does not exist"):
        save_figure(fig, tmp_path / "x", source=tmp_path / "missing.pt")
    with pytest.raises(ValueError, match="unsupported format 'doc'"):
        save_figure(fig, tmp_path / "y", formats=("png", "doc"))
    assert not (tmp_path / "y.png").exists()  # every format is checked before anything is written


def test_logs_plot_is_saved_with_the_log_file_as_its_source(tmp_path, capsys):
    """`logs --plot` goes through save_figure: the PNG's metadata and caption name the log file."""
    from PIL import Image

    from helpers.__main__ import main

    log = SAMPLES / "logs" / "sglang.log"
    out = tmp_path / "accept.png"
    assert main(["logs", str(log), "--plot", str(out)]) == 0
    meta = read_figure_metadata(out)
    assert Path(meta["source"]).resolve() == log.resolve() and len(meta["sources"]) == 1
    assert meta["source_size"] == log.stat().st_size
    assert meta["source_sha256"] == hashlib.sha256(log.read_bytes()).hexdigest()
    assert meta["verdict"] is None and meta["kit_version"] == helpers.__version__
    with Image.open(out) as im:
        assert meta["source"] in im.text["Description"]  # the caption line drawn under the plot
    # the suffix still picks the format, and the file is written exactly where asked
    assert main(["logs", str(log), "--plot", str(tmp_path / "accept.pdf")]) == 0
    assert (tmp_path / "accept.pdf").read_bytes()[:5] == b"%PDF-"
    assert main(["logs", str(log), "--plot", str(tmp_path / "UPPER.PNG")]) == 0
    assert (tmp_path / "UPPER.PNG").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["logs", str(log), "--plot", str(tmp_path / "bare")]) == 0
    assert read_figure_metadata(tmp_path / "bare.png")["source"] == meta["source"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["UPPER.PNG", "accept.pdf", "accept.png", "bare.png"]
    capsys.readouterr()


def test_style_is_not_applied_at_import_and_set_style_applies_it():
    import importlib
    import sys

    import matplotlib as mpl

    mpl.rcdefaults()
    for name in ("style", "provenance", "mapping", "accuracy", "speculation", "findings"):  # every module runs again
        importlib.reload(sys.modules[f"helpers.plots.{name}"])
    assert mpl.rcParams["axes.spines.top"] is True and mpl.rcParams["axes.grid"] is False
    assert hasattr(style(), "__enter__")  # the context manager
    ax = plot_throughput(90, 3.0)
    assert not ax.spines["top"].get_visible() and ax.xaxis.get_gridlines()[0].get_visible()  # the kit's style
    assert mpl.rcParams["axes.spines.top"] is True  # ... without touching the global rcParams
    set_style()
    assert mpl.rcParams["axes.spines.top"] is False and mpl.rcParams["axes.grid"] is True
    mpl.rcdefaults()


# -- the figures command and notebook 02 ----------------------------------------------------------------
def test_figures_command_writes_the_standard_figures_with_metadata(tmp_path, cli):
    r = cli("figures", BAD, "-o", tmp_path, "--prefix", "kimi_absolute")
    assert r.returncode == 0, r.stderr
    files = sorted(p.name for p in tmp_path.glob("*.png"))
    assert files == sorted(f"kimi_absolute_{n}.png" for n in STANDARD)
    for p in tmp_path.glob("*.png"):
        meta = read_figure_metadata(p)
        assert meta["verdict"] == "absolute" and meta["source"] == str(BAD / "d2t.pt")
        assert 10_000 < p.stat().st_size < 250_000
    bad = cli("figures", tmp_path / "nope", "-o", tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "nope" in bad.stderr


@pytest.mark.slow
def test_plot_findings_grid_colours_each_code_by_worst_severity():
    from types import SimpleNamespace as F

    rows = {
        "before": [F(code="d2t-absolute", severity="error"), F(code="key-layout", severity="info"),
                   F(code="key-layout", severity="warning")],
        "after": [{"code": "key-layout", "severity": "info"}],
    }
    ax = plot_findings(rows)
    grid = ax.images[0].get_array()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["d2t-absolute", "key-layout"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["before", "after"]
    assert grid.tolist() == [[3, 2], [0, 1]]  # error, warning (worst of info+warning) / none, info
    assert "1 of 2 with errors" in ax.get_title()
    plt.close("all")


def test_plot_prediction_curve_draws_the_closed_form():
    from helpers.acceptance.chain import chain_expected
    from helpers.acceptance.drafting import Drafting

    chain = Drafting(4)
    ax = plot_prediction_curve([chain], marks={"measured": (0.5, chain.expected(0.5))}, rates=[0.0, 0.5, 0.9])
    line = ax.lines[0]
    assert list(line.get_xdata()) == [0.0, 0.5, 0.9]
    assert np.allclose(line.get_ydata(), [chain_expected(a, 4) for a in (0.0, 0.5, 0.9)])
    assert ax.lines[1].get_ydata()[0] == pytest.approx(chain_expected(0.5, 4))
    assert "acceptance" in ax.get_xlabel() and "accept length" in ax.get_ylabel()
    plt.close("all")


def test_token_view_figure_marks_each_token_by_how_it_came(tmp_path):
    """The token view draws one box per generated token, coloured by kind, one panel per reading."""
    from matplotlib.colors import to_hex

    run = {"pieces": ["a", "b", "\n", "c"], "kinds": ["target", "draft", "draft", "correction"],
           "draft_pos": [-1, 0, 1, -1], "mean_accept_length": 2.0}
    miss = {**run, "kinds": ["target", "correction", "correction", "correction"], "draft_pos": [-1] * 4,
            "mean_accept_length": 1.0}
    fig = plot_token_view({"offset": run, "absolute": miss})
    ax0, ax1 = fig.axes[:2]
    colours = [[to_hex(p.get_facecolor()) for p in ax.patches] for ax in (ax0, ax1)]
    bad = token_style("correction")[0].lower()
    assert colours[0][1] != colours[0][2] and colours[0][3] == bad  # draft positions shaded apart
    assert colours[1][1:] == [bad] * 3
    assert "\u21b5" in [t.get_text() for t in ax0.texts]  # the newline token is visible
    assert "accept length 1.00" in ax1.get_title()
    written = save_figure(fig, tmp_path / "tv", source=None)
    assert written[0].suffix == ".png" and read_figure_metadata(written[0])
