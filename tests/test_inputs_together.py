"""Inputs that belong together are checked together (issue 40): samples against the draft and target
their capture.json names, two drafts' target vocabularies before a diff, a log's drafting settings
against the flags, and in `report --target` every check the standalone commands make, before any
notebook. Real bundled files are copied into tmp_path and altered there; data_samples/ is never written."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers.core.errors import BadInputError
from conftest import SAMPLES

TINY = SAMPLES / "tiny_draft_sglang"
KIMI_DRAFT = SAMPLES / "kimi_draft_mla"
LOG = SAMPLES / "logs" / "sglang.log"  # server_args: speculative_num_steps=5, topk=4, num_draft_tokens=16


def _one_line(r, *needles):
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], err)
    assert err.startswith("error:") and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)
    return err


def _samples_copy(tmp_path: Path, src: Path, name: str, files: int = 2, **manifest) -> Path:
    """A few sample files of `src` with its capture.json, the target path made absolute (so it is
    found from tmp_path) and `manifest` merged in (keys 'target.X' into the target object)."""
    dst = tmp_path / name
    rows = dst / "rows_0-64"
    rows.mkdir(parents=True)
    for f in sorted((src / "rows_0-64").glob("data_*"))[:files]:
        shutil.copy(f, rows)
    m = json.loads((src / "capture.json").read_text())
    m["target"]["path"] = str(SAMPLES / Path(m["target"]["path"]).name)
    for k, v in manifest.items():
        if k.startswith("target."):
            m["target"][k[len("target."):]] = v
        else:
            m[k] = v
    (dst / "capture.json").write_text(json.dumps(m))
    return dst


# -- samples against the draft and target they claim ----------------------------------------------------
def test_evaluate_refuses_samples_captured_from_another_target(tmp_path, cli):
    kimi = _samples_copy(tmp_path, SAMPLES / "kimi_hidden_states", "kimi_samples")
    r = cli("evaluate", TINY, "--samples", kimi, "--device", "cpu")
    err = _one_line(r, str(kimi / "capture.json"), "kimi_target", "deepseek_v3", "H 64", "vocab 4,096",
                    "aux layers [1, 3, 4]", "embed_tokens", "another target")
    assert "weak" not in r.stdout + err and r.stdout == ""
    from helpers.model.fit import embed_agreement
    from helpers.model.preflight import check_samples

    assert len(check_samples(KIMI_DRAFT, kimi)) == 1  # the Kimi draft on its own target's samples passes
    from helpers.io.checkpoint import open_checkpoint

    same, n = embed_agreement(open_checkpoint(KIMI_DRAFT), SAMPLES / "kimi_target")
    other, _ = embed_agreement(open_checkpoint(TINY), SAMPLES / "kimi_target")
    assert n == 64 and same > 0.99 and other < 0.5


def test_the_refusal_names_the_draft_as_given(tmp_path, cli):
    """evaluate opens the checkpoint once and hands it on: the message still names the path typed."""
    kimi = _samples_copy(tmp_path, SAMPLES / "kimi_hidden_states", "kimi_samples")
    err = _one_line(cli("evaluate", TINY, "--samples", kimi, "--device", "cpu"), f"but the draft {TINY} expects")
    assert "Checkpoint(" not in err


@pytest.mark.parametrize("edit, expect", [
    ({"target.hidden_size": 128}, "hidden size 128 vs the draft's 64"),
    ({"target.vocab_size": 163840}, "vocab 163,840 vs the draft's 4,096"),
    ({"aux_layer_ids": [2, 4, 6], "captured_layers": [3, 5, 7]}, "captured layers [3, 5, 7]"),
])
def test_evaluate_refuses_a_manifest_that_says_another_shape(tmp_path, cli, edit, expect):
    val = _samples_copy(tmp_path, SAMPLES / "tiny_hidden_states" / "val", "val", **edit)
    r = cli("evaluate", TINY, "--samples", val, "--device", "cpu")
    _one_line(r, str(val / "capture.json"), expect, "expects H 64, vocab 4,096, aux layers [1, 3, 4]")


def test_samples_without_a_manifest_are_not_checked_and_a_broken_one_is_named(tmp_path):
    from helpers.model.preflight import check_samples

    val = _samples_copy(tmp_path, SAMPLES / "tiny_hidden_states" / "val", "val")
    assert [m.hidden_size for m in check_samples(TINY, val)] == [64]  # its own target's samples pass
    (val / "capture.json").unlink()
    assert check_samples(TINY, val) == []
    (val / "capture.json").write_text(json.dumps({"target": {"hidden_size": "abc"}}))
    with pytest.raises(BadInputError, match="target.hidden_size is 'abc'"):
        check_samples(TINY, val)


def test_evaluate_refuses_a_target_head_of_another_target_than_the_samples(tmp_path, cli):
    val = _samples_copy(tmp_path, SAMPLES / "tiny_hidden_states" / "val", "val")
    r = cli("evaluate", TINY, "--samples", val, "--target-head", SAMPLES / "kimi_target", "--device", "cpu")
    _one_line(r, "--target-head", "kimi_target", "target_config_sha256")


# -- two drafts' target vocabularies ----------------------------------------------------------------------
def _wider_vocab_copy(tmp_path: Path, vocab: int) -> Path:
    """tiny_draft_sglang rebuilt for a `vocab`-token target: config vocab_size and t2d (the draft's 800
    tokens kept where they were, the rest of the longer vocab not in the draft)."""
    dst = tmp_path / f"draft_{vocab}"
    shutil.copytree(TINY, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["vocab_size"] = vocab
    (dst / "config.json").write_text(json.dumps(cfg))
    tensors = load_file(dst / "model.safetensors")
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[: tensors["t2d"].numel()] = tensors["t2d"]
    tensors["t2d"] = t2d
    tensors["embed_tokens.weight"] = torch.zeros(vocab, tensors["embed_tokens.weight"].shape[1],
                                                 dtype=tensors["embed_tokens.weight"].dtype)
    save_file(tensors, dst / "model.safetensors")
    return dst


@pytest.mark.parametrize("other, sizes", [("kimi_k25_mapping", "163,840"), ("rebuilt", "8,192")])
def test_diff_and_doctor_previous_refuse_drafts_of_different_target_vocabularies(tmp_path, cli, other, sizes):
    if other == "rebuilt":
        a = _wider_vocab_copy(tmp_path, 8192)
    else:
        a = tmp_path / other
        shutil.copytree(SAMPLES / other, a)
    b = tmp_path / "tiny"
    shutil.copytree(TINY, b)
    for r in (cli("diff", a, b), cli("diff", b, a), cli("doctor", b, "--previous", a, "--no-weights")):
        err = _one_line(r, sizes, "4,096", "different targets")
        assert "moved" not in err and "mapping changed" not in r.stdout
    ok = cli("diff", TINY, b)  # the same target: compared as before
    assert ok.returncode == 0, ok.stderr


# -- a log's drafting settings against the flags ------------------------------------------------------------
def _report_settings(*extra):
    from helpers.__main__ import build_parser
    from helpers.commands.report import settings_from_args

    args = build_parser().parse_args(["report", str(TINY), "-o", "unused", "--log", str(LOG), *map(str, extra)])
    return settings_from_args(args)


def test_report_names_a_drafting_conflict_and_the_log_wins_unless_told_otherwise():
    s = _report_settings("--steps", 3, "--topk", 1)
    assert (s.steps, s.topk, s.num_draft_tokens) == (5, 4, 16)  # what the server ran
    text = s.sources["drafting_conflict"]
    assert "--steps 3 --topk 1" in text and "chain, 3 tokens" in text and "tree 5/4/16" in text and str(LOG) in text
    f = _report_settings("--steps", 3, "--topk", 1, "--drafting-from", "flags")
    assert (f.steps, f.topk, f.num_draft_tokens) == (3, 1, 4) and "drafting_conflict" in f.sources
    agree = _report_settings("--steps", 5, "--topk", 4, "--draft-tokens", 16)
    assert "drafting_conflict" not in agree.sources
    assert "drafting_conflict" not in _report_settings().sources


def test_a_logs_figure_carries_the_drafting_its_server_ran_so_no_same_settings_claim():
    from helpers.serving.measured import serving_figure
    from helpers.speculate.ladder import Figure, evidence_ladder

    flags = _report_settings("--steps", 3, "--topk", 1, "--drafting-from", "flags")
    fig = serving_figure([str(LOG)], flags)
    assert fig.shape == (5, 4, 16)
    engine_free = Figure(fig.value + 0.5, 0.05, "engine-free, flags' settings", (3, 1, 4))
    text = json.dumps(evidence_ladder(serving=fig, engine_free=engine_free, predicted=None).to_dict())
    assert "same drafting settings" not in text and "not comparable" in text


def test_report_prints_the_conflict_and_quotes_it_in_the_summary(tmp_path, cli, monkeypatch):
    import helpers.ui.report as report

    ran = []

    def no_notebook(name, out, parameters, timeout=3600):  # the notebooks are not what is checked here
        ran.append((name, parameters.get("steps"), parameters.get("topk")))
        return report.NotebookRun(name, True, 0.0)

    monkeypatch.setattr(report, "run_notebook", no_notebook)
    out = tmp_path / "bundle"
    r = cli("report", TINY, "-o", out, "--log", LOG, "--steps", 3, "--topk", 1)
    assert r.returncode == 0, r.stderr
    assert "drafting settings conflict" in r.stdout and "tree 5/4/16" in r.stdout
    assert ("04_accept_length_simulation", 5, 4) in ran  # the notebooks run on the log's settings
    summary = json.loads((out / "summary.json").read_text())
    assert "tree 5/4/16" in summary["drafting_conflict"] and summary["drafting_conflict"] in summary["conclusion"]
    md = (out / "summary.md").read_text()
    assert "drafting settings conflict" in md and "same drafting settings" not in md


# -- report --target: every standalone check before any notebook ---------------------------------------------
def test_report_with_a_target_the_draft_does_not_fit_stops_before_any_notebook(tmp_path, cli):
    out = tmp_path / "bundle"
    r = cli("report", TINY, "-o", out, "--target", SAMPLES / "kimi_target", "--prompts", SAMPLES / "prompts.jsonl")
    _one_line(r, "does not fit the target", "kimi_target", "embed_tokens")
    assert not out.exists() and r.stdout == ""


def test_report_refuses_samples_of_another_target_than_its_target(tmp_path, cli):
    kimi = _samples_copy(tmp_path, SAMPLES / "kimi_hidden_states", "kimi_samples")
    out = tmp_path / "bundle"
    r = cli("report", TINY, "-o", out, "--samples", kimi, "--target", SAMPLES / "tiny_target",
            "--prompts", SAMPLES / "prompts.jsonl")
    _one_line(r, str(kimi / "capture.json"), "kimi_target", "target_config_sha256")
    assert not out.exists()


def test_report_runs_the_doctor_with_its_target_before_the_notebooks_and_quotes_its_errors(tmp_path, cli, monkeypatch):
    import helpers.ui.report as report

    order = []

    def no_notebook(name, out, parameters, timeout=3600):  # the notebooks are not what is checked here
        order.append(name)
        return report.NotebookRun(name, True, 0.0)

    monkeypatch.setattr(report, "run_notebook", no_notebook)
    real = report.target_doctor
    monkeypatch.setattr(report, "target_doctor", lambda s: (order.append("doctor --target"), real(s))[1])
    draft = tmp_path / "absolute"
    shutil.copytree(SAMPLES / "tiny_draft_absolute", draft)
    out = tmp_path / "bundle"
    r = cli("report", draft, "-o", out, "--target", SAMPLES / "tiny_target", "--prompts", SAMPLES / "prompts.jsonl")
    assert r.returncode == 0, r.stderr
    assert order[0] == "doctor --target" and len(order) == 7, order  # before 01..07
    summary = json.loads((out / "summary.json").read_text())
    assert any("d2t-absolute" in line for line in summary["target_doctor"])
    assert summary["target_doctor"][0] in summary["conclusion"] and summary["target_doctor"][0] in r.stdout


def test_report_refuses_a_draft_config_evaluate_would_refuse_before_any_notebook(tmp_path, cli):
    draft = tmp_path / "draft"
    shutil.copytree(TINY, draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg["num_attention_heads"] = 0
    (draft / "config.json").write_text(json.dumps(cfg))
    val = _samples_copy(tmp_path, SAMPLES / "tiny_hidden_states" / "val", "val")
    out = tmp_path / "bundle"
    r = cli("report", draft, "-o", out, "--samples", val)
    _one_line(r, "config.json", "num_attention_heads")
    assert not out.exists()
    assert cli("evaluate", draft, "--samples", val, "--device", "cpu").returncode == 2  # the standalone command agrees
