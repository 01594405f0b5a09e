"""TorchSpec fixture (source only, no release on PyPI): run inside a venv with torch and
transformers==4.57.1, with the TorchSpec source tree (torchspec/ and tools/) on PYTHONPATH.

Usage (cwd = repository root): python -m scripts.producer_fixtures.gen_torchspec OUT_ROOT TARGET_DIR WORK_DIR TORCHSPEC_SRC
(with PYTHONPATH=TORCHSPEC_SRC:TORCHSPEC_SRC/tools, as make_producer_fixtures.py sets it)

TORCHSPEC_SRC is a checkout of github.com/lightseekorg/TorchSpec (the commit read is recorded in
reference.json; make_producer_fixtures.py exports it from a git dir with `git archive`).

What runs, all TorchSpec's own code:
* the draft config: configs/draft_models/kimi_k25_eagle3_mla.json (Eagle3DeepseekV2ForCausalLM,
  model_type kimi_k2, yarn rope) scaled down to H 32; draft_vocab_size = vocab_size (512), as
  tools/convert_to_hf.py requires for its --prune-vocab path;
* AutoDraftModelConfig.from_dict + AutoEagle3DraftModel.from_config(..., attention_backend='sdpa',
  torch_dtype=bf16) (the trainer's call), Eagle3DraftModel.load_embedding from the target,
  freeze_embedding, seeded random values for every other weight;
* the FSDP checkpoint is not made (it needs a process group and FSDP2); the conversion runs from
  the trainer's state dict keyed 'draft_model.*' through tools/convert_to_hf.py's own pieces:
  _extract_model_weights, AutoEagle3DraftModel.from_config + load_state_dict, and, for the vocab
  pruning, torchspec.data.preprocessing.process_token_dict_to_mappings +
  _save_with_vocab_pruning (export_for_vllm false): OUT_ROOT/torchspec_mla_pruned/;
* logits: Eagle3Model.forward (torchspec/models/eagle3.py, length 3, sdpa backend) with
  _calculate_loss wrapped to record draft_model.compute_logits(hidden_states) at each step
  (the loss itself does RMSNorm + lm_head on the same states inside a torch.compile'd function;
  TORCHDYNAMO_DISABLE=1 runs it eagerly), once for the model re-built from the export (draft vocab
  128: the recorded logits) and once for the trained model before conversion (full vocab 512:
  logits_train_fullvocab_fp32_step0, to show which lm_head rows the export kept).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from collections import Counter

warnings.filterwarnings("ignore")
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from scripts.producer_fixtures import common as C  # noqa: E402

SRC = sys.argv[4] if len(sys.argv) > 4 else None
# TorchSpec's tree (SRC and SRC/tools) comes on PYTHONPATH, set by scripts/make_producer_fixtures.py

from importlib.metadata import version as _pkg_version  # noqa: E402

import convert_to_hf as CONV  # noqa: E402  (TorchSpec tools/convert_to_hf.py)
import torchspec.models.eagle3 as E3  # noqa: E402
from torchspec.data.preprocessing import process_token_dict_to_mappings  # noqa: E402
from torchspec.models.draft import AutoDraftModelConfig, AutoEagle3DraftModel  # noqa: E402
from torchspec.utils.tensor import padding  # noqa: E402

TF_VERSION = _pkg_version("transformers")
AUX_IDS = [1, 3, 4]

DRAFT_CONFIG = {  # configs/draft_models/kimi_k25_eagle3_mla.json, scaled down
    "architectures": ["Eagle3DeepseekV2ForCausalLM"],
    "model_type": "kimi_k2",
    "hidden_size": C.H,
    "intermediate_size": C.INTER,
    "num_hidden_layers": 1,
    "num_attention_heads": C.HEADS,
    "num_key_value_heads": C.HEADS,
    "q_lora_rank": 24,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 8,
    "v_head_dim": 12,
    "hidden_act": "silu",
    "rms_norm_eps": C.EPS,
    "vocab_size": C.VOCAB,
    "draft_vocab_size": C.VOCAB,
    "max_position_embeddings": 64,
    "torch_dtype": "bfloat16",
    "rope_theta": 50000.0,
    "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 8.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 8, "type": "yarn"},
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_IDS, "use_aux_hidden_state": True,
                     "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                     "use_mtp_layernorm": False},
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


def git_head(src: str) -> str | None:
    try:
        return subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:
        marker = os.path.join(src, "COMMIT")
        return open(marker).read().strip() if os.path.exists(marker) else None


def build_trained(cfg_dict: dict, target_dir: str, seed: int):
    config = AutoDraftModelConfig.from_dict(cfg_dict)
    model = AutoEagle3DraftModel.from_config(config, attention_backend="sdpa", torch_dtype=torch.bfloat16)
    model.load_embedding(target_dir, embedding_key="model.embed_tokens.weight")  # TrainConfig default
    model.freeze_embedding()
    C.randomize_(model, seed, skip=("embed",))
    return model


def ttt_logits(model, inputs, dtype):
    """Eagle3Model.forward, recording draft_model.compute_logits(h) at every TTT step."""
    model = model.to(dtype)
    captured = []

    class Capturing(E3.Eagle3Model):
        def _calculate_loss(self, hidden_states, **kw):
            captured.append(self.draft_model.compute_logits(hidden_states).detach().float().clone())
            z = hidden_states.new_zeros(())
            return z, z

    e3 = Capturing(model, length=C.STEPS, attention_backend="sdpa")
    ids = padding(inputs["input_ids"], left=False)  # Eagle3Trainer._forward
    g = torch.Generator().manual_seed(99)
    target = E3.LazyTarget(hidden_states_padded=torch.zeros(1, C.T + C.STEPS, C.HT, dtype=dtype),
                           lm_head_weight=torch.randn(C.VOCAB, C.HT, generator=g).to(dtype))  # loss only
    with torch.no_grad():
        e3(input_ids=ids, attention_mask=torch.ones(1, C.T, dtype=torch.long), target=target,
           loss_mask=torch.ones(1, C.T, dtype=torch.long), hidden_states=inputs["aux_hidden_states"].to(dtype))
    assert len(captured) == C.STEPS
    return ids, captured


def reference_json(files, commit, checks, target_rel):
    return {
        "producer": "torchspec",
        "version": "0.1.0 (version.txt; source only, not on PyPI)",
        "commit": commit,
        "transformers": TF_VERSION,
        "variant": "Kimi-K2.5-style MLA EAGLE-3 draft (Eagle3DeepseekV2ForCausalLM), yarn rope, "
                   "vocab pruned at conversion by tools/convert_to_hf.py --prune-vocab",
        "target": target_rel + " (embed_tokens; the export also carries its own embed_tokens copy)",
        "signals": {
            "config": {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2",
                       "rope_scaling": DRAFT_CONFIG["rope_scaling"], "rope_theta": DRAFT_CONFIG["rope_theta"],
                       "eagle_config": DRAFT_CONFIG["eagle_config"], "_torchspec_version": "0.1.0"},
            "weight_keys": "flat: embed_tokens.weight, fc.weight, midlayer.{input_layernorm,hidden_norm,"
                           "post_attention_layernorm}.weight, midlayer.self_attn.{q_a_proj,q_a_layernorm,q_b_proj,"
                           "kv_a_proj_with_mqa,kv_a_layernorm,kv_b_proj,o_proj}.weight, midlayer.mlp.*, norm.weight, "
                           "lm_head.weight [draft_vocab, H], d2t (int64 offsets), t2d (bool); safetensors metadata "
                           "torchspec_version",
        },
        "files": files,
        "forward": {
            "source": [
                "torchspec/models/draft/deepseek_eagle.py: DeepSeekMLAAttention (_init_rope, "
                "_compute_softmax_scale, _project_qkv, _apply_rope_and_assemble, forward cached path), "
                "_apply_rotary_pos_emb_interleaved, DeepSeekDecoderLayer, Eagle3DeepseekV2ForCausalLM",
                "torchspec/models/draft/llama3_eagle.py: LlamaYarnRotaryEmbedding, LlamaRMSNorm, LlamaMLP, "
                "yarn_get_mscale",
                "torchspec/models/eagle3.py: Eagle3Model.forward (TTT loop)",
                "torchspec/training/eagle3_trainer.py: Eagle3Trainer._forward (padding(input_ids, left=False))",
                "tools/convert_to_hf.py: _extract_model_weights, _save_with_vocab_pruning",
                "torchspec/data/preprocessing.py: process_token_dict_to_mappings",
            ],
            "path": "Eagle3Model.forward, length 3, sdpa backend (the cached eager path of the MLA attention), "
                    "TORCHDYNAMO_DISABLE=1; logits = draft_model.compute_logits at each step",
            "weights": "bf16 (trainer: from_config(torch_dtype=bf16)); logits_bf16 from the exported config + "
                       "weights in a model built by from_config(torch_dtype=bf16) (its yarn cos/sin tables are "
                       "bf16-rounded buffers); logits_fp32 from a model built in fp32 with the exported weights",
            "project": "h0 = fc(g)",
            "layer": "r = h_k; x = cat(input_layernorm(embed), hidden_norm(h_k)); a = r + o_proj(MLA(x)); "
                     "out = a + mlp(post_attention_layernorm(a)); logits = lm_head(norm(out)); out fed back raw",
            "attention": "MLA as DeepSeek-V3 (q_a_proj -> q_a_layernorm -> q_b_proj; kv_a_proj_with_mqa -> "
                         "latent | k_pe; kv_a_layernorm; kv_b_proj -> k_nope | v); RoPE on the rope slice with "
                         "ADJACENT-pair rotation (neox cos/sin tables de-duplicated and repeat_interleave'd); "
                         "yarn (DeepSeek style, always applied): inv_freq blended with the beta_fast/beta_slow "
                         "ramp, cos/sin multiplied by mscale(factor, mscale)/mscale(factor, mscale_all_dim), "
                         "softmax scale = mscale(factor, mscale_all_dim)^2 / sqrt(qk_nope + qk_rope)",
        },
        "alignment": {
            "raw": "input_ids[0, t] = x_t, aux_hidden_states[0, t] = g_t",
            "step0": "position t takes g_t and embed(x_{t+1}) (padding(input_ids, left=False)), predicts x_{t+2}",
            "kit_inputs": "aux_hidden = aux_hidden_states (T positions), next_ids = [x_1..x_{T-1}, 0]",
        },
        "steps": {
            "k>=1 hidden": "raw layer output (pre-norm)",
            "k>=1 token": "ids shifted left once more per step, 0-padded (ids_step{k})",
            "rope": "step k: position t + k for the query and new key (position_ids + number of cached steps)",
            "attention_mask": "step-0 keys s <= t (causal) plus the diagonal key of each step j=1..k; fp32 softmax",
        },
        "reference_pt": {
            "input_ids / aux_hidden_states / aux_hidden / next_ids / ids_step{k} / position_ids": "as the other fixtures",
            "logits_fp32_step{k}": "[1,T,128] fp32 of the model rebuilt from the export (draft vocab 128)",
            "logits_bf16_step{k}": "[1,T,128] bf16, same",
            "logits_train_fullvocab_fp32_step0": "[1,T,512] fp32 of the trained (full-vocab) model before "
                                                 "conversion, same weights otherwise",
            "d2t": "[128] int64 offsets (ascending ids)",
        },
        "checks": checks,
        "notes": [
            "tools/convert_to_hf.py prunes lm_head with tensors['lm_head.weight'][d2t], i.e. by the OFFSETS, not by "
            "the target ids d2t + arange: see checks (exported logits equal the full-vocab logits at columns d2t, "
            "not at d2t + arange)",
            "the FSDP checkpoint and its DCP layout were not produced (no process group / FSDP2 on CPU here)",
            "export_for_vllm renames midlayer.* to layers.0.* and, for model_type kimi_k2, adds 1 to "
            "eagle_aux_hidden_state_layer_ids (not made here)",
        ],
    }


def main():
    out_root, target_dir, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    commit = git_head(SRC) if SRC else None
    inputs = C.fixed_inputs()
    trained = build_trained(DRAFT_CONFIG, target_dir, seed=700)
    _, train_lg = ttt_logits(trained, inputs, torch.float32)  # full vocab, fp32 copy of the bf16 weights
    trained = trained.to(torch.bfloat16)
    # what the FSDP checkpoint holds (draft_model.* keys) -> convert_to_hf
    ckpt_state = {f"draft_model.{k}": v for k, v in trained.state_dict().items()}
    model_state = CONV._extract_model_weights(ckpt_state)
    config = AutoDraftModelConfig.from_dict(DRAFT_CONFIG)
    hf_model = AutoEagle3DraftModel.from_config(config).to(torch.bfloat16)
    missing, unexpected = hf_model.load_state_dict(model_state, strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    d2t, t2d = process_token_dict_to_mappings(Counter(C.token_counts()), C.DRAFT_VOCAB, C.VOCAB)
    fixture = os.path.join(out_root, "torchspec_mla_pruned")
    shutil.rmtree(fixture, ignore_errors=True)
    os.makedirs(fixture)
    CONV._save_with_vocab_pruning(hf_model, fixture, dict(DRAFT_CONFIG), C.VOCAB, C.DRAFT_VOCAB, d2t, t2d,
                                  export_for_vllm=False)
    with open(os.path.join(fixture, "config.json")) as f:
        exported_cfg = json.load(f)
    exported = load_file(os.path.join(fixture, "model.safetensors"))
    ref = {k: v for k, v in inputs.items()}
    ref["aux_hidden"] = inputs["aux_hidden_states"].clone()
    lg = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        cfg = AutoDraftModelConfig.from_dict(exported_cfg)
        m = AutoEagle3DraftModel.from_config(cfg, attention_backend="sdpa",
                                             torch_dtype=torch.bfloat16 if dtype == torch.bfloat16 else None)
        m.load_state_dict(exported, strict=True)
        m.eval()
        ids, lg[name] = ttt_logits(m, inputs, dtype)
    for k in range(C.STEPS):
        ref[f"logits_fp32_step{k}"] = lg["fp32"][k].contiguous()
        ref[f"logits_bf16_step{k}"] = lg["bf16"][k].to(torch.bfloat16).contiguous()
    ref["logits_train_fullvocab_fp32_step0"] = train_lg[0].contiguous()
    ref["next_ids"] = ids.clone()
    cur = ids
    for k in range(C.STEPS):
        ref[f"ids_step{k}"] = cur.clone()
        cur = padding(cur, left=False)
    ref["position_ids"] = torch.arange(C.T).unsqueeze(0)
    ref["d2t"] = exported["d2t"].clone()
    dd = exported["d2t"]
    checks = {
        "max|export_step0 - train_fullvocab_step0[..., d2t]|":
            (lg["fp32"][0] - train_lg[0][..., dd]).abs().max().item(),
        "max|export_step0 - train_fullvocab_step0[..., d2t + arange]|":
            (lg["fp32"][0] - train_lg[0][..., dd + torch.arange(len(dd))]).abs().max().item(),
    }
    torch.save(ref, os.path.join(fixture, "reference.pt"))
    C.check_weights_only(os.path.join(fixture, "reference.pt"))
    files = sorted(os.listdir(fixture)) + ["reference.json"]
    C.write_json(os.path.join(fixture, "reference.json"), reference_json(files, commit, checks, os.path.relpath(target_dir, fixture)))
    print("torchspec_mla_pruned:", files, checks)


if __name__ == "__main__":
    main()
