"""vLLM 0.34.0 in the engine table, read from its released wheel (not run), and the findings it needs.

What changed at 0.34.0 (helpers/engines/table.py; helpers/doctor/checks_method.py): P-EAGLE drafts are
refused; `mask_hidden` is always skipped with a warning; `parallel_drafting`, `use_heterogeneous_vocab` and
`custom_class` are refused as serving options; the aux ids come from the top-level list only (model runner
V2; the V1 runner that also read eagle_config's list is gone); a target head / embedding stored packed is
no longer compared with the draft's own copy. The d2t rule and the log and metric names did not change.

Every draft here is a real safetensors checkpoint made in tmp_path from data_samples/engine_llama/draft.
"""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers.engines.table import ENGINE_TABLE
from helpers.engines.registry import aux_layer_ids, engine_at, engines_at
from helpers.doctor.checks_method import PEAGLE_SAYS, packed_layers
from helpers.doctor.diagnose import diagnose
from conftest import SAMPLES


PAIR = SAMPLES / "engine_llama"
DRAFT, TARGET = PAIR / "draft", PAIR / "target" / "config.json"

# SpecForge's public P-EAGLE draft config, quoted whole from sgl-project/SpecForge configs/qwen3-8b-peagle.json
# (commit a6a07bc4). The fixture below keeps its architecture and switches and takes the sizes of the bundled
# engine pair's draft, so the weights fit.
SPECFORGE_PEAGLE = {
    "architectures": ["PEagleDraftModel"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 12288, "max_position_embeddings": 40960, "max_window_layers": 36,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 4, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936, "draft_vocab_size": 151936,
}
SIZES = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
         "num_hidden_layers", "vocab_size", "draft_vocab_size", "max_position_embeddings", "rope_theta", "bos_token_id",
         "eos_token_id")


def _draft(tmp_path: Path, name: str, config=None, tensors=None) -> Path:
    """A copy of the engine pair's draft with its config.json and/or weights changed."""
    out = tmp_path / name
    shutil.copytree(DRAFT, out)
    if config is not None:
        cfg = json.loads((out / "config.json").read_text())
        cfg = config(cfg) or cfg
        (out / "config.json").write_text(json.dumps(cfg, indent=2))
    if tensors is not None:
        sd = load_file(out / "model.safetensors")
        tensors(sd)
        save_file(sd, out / "model.safetensors")
    return out


