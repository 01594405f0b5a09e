"""The readers on the folders the trainers really write (data_samples/producers/layouts/).

Made by SpecForge 0.2.0's and speculators 0.9.0's own code (scripts/make_producer_fixtures.py,
docs/producer-variants.md 'Trainer folders'). A .pt file is taken as a mapping or as weights by
its content, never by its name; foreign files (optimizer states, per-rank training states) are
set aside. Also: the target head's hidden_normed choice and SpecForge's exact mask count.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

from helpers.__main__ import main
from helpers.io.checkpoint import load_mapping, open_checkpoint
from helpers.doctor.diagnose import diagnose
from helpers.core.errors import BadInputError
from helpers.measure.evaluate import evaluate
from helpers.doctor.inspection import inspect_path
from helpers.measure.predict import _labels_and_mask
from helpers.io.pt_files import pt_kind
from helpers.io.samples import iter_samples
from helpers.model.target_head import detect_hidden_normed, load_target_head
from conftest import SAMPLES

LAY = SAMPLES / "producers" / "layouts"
TARGET = SAMPLES / "producers" / "target"
SF_STEP = LAY / "specforge_trainer" / "tiny-step1"
SPEC_D2T = LAY / "speculators_trainer_d2t" / "0"
SPEC_NO = LAY / "speculators_trainer_no_d2t" / "0"
REF = SAMPLES / "producers" / "specforge_control" / "reference.pt"

pytestmark = pytest.mark.skipif(not LAY.exists(), reason="producer layouts not bundled")


def run_cli(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def offset_mapping_ok(m):
    assert m.verdict().encoding == "offset"
    assert m.draft_vocab_size == 128 and m.target_vocab_size == 512


# -- what the real files hold ------------------------------------------------------------------------
def test_real_files_are_told_apart_by_content():
    load = lambda p: torch.load(p, weights_only=True, map_location="cpu")  # noqa: E731
    assert pt_kind(load(SF_STEP / "training_state.pt"))[0] == "weights"  # draft_state_dict, with d2t/t2d
    assert pt_kind(load(SF_STEP / "training_state_rank0.pt"))[0] == "rank"  # optimizer + rng, no weights
    assert pt_kind(load(SPEC_D2T / "optimizer_state_dict.pt"))[0] == "optimizer"
    assert pt_kind({"d2t": torch.zeros(4, dtype=torch.long), "t2d": torch.ones(4, dtype=torch.bool)})[0] == "mapping"
    assert pt_kind({"d2t": torch.zeros(4)})[0] == "other"  # a float d2t is not a mapping


# -- SpecForge trainer folders ------------------------------------------------------------------------
@pytest.mark.parametrize("path", [
    SF_STEP, SF_STEP / "training_state.pt", LAY / "specforge_trainer" / "tiny-latest", LAY / "specforge_trainer",
])
def test_specforge_training_checkpoint_is_read(path):
    ck = open_checkpoint(path)
    assert ck.tensors.find("lm_head.weight") and ck.key_layout == "midlayer"
    assert "embed_tokens.weight" not in ck.tensors  # the frozen embedding is filtered out
    assert all(Path(f).name == "training_state.pt" for f in ck.tensors.files)
    offset_mapping_ok(load_mapping(ck))
    assert not any("rank" in Path(s).name for s in load_mapping(ck).sources)


def test_specforge_trainer_cli(capsys):
    code, out, err = run_cli(["inspect", str(SF_STEP)], capsys)
    assert code == 0 and "verdict: OFFSET" in out and "training_state.pt" in out, err
    code, out, err = run_cli(["doctor", str(SF_STEP), "--json"], capsys)
    d = json.loads(out)
    assert code == 0 and d["ok"], d
    codes = {f["code"] for f in d["findings"]}
    assert "training-checkpoint" in codes and "d2t-missing" not in codes


def test_rank_file_alone_is_refused_by_content(capsys):
    code, out, err = run_cli(["inspect", str(SF_STEP / "training_state_rank0.pt")], capsys)
    assert code == 2 and "per-rank training state" in err and "\n" not in err.strip()


def test_rank_files_with_weight_shards_would_be_merged(tmp_path):
    # SpecForge 0.2.0's rank files hold {optimizer, rng}; were weights split over several .pt
    # files, they are merged, and a tensor found twice is refused
    d = tmp_path / "step"
    shutil.copytree(SF_STEP, d)
    sd = torch.load(d / "training_state.pt", weights_only=True)["draft_state_dict"]
    keys = sorted(sd)
    half = len(keys) // 2
    torch.save({"draft_state_dict": {k: sd[k] for k in keys[:half]}, "global_step": 1}, d / "training_state.pt")
    torch.save({"draft_state_dict": {k: sd[k] for k in keys[half:]}}, d / "training_state_shard1.pt")
    ck = open_checkpoint(d)
    assert sorted(ck.tensors.keys()) == keys
    offset_mapping_ok(load_mapping(ck))
    dup = next(k for k in keys if k.endswith("weight"))
    torch.save({"draft_state_dict": {dup: sd[dup]}}, d / "training_state_shard2.pt")
    with pytest.raises(BadInputError, match="is in both"):
        open_checkpoint(d)


def test_training_state_with_objects_gives_one_line(tmp_path, capsys):
    d = tmp_path / "step"
    shutil.copytree(SF_STEP, d)
    state = torch.load(d / "training_state.pt", weights_only=True)
    state["args"] = argparse.Namespace(lr=1e-4)  # what older SpecForge versions keep there
    torch.save(state, d / "training_state.pt")
    for p in (d, d / "training_state.pt"):
        code, out, err = run_cli(["inspect", str(p)], capsys)
        assert code == 2 and "refused" in err and "argparse.Namespace" in err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


# -- exported and speculators folders ------------------------------------------------------------------
def test_specforge_export(capsys):
    offset_mapping_ok(load_mapping(LAY / "specforge_export_hf"))
    code, out, _ = run_cli(["doctor", str(LAY / "specforge_export_hf")], capsys)
    assert code == 0


def test_speculators_with_d2t_ignores_the_optimizer_state(capsys):
    offset_mapping_ok(load_mapping(SPEC_D2T))
    code, out, err = run_cli(["inspect", str(SPEC_D2T)], capsys)
    assert code == 0 and "verdict: OFFSET" in out
    code, out, err = run_cli(["doctor", str(SPEC_D2T)], capsys)
    assert code in (0, 1) and "optimizer_state_dict.pt" not in err  # findings, not unreadable input


def test_speculators_without_d2t_is_identity(capsys):
    ck = open_checkpoint(SPEC_NO)
    assert "dict" not in ck.mapping_files
    assert any(Path(k).name == "optimizer_state_dict.pt" for k in ck.ignored)
    r = inspect_path(SPEC_NO)
    assert r["verdict"] == "identity" and r["draft_vocab_size"] == r["target_vocab_size"] == 512
    code, out, err = run_cli(["inspect", str(SPEC_NO)], capsys)
    assert code == 0 and "IDENTITY" in out and "ignored: " in out
    fs = diagnose(SPEC_NO, check_weights=False)
    codes = {f.code for f in fs}
    assert "d2t-absent-full-vocab" in codes and "d2t-missing" not in codes and "foreign-file" in codes


def test_optimizer_state_alone_is_refused(capsys):
    for cmd in ("inspect", "doctor"):
        code, out, err = run_cli([cmd, str(SPEC_D2T / "optimizer_state_dict.pt")], capsys)
        assert code == 2 and "optimizer state" in err


def test_foreign_pt_beside_a_checkpoint_never_becomes_its_mapping(tmp_path):
    d = tmp_path / "spec"
    shutil.copytree(SPEC_NO, d)
    # a lone foreign .pt of any name, even one named like a mapping cache
    shutil.copy(SF_STEP / "training_state_rank0.pt", d / "cache.pt")
    torch.save({"d2t": torch.zeros(512)}, d / "vocab_mapping.pt")  # float d2t: not a mapping
    assert load_mapping(d).verdict().encoding == "identity"
    assert {Path(k).name for k in open_checkpoint(d).ignored} >= {"cache.pt", "vocab_mapping.pt", "optimizer_state_dict.pt"}
    # a real mapping dict beside it is taken, whatever its name
    m = load_mapping(SPEC_D2T)
    torch.save({"d2t": m.d2t, "t2d": m.t2d}, d / "zz_whatever.pt")
    cfg = json.loads((d / "config.json").read_text())
    cfg["draft_vocab_size"] = 128
    (d / "config.json").write_text(json.dumps(cfg))
    assert open_checkpoint(d).mapping_files["dict"].name == "zz_whatever.pt"


# -- evaluate on the layouts (the producers' own tiny target: H 32, vocab 512) ---------------------------
@pytest.fixture(scope="module")
def layout_samples(tmp_path_factory):
    """One SpecForge-layout sample from the fixtures' shared inputs (T 16, aux [1, 16, 96])."""
    ref = torch.load(REF, weights_only=True)
    d = tmp_path_factory.mktemp("laysamples") / "rows_0-1"
    d.mkdir()
    ids = ref["input_ids"][0]
    torch.save({"input_ids": ids, "loss_mask": torch.ones_like(ids), "hidden_state": torch.zeros(1, ids.numel(), 32),
                "aux_hidden_state": ref["aux_hidden_states"].float()}, d / "data_0.ckpt")
    return d.parent


