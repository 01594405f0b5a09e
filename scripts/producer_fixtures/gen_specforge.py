"""SpecForge fixtures: run inside a venv with specforge==0.2.0 (see scripts/make_producer_fixtures.py).

Usage (cwd = repository root): python -m scripts.producer_fixtures.gen_specforge OUT_ROOT TARGET_DIR WORK_DIR [--layouts]

For each variant: build the draft with SpecForge's own classes (AutoDraftModelConfig.from_file +
AutoDraftModel.from_config -> LlamaForCausalLMEagle3), install d2t/t2d from
specforge.data.preprocessing.process_token_dict_to_mappings, copy embed_tokens from the tiny
target with Eagle3DraftModel.load_embedding and freeze it (as the trainer does), give every
other weight seeded random values, save a trainer checkpoint with
specforge.training.checkpoint.CheckpointManager (draft_state_dict filtered by
Eagle3TrainStrategy.checkpoint_state_filter), export it with
specforge.export.to_sglang.export_to_sglang into OUT_ROOT/specforge_<variant>/, and record the
logits of the producer's training-time-test forward (OnlineEagle3Model.forward, sdpa backend)
at steps 0..2 for the re-materialised (bf16-rounded) weights, in fp32 and bf16.
"""
from __future__ import annotations

import os
import shutil
import sys
import types
from collections import Counter

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # eager reference semantics; no C++ toolchain needed
import warnings  # noqa: E402

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from scripts.producer_fixtures import common as C  # noqa: E402

import specforge  # noqa: E402
from specforge.algorithms.eagle3.model import OnlineEagle3Model  # noqa: E402
from specforge.data.preprocessing import process_token_dict_to_mappings  # noqa: E402
from specforge.export.checkpoint_io import materialize_draft, resolve_training_state  # noqa: E402
from specforge.export.to_hf import export_to_hf  # noqa: E402
from specforge.export.to_sglang import export_to_sglang  # noqa: E402
from specforge.modeling.auto import AutoDraftModel, AutoDraftModelConfig  # noqa: E402
from specforge.modeling.target.target_head import TargetHead  # noqa: E402
from specforge.training.checkpoint import CheckpointManager  # noqa: E402
from specforge.training.strategies.base import Eagle3TrainStrategy  # noqa: E402

VERSION = getattr(specforge, "__version__", None) or "0.2.0"
SRC = "specforge/modeling/draft/llama3_eagle.py"
TTT = "specforge/algorithms/eagle3/model.py"

# variant -> extra draft-config keys (SpecForge has no q_norm/k_norm, attention bias, sliding
# window or tied lm_head for its EAGLE-3 draft: see docs/producer-variants.md)
VARIANTS = {
    "control": {},
    "fc_norm": {"fc_norm": True, "norm_output": True},
    "fc_norm_no_norm_output": {"fc_norm": True, "norm_output": False},
    "head_dim": {"head_dim": 16},
}


def draft_config(extra: dict) -> dict:
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": C.H,
        "intermediate_size": C.INTER,
        "num_attention_heads": C.HEADS,
        "num_key_value_heads": C.KV_HEADS,
        "num_hidden_layers": 1,
        "max_position_embeddings": 2048,
        "initializer_range": 0.02,
        "rms_norm_eps": C.EPS,
        "rope_theta": C.ROPE_THETA,
        "rope_scaling": None,
        "pretraining_tp": 1,
        "tie_word_embeddings": False,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "vocab_size": C.VOCAB,
        "draft_vocab_size": C.DRAFT_VOCAB,
        "target_hidden_size": C.HT,
        "torch_dtype": "bfloat16",
    }
    cfg.update(extra)
    return cfg