def _speculators_peagle(cfg: dict) -> dict:
    """The engine draft as a speculators P-EAGLE config: the fields of speculators' PEagleSpeculatorConfig
    (vllm-project/speculators src/speculators/models/peagle/config.py) and the ones vLLM 0.33.0's
    update_peagle reads (mask_token_id required, eagle_aux_hidden_state_layer_ids)."""
    layer = {k: v for k, v in cfg.items() if k not in ("architectures", "eagle_config", "draft_vocab_size",
                                                       "target_hidden_size")}
    return {
        "architectures": ["PEagleSpeculator"], "speculators_model_type": "peagle", "speculators_version": "0.9.0",
        "draft_vocab_size": cfg["draft_vocab_size"], "target_hidden_size": cfg["target_hidden_size"],
        "norm_before_residual": False, "mask_token_id": 3, "embed_requires_grad": True,
        "eagle_aux_hidden_state_layer_ids": cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"],
        "speculators_config": {"algorithm": "peagle", "default_proposal_method": "greedy",
                               "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                               "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": str(PAIR / "target")}},
        "transformer_layer_config": layer,
    }


def _specforge_peagle(cfg: dict) -> dict:
    out = copy.deepcopy(SPECFORGE_PEAGLE)
    out.update({k: cfg[k] for k in SIZES if k in cfg})
    out["eagle_config"] = cfg["eagle_config"]
    return out


def _vllm(fs, code):
    return [f for f in fs if f.code == code and f.engine == "vllm"]


# -- the release --------------------------------------------------------------------------------------
def test_newest_vllm_read_is_034_and_it_can_be_named():
    v = ENGINE_TABLE["vllm"]
    assert v.newest == "0.34.0" and v.releases[-2] == "0.33.0"
    assumed = engines_at("vllm")[0]
    assert assumed.version == "0.34.0" and assumed.assumed
    named = engine_at("vllm==0.34.0")
    assert named.version == "0.34.0" and named.note is None  # a release read, not one assumed
    # read, not run: the outcome of a healthy draft at 0.34.0 is the table's, marked as not checked
    o = named.outcome("healthy")
    assert o["result"] == "serves" and o["checked"] is False and o["run_in"] == ["0.32.0"]


def test_cli_doctor_with_vllm_034(cli):
    for spec in ("vllm==0.34.0", "vllm"):
        r = cli("doctor", str(DRAFT), "--engine", spec, "--target-config", str(TARGET), "--json", "--no-weights")
        assert r.returncode == 0, r.stdout + r.stderr
        data = json.loads(r.stdout)
        assert [v["version"] for v in data["engine_versions"]] == ["0.34.0"]
        assert data["predicted_outcome"]["vllm"]["result"] == "serves"
    text = cli("doctor", str(DRAFT), "--engine", "vllm==0.34.0", "--no-weights").stdout
    assert "served by vLLM 0.34.0" in text and "not run" in text


def test_the_mapping_rule_and_names_did_not_change_at_034():
    old, new = engine_at("vllm==0.33.0"), engine_at("vllm==0.34.0")
    for effect in ("d2t.past-vocab", "d2t.wrong-ids", "d2t-missing.error", "t2d-mismatch.error"):
        keep = ("result", "accept", "says")
        assert {k: new.outcome(effect)[k] for k in keep} == {k: old.outcome(effect)[k] for k in keep}, effect
    for rule in ("layout.midlayer", "prefix.model", "unknown", "aux.shift", "embed.borrow", "mla.detect"):
        assert new.value(rule) == old.value(rule), rule


# -- P-EAGLE -----------------------------------------------------------------------------------------------
def test_a_speculators_peagle_draft_is_refused_by_name_in_034_and_served_by_033(tmp_path):
    d = _draft(tmp_path, "peagle", config=_speculators_peagle)
    new = diagnose(d, "vllm==0.34.0", TARGET, check_weights=False)
    err = _vllm(new, "peagle-draft")
    assert [f.severity for f in err] == ["error"]
    assert "P-EAGLE" in err[0].message and "vLLM 0.34.0 refuses" in err[0].message and PEAGLE_SAYS in err[0].message
    pred = new.predicted_outcome()["vllm"]
    assert pred["result"] == "refuses" and "P-EAGLE (parallel drafting EAGLE-3) is not supported" in pred["says"]
    assert "refuses to start" in new.report()
    old = diagnose(d, "vllm==0.33.0", TARGET, check_weights=False)
    warn = _vllm(old, "peagle-draft")
    assert [f.severity for f in warn] == ["warning"]
    assert "parallel_drafting: true" in warn[0].message and "one token at a time" in warn[0].message
    assert warn[0].outcome["vllm"]["result"] == "serves" and warn[0].outcome["vllm"]["accept"] == "unknown"
    # (the draft's own prediction is not asserted: checks_target's eagle3-as-eagle reads speculators' class name
    # PEagleSpeculator as an EAGLE (1/2) class, though vLLM builds a speculators draft by speculators_model_type)
    # a release the kit did not read for P-EAGLE: said, and left out of the prediction
    older = diagnose(d, "vllm==0.31.0", TARGET, check_weights=False)
    assert "peagle-draft" in older.predicted_outcome()["vllm"]["unknown_for"]


def test_specforges_public_peagle_config_is_refused_by_architecture(tmp_path):
    d = _draft(tmp_path, "specforge_peagle", config=_specforge_peagle)
    for release, named in (("0.34.0", "PEagleDraftModel is no longer in its model registry"),
                           ("0.33.0", "renames the architecture to Eagle3PEagleDraftModel")):
        fs = diagnose(d, f"vllm=={release}", check_weights=False)
        err = _vllm(fs, "peagle-draft")
        assert [f.severity for f in err] == ["error"] and named in err[0].message, err
        assert err[0].outcome["vllm"]["result"] == "refuses" and err[0].outcome["vllm"]["says"] == "are not supported"
    # SGLang's findings do not speak of P-EAGLE (its P-EAGLE handling was not read)
    assert not [f for f in diagnose(d, "sglang", check_weights=False) if f.code == "peagle-draft"]


def test_mask_hidden_is_skipped_with_a_warning_from_034(tmp_path):
    d = _draft(tmp_path, "mask", tensors=lambda sd: sd.update(mask_hidden=torch.zeros(1, 192, dtype=torch.bfloat16)))
    new = _vllm(diagnose(d, "vllm==0.34.0", check_weights=False), "mask-hidden")
    assert [f.severity for f in new] == ["warning"] and "skips it with a warning" in new[0].message
    assert new[0].outcome["vllm"]["result"] == "serves"
    old = _vllm(diagnose(d, "vllm==0.33.0", check_weights=False), "mask-hidden")
    assert [f.severity for f in old] == ["info"] and "only when drafting in parallel" in old[0].message
    assert not _vllm(diagnose(DRAFT, "vllm==0.34.0", check_weights=False), "mask-hidden")


# -- serving options written into the draft's config ------------------------------------------------------
def test_serving_options_in_config_json_are_ignored_and_034_refuses_them_as_options(tmp_path):
    def opts(cfg):
        cfg.update(parallel_drafting=True, use_heterogeneous_vocab=True, custom_class="my_pkg.MyProposer")
    d = _draft(tmp_path, "opts", config=opts)
    new = _vllm(diagnose(d, "vllm==0.34.0", check_weights=False), "speculative-option")
    assert sorted(f.message.split(" = ")[0].split()[-1] for f in new) == sorted(
        ["parallel_drafting", "use_heterogeneous_vocab", "custom_class"])
    assert {f.severity for f in new} == {"warning"} and all("refuses it" in f.message for f in new)
    assert all(f.outcome["vllm"]["result"] == "serves" and f.outcome["vllm"]["accept"] == "as-trained" for f in new)
    old = _vllm(diagnose(d, "vllm==0.33.0", check_weights=False), "speculative-option")
    assert len(old) == 3 and {f.severity for f in old} == {"info"}
    off = _draft(tmp_path, "off", config=lambda cfg: cfg.update(parallel_drafting=False))
    assert [f.severity for f in _vllm(diagnose(off, "vllm==0.34.0", check_weights=False), "speculative-option")] == \
        ["info"]


# -- the method served with ---------------------------------------------------------------------------------
def test_eagle3_draft_served_as_eagle_is_refused_by_vllm(tmp_path):
    fs = diagnose(DRAFT, "vllm==0.34.0", check_weights=False, algorithm="eagle")
    f = [x for x in fs if x.code == "eagle3-as-eagle"]
    assert f and f[0].outcome["vllm"]["result"] == "refuses" and f[0].outcome["vllm"]["says"] == "are not supported"
    assert not [x for x in fs if x.code == "method-mismatch"]  # 0.34.0's new check does not apply to EAGLE classes
    assert engine_at("vllm==0.34.0").value("method.checkpoint") == "declared-only"


def test_a_declared_draft_served_with_another_method(tmp_path):
    d = _draft(tmp_path, "dflash_named", config=lambda cfg: cfg.update(architectures=["DFlashDraftModel"]))
    new = _vllm(diagnose(d, "vllm==0.34.0", check_weights=False, algorithm="eagle3"), "method-mismatch")
    assert [f.severity for f in new] == ["error"]
    assert "speculative_config requested method='eagle3'" in new[0].message and "'dflash' checkpoint" in new[0].message
    assert new[0].outcome["vllm"]["says"] == "speculative_config requested method="
    old = _vllm(diagnose(d, "vllm==0.33.0", check_weights=False, algorithm="eagle3"), "method-mismatch")
    assert old and old[0].outcome["vllm"]["says"] == "are not supported"


# -- a target quantized with packed weights --------------------------------------------------------------
def _target(tmp_path: Path, quant: dict) -> Path:
    cfg = json.loads(TARGET.read_text())
    cfg["quantization_config"] = quant
    out = tmp_path / f"target_{len(list(tmp_path.glob('target_*')))}.json"
    out.write_text(json.dumps(cfg))
    return out


GPTQ_HEAD = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "lm_head": True}
CT_EMBED = {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear", "re:.*embed_tokens"],
                                          "weights": {"num_bits": 4, "type": "int", "group_size": 128}}}}


