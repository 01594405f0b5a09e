"""A report is about the user's inputs only, and says one thing.

Two real reports run once per module on copies of bundled files placed outside `data_samples/`
(as a user's own files would be):
- the healthy bundle: `make demo`'s inputs (the healthy draft, its samples, a serving log that
  shows accept length ~1.0 - data_samples/logs/sglang.log: the draft served with d2t read as
  absolute ids -, the tiny target and prompts), every notebook, notebook 07 included;
- the misencoded draft with no log and no target.
Each test reads the bundles as a person would: summary.md, the executed notebooks' outputs, the
HTML, the PNGs. The conclusion a report draws without a target in the loop is computed by the
report's own summary code from the healthy bundle's notebook 01-06 outputs, with the target taken
out of the settings.
"""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from conftest import SAMPLES

pytestmark = pytest.mark.slow

MAX_SAMPLES = "6"
MAX_PROMPTS = "4"
SAMPLE_LOG = SAMPLES / "logs" / "sglang.log"


def _copy_samples(src: Path, dst: Path, per_split: int = 6) -> Path:
    """The first `per_split` sample files of each split, in SpecForge's layout."""
    for split in ("train", "val"):
        files = sorted((src / split).rglob("data_*.ckpt*"), key=lambda p: int(re.findall(r"\d+", p.name)[0]))
        for f in files[:per_split]:
            out = dst / split / f.parent.name / f.name
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, out)
    return dst


@pytest.fixture(scope="module")
def user_files(tmp_path_factory, samples_dir):
    root = tmp_path_factory.mktemp("user")
    files = {
        "draft": shutil.copytree(samples_dir / "tiny_draft_sglang", root / "my_draft"),
        "bad": shutil.copytree(samples_dir / "tiny_draft_absolute", root / "my_bad_draft"),
        "samples": _copy_samples(samples_dir / "tiny_hidden_states", root / "my_states"),
        "log": Path(shutil.copy2(samples_dir / "logs" / "sglang.log", root / "server.log")),
        "target": shutil.copytree(samples_dir / "tiny_target", root / "my_target"),
        "prompts": Path(shutil.copy2(samples_dir / "prompts.jsonl", root / "my_prompts.jsonl")),
    }
    return files


def _report(args, out):
    from helpers.__main__ import main

    code = main(["report", *map(str, args), "-o", str(out)])
    return code, out


@pytest.fixture(scope="module")
def healthy_bundle(user_files, tmp_path_factory):
    f = user_files
    code, out = _report([f["draft"], "--samples", f["samples"], "--log", f["log"], "--baseline-tps", "90",
                         "--max-samples", MAX_SAMPLES, "--engine", "sglang", "--target", f["target"],
                         "--prompts", f["prompts"], "--max-prompts", MAX_PROMPTS, "--max-new-tokens", "24",
                         "--device", "cpu", "--batch-size", "3"],
                        tmp_path_factory.mktemp("r") / "healthy")
    assert code == 0, (out / "summary.md").read_text()
    return out


@pytest.fixture(scope="module")
def misencoded_bundle(user_files, tmp_path_factory):
    f = user_files
    from helpers.ui.notebook import SEQUENCE
    from helpers.ui.report import run_report
    from helpers.ui.settings import RunSettings

    # what the tests read: the summary, notebooks 01, 03, 04 and 06 (02 only draws figures)
    s = RunSettings(checkpoint=str(f["bad"]), samples=str(f["samples"]), max_samples=int(MAX_SAMPLES))
    out = tmp_path_factory.mktemp("r") / "bad"
    res = run_report(s, out, notebooks=tuple(n for n in SEQUENCE if not n.startswith("02")), progress=None)
    assert res.ok, [(r.name, r.error) for r in res.runs if not r.ok]
    return out


def _texts(nb_path: Path) -> list[str]:
    """Every output of an executed notebook as text (streams, text/plain, text/html)."""
    nb = json.loads(nb_path.read_text())
    out = []
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            if "text" in o:
                out.append("".join(o["text"]))
            for mime in ("text/plain", "text/html"):
                if mime in o.get("data", {}):
                    out.append("".join(o["data"][mime]))
    return out


def _text(bundle: Path, name: str) -> str:
    return "\n".join(_texts(bundle / "notebooks" / f"{name}.ipynb"))


def test_no_bundled_data_in_a_users_bundle(healthy_bundle, samples_dir):
    from helpers.plots.provenance import read_figure_metadata

    needle = "data_samples"
    assert needle in str(samples_dir)  # the test would see the bundled folder's name if it leaked
    leaks = []
    for p in healthy_bundle.rglob("*"):
        if p.suffix in (".md", ".json", ".html", ".ipynb") and needle in p.read_text():
            leaks.append(str(p))
        if p.suffix == ".png" and needle in json.dumps(read_figure_metadata(p)):
            leaks.append(str(p))
    assert not leaks, leaks


