"""The doctor on broken drafts: each finding on the broken draft made for it, none on the healthy samples.

The broken drafts come from `scripts/make_broken_drafts.py`, run here into a temporary folder
(each is a bundled sample with one known bug put in). Also: the target comparison as structured
mismatches, and `diff` naming the ids a rebuilt mapping moved, exactly.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers.doctor.diagnose import diagnose
from helpers.doctor.findings import has_error
from conftest import SAMPLES


NEW_CODES = {"eagle3-as-eagle", "lm-head-borrowed", "embed-mismatch", "context-length", "mapping-drift"}


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> dict:
    from conftest import script_module

    out = tmp_path_factory.mktemp("broken")
    script_module("make_broken_drafts").build(out)  # in this process: the script's own build()
    return json.loads((out / "cases.json").read_text())


CASE_NAMES = ["eagle1-architecture", "served-with-eagle-flag", "aux-states-switched-off", "head-replaced-by-target",
              "head-never-borrowed", "embed-gemma-scale", "embed-other-revision", "short-context", "target-rope-scaling",
              "aux-out-of-range", "aux-places-differ", "aux-five-ids-three-state-fc", "aux-five-layer-draft",
              "mapping-drift"]


def test_every_case_the_script_builds_is_tested(broken):
    assert sorted(broken) == sorted(CASE_NAMES)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_each_broken_draft_yields_its_finding(name, broken, cli):
    case = broken[name]
    r = cli("doctor", case["draft"], "--json", "--no-weights", *case["args"])
    assert r.returncode in (0, 1), r.stderr
    data = json.loads(r.stdout)
    hits = {(f["code"], f["severity"]) for f in data["findings"]}
    assert (case["code"], case["severity"]) in hits, hits
    assert r.returncode == (1 if any(f["severity"] == "error" for f in data["findings"]) else 0)
    assert all(f["message"] and f["fix"] and "\n" not in f["message"] for f in data["findings"])


def _healthy():
    tiny = [(p, SAMPLES / "tiny_target") for p in sorted(SAMPLES.glob("tiny_draft_*"))]
    # SpecForge's and speculators' fixtures; NeMo Automodel's, Model-Optimizer's and TorchSpec's exports carry
    # findings of their own (tests/test_producer_exports.py), and target_* folders are targets
    prods = [(p, SAMPLES / "producers" / "target") for p in sorted((SAMPLES / "producers").iterdir())
             if (p / "reference.json").is_file()
             and json.loads((p / "reference.json").read_text())["producer"] in ("specforge", "speculators")]
    layouts = [(p / "0" if (p / "0").is_dir() else p, SAMPLES / "producers" / "target")  # speculators: epoch folders
               for p in sorted((SAMPLES / "producers" / "layouts").iterdir())]
    return tiny + prods + layouts


@pytest.mark.parametrize("draft,target", _healthy(), ids=lambda p: "/".join(p.parts[-2:]) if isinstance(p, Path) else str(p))
def test_new_findings_absent_on_healthy_samples(draft, target):
    for engine in ("sglang", "vllm"):
        fs = diagnose(draft, engine, check_weights=False, target=target)
        assert not {f.code for f in fs} & NEW_CODES, [(f.code, f.message) for f in fs if f.code in NEW_CODES]
        assert not [f for f in fs if f.code == "aux-layers" and f.severity == "error"]
        assert not [f for f in fs if "differ: SGLang reads the first" in f.message]
        plain = diagnose(draft, engine, check_weights=False)
        assert has_error(fs) == has_error(plain)  # the target / previous checks add no error to a healthy draft


def test_target_comparison_is_structured_and_names_the_scale():
    from helpers.io.checkpoint import open_checkpoint
    from helpers.io.configs import read_config
    from helpers.model.fit import compare_to_target

    draft, target = open_checkpoint(SAMPLES / "tiny_draft_sglang"), open_checkpoint(SAMPLES / "tiny_target")
    d_emb, t_emb = draft.tensors.get("embed_tokens.weight"), target.tensors.get(target.tensors.find("embed_tokens.weight"))
    tcfg = read_config(SAMPLES / "tiny_target")
    assert compare_to_target(draft.config, tcfg, draft_embed=d_emb, target_embed=t_emb, fc_in=192) == []
    scaled = (t_emb.float() * math.sqrt(64)).to(t_emb.dtype)
    cfg = dict(draft.config, max_position_embeddings=128, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 9]})
    got = {m.field: m for m in compare_to_target(cfg, dict(tcfg, vocab_size=5000), draft_embed=scaled,
                                                 target_embed=t_emb, fc_in=192)}
    assert set(got) == {"embed_tokens", "max_position_embeddings", "aux_layer_ids", "vocab_size"}
    assert got["embed_tokens"].scale == pytest.approx(8.0, rel=0.02) and "sqrt(hidden_size)" in got["embed_tokens"].detail
    assert got["max_position_embeddings"].as_dict()["draft"] == 128 and got["vocab_size"].target == 5000
    assert 9 in got["aux_layer_ids"].draft


def test_diff_names_the_moved_ids_exactly(broken, cli, tmp_path):
    a, b = SAMPLES / "tiny_draft_sglang", Path(broken["mapping-drift"]["draft"])
    ta, tb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    old = (ta["d2t"] + torch.arange(ta["d2t"].numel())).tolist()
    new = (tb["d2t"] + torch.arange(tb["d2t"].numel())).tolist()
    want = sorted((t, old.index(t), new.index(t)) for t in set(old) & set(new) if old.index(t) != new.index(t))
    assert want  # the rebuilt mapping does move ids
    r = cli("diff", a, b, "--json", "-o", tmp_path / "diff.png")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [(m["target_id"], m["slot_a"], m["slot_b"]) for m in d["moved"]] == want
    assert d["added"] == sorted(set(new) - set(old)) and d["removed"] == sorted(set(old) - set(new))
    assert d["verdict"].startswith("mapping drift") and d["lm_head"]["agree_under_a"] == 1.0
    assert (tmp_path / "diff.png").stat().st_size > 0
    twin = cli("diff", a, broken["mapping-drift"]["healthy_twin"], "--json")
    assert json.loads(twin.stdout)["verdict"] == "mapping changed and lm_head rows moved with it"
    same = json.loads(cli("diff", a, a, "--json").stdout)
    assert same["moved"] == [] and same["verdict"] == "same mapping"
    text = cli("diff", a, b)
    assert f"{want[0][0]}: {want[0][1]}->{want[0][2]}" in text.stdout


def test_drift_twin_with_its_head_moved_is_no_error(broken):
    fs = diagnose(broken["mapping-drift"]["healthy_twin"], "all", check_weights=False,
                  previous=SAMPLES / "tiny_draft_sglang")
    assert [f.severity for f in fs if f.code == "mapping-drift"] == ["info"]
    same = diagnose(SAMPLES / "tiny_draft_sglang", "all", check_weights=False, previous=SAMPLES / "tiny_draft_sglang")
    assert not [f for f in same if f.code == "mapping-drift"]


def test_diff_figure_counts_every_moved_id(broken):
    from helpers.doctor.diff import diff_drafts
    from helpers.plots.draft_diff import plot_draft_diff

    d = diff_drafts(SAMPLES / "tiny_draft_sglang", broken["mapping-drift"]["draft"])
    fig = plot_draft_diff(d)
    left, right = fig.axes
    assert sum(len(c.get_offsets()) for c in left.collections) == d["shared"]
    bars = [sum(p.get_height() for p in c) for c in right.containers]
    assert bars == [len(d["moved"]), len(d["moved"])]
    with pytest.raises(TypeError):
        plot_draft_diff({"verdict": "x"})


def test_diff_names_an_encoding_change_not_drift(cli):
    """A draft whose d2t is stored as absolute ids against its offset twin: the same target ids when
    each is read as stored; the diff and `doctor --previous` name the encoding change and suggest
    `fix`, never 'mapping drift' nor an ERROR mapping-drift."""
    a, b = SAMPLES / "tiny_draft_sglang", SAMPLES / "tiny_draft_absolute"
    d = json.loads(cli("diff", a, b, "--json").stdout)
    assert (d["encoding_a"], d["encoding_b"]) == ("offset", "absolute")
    assert d["moved"] == [] and d["added"] == [] and d["removed"] == []
    assert d["verdict"].startswith("encoding changed: A stores d2t as offsets, B as absolute ids")
    assert f"d2t-lab fix {b}" in d["verdict"] and "drift" not in d["verdict"]
    fs = diagnose(b, "all", check_weights=False, previous=a)
    drift = [f for f in fs if f.code == "mapping-drift"]
    assert [f.severity for f in drift] == ["info"] and "encoding change" in drift[0].message
    assert "d2t-lab fix" in drift[0].fix


def test_diff_tie_at_zero_has_its_own_wording(tmp_path, cli):
    """Moved ids whose lm_head rows agree under neither mapping (0 % / 0 %) are not 'rows moved with it'."""
    import shutil

    from safetensors.torch import save_file

    src = SAMPLES / "tiny_draft_sglang"
    b = tmp_path / "retrained"
    shutil.copytree(src, b)
    t = load_file(str(b / "model.safetensors"))
    targets = t["d2t"] + torch.arange(t["d2t"].numel())
    targets[[10, 11]] = targets[[11, 10]].clone()  # two ids swap slots: both move
    t["d2t"] = (targets - torch.arange(targets.numel())).to(t["d2t"].dtype)
    t["lm_head.weight"] = -t["lm_head.weight"]  # every row points the other way: cosine -1 under both
    save_file(t, str(b / "model.safetensors"))
    d = json.loads(cli("diff", src, b, "--json").stdout)
    assert len(d["moved"]) == 2 and d["lm_head"]["agree_under_a"] == d["lm_head"]["agree_under_b"] == 0.0
    assert "0 % / 0 %" in d["verdict"] and "moved with it" not in d["verdict"]