def test_which_target_layers_vllm_034_loads_packed():
    assert packed_layers({"quantization_config": GPTQ_HEAD}) == {"lm_head": "gptq (lm_head: true)"}
    assert packed_layers({"quantization_config": dict(GPTQ_HEAD, quant_method="awq", lm_head=False)}) == {}
    assert packed_layers({"quantization_config": CT_EMBED}) == {"embed_tokens": "compressed-tensors (pack-quantized)"}
    linear_only = copy.deepcopy(CT_EMBED)
    linear_only["config_groups"]["group_0"]["targets"] = ["Linear"]  # ParallelLMHead is not a Linear to vLLM
    assert packed_layers({"quantization_config": dict(linear_only, ignore=[])}) == {}
    fp8 = dict(copy.deepcopy(CT_EMBED), format="float-quantized")
    assert packed_layers({"quantization_config": fp8}) == {}
    assert packed_layers({"quantization_config": {"quant_method": "fp8"}}) == {}


def test_a_packed_target_head_beside_the_drafts_own_head(tmp_path):
    target = _target(tmp_path, GPTQ_HEAD)
    new = _vllm(diagnose(DRAFT, "vllm==0.34.0", target, check_weights=False), "packed-target")
    assert [f.severity for f in new] == ["info"] and "keeps it" in new[0].message
    assert new[0].outcome["vllm"]["accept"] == "as-trained"
    old = diagnose(DRAFT, "vllm==0.33.0", target, check_weights=False)
    err = _vllm(old, "packed-target")
    assert [f.severity for f in err] == ["error"] and "AttributeError" in err[0].message
    assert old.predicted_outcome()["vllm"]["result"] == "refuses"