@pytest.mark.parametrize("folder,has_d2t", [(LAY / "specforge_export_hf", True), (SPEC_D2T, True), (SPEC_NO, False)])
def test_evaluate_runs_on_each_layout_with_a_config(folder, has_d2t, layout_samples):
    r = evaluate(folder, layout_samples, device="cpu", progress=False, embed_from=TARGET)
    assert r.has_d2t == has_d2t and r.overall.tokens == 14
    if not has_d2t:  # full vocab, no d2t: the engines' identity mapping, scored as offset
        assert r.full_vocab and r.readings == ["offset"] and r.diagnosis() != "no_mapping"


def test_evaluate_needs_a_config_for_a_training_checkpoint(layout_samples, capsys):
    # SpecForge keeps the draft config outside the step folder (the trainer's --draft-model-config)
    with pytest.raises(BadInputError, match="pass --draft-config FILE"):
        evaluate(SF_STEP, layout_samples, device="cpu", progress=False, embed_from=TARGET)
    # given the config, the training checkpoint (fp32 weights under draft_state_dict) loads and scores
    config = LAY / "specforge_export_hf" / "config.json"
    r = evaluate(SF_STEP, layout_samples, device="cpu", progress=False, embed_from=TARGET, draft_config=config)
    assert r.has_d2t and r.overall.tokens == 14
    code, out, err = run_cli(["evaluate", str(SF_STEP), "--samples", str(layout_samples), "--embed-from", str(TARGET),
                              "--draft-config", str(config), "--device", "cpu", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["readings"]["offset"]["tokens"] == 14


# -- the target head: hidden_normed ---------------------------------------------------------------------
TINY_TARGET = SAMPLES / "tiny_target"
TINY_VAL = SAMPLES / "tiny_hidden_states" / "val"


def _agreement(head, samples):
    agree = n = 0
    for s in samples:
        arg = head.argmax(s.hidden_state)  # [T] the target's choice after t
        m = s.loss_mask[1:] == 1  # token t+1 was the target's own greedy choice
        agree += int(((arg[:-1] == s.input_ids[1:]) & m).sum())
        n += int(m.sum())
    return agree / n


@pytest.mark.skipif(not TINY_VAL.exists(), reason="bundled samples not generated")
def test_norm_twice_disagrees_with_the_stored_target_choice():
    head = load_target_head(TINY_TARGET)
    assert not bool((head.norm_weight == 1).all())  # a real final norm, not ones
    assert json.loads((TINY_TARGET / "config.json").read_text())["tie_word_embeddings"] is False
    samples = list(iter_samples(TINY_VAL))
    normed, how = detect_hidden_normed(head, [s.hidden_state for s in samples[:4]])
    assert normed and how.startswith("auto: 100.0 %")
    assert _agreement(dataclasses.replace(head, hidden_normed=True), samples) == 1.0
    assert _agreement(dataclasses.replace(head, hidden_normed=False), samples) < 0.90  # measured 85.3 %


def test_auto_detects_states_before_the_norm(tmp_path):
    head = load_target_head(TINY_TARGET)
    s = next(iter_samples(TINY_VAL))
    pre = s.hidden_state.float() / head.norm_weight * 3.7  # an un-normed state: RMS(h / w) = 3.7
    assert detect_hidden_normed(head, [pre])[0] is False
    with pytest.raises(BadInputError, match="cannot tell"):
        detect_hidden_normed(head, [torch.cat([pre, s.hidden_state.float()])])


@pytest.mark.skipif(not TINY_VAL.exists(), reason="bundled samples not generated")
def test_evaluate_says_which_hidden_normed_it_used():
    kw = dict(readings=("offset",), device="cpu", progress=False, max_samples=8, target_head=TINY_TARGET)
    auto = evaluate(SAMPLES / "tiny_draft_sglang", TINY_VAL, **kw)
    yes = evaluate(SAMPLES / "tiny_draft_sglang", TINY_VAL, hidden_normed="yes", **kw)
    no = evaluate(SAMPLES / "tiny_draft_sglang", TINY_VAL, hidden_normed="no", **kw)
    assert auto.hidden_normed == "yes" and auto.hidden_normed_how.startswith("auto:")
    assert yes.hidden_normed_how == "stated" and no.hidden_normed == "no"
    a, y, n = (r.overall.readings["offset"].target_top1 for r in (auto, yes, no))
    assert a == y and n < y
    assert auto.to_dict()["hidden_normed"] == "yes"


# -- SpecForge's exact count -------------------------------------------------------------------------------
def test_specforge_mask_counts_the_padded_last_positions():
    # one sample, T = 6, loss_mask on t = 2..5; ids 10..15
    ids = torch.tensor([[10, 11, 12, 13, 14, 15]])
    lmask = torch.tensor([[0, 0, 1, 1, 1, 1]], dtype=torch.bool)
    valid = torch.ones_like(lmask)
    # SpecForge 0.2.0: step j counts t with loss_mask[t+j] = 1 (loss_mask shifted left j times,
    # zero-padded), its label at t+2+j is the pad id 0 once it lies past the end.
    # step 0: t = 2, 3, 4, 5 -> labels 14, 15, 0, 0 ; step 1: t = 1..4 -> labels 14, 15, 0, 0
    labels, mask = _labels_and_mask(ids, lmask, valid, steps=2, mask_at="specforge")
    assert mask[0, :, 0].nonzero().flatten().tolist() == [2, 3, 4, 5]
    assert labels[0, [2, 3, 4, 5], 0].tolist() == [14, 15, 0, 0]
    assert mask[0, :, 1].nonzero().flatten().tolist() == [1, 2, 3, 4]
    assert labels[0, [1, 2, 3, 4], 1].tolist() == [14, 15, 0, 0]
    # 'position' drops the positions whose label lies past the end: 2 and 2 fewer
    _, pmask = _labels_and_mask(ids, lmask, valid, steps=2, mask_at="position")
    assert pmask.sum((0, 1)).tolist() == [2, 2] and mask.sum((0, 1)).tolist() == [4, 4]


@pytest.mark.skipif(not TINY_VAL.exists(), reason="bundled samples not generated")
def test_specforge_mask_on_the_bundled_samples(capsys):
    # 50-token samples, loss_mask on the last 24: SpecForge counts 24 positions per sample at
    # every step (2 more than 'position' at step 0, which drops the last two)
    kw = dict(readings=("offset",), device="cpu", progress=False, max_samples=4, steps=2)
    sf = evaluate(SAMPLES / "tiny_draft_sglang", TINY_VAL, mask_at="specforge", **kw)
    po = evaluate(SAMPLES / "tiny_draft_sglang", TINY_VAL, mask_at="position", **kw)
    assert sf.overall.tokens == 4 * 24 and po.overall.tokens == 4 * 22
    code, out, _ = run_cli(["evaluate", str(SAMPLES / "tiny_draft_sglang"), "--samples", str(TINY_VAL),
                            "--max-samples", "2", "--mask-at", "specforge", "--target-head", str(TINY_TARGET),
                            "--hidden-normed", "auto", "--readings", "offset", "--json"], capsys)
    d = json.loads(out)
    assert code == 0 and d["mask_at"] == "specforge" and d["tokens"] == 48 and d["hidden_normed"] == "yes"
