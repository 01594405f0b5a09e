"""Reliability, fourth round: notebooks' parameters, long runs, the files the kit writes, the words
of its messages, UX gaps and the doctor on small targets. Real files, real CLI runs (in-process
through `run_cli` where a subprocess adds nothing)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli

ROOT = Path(__file__).parents[1]
DATA = ROOT / "data_samples"


# -- 6. the doctor on small targets ---------------------------------------------------------------------
def _target_config(tmp_path: Path, layers: int) -> Path:
    cfg = json.loads((DATA / "tiny_target" / "config.json").read_text())
    cfg["num_hidden_layers"] = layers
    p = tmp_path / f"target_{layers}" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(cfg))
    return p


def _draft_with_ids(tmp_path: Path, ids) -> Path:
    d = tmp_path / f"draft_{'none' if ids is None else '_'.join(map(str, ids))}"
    shutil.copytree(DATA / "tiny_draft_sglang", d)
    cfg = json.loads((d / "config.json").read_text())
    if ids is None:
        cfg.pop("eagle_config", None)
    else:
        cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(ids)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


# what arrives at fc per engine (SGLang adds 1 to configured ids; vLLM reads only the top-level key,
# so the nested ids leave it on its default 2, L//2, L-3); each engine captures by membership in its
# layer loop: a layer twice is captured once, one outside 0..L-1 never
SMALL = {  # L: (SGLang with ids [0, 1, 2] -> layers [1, 2, 3], the default capture with no ids)
    1: ([], [0]),
    2: ([1], [1]),
    3: ([1, 2], [0, 1, 2]),
    4: ([1, 2, 3], [1, 2]),
    5: ([1, 2, 3], [2]),
}


@pytest.mark.parametrize("layers", sorted(SMALL))
def test_aux_check_on_a_target_of_few_layers(tmp_path, layers):
    from helpers.core.engines import arriving_layers
    from helpers.doctor.diagnose import diagnose

    sglang_arrive, default_arrive = SMALL[layers]
    assert arriving_layers("sglang", [0, 1, 2], layers) == sglang_arrive
    assert arriving_layers("vllm", None, layers) == default_arrive
    cfg = _target_config(tmp_path, layers)
    for ids, engine, arrive in (([0, 1, 2], "sglang", sglang_arrive), (None, "vllm", default_arrive)):
        (tmp_path / engine).mkdir()
        found = diagnose(str(_draft_with_ids(tmp_path / engine, ids)), engine, str(cfg), check_weights=False)
        aux = [f for f in found if f.code == "aux-layers"]
        assert aux, [f.message for f in found]
        assert not any("no usable num_hidden_layers" in f.message for f in aux)
        errors = [f for f in aux if f.severity == "error"]
        if len(arrive) == 3:  # three distinct layers the target has: no error
            assert not errors, [f.message for f in errors]
        else:
            assert len(errors) == 1, [f.message for f in aux]
            assert f"{len(arrive)} hidden state" in errors[0].message and str(arrive) in errors[0].message
            assert f"target's {layers} layer" in errors[0].message or "named twice" in errors[0].message
            predicted = found.predicted_outcome()[engine]
            assert predicted["result"] in ("crashes", "refuses"), predicted


def test_aux_check_cli_on_a_two_layer_target_is_an_error_not_a_healthy_serve(tmp_path):
    cfg = _target_config(tmp_path, 2)
    r = run_cli("doctor", str(DATA / "tiny_draft_sglang"), "--target-config", str(cfg), "--engine", "sglang", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 1
    assert out["predicted_outcome"]["sglang"]["result"] == "crashes"


def test_doctor_on_an_engine_whose_capture_is_unread_names_it(tmp_path):
    r = run_cli("doctor", str(DATA / "tiny_draft_sglang"), "--engine", "trtllm")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if "aux-layers" in x)
    assert "not checked" in line and "TensorRT-LLM" in line
    assert not re.search(r":\s*;|:\s*$", line)  # no empty list


# -- 4. words ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", ["3/1/3", "0", "3/0/4", "3/2/100", "3/2/1"])
def test_evaluate_predict_errors_name_only_evaluate_flags(shape):
    r = run_cli("evaluate", str(DATA / "tiny_draft_sglang"), "--samples", str(DATA / "tiny_hidden_states" / "val"),
                "--predict", shape)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    _flags_exist("evaluate", r.stderr)
    assert "--draft-tokens" not in r.stderr and "--num-speculative-tokens" not in r.stderr


def _parser_flags(command: str) -> set[str]:
    from helpers.__main__ import build_parser

    parser = build_parser([command])
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {o for a in sub.choices[command]._actions for o in a.option_strings}


def _flags_exist(command: str, text: str) -> None:
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", text))
    missing = named - _parser_flags(command)
    assert not missing, f"{command} recommends {sorted(missing)}, which it does not take: {text}"