def test_figures_name_the_users_files(healthy_bundle, user_files):
    from helpers.plots.provenance import caption_line, read_figure_metadata

    figs = healthy_bundle / "figures"
    log = read_figure_metadata(figs / "04_accept_length_simulation" / "logs_vs_prediction.png")
    assert caption_line(log).startswith(f"log: {user_files['log']}")
    draft = read_figure_metadata(figs / "03_accuracy_with_and_without_mapping" / "03_readings.png")
    assert caption_line(draft).startswith(f"checkpoint: {user_files['draft']}")
    assert {r["path"] for r in draft["sources"]} <= {str(p) for p in user_files["draft"].iterdir()}


def test_every_figure_shown_once_and_saved_once(healthy_bundle):
    summary = json.loads((healthy_bundle / "summary.json").read_text())
    total = 0
    for run in summary["notebooks"]:
        nb = json.loads(Path(run["notebook"]).read_text())
        images = sum("image/png" in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", []))
        saved = sorted((healthy_bundle / "figures" / run["name"]).glob("*.png"))
        assert images == len(saved) == len(run["figures"]), (run["name"], images, [p.name for p in saved])
        total += images
    assert total >= 15  # 1 + 6 + 3 + 4 + 1 with every input given (03 has no misencoded copy), 07's 3+


def test_summary_and_notebooks_agree(healthy_bundle):
    md = (healthy_bundle / "summary.md").read_text()
    s = json.loads((healthy_bundle / "summary.json").read_text())["numbers"]
    # verdict: summary vs notebook 01
    verdict = re.search(r"^\*\*(\w+)\*\* — draft vocab", md, re.M).group(1)
    assert f"VERDICT: {verdict}" in _text(healthy_bundle, "01_mapping_inspection")
    # drafting settings: summary vs notebook 04 (the log's server_args: tree 5/4/16)
    nb04 = _text(healthy_bundle, "04_accept_length_simulation")
    label = s["predicted_accept_length"]["drafting"]
    assert label == "tree 5/4/16 (steps/topk/draft tokens)" and f"drafting: {label}" in nb04
    assert "steps = 5  (server_args in " in nb04  # where the value came from, as the summary says
    assert f"| drafting | {label}" in md
    # accuracy: summary's validation offset top-1 vs notebook 03's table and notebook 04's acceptance
    val = re.search(r"^\| val \| offset \| ([\d.]+) %", md, re.M).group(1)
    assert re.search(rf"\b{re.escape(val)}\b", _text(healthy_bundle, "03_accuracy_with_and_without_mapping"))
    rate = re.search(r"per-token acceptance a = ([\d.]+)", nb04).group(1)
    assert f"{100 * float(rate):.1f}" == val
    assert f"per-token acceptance **{rate}**" in md
    # accept length: predicted, replayed and measured, summary vs notebook 04
    predicted = re.search(r"predicted accept length, tree 5/4/16 \(steps/topk/draft tokens\): \*\*([\d.]+)\*\*", md).group(1)
    assert f"predicted accept length, {label}: {predicted}" in nb04
    replayed = re.search(r"replayed accept length, offset reading, chain of (\d+): ([\d.]+)", md)
    assert replayed.group(1) == "5"
    in_nb04 = float(re.search(r"offset: replayed accept length ([\d.]+)", nb04).group(1))
    assert f"{in_nb04:.2f}" == replayed.group(2)
    measured = re.search(r"measured accept length \(serving logs\): \*\*([\d.]+)\*\*", md).group(1)
    assert "measured accept length (mean over" in nb04 and f": {measured}" in nb04
    # the conclusion is the same sentence in both
    assert s["accept_length_conclusion"] in nb04 and s["accept_length_conclusion"] in md


def _summary_without_target(bundle: Path, f: dict) -> dict:
    """The summary the report writes for the same inputs with no --target: the report's own summary
    code on the bundle's notebook 01-06 runs (notebook 07 is the only one the target adds)."""
    from helpers.ui.notebook import SPECULATE
    from helpers.ui.report import NotebookRun, environment
    from helpers.ui.settings import RunSettings, resolve_drafting
    from helpers.ui.summary import summary_dict

    runs = [NotebookRun(**r) for r in json.loads((bundle / "summary.json").read_text())["notebooks"]
            if r["name"] != SPECULATE]
    s = resolve_drafting(RunSettings(checkpoint=str(f["draft"]), samples=str(f["samples"]), logs=(str(f["log"]),),
                                     baseline_tps=90.0, engine="sglang", max_samples=int(MAX_SAMPLES)))
    return summary_dict(s, runs, environment())


def test_healthy_draft_with_a_low_serving_log_is_a_deployment_bug(healthy_bundle, user_files):
    s = _summary_without_target(healthy_bundle, user_files)
    assert s["numbers"]["accept_length_status"] == "below"
    assert "healthy offline, yet serving accepts far less" in s["conclusion"][0]
    assert "deployment bug" in s["conclusion"][0] and "Healthy:" not in s["conclusion"][0]
    nb04 = _text(healthy_bundle, "04_accept_length_simulation")
    assert "is well below the predicted" in nb04 and "deployment bug" in nb04
    from helpers.serving.logs import read_log

    assert s["numbers"]["measured"] == read_log(SAMPLE_LOG).summary()["mean_accept_length"]
    # without a target in the loop the verdict rests on a prediction, and says how to strengthen it
    assert "rests on a prediction" in s["conclusion"][0] and "--target" in s["conclusion"][0]
    assert "speculate" not in s["numbers"]


# -- with the target in the loop: `make demo`'s report tells one story ------------------------------
def test_the_report_concludes_from_its_own_strongest_numbers(healthy_bundle):
    s = json.loads((healthy_bundle / "summary.json").read_text())
    md = (healthy_bundle / "summary.md").read_text()
    n = s["numbers"]
    figs = healthy_bundle / "figures"
    nb04 = json.loads((figs / "04_accept_length_simulation" / "numbers.json").read_text())
    nb07 = json.loads((figs / "07_speculative_decoding" / "numbers.json").read_text())
    serving, ef = nb04["serving_figure"], nb07["speculate"]["offset"]
    # the verdict follows from the recorded numbers: serving well below the engine-free measurement
    z = (serving["value"] - ef["mean_accept_length"]) / math.hypot(serving["stderr"], ef["stderr"])
    assert serving["value"] == pytest.approx(nb04["measured"])
    assert s["ladder"]["verdict"] == ("a deployment bug" if z <= -3 else "no deployment bug")
    assert s["ladder"]["verdict"] == "a deployment bug"
    assert nb07["speculate_ladder"]["verdict"] == s["ladder"]["verdict"]  # notebook 07 says the same
    assert nb07["speculate_settings"]["steps"] == nb04["drafting"]["steps"] == 5  # the log's tree 5/4/16
    assert f"{nb04['predicted']:.2f}" in s["ladder"]["rungs"][1]["text"]  # rung 2 quotes notebook 04's prediction
    first = s["conclusion"][0]
    assert "deployment bug" in first and "serving vs engine-free" in first and "no deployment bug" not in first
    # it names the reproduced wiring, with the correct wiring's measurement beside it
    best = nb07["speculate_reproduce"]["best"]
    assert best["key"] == "absolute" and "d2t read as absolute ids" in first
    assert f"{ef['mean_accept_length']:.2f}" in first
    assert "## Which wiring reproduces the serving number (notebook 07)" in md
    # no section contradicts another: the prediction-only conclusion is marked as weaker evidence
    assert "serving against the prediction alone" in md and "Healthy" not in first
    assert n["speculate"]["reproduce"]["best"]["key"] == "absolute"


def test_rung_two_blames_a_gap_only_on_evidence(healthy_bundle):
    """Issue 41: the prediction is the rank table's (notebook 04), checked on the loop's own text (notebook 07);
    rung 2 follows from those recorded numbers, and blames the samples only when the prediction holds there."""
    s = json.loads((healthy_bundle / "summary.json").read_text())
    figs = healthy_bundle / "figures"
    nb04 = json.loads((figs / "04_accept_length_simulation" / "numbers.json").read_text())
    nb07 = json.loads((figs / "07_speculative_decoding" / "numbers.json").read_text())
    pred = s["numbers"]["predicted_accept_length"]
    assert pred["sglang"] == {"speculative_num_steps": 5, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 16}
    assert len(pred["rank_table"]) == 5 and len(pred["rank_table"][0]) == 4 and pred["expected"] == nb04["predicted"]
    assert {"teacher forcing", "independence across depths"} <= set(pred["assumptions"])
    assert pred["expected"] < pred["expected_one_rate"] - 0.5  # this draft's siblings catch next to nothing
    md = (healthy_bundle / "summary.md").read_text()
    assert "one rate for every depth would say" in md and "it assumes teacher forcing:" in md
    assert pred["flags"] in md and "--speculative-eagle-topk 4 --speculative-num-draft-tokens 16" in pred["flags"]
    ef = nb07["speculate"]["offset"]
    same = nb07["speculate_comparison"]["offset"]
    assert same["prediction"]["label"] == pred["drafting"]  # the same prediction, on the loop's own text
    gain = lambda x: x - 1.0  # noqa: E731
    z = (ef["mean_accept_length"] - pred["expected"]) / ef["stderr"]
    below = z <= -3 and gain(ef["mean_accept_length"]) / gain(pred["expected"]) < 0.85
    above = z >= 3 and gain(ef["mean_accept_length"]) / gain(pred["expected"]) > 1.15
    holds = (abs(ef["mean_accept_length"] - same["predicted_from_accuracy"]) / ef["stderr"] < 3
             or abs(gain(ef["mean_accept_length"]) / gain(same["predicted_from_accuracy"]) - 1) <= 0.15)
    expect = ("no" if not (below or above) else "no: the prediction misses" if not holds
              else "yes" if below else "no (they understate it)")
    r2 = s["ladder"]["rungs"][1]
    assert r2["finding"] == expect, r2
    assert s["ladder"]["samples_overstate"] is (expect == "yes")
    if expect != "no":
        assert f"{same['predicted_from_accuracy']:.2f}" in r2["text"] and "loop's own text" in r2["text"]


def test_notebook_07_runs_in_the_report_and_the_summary_quotes_it(healthy_bundle, user_files):
    summary = json.loads((healthy_bundle / "summary.json").read_text())
    run = next(r for r in summary["notebooks"] if r["name"] == "07_speculative_decoding")
    assert run["ok"], run["error"]
    assert {"token_view.png", "speculate_accept_lengths.png", "speculate_throughput.png"} <= {
        Path(f).name for f in run["figures"]}
    spec = summary["numbers"]["speculate"]
    assert spec["settings"]["steps"] == 5 and spec["prompts"] == int(MAX_PROMPTS) and spec["same_text"] is True
    assert spec["settings"]["batch_size"] == 3  # --batch-size reached the loop
    off, ab = spec["speculate"]["offset"], spec["speculate"]["absolute"]
    assert off["mean_accept_length"] > ab["mean_accept_length"] == 1.0
    md = (healthy_bundle / "summary.md").read_text()
    assert "## Speculative decoding with the target (notebook 07)" in md
    assert f"| offset | **{off['mean_accept_length']:.3f}**" in md
    assert f"| target in the loop | `{user_files['target']}` on prompts `" in md  # the inputs table names them


def test_misencoded_draft_is_broken_in_summary_and_notebook_04(misencoded_bundle):
    s = json.loads((misencoded_bundle / "summary.json").read_text())
    md = (misencoded_bundle / "summary.md").read_text()
    n = s["numbers"]
    assert n["inspect"]["verdict"] == "absolute"
    assert "The checkpoint itself is broken" in s["conclusion"][0] and "d2t-absolute" in s["conclusion"][0]
    assert n["accept_length_status"] == "broken"
    assert n["predicted_accept_length"]["expected"] < 1.05
    nb04 = _text(misencoded_bundle, "04_accept_length_simulation")
    assert "the checkpoint itself is broken or misread" in nb04
    assert n["accept_length_conclusion"] in md
    # nothing was given for serving, and the summary says how to give it
    assert "not given: pass --log FILE" in md and "not given: pass --baseline-tps" in md
    assert "not given: no serving log" in nb04
    # notebook 06 planned the fix and wrote no copy anywhere in the bundle
    assert not [p for p in misencoded_bundle.rglob("*.safetensors")]
    assert "d2t: absolute target ids converted to offsets" in _text(misencoded_bundle, "06_checkpoint_doctor")


def test_the_bundle_notebooks_run_again_from_their_injected_values(healthy_bundle):
    """The bundle's notebooks have their defaults cell blanked; the injected cell defines everything."""
    import papermill as pm

    nb = healthy_bundle / "notebooks" / "01_mapping_inspection.ipynb"
    src = json.loads(nb.read_text())
    defaults = [c for c in src["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert defaults and "data_samples" not in "".join(defaults[0]["source"])
    injected = [c for c in src["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert "window_start" in "".join(injected[0]["source"])
    assert pm.inspect_notebook(str(nb)) == {}  # no defaults left to inspect


@pytest.mark.browser
def test_the_bundle_html_renders_offline(healthy_bundle, offline_browser):
    """Every notebook page of a user's bundle shows every figure with the network off."""
    runs = json.loads((healthy_bundle / "summary.json").read_text())["notebooks"]
    for run, seen in zip(runs, offline_browser([Path(r["html"]) for r in runs]), strict=True):
        assert seen["blocked"] == [], (run["name"], seen["blocked"])
        assert len(seen["widths"]) == len(run["figures"]) and all(w > 0 for w in seen["widths"]), (run["name"], seen)
