"""What llama.cpp's loader refuses in a draft GGUF itself (helpers.doctor.checks_gguf), without llama.cpp.

An HF checkpoint meets llama.cpp's converter first, which casts a float d2t to I64, refuses ids past the
target vocab, ignores draft_vocab_size and writes eagle3.target_layers (a default when the config names
none). A GGUF meets the loader and the draft graph directly, so the same problems stop the server at
start-up (run in b11434: the `gguf-*` rows of data_samples/engine_truth/llamacpp-b11434.json). The GGUFs
here are written from the bundled data_samples/engine_llama draft with the kit's writer and changed with
`copy_gguf`, as scripts/engine_truth.py changes the converter's.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file

from helpers.engines.registry import arriving_layers, aux_max_index, layers_in
from helpers.doctor.diagnose import diagnose
from helpers.io.gguf_files import copy_gguf, stored_d2t, stored_tensor, write_draft_gguf
from conftest import SAMPLES


PAIR = SAMPLES / "engine_llama"
TARGET_CONFIG = PAIR / "target" / "config.json"
SPEC = "llamacpp==b11434"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf_loader")
    tensors = load_file(str(PAIR / "draft" / "model.safetensors"))
    cfg = json.loads((PAIR / "draft" / "config.json").read_text())
    return write_draft_gguf(d / "draft.gguf", tensors, cfg, json.loads(TARGET_CONFIG.read_text()),
                            model_dir=PAIR / "draft")


def _doctor(path):
    found = diagnose(path, SPEC, TARGET_CONFIG, check_weights=False)
    return {f.code for f in found}, found.predicted_outcome()["llamacpp"]


@pytest.mark.parametrize("qtype", ["F32", "BF16"])
def test_a_d2t_not_stored_as_i64_refuses_at_startup(good, tmp_path, qtype):
    bad = copy_gguf(good, tmp_path / "d2t.gguf", {"d2t": (stored_d2t(good), qtype)})
    codes, pred = _doctor(bad)
    assert "gguf-d2t-type" in codes and "d2t-invalid" not in codes
    assert pred["result"] == "refuses" and pred["stage"] == "serve"
    assert pred["says"] == "GGML_ASSERT(model.d2t->type == GGML_TYPE_I64)" and pred["checked"]


def test_a_d2t_id_past_the_target_vocab_refuses_at_startup(good, tmp_path):
    ids = stored_d2t(good).copy()
    ids[-1] = 4096  # the target vocab's size
    codes, pred = _doctor(copy_gguf(good, tmp_path / "past.gguf", {"d2t": ids}))
    assert "gguf-d2t-range" in codes and "d2t-invalid" not in codes
    assert pred["result"] == "refuses" and pred["says"] == "GGML_ASSERT(i1 >= 0 && i1 < ne1)"


def test_a_head_a_row_short_of_d2t_refuses_at_startup(good, tmp_path):
    head = stored_tensor(good, "output.weight")
    codes, pred = _doctor(copy_gguf(good, tmp_path / "short.gguf", {"output.weight": head[:-1]}))
    # the general vocab-size-mismatch (a config number llama.cpp's converter ignores) gives way to the loader's check
    assert "gguf-head-rows" in codes and "vocab-size-mismatch" not in codes
    assert pred["result"] == "refuses" and pred["says"] == "'output.weight' has wrong shape"


def test_no_target_layers_key_refuses_at_startup(good, tmp_path):
    codes, pred = _doctor(copy_gguf(good, tmp_path / "nolayers.gguf", {}, {"eagle3.target_layers": None}))
    assert "gguf-target-layers" in codes
    assert pred["result"] == "refuses" and pred["says"] == "requires 'extract_layers'"
    found = diagnose(tmp_path / "nolayers.gguf", SPEC, TARGET_CONFIG, check_weights=False)
    assert not any(f.effect == "aux.unstated" for f in found)  # no default is taken for a GGUF


def test_norm_before_fc_without_its_weight_refuses_at_startup(good, tmp_path):
    codes, pred = _doctor(copy_gguf(good, tmp_path / "nbf.gguf", {}, {"eagle3.norm_before_fc": True}))
    assert "gguf-enc-norm-missing" in codes and "variant-norm-before-fc" not in codes
    assert pred["result"] == "refuses" and pred["says"] == "'enc.output_norm.weight' not found"
    assert not pred["unknown_for"]


def test_the_healthy_gguf_has_none_of_these(good):
    codes, pred = _doctor(good)
    assert not codes & {"gguf-d2t-type", "gguf-d2t-range", "gguf-head-rows", "gguf-target-layers",
                        "gguf-enc-norm-missing"}
    assert pred["result"] == "serves" and pred["accept"] == "as-trained"


def test_an_aux_id_equal_to_l_is_the_last_layers_output_in_llamacpp_only(good, tmp_path):
    # common/speculative.cpp: id == n_layer -> the target's pre-norm last hidden state (served: 2.202 in b11434)
    assert aux_max_index("llamacpp==b11434", 8) == 8
    assert arriving_layers("llamacpp==b11434", [2, 4, 8], 8) == [2, 4, 8]
    assert layers_in("llamacpp==b11434", [2, 4, 8], 8) == [2, 4, 8]
    # the others capture 0..L-1 only: index 8 never arrives (SGLang and TokenSpeed add 1 to the ids)
    for other, ids in (("vllm", [2, 4, 8]), ("llamacpp==b10470", [2, 4, 8]), ("sglang", [1, 3, 7]),
                       ("tokenspeed", [1, 3, 7])):
        assert aux_max_index(other, 8) == 7
        assert arriving_layers(other, ids, 8) == [2, 4], other
    with pytest.raises(ValueError, match="0..7"):
        layers_in("vllm", [2, 4, 8], 8)
    with pytest.raises(ValueError, match="0..8"):
        layers_in("llamacpp==b11434", [2, 4, 9], 8)
    last = copy_gguf(good, tmp_path / "last.gguf", {}, {"eagle3.target_layers": [2, 4, 8]})
    found = diagnose(last, SPEC, TARGET_CONFIG, check_weights=False)
    assert not [f for f in found if f.severity == "error"], [f.message for f in found]
    assert found.predicted_outcome()["llamacpp"]["result"] == "serves"
    past = copy_gguf(good, tmp_path / "past.gguf", {}, {"eagle3.target_layers": [2, 4, 9]})
    pred = _doctor(past)[1]
    assert pred["result"] == "refuses" and pred["says"] == "exceeds target n_layer"


def test_copy_gguf_refuses_a_metadata_key_the_file_lacks(good, tmp_path):
    with pytest.raises(ValueError, match="no metadata key"):
        copy_gguf(good, tmp_path / "x.gguf", {}, {"eagle3.no_such_key": 1})
    kept = copy_gguf(good, tmp_path / "same.gguf", {})
    assert kept.read_bytes() == Path(good).read_bytes()
    assert np.array_equal(stored_d2t(kept), stored_d2t(good))