class CapturingTTT(OnlineEagle3Model):
    """OnlineEagle3Model unchanged except that _acc_and_loss records the logits each TTT step
    hands to its loss and returns zeros: SpecForge's loss is a Triton kernel (GPU only) and
    plays no part in the logits."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.captured: list[torch.Tensor] = []

    def _acc_and_loss(self, *, logits, **kw):
        self.captured.append(logits.detach().float().clone())
        z = torch.zeros(())
        return z, z, z, z, z, z, z


def build(variant: str, extra: dict, target_dir: str, work: str, seed: int):
    cfg_path = os.path.join(work, f"draft_config_{variant}.json")
    C.write_json(cfg_path, draft_config(extra))
    config = AutoDraftModelConfig.from_file(cfg_path)
    draft = AutoDraftModel.from_config(config)
    d2t, t2d = process_token_dict_to_mappings(Counter(C.token_counts()), C.DRAFT_VOCAB, C.VOCAB)
    draft.d2t.copy_(d2t)
    draft.t2d.copy_(t2d)
    draft.load_embedding(target_dir, embedding_key="model.embed_tokens.weight")
    draft.freeze_embedding()
    C.randomize_(draft, seed, skip=("embed",))
    return cfg_path, draft


def save_trainer_checkpoint(draft, out_dir: str, run_id: str, step: int) -> str:
    """What TrainerController.save_checkpoint writes for a single-rank DDP-less run."""
    eagle = OnlineEagle3Model(draft, length=C.STEPS, attention_backend="sdpa")
    params = [p for p in eagle.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    strategy = types.SimpleNamespace(eagle3_model=eagle)
    shared = {
        "draft_state_dict": Eagle3TrainStrategy.checkpoint_state_filter(strategy, eagle.state_dict()),
        "global_step": step,
        "epoch": 0,
        "epoch_batch": step,
        "epoch_samples": step,
        "strategy": "eagle3",
        "run_id": run_id,
        "world_size": 1,
    }
    mgr = CheckpointManager(out_dir, run_id)
    return mgr.save(shared, step, rank_state={"optimizer": opt.state_dict(), "rng": {"torch": torch.get_rng_state()}})


def ttt_logits(model, inputs, dtype):
    """Run OnlineEagle3Model.forward (sdpa) and return the logits of its STEPS TTT steps."""
    model = model.to(dtype)
    cap = CapturingTTT(model, length=C.STEPS, attention_backend="sdpa")
    ids = inputs["input_ids"]
    g = torch.Generator().manual_seed(99)
    target = torch.randn(1, C.T, C.VOCAB, generator=g)  # target logits: only the loss uses them
    loss_mask = torch.ones(1, C.T, dtype=torch.long)
    shifted_ids, target, loss_mask = TargetHead.preprocess(None, ids, target, loss_mask)
    with torch.no_grad():
        cap(input_ids=shifted_ids, attention_mask=torch.ones(1, C.T, dtype=torch.long), target=target,
            loss_mask=loss_mask, hidden_states=inputs["aux_hidden_states"].to(dtype))
    assert len(cap.captured) == C.STEPS
    return shifted_ids, cap.captured


def reference_json(variant, extra, files):
    return {
        "producer": "specforge",
        "version": VERSION,
        "variant": variant,
        "signals": {
            "config": {k: v for k, v in extra.items()},
            "weight_keys": (["fc_norm.0.weight", "fc_norm.1.weight", "fc_norm.2.weight"]
                            if extra.get("fc_norm") else []),
        },
        "files": files,
        "forward": {
            "source": [
                f"{SRC}: LlamaForCausalLMEagle3.project_hidden_states / backbone / compute_logits, "
                "LlamaDecoderLayer.forward, LlamaAttention.forward (cache_hidden branch), LlamaRMSNorm",
                f"{TTT}: OnlineEagle3Model.forward (the training-time-test loop)",
                "specforge/core/eagle3_adapters.py: SdpaLikeAdapter.step_view",
                "specforge/modeling/target/target_head.py: TargetHead.preprocess (the one-token shift)",
                "specforge/modeling/draft/base.py: Eagle3DraftModel.prepare_decoder_attention_mask",
            ],
            "path": "training-time test: OnlineEagle3Model.forward with attention_backend='sdpa', "
                    "length=3; logits captured where each step hands them to its loss "
                    "(_acc_and_loss, whose Triton loss is skipped on CPU). TORCHDYNAMO_DISABLE=1 (the torch.compile on LlamaRMSNorm and "
                    "the loss helpers runs eagerly).",
            "weights": "the exported (bf16) weights: logits_bf16 from "
                       "specforge.export.checkpoint_io.materialize_draft (a bf16 model, bf16 RoPE "
                       "tables); logits_fp32 from the exported model.safetensors loaded into a "
                       "model built in fp32 (AutoDraftModel.from_config(..., torch_dtype=float32)); "
                       "the trainer checkpoint's draft_state_dict is fp32, the export rounds to bf16; "
                       "embed_tokens from ../target via Eagle3DraftModel.load_embedding",
            "project": ("h0 = fc(cat(fc_norm[0](g[:, :, 0:Ht]), fc_norm[1](g[:, :, Ht:2Ht]), "
                        "fc_norm[2](g[:, :, 2Ht:3Ht])))" if extra.get("fc_norm") else "h0 = fc(g)"),
            "logits": ("lm_head(norm(h_k))" if extra.get("norm_output", True)
                       else "lm_head(h_k)  (norm_output false: the final norm is NOT applied)"),
        },
        "alignment": {
            "raw": "input_ids[0, t] = x_t, aux_hidden_states[0, t] = g_t (aux states of target position t)",
            "step0": "position t takes g_t and embed(x_{t+1}) and predicts x_{t+2} "
                     "(TargetHead.preprocess shifts input_ids left by one and pads 0 at the end)",
            "kit_inputs": "aux_hidden = aux_hidden_states (all T positions), next_ids = "
                          "padding(input_ids, left=False) = [x_1..x_{T-1}, 0]",
        },
        "steps": {
            "k>=1 hidden": "the decoder layer's raw output h_{k-1} (pre-final-norm; never normed "
                           "for feedback in SpecForge, whatever norm_output says)",
            "k>=1 token": "teacher forcing: position t takes embed(x_{t+1+k}) (input ids shifted "
                          "left once more per step, 0-padded); ids_step{k} holds them",
            "rope": "step k uses RoPE position t+k for query and new key (position_ids + len(cache))",
            "attention_mask": "step 0: causal over positions (additive mask from "
                              "prepare_decoder_attention_mask + key padding mask, all ones here). "
                              "Step k: the query at t attends the step-0 keys/values of positions "
                              "<= t (same causal mask) plus, for each earlier step j=1..k, only "
                              "its own position's key/value from step j (the diagonal), and its "
                              "own step-k key; one softmax over all of them (fp32).",
        },
        "reference_pt": {
            "input_ids": "[1,T] int64 raw tokens x_t (target ids)",
            "aux_hidden_states": "[1,T,3*Ht] fp32 raw g_t (chunk i scaled by 1/4/16)",
            "aux_hidden": "[1,T,3*Ht] fp32, what the kit's forward takes (same as aux_hidden_states)",
            "next_ids": "[1,T] int64, step-0 embedding ids (target ids), position t = x_{t+1}, last = 0",
            "ids_step{k}": "[1,T] int64, the embedding ids fed at step k",
            "logits_fp32_step{k}": "[1,T,draft_vocab] fp32",
            "logits_bf16_step{k}": "[1,T,draft_vocab] bf16 weights and activations, stored as bf16",
            "d2t": "[draft_vocab] int64 offsets (target = draft + d2t[draft])",
        },
        "notes": [
            "positions whose target would run past the sequence (last 1+k at step k) are still "
            "computed (fed pad id 0); SpecForge masks them out of the loss only",
            "draft d2t/t2d live in model.safetensors as buffers (d2t int64 offsets, t2d bool)",
            "embed_tokens is left out of the export (frozen, from the target): use ../target",
        ],
    }


def main():
    out_root, target_dir, work = sys.argv[1:4]
    layouts = "--layouts" in sys.argv
    os.makedirs(work, exist_ok=True)
    inputs = C.fixed_inputs()
    for i, (variant, extra) in enumerate(VARIANTS.items()):
        fixture = os.path.join(out_root, f"specforge_{variant}")
        shutil.rmtree(fixture, ignore_errors=True)
        cfg_path, draft = build(variant, extra, target_dir, work, seed=100 + i)
        ck_root = os.path.join(work, f"sf_ckpt_{variant}")
        shutil.rmtree(ck_root, ignore_errors=True)
        ckpt_dir = save_trainer_checkpoint(draft, ck_root, run_id="tiny", step=1)
        export_to_sglang(ckpt_dir, cfg_path, fixture)
        state = resolve_training_state(ckpt_dir)
        ref = {k: v for k, v in inputs.items()}
        ref["aux_hidden"] = inputs["aux_hidden_states"].clone()
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            if dtype == torch.bfloat16:
                model = materialize_draft(state, cfg_path)  # bf16, as the exporter builds it
            else:
                # materialize_draft's steps, with the model built in fp32: building in bf16 and
                # casting up would leave bf16-rounded RoPE tables (inv_freq / cos / sin caches)
                # The weights are the exported (bf16) ones: the trainer checkpoint itself keeps
                # fp32 weights, which the export rounds.
                model = AutoDraftModel.from_config(AutoDraftModelConfig.from_file(cfg_path),
                                                   torch_dtype=torch.float32)
                exported = load_file(os.path.join(fixture, "model.safetensors"))
                missing, unexpected = model.load_state_dict(exported, strict=False)
                assert not unexpected and all("embed" in k for k in missing), (missing, unexpected)
            model.load_embedding(target_dir, embedding_key="model.embed_tokens.weight")
            model.eval()
            shifted, logits = ttt_logits(model, inputs, dtype)
            for k, lg in enumerate(logits):
                ref[f"logits_{name}_step{k}"] = lg.to(dtype).contiguous()
        ref["next_ids"] = shifted.clone()
        ids = shifted
        for k in range(C.STEPS):
            ref[f"ids_step{k}"] = ids.clone()
            ids = torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], dim=1)
        ref["d2t"] = state["draft_state_dict"]["d2t"].clone()
        torch.save(ref, os.path.join(fixture, "reference.pt"))
        C.check_weights_only(os.path.join(fixture, "reference.pt"))
        files = sorted(os.listdir(fixture)) + ["reference.json"]
        C.write_json(os.path.join(fixture, "reference.json"), reference_json(variant, extra, files))
        print(f"specforge_{variant}: {files}")
        if layouts and variant == "control":
            lay = os.path.join(out_root, "layouts", "specforge_trainer")
            shutil.rmtree(lay, ignore_errors=True)
            shutil.copytree(ck_root, lay, symlinks=True)
            hf = os.path.join(out_root, "layouts", "specforge_export_hf")
            shutil.rmtree(hf, ignore_errors=True)
            export_to_hf(ckpt_dir, cfg_path, hf, embedding_source=target_dir)
            print("layouts:", lay, hf)


if __name__ == "__main__":
    main()