def test_a_draft_without_embedding_is_given_the_packed_target_one(tmp_path):
    d = _draft(tmp_path, "no_embed", tensors=lambda sd: sd.pop("embed_tokens.weight"))
    target = _target(tmp_path, CT_EMBED)
    for release in ("0.33.0", "0.34.0"):
        f = _vllm(diagnose(d, f"vllm=={release}", target, check_weights=False), "packed-target")
        assert [x.severity for x in f] == ["warning"] and "gives it the target's packed one" in f[0].message
        assert f[0].outcome["vllm"] == f[0].outcome["vllm"] | {"result": "serves", "accept": "at-most"}
    # an unquantized target: nothing to say
    assert not _vllm(diagnose(d, "vllm==0.34.0", TARGET, check_weights=False), "packed-target")


# -- aux layers ------------------------------------------------------------------------------------------------
def test_034_reads_the_aux_ids_from_the_top_level_list_only():
    nested = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}}
    top = {"eagle_aux_hidden_state_layer_ids": [2, 4, 5]}
    new, old = engine_at("vllm==0.34.0"), engine_at("vllm==0.33.0")
    assert aux_layer_ids(nested, [old])["vllm"] == [1, 3, 4]
    assert aux_layer_ids(nested, [new])["vllm"] is None  # the target's default capture, said only at INFO
    assert aux_layer_ids(dict(nested, **top), [new])["vllm"] == [2, 4, 5]
    assert "from 0.34.0" in old.change("aux.from") and "V1 runner removed" in old.change("aux.from")
    # fc is still sized from num_aux_hidden_states, else eagle_config's list, else 3
    assert new.value("aux.count") == old.value("aux.count")
    assert new.outcome("aux.unread")["result"] == "serves"

