"""speculators fixtures: run inside a venv with speculators==0.9.0 (see scripts/make_producer_fixtures.py).

Usage (cwd = repository root, so the verifier path recorded in config.json is the repo-relative
data_samples/producers/target):
    python -m scripts.producer_fixtures.gen_speculators OUT_ROOT TARGET_DIR WORK_DIR [--layouts]

For each variant: build the decoder config with speculators.train.cli.create_transformer_layer_config
(the trainer's own path, from the tiny target's config.json), d2t/t2d with
speculators.train.vocab_mapping.build_vocab_mappings_from_distribution, the model with
Eagle3DraftModel.from_training_args (which loads embed_tokens and lm_head = target lm_head[t2d]
from the verifier, as training does), seeded random values for every trainable weight, save with
speculators.train.checkpointer.SingleGPUCheckpointer (bf16, as the trainer does) and copy the
epoch folder into OUT_ROOT/speculators_<variant>/. Logits: the checkpoint is loaded back with
the body of SingleGPUCheckpointer.load_model_state_dict (cpu) into a fresh model and
Eagle3DraftModel.forward (the training-time-test loop, ttt_steps=3, draft_attn_impl='eager') is
run on the shifted batch; a forward hook on lm_head records each step's logits.
"""
from __future__ import annotations

import os
import shutil
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402

from scripts.producer_fixtures import common as C  # noqa: E402

import speculators  # noqa: E402
from speculators.models.eagle3.core import Eagle3DraftModel  # noqa: E402
from speculators.train.checkpointer import (  # noqa: E402
    SingleGPUCheckpointer,
    convert_float_dtype,
    load_safetensors_state_dict,
)
from speculators.train.cli import create_transformer_layer_config  # noqa: E402
from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution  # noqa: E402

VERSION = getattr(speculators, "__version__", None) or "0.9.0"
SRC = "speculators/models/eagle3/core.py"
DEFS = "speculators/models/eagle3/model_definitions.py"
ATT = "speculators/models/eagle3/attention.py"

BASE = {"draft_arch": "llama", "sliding_window": 2048, "full_attention": True,
        "norm_before_residual": False, "norm_before_fc": False, "fc_norm": False,
        "norm_output": False, "tl": {}}

# variant -> overrides of BASE ("tl": extra transformer_layer_config attributes)
VARIANTS = {
    "control": {},
    # the trainer's defaults for --speculator-type eagle3 (train/config/schema.py):
    # norm_before_residual, norm_before_fc, norm_output all true; every draft layer sliding
    # (window 2048 > T here, so the window itself does not bite)
    "defaults": {"norm_before_residual": True, "norm_before_fc": True, "norm_output": True,
                 "full_attention": False},
    "norm_output": {"norm_output": True},
    "norm_before_fc": {"norm_before_fc": True},
    "fc_norm": {"fc_norm": True},
    "sliding_window": {"sliding_window": 4, "full_attention": False},
    "qwen3": {"draft_arch": "qwen3"},
    "attention_bias": {"tl": {"attention_bias": True}},
    "head_dim": {"tl": {"head_dim": 16}},
}


def build(v: dict, target_dir: str, seed: int | None, attn_impl: str):
    tl = create_transformer_layer_config(
        verifier_name_or_path=target_dir, num_layers=1, draft_arch=v["draft_arch"],
        hidden_act="silu", sliding_window=v["sliding_window"],
        full_attention_indices=[0] if v["full_attention"] else [],
    )
    for k, val in v["tl"].items():
        setattr(tl, k, val)
    d2t, t2d = build_vocab_mappings_from_distribution(C.token_counts(), C.DRAFT_VOCAB, C.VOCAB)
    model = Eagle3DraftModel.from_training_args(
        verifier_config=tl, t2d=t2d, d2t=d2t, verifier_name_or_path=target_dir,
        draft_vocab_size=C.DRAFT_VOCAB, norm_before_residual=v["norm_before_residual"],
        norm_before_fc=v["norm_before_fc"], fc_norm=v["fc_norm"], norm_output=v["norm_output"],
        ttt_steps=C.STEPS, draft_attn_impl=attn_impl,
    )
    if seed is not None:
        # trainable weights only: embed_tokens / lm_head / verifier_* stay as loaded from the target
        C.randomize_(model, seed, skip=("embed_tokens", "lm_head", "verifier_"))
    return model


def ttt_logits(model, hidden, ids):
    captured = []
    h = model.lm_head.register_forward_hook(lambda m, i, o: captured.append(o.detach().float().clone()))
    T1 = ids.shape[1]
    with torch.no_grad():
        model(hidden_states=hidden, input_ids=ids, document_ids=torch.zeros(1, T1, dtype=torch.long),
              position_ids=torch.arange(1, T1 + 1).unsqueeze(0), ttt_steps=C.STEPS)
    h.remove()
    assert len(captured) == C.STEPS, len(captured)
    return captured


