"""NVIDIA Model-Optimizer fixture: run inside a venv with nvidia-modelopt==0.47.0 (--no-deps) and
transformers<5.15 (see scripts/make_producer_fixtures.py).

Usage (cwd = repository root): python -m scripts.producer_fixtures.gen_modelopt OUT_ROOT TARGET_DIR WORK_DIR

What runs, all ModelOpt's own code:
* a tiny HF LlamaForCausalLM built from TARGET_DIR/config.json (embed_tokens, lm_head, norm from
  TARGET_DIR/model.safetensors; the decoder layers are dropped by eagle_offline, as in offline
  training);
* modelopt.torch.speculative.convert(model, [("eagle", cfg)]) with the EAGLE-3 defaults
  (eagle3_default_config: use_aux_hidden_state, use_last_layernorm) and a tiny
  eagle_architecture_config, eagle_decoder_type "llama", eagle_offline, eagle_ttt_steps 3,
  eagle_use_torch_compile off (CPU);
* d2t loaded with HFEagleModel.load_draft_vocab_cache (a torch.save'd int64 offset tensor; the
  calibration script that writes it is in the Model-Optimizer repo's examples, not in the wheel,
  so the file is made here from the shared count table: the top-128 ids in ascending id order);
* seeded random values for every eagle_module weight;
* export: modelopt.torch.export.export_speculative_decoding (EagleExporter.export:
  model.safetensors + config.json) into OUT_ROOT/modelopt_eagle3/;
* logits: HFEagleModel.forward in training mode (the TTT loop, eagle_ttt_steps=3) on offline base
  outputs (base_model_outputs = {aux_hidden_states, base_model_hidden_states, base_model_logits}),
  with a forward hook on eagle_module.lm_head.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from scripts.producer_fixtures import common as C  # noqa: E402

from importlib.metadata import version as _pkg_version  # noqa: E402

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import modelopt.torch.speculative as mtsp  # noqa: E402
from modelopt.torch.export import export_speculative_decoding  # noqa: E402
from modelopt.torch.speculative.plugins.hf_eagle import HFEagleModel  # noqa: E402

VERSION = _pkg_version("nvidia-modelopt")
TF_VERSION = _pkg_version("transformers")
AUX_IDS = [1, 3, 4]  # = default_eagle_aux_layer_ids(8): {1, 8//2-1, 8-4}

ARCH = {  # eagle_architecture_config (merged over eagle3_default_config by convert)
    "intermediate_size": C.INTER,
    "num_attention_heads": C.HEADS,
    "num_key_value_heads": C.KV_HEADS,
    "head_dim": C.H // C.HEADS,
    "rms_norm_eps": C.EPS,
    "draft_vocab_size": C.DRAFT_VOCAB,
    "eagle_aux_hidden_state_layer_ids": AUX_IDS,
    "_attn_implementation": "sdpa",
}


def base_model(target_dir: str) -> LlamaForCausalLM:
    with open(os.path.join(target_dir, "config.json")) as f:
        cfg = LlamaConfig(**{k: v for k, v in json.load(f).items() if k != "architectures"})
    model = LlamaForCausalLM(cfg)
    sd = load_file(os.path.join(target_dir, "model.safetensors"))
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    assert not unexpected
    return model


def d2t_offsets() -> torch.Tensor:
    counts = C.token_counts()
    top = sorted(sorted(counts, key=lambda t: -counts[t])[: C.DRAFT_VOCAB])
    return torch.tensor(top, dtype=torch.int64) - torch.arange(C.DRAFT_VOCAB, dtype=torch.int64)


def convert(target_dir: str, d2t_path: str, seed: int):
    model = base_model(target_dir)
    cfg = {
        "eagle_decoder_type": "llama",
        "eagle_offline": True,
        "eagle_ttt_steps": C.STEPS,
        "eagle_mix_hidden_states": False,
        "eagle_use_torch_compile": False,
        "eagle_architecture_config": dict(ARCH),
    }
    model = mtsp.convert(model, [("eagle", cfg)])
    HFEagleModel.load_draft_vocab_cache(model, d2t_path)
    C.randomize_(model.eagle_module, seed)
    return model


def run_ttt(model, inputs, dtype):
    """HFEagleModel.forward (training mode = the TTT loop) with offline base outputs."""
    model = model.to(dtype)
    # the rotary table is built lazily at the first forward (EagleModule._maybe_init_rope), in fp32;
    # drop the one a previous run left so a cast does not round it
    if hasattr(model.eagle_module, "rotary_emb"):
        del model.eagle_module.rotary_emb
    # the TTT masks (steps >= 1) take their dtype from the base config's dtype (bf16 in the target's
    # config.json) and are cached per step: set it to the run's dtype, as loading the base model
    # in that dtype does, and drop masks of an earlier run
    model._base_llm_config.dtype = dtype
    model._cached_attn_blk_masks = {}
    captured = []
    hook = model.eagle_module.lm_head.register_forward_hook(
        lambda _m, _i, out: captured.append(out.detach().float().clone()))
    g = torch.Generator().manual_seed(99)
    base = {
        "aux_hidden_states": inputs["aux_hidden_states"].to(dtype),
        "base_model_hidden_states": torch.randn(1, C.T, C.HT, generator=g).to(dtype),  # loss only
        "base_model_logits": torch.randn(1, C.T, C.VOCAB, generator=g).to(dtype),  # loss only
    }
    model.train()
    with torch.no_grad():
        model(input_ids=inputs["input_ids"], attention_mask=torch.ones(1, C.T, dtype=torch.long),
              loss_mask=torch.ones(1, C.T, dtype=torch.long), base_model_outputs=base)
    hook.remove()
    assert len(captured) == C.STEPS, len(captured)
    return captured


def reference_json(files, export_cfg, target_rel):
    return {
        "producer": "nvidia-modelopt",
        "version": VERSION,
        "transformers": TF_VERSION,
        "variant": "eagle3 (llama decoder, eagle3_default_config)",
        "target": target_rel,
        "signals": {
            "config": {
                "architectures": export_cfg.get("architectures"),
                "eagle_config": export_cfg.get("eagle_config"),
                "rope_scaling (export override, NOT used in training)": export_cfg.get("rope_scaling"),
                "rope_theta": export_cfg.get("rope_theta"),
                "num_hidden_layers": export_cfg.get("num_hidden_layers"),
            },
            "weight_keys": "un-prefixed: fc, layers.0.{input_layernorm,hidden_norm,post_attention_layernorm}, "
                           "layers.0.self_attn.{q,k,v,o}_proj, layers.0.mlp.*, norm, lm_head, d2t (no t2d, "
                           "no embed_tokens)",
        },
        "files": files,
        "forward": {
            "source": [
                "modelopt/torch/speculative/plugins/hf_eagle.py: HFEagleModel.modify / _prepare_eagle_inputs / "
                "_eagle_forward / forward (TTT loop) / _compute_ttt_attention_mask",
                "modelopt/torch/speculative/plugins/modeling_eagle.py: EagleModule.__init__ / "
                "_eagle3_attention_forward_pre_hook / forward",
                "modelopt/torch/speculative/utils.py: get_ttt_msk_func",
                f"transformers {TF_VERSION}: LlamaDecoderLayer / LlamaAttention (sdpa) / LlamaRMSNorm / "
                "LlamaRotaryEmbedding / DynamicCache",
                "modelopt/torch/export/plugins/hf_spec_export.py: EagleExporter; hf_spec_configs.py: "
                "llama_eagle_template_config",
            ],
            "path": "HFEagleModel.forward in training mode (eagle_offline, base_model_outputs given, "
                    "eagle_ttt_steps=3, sdpa, eagle_mix_hidden_states false, torch.compile off); logits from a "
                    "forward hook on eagle_module.lm_head",
            "weights": "logits_fp32 from the fp32 model, logits_bf16 from the same model cast to bf16 "
                       "(ModelOpt casts eagle_module to the base model's dtype); the export is written from the "
                       "fp32 model with dtype None, so model.safetensors holds fp32 tensors",
            "project": "h0 = fc(g)  (g = cat of the 3 aux layers' outputs, fc: [H, 3H], no bias)",
            "layer": "HF LlamaDecoderLayer with a pre-hook on self_attn: r = h_k; u = input_layernorm(h_k) "
                     "(the layer's own call); attn input = cat(input_layernorm(embed), hidden_norm(u)) -- "
                     "the carried hidden state goes through input_layernorm AND hidden_norm; "
                     "a = r + o_proj(attn); out = a + mlp(post_attention_layernorm(a))",
            "logits": "lm_head(norm(out)) (use_last_layernorm true)",
        },
        "alignment": {
            "raw": "input_ids[0, t] = x_t, aux_hidden_states[0, t] = g_t",
            "step0": "position q takes g_q and embed(x_{q+1}) -- input_ids.roll(-1): the LAST position takes "
                     "embed(x_0) (wrap-around), not a pad id -- and predicts x_{q+2}",
            "kit_inputs": "aux_hidden = aux_hidden_states (T positions), next_ids = input_ids.roll(-1) = "
                          "[x_1..x_{T-1}, x_0]",
        },
        "steps": {
            "indexing": "ModelOpt keeps every step on the SAME embeddings and positions and shifts the hidden "
                        "state instead: step k at position q takes out_{k-1} of position q-1 (prenorm output "
                        ".roll(1)) and embed(x_{q+1}). So position q at step k is the chain anchored at a = q-k "
                        "(SpecForge's step k, position a). Positions q < k hold wrapped garbage (masked from the "
                        "loss).",
            "k>=1 hidden": "the raw (pre-norm) layer output; the normed state only feeds lm_head",
            "rope": "position q (= a + k) for the query and the new key, as in SpecForge",
            "attention_mask": "get_ttt_msk_func: step-0 keys s <= q-k (= a) plus, for j=1..k, the key of step j "
                              "at position q-(k-j) (= anchor a's step-j key); keys held in a DynamicCache that "
                              "grows by T per step",
        },
        "reference_pt": {
            "input_ids": "[1,T] int64 raw x_t",
            "aux_hidden_states": "[1,T,3*Ht] fp32 raw g_t",
            "aux_hidden": "[1,T,3*Ht] fp32, same",
            "next_ids": "[1,T] int64 input_ids.roll(-1) (last = x_0)",
            "ids_step{k}": "[1,T] int64, the kit's teacher-forcing ids for anchor a at step k: "
                           "next_ids shifted left k times, 0-padded (what the kit would embed)",
            "position_ids": "[1,T] int64 0..T-1",
            "logits_fp32_step{k}": "[1,T,draft_vocab] fp32 in ModelOpt's OWN indexing (position q = anchor q-k; "
                                   "q < k invalid)",
            "logits_bf16_step{k}": "[1,T,draft_vocab] bf16, same indexing",
            "logits_fp32_anchor_step{k}": "[1,T-k,draft_vocab] fp32 = logits_fp32_step{k}[:, k:]: anchor a = 0..T-1-k, "
                                          "the kit's (SpecForge) alignment; valid for every anchor because "
                                          "ModelOpt's embed at q = a+k is next_ids[a+k]",
            "logits_bf16_anchor_step{k}": "[1,T-k,draft_vocab] bf16, same",
            "d2t": "[draft_vocab] int64 offsets (ascending top-128 ids here)",
        },
        "notes": [
            "export config rope_scaling: when training rope_type is 'default', EagleExporter writes "
            "eagle_export_rope_scaling (default {rope_type: yarn, factor: 32, original_max_position_embeddings: "
            "2048}) into config.json; the recorded logits use the TRAINING rope (default, theta 10000)",
            "embed_tokens is not exported: the draft uses the target's embeddings (see target)",
            "t2d is not exported (ModelOpt has no t2d buffer)",
            "config.json has eagle_config.{use_aux_hidden_state, use_input_layernorm_in_first_layer, "
            "use_last_layernorm, eagle_aux_hidden_state_layer_ids, ...} and draft_vocab_size",
        ],
    }


def main():
    out_root, target_dir, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    d2t_path = os.path.join(work, "d2t.pt")
    torch.save(d2t_offsets(), d2t_path)
    inputs = C.fixed_inputs()
    model = convert(target_dir, d2t_path, seed=500)
    fixture = os.path.join(out_root, "modelopt_eagle3")
    shutil.rmtree(fixture, ignore_errors=True)
    export_speculative_decoding(model, dtype=None, export_dir=fixture)
    exported = load_file(os.path.join(fixture, "model.safetensors"))
    with open(os.path.join(fixture, "config.json")) as f:
        export_cfg = json.load(f)
    ref = {k: v for k, v in inputs.items()}
    ref["aux_hidden"] = inputs["aux_hidden_states"].clone()
    lg32 = run_ttt(model, inputs, torch.float32)
    lg16 = run_ttt(model, inputs, torch.bfloat16)
    next_ids = inputs["input_ids"].roll(-1, 1)
    ref["next_ids"] = next_ids.clone()
    ids = next_ids
    for k in range(C.STEPS):
        ref[f"ids_step{k}"] = ids.clone()
        ids = torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], dim=1)
        ref[f"logits_fp32_step{k}"] = lg32[k].float().contiguous()
        ref[f"logits_bf16_step{k}"] = lg16[k].to(torch.bfloat16).contiguous()
        ref[f"logits_fp32_anchor_step{k}"] = lg32[k][:, k:].float().contiguous()
        ref[f"logits_bf16_anchor_step{k}"] = lg16[k][:, k:].to(torch.bfloat16).contiguous()
    ref["position_ids"] = torch.arange(C.T).unsqueeze(0)
    ref["d2t"] = exported["d2t"].clone()
    torch.save(ref, os.path.join(fixture, "reference.pt"))
    C.check_weights_only(os.path.join(fixture, "reference.pt"))
    files = sorted(os.listdir(fixture)) + ["reference.json"]
    C.write_json(os.path.join(fixture, "reference.json"), reference_json(files, export_cfg, os.path.relpath(target_dir, fixture)))
    print("modelopt_eagle3:", files, sorted(exported))


if __name__ == "__main__":
    main()