def signals(name, v, sd_keys, cfg):
    tl = cfg.get("transformer_layer_config", {})
    out = {"config": {}, "weight_keys": []}
    for k in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"):
        if k in cfg:
            out["config"][k] = cfg[k]
    for k in ("model_type", "sliding_window", "layer_types", "use_sliding_window", "attention_bias", "head_dim"):
        if k in tl:
            out["config"][f"transformer_layer_config.{k}"] = tl[k]
    for pat in ("input_norm", "fc_norm", "q_norm", "k_norm", ".bias"):
        out["weight_keys"] += [k for k in sd_keys if pat in k]
    out["weight_keys"] = sorted(set(out["weight_keys"]))
    return out


def reference_json(variant, v, files, sig):
    proj = "h0 = fc(g)"
    if v["norm_before_fc"]:
        proj = "h0 = fc(input_norm(g))  (ONE RMSNorm over the whole 3*H concatenation)"
    if v["fc_norm"]:
        proj = "h0 = fc(cat(fc_norm[i](g_chunk_i) for i in 0..2))  (one RMSNorm per aux chunk)"
    window = (f"sliding window {v['sliding_window']} on layer 0: step-0 keys s with "
              f"t - {v['sliding_window']} < s <= t" if not v["full_attention"] else "full causal")
    return {
        "producer": "speculators",
        "version": VERSION,
        "variant": variant,
        "signals": sig,
        "files": files,
        "forward": {
            "source": [
                f"{SRC}: Eagle3DraftModel.__init__ / forward (the training-time-test loop)",
                f"{DEFS}: Eagle3FirstLayerMixin.forward (+ transformers LlamaDecoderLayer / "
                "Qwen3DecoderLayer attention and MLP)",
                f"{ATT}: create_combined_mask_mod, extend_dense_mask_for_draft_tokens",
                "speculators/models/eagle3/data.py: shift_batch (the alignment)",
                "speculators/models/attention.py: create_float_mask (eager path)",
            ],
            "path": "training-time test: Eagle3DraftModel.forward(hidden_states, input_ids, "
                    "document_ids=0, position_ids=1..T-1, ttt_steps=3) with "
                    "draft_attn_impl='eager' (dense float mask; the flex-attention default "
                    "computes the same mask); logits recorded by a forward hook on lm_head",
            "weights": "the saved (bf16) checkpoint loaded back with "
                       "the body of SingleGPUCheckpointer.load_model_state_dict (on cpu) into a fresh model in fp32 "
                       "(logits_fp32) or bf16 (logits_bf16)",
            "project": proj,
            "layer": ("Qwen3 layer: q_norm / k_norm (RMSNorm over head_dim, per head) applied to "
                      "q and k before RoPE" if v["draft_arch"] == "qwen3" else "Llama layer")
                     + ("; q/k/v/o projections carry biases" if v["tl"].get("attention_bias") else "")
                     + (f"; head_dim {v['tl']['head_dim']}" if "head_dim" in v["tl"] else ""),
            "residual": "residual = hidden_norm(h)" if v["norm_before_residual"] else "residual = h",
            "logits": "lm_head(norm(h_k)) at every step (norm_output does not change step-k logits)",
            "attention": window,
        },
        "alignment": {
            "raw": "input_ids[0, t] = x_t, aux_hidden_states[0, t] = g_t, t = 0..T-1",
            "shift_batch": "draft input ids = x_1..x_{T-1}, hidden states = g_0..g_{T-2}: "
                           "position t takes g_t and embed(x_{t+1}) and predicts x_{t+2}",
            "kit_inputs": "aux_hidden = aux_hidden_states[:, :-1], next_ids = input_ids[:, 1:] "
                          "(T-1 positions; logits are [1, T-1, draft_vocab])",
            "rope": "position_ids start at 1 (shift_batch); +1 per step. Only relative positions "
                    "matter, so this equals SpecForge's 0-based t+k",
        },
        "steps": {
            "k>=1 hidden": ("norm(h_{k-1}) - the final norm's output is fed back (norm_output)"
                            if v["norm_output"] else "h_{k-1}, the decoder layer's raw output"),
            "k>=1 token": "teacher forcing: position t takes embed(x_{t+1+k}) (target ids, "
                          "0-padded at the end); ids_step{k} holds them",
            "attention_mask": "a DynamicCache keeps every step's keys; step k's query at t "
                              "attends the step-0 keys allowed by the causal (+ window) + "
                              "document mask, plus, for j=1..k, only position t's key of step "
                              "j (diagonal blocks appended by extend_dense_mask_for_draft_tokens)",
        },
        "reference_pt": {
            "input_ids": "[1,T] int64 raw tokens x_t (target ids)",
            "aux_hidden_states": "[1,T,3*H] fp32 raw g_t (chunk i scaled by 1/4/16)",
            "aux_hidden": "[1,T-1,3*H] fp32, what the kit's forward takes (g_0..g_{T-2})",
            "next_ids": "[1,T-1] int64, step-0 embedding ids x_1..x_{T-1}",
            "ids_step{k}": "[1,T-1] int64, the embedding ids fed at step k",
            "logits_fp32_step{k}": "[1,T-1,draft_vocab] fp32",
            "logits_bf16_step{k}": "[1,T-1,draft_vocab] bf16 weights and activations, stored as bf16",
            "d2t": "[draft_vocab] int64 offsets (target = draft + d2t[draft])",
        },
        "notes": [
            "model.safetensors holds embed_tokens (copied from ../target), lm_head "
            "(= target lm_head rows where t2d), d2t (int64 offsets) and t2d (bool); "
            "verifier_lm_head / verifier_norm are not saved",
            "config.json's speculators_config.verifier.name_or_path is the repo-relative "
            "data_samples/producers/target",
        ],
    }


def main():
    out_root, target_dir, work = sys.argv[1:4]
    layouts = "--layouts" in sys.argv
    os.makedirs(work, exist_ok=True)
    inputs = C.fixed_inputs()
    ids_raw, g_raw = inputs["input_ids"], inputs["aux_hidden_states"]
    hidden, ids = g_raw[:, :-1].contiguous(), ids_raw[:, 1:].contiguous()  # shift_batch
    for i, (variant, over) in enumerate(VARIANTS.items()):
        v = {**BASE, **over}
        fixture = os.path.join(out_root, f"speculators_{variant}")
        shutil.rmtree(fixture, ignore_errors=True)
        model = build(v, target_dir, seed=200 + i, attn_impl="eager")
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        ck_root = os.path.join(work, f"spec_ckpt_{variant}")
        shutil.rmtree(ck_root, ignore_errors=True)
        ck = SingleGPUCheckpointer(ck_root)
        ck.save_checkpoint(model, opt, 0)
        shutil.copytree(os.path.join(ck_root, "0"), fixture)
        # kept only in layouts/: the optimizer state, and config.py (the Eagle3SpeculatorConfig
        # source that save_pretrained copies beside config.json for its auto_map)
        for extra in ("optimizer_state_dict.pt", "config.py"):
            os.remove(os.path.join(fixture, extra))
        ref = dict(inputs)
        ref["aux_hidden"], ref["next_ids"] = hidden.clone(), ids.clone()
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            m = build(v, target_dir, seed=None, attn_impl="eager")
            # SingleGPUCheckpointer.load_model_state_dict's body with device "cpu" (its own
            # get_current_device() asks for pinned memory, which a CPU-only torch lacks)
            sd = convert_float_dtype(load_safetensors_state_dict(ck.model_path(0), "cpu"), dtype)
            m.load_state_dict(sd, strict=False)
            m = m.to(dtype).eval()
            for k, lg in enumerate(ttt_logits(m, hidden.to(dtype), ids)):
                ref[f"logits_{name}_step{k}"] = lg.to(dtype).contiguous()
        cur = ids
        for k in range(C.STEPS):
            ref[f"ids_step{k}"] = cur.clone()
            cur = torch.cat([ids[:, 1 + k:], ids.new_zeros(1, 1 + k)], dim=1)
        ref["d2t"] = m.d2t.clone()
        torch.save(ref, os.path.join(fixture, "reference.pt"))
        C.check_weights_only(os.path.join(fixture, "reference.pt"))
        import json
        cfg = json.load(open(os.path.join(fixture, "config.json")))
        from safetensors import safe_open
        with safe_open(os.path.join(fixture, "model.safetensors"), "pt") as f:
            keys = list(f.keys())
        files = sorted(os.listdir(fixture)) + ["reference.json"]
        C.write_json(os.path.join(fixture, "reference.json"),
                     reference_json(variant, v, files, signals(variant, v, keys, cfg)))
        print(f"speculators_{variant}: {files}")
        if layouts and variant == "control":
            lay = os.path.join(out_root, "layouts", "speculators_trainer_d2t")
            shutil.rmtree(lay, ignore_errors=True)
            shutil.copytree(ck_root, lay, symlinks=True)
    if layouts:
        # draft vocab == target vocab: no d2t/t2d buffers at all (use_draft_vocab False)
        lay = os.path.join(out_root, "layouts", "speculators_trainer_no_d2t")
        shutil.rmtree(lay, ignore_errors=True)
        tl = create_transformer_layer_config(target_dir, 1, "llama", "silu", 2048, [0])
        model = Eagle3DraftModel.from_training_args(
            verifier_config=tl, t2d=None, d2t=None, verifier_name_or_path=target_dir,
            draft_vocab_size=C.VOCAB, norm_before_residual=True, norm_before_fc=True,
            norm_output=True, ttt_steps=C.STEPS, draft_attn_impl="eager")
        C.randomize_(model, 299, skip=("embed_tokens", "lm_head", "verifier_"))
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        SingleGPUCheckpointer(lay).save_checkpoint(model, opt, 0)
        print("layouts:", lay)


if __name__ == "__main__":
    main()
