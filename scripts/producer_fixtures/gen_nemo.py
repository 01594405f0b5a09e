"""NeMo Automodel fixtures: run inside a venv with nemo-automodel==0.7.0 (--no-deps, see
scripts/make_producer_fixtures.py).

Usage (cwd = repository root): python -m scripts.producer_fixtures.gen_nemo OUT_ROOT LLAMA_TARGET_DIR WORK_DIR

What runs, per variant, all from nemo_automodel itself:
* the draft config the way TrainEagle3Recipe.setup builds it (recipes/llm/train_eagle3.py): the
  target's config class, ``target_config.to_dict()`` plus draft_vocab_size, target_hidden_size,
  ``architectures = ["LlamaEagle3DraftModel"]`` (for every draft class, the MLA one included),
  tie_word_embeddings false, attn_implementation eager, fc_norm, norm_output, parallel_drafting;
* the draft class from the registry (resolve_eagle3_draft_spec on the target's architectures):
  LlamaEagle3DraftModel for LlamaForCausalLM, DeepseekV3Eagle3DraftModel for
  DeepseekV3ForCausalLM; cast to bf16 (the recipe's compute dtype on CUDA);
* copy_embeddings_from_target, set_vocab_mapping with the ids from
  datasets.llm.eagle3.build_eagle3_token_mapping (bos/eos forced first, as the recipe does),
  freeze_embeddings, then seeded random values for every other weight;
* the trainer's checkpointer (components.checkpoint.checkpointing.Checkpointer, single process,
  gloo world of 1, save_consolidated, is_final_checkpoint) writes
  WORK_DIR/<variant>/epoch_0_step_1/model/{consolidated/, .hf_metadata/, shard-*.safetensors,
  consolidate.sh}; the fixture folder is a copy of model/consolidated/;
* logits: Eagle3TrainerModule.forward (components/speculative/eagle/core.py, ttt_steps=3) on a
  batch shifted by target._shift_left_with_zero (what HFEagle3TargetModel.generate_batch hands
  it); draft_model.compute_logits is wrapped to record each step's logits.

The DeepSeek-V3 (MLA) variants need a DeepSeek-V3 target: OUT_ROOT/target_deepseek_v3/ is
written here (config.json from transformers' DeepseekV3Config, and the same three bf16 tensors
as ../target: embed_tokens, lm_head, norm).
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
import torch.distributed as dist  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from scripts.producer_fixtures import common as C  # noqa: E402

from importlib.metadata import version as _pkg_version  # noqa: E402

from transformers import AutoConfig, DeepseekV3Config  # noqa: E402

from nemo_automodel.components.checkpoint.checkpointing import Checkpointer  # noqa: E402
from nemo_automodel.components.checkpoint.config import CheckpointingConfig  # noqa: E402
from nemo_automodel.components.datasets.llm.eagle3 import build_eagle3_token_mapping  # noqa: E402
from nemo_automodel.components.speculative.eagle.core import Eagle3TrainerModule  # noqa: E402
from nemo_automodel.components.speculative.eagle.registry import resolve_eagle3_draft_spec  # noqa: E402
from nemo_automodel.components.speculative.eagle.target import _shift_left_with_zero  # noqa: E402

VERSION = _pkg_version("nemo-automodel")
PKG = "nemo_automodel/components"

# DeepSeek-V3-like tiny target (MLA). H matches the Llama target so the same aux inputs serve.
MLA = dict(q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=12)
YARN = {"rope_type": "yarn", "rope_theta": C.ROPE_THETA, "factor": 8.0, "original_max_position_embeddings": 8,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}

# variant -> (target kind, recipe flags, target config overrides)
VARIANTS = {
    "llama": ("llama", {}, {}),
    "llama_fc_norm_norm_output": ("llama", {"fc_norm": True, "norm_output": True}, {}),
    "mla": ("deepseek_v3", {}, {}),
    "mla_no_q_lora": ("deepseek_v3", {}, {"q_lora_rank": None}),
    "mla_yarn": ("deepseek_v3", {}, {"rope_parameters": YARN, "max_position_embeddings": 64}),
}


def deepseek_target_config(overrides: dict) -> DeepseekV3Config:
    kw = dict(vocab_size=C.VOCAB, hidden_size=C.HT, intermediate_size=C.INTER, moe_intermediate_size=16,
              num_hidden_layers=C.TARGET_LAYERS, num_attention_heads=C.HEADS, num_key_value_heads=C.HEADS,
              n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
              first_k_dense_replace=1, max_position_embeddings=2048, rms_norm_eps=C.EPS,
              rope_parameters={"rope_type": "default", "rope_theta": C.ROPE_THETA},
              tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, architectures=["DeepseekV3ForCausalLM"],
              **MLA)
    kw.update(overrides)
    return DeepseekV3Config(**kw)


def write_deepseek_target(out_dir: str, llama_target: str) -> None:
    """target_deepseek_v3/: the DeepSeek-V3 config (base, no yarn) + the Llama target's 3 tensors."""
    os.makedirs(out_dir, exist_ok=True)
    cfg = deepseek_target_config({})
    cfg.torch_dtype = "bfloat16"
    d = cfg.to_dict()
    C.write_json(os.path.join(out_dir, "config.json"), d)
    tensors = load_file(os.path.join(llama_target, "model.safetensors"))
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "model.safetensors"),
              metadata={"format": "pt"})


def token_mapping():
    """build_eagle3_token_mapping over one batch whose supervised tokens reproduce the shared
    count table; bos (1) and eos (2) forced first, as TrainEagle3Recipe passes the tokenizer's
    special ids (pad/unk None here)."""
    counts = C.token_counts()
    ids = torch.cat([torch.full((n,), t, dtype=torch.long) for t, n in sorted(counts.items())]).unsqueeze(0)
    batch = {"input_ids": ids, "loss_mask": torch.ones_like(ids)}
    return build_eagle3_token_mapping([batch], target_vocab_size=C.VOCAB, draft_vocab_size=C.DRAFT_VOCAB,
                                      special_token_ids=[1, 2, None, None])


def draft_config(target_cfg, flags: dict):
    """TrainEagle3Recipe.setup's draft config (train_eagle3.py, 'draft_config = ...' block)."""
    d = target_cfg.to_dict()
    d["draft_vocab_size"] = C.DRAFT_VOCAB
    d["target_hidden_size"] = target_cfg.hidden_size
    d["architectures"] = ["LlamaEagle3DraftModel"]
    d["tie_word_embeddings"] = False
    d["attn_implementation"] = "eager"
    d["fc_norm"] = bool(flags.get("fc_norm", False))
    d["norm_output"] = bool(flags.get("norm_output", False))
    d["parallel_drafting"] = False
    return type(target_cfg).from_dict(d)


def build(draft_cls, cfg, embed_weight, selected_ids, seed):
    model = draft_cls(cfg).to(dtype=torch.bfloat16)  # the recipe's compute dtype on CUDA
    model.copy_embeddings_from_target(torch.nn.Embedding.from_pretrained(embed_weight))
    model.set_vocab_mapping(selected_ids)
    model.freeze_embeddings()
    C.randomize_(model, seed, skip=("embed",))
    return model


def save_with_checkpointer(model, ckpt_root: str, target_dir: str) -> str:
    shutil.rmtree(ckpt_root, ignore_errors=True)
    ck = CheckpointingConfig(enabled=True, checkpoint_dir=ckpt_root, model_save_format="safetensors",
                             model_repo_id=os.path.abspath(target_dir), model_cache_dir=os.path.join(ckpt_root, ".hf"),
                             save_consolidated=True, is_peft=False,
                             model_state_dict_keys=list(model.state_dict().keys()))
    ckpt = Checkpointer(ck, dp_rank=0, tp_rank=0, pp_rank=0)
    path = os.path.join(ckpt_root, "epoch_0_step_1")
    ckpt.save_model(model, path, is_final_checkpoint=True)
    return path


class _Capture:
    def __init__(self, model):
        self.model, self.orig, self.logits = model, model.compute_logits, []

    def __call__(self, h):
        out = self.orig(h)
        self.logits.append(out.detach().float().clone())
        return out


@torch.no_grad()
def ttt_logits(model, selected_ids, inputs, dtype):
    cap = _Capture(model)
    model.compute_logits = cap
    mask = torch.zeros(C.VOCAB, dtype=torch.bool)
    mask[selected_ids] = True
    trainer = Eagle3TrainerModule(model, selected_token_ids=selected_ids, selected_token_mask=mask, ttt_steps=C.STEPS)
    ids = inputs["input_ids"]
    g = torch.Generator().manual_seed(99)
    target_logits = torch.randn(1, C.T, C.VOCAB, generator=g)  # only the loss uses them
    shifted = _shift_left_with_zero(ids)
    trainer(input_ids=shifted, attention_mask=torch.ones(1, C.T, dtype=torch.long),
            loss_mask=_shift_left_with_zero(torch.ones(1, C.T, dtype=torch.long)),
            aux_hidden_states=inputs["aux_hidden_states"].to(dtype),
            target_logits=_shift_left_with_zero(target_logits).to(dtype))
    del model.compute_logits
    assert len(cap.logits) == C.STEPS
    return shifted, cap.logits


def ckpt_tree(path: str) -> list[str]:
    out = []
    for root, _dirs, files in os.walk(path):
        for f in files:
            out.append(os.path.relpath(os.path.join(root, f), os.path.dirname(path)))
    return sorted(out)


def reference_json(variant, kind, flags, cfg, files, tree, weight_keys, target_rel):
    mla = kind == "deepseek_v3"
    draft_src = f"{PKG}/speculative/eagle/" + ("draft_deepseek.py" if mla else "draft_llama.py")
    rope = getattr(cfg, "rope_parameters", None) or {}
    return {
        "producer": "nemo-automodel",
        "version": VERSION,
        "variant": variant,
        "target": target_rel,
        "signals": {
            "config": {
                "architectures": ["LlamaEagle3DraftModel"],
                "model_type": cfg.model_type,
                "fc_norm": bool(flags.get("fc_norm", False)),
                "norm_output": bool(flags.get("norm_output", False)),
                **({k: getattr(cfg, k) for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                                 "qk_rope_head_dim", "v_head_dim", "rope_interleave")} if mla else {}),
                "rope_parameters": rope,
                "num_hidden_layers (copied from the target, NOT the draft's layer count)": cfg.num_hidden_layers,
            },
            "weight_keys": weight_keys,
        },
        "files": files,
        "checkpoint_tree": tree,
        "forward": {
            "source": [
                f"{draft_src}: " + ("DeepseekV3Eagle3DraftModel.project_hidden_states / forward / compute_logits, "
                                    "Eagle3DeepseekDecoderLayer.forward, Eagle3DeepseekMLAAttention._project_qkv / "
                                    "_assemble_qkv / forward / _eager_attention_forward" if mla else
                                    "LlamaEagle3DraftModel.project_hidden_states / forward / compute_logits, "
                                    "Eagle3LlamaDecoderLayer.forward, Eagle3LlamaAttention.forward / "
                                    "_eager_attention_forward"),
                f"{PKG}/speculative/eagle/core.py: Eagle3TrainerModule.forward (the TTT loop)",
                f"{PKG}/speculative/eagle/target.py: _shift_left_with_zero (the one-token shift of "
                "HFEagle3TargetModel.generate_batch)",
                (f"{PKG}/models/deepseek_v3/rope_utils.py: precompute_freqs_cis (yarn frequency blend), "
                 "freqs_cis_from_position_ids, apply_rotary_emb -> models/common/rope_triton.py: "
                 "_apply_rope_torch (adjacent-pair complex rotation)") if mla else
                f"{PKG}/models/llama/rope_utils.py: LlamaRotaryEmbedding, apply_rotary_pos_emb",
                f"{PKG}/models/common/utils.py: initialize_rms_norm_module('torch') = torch.nn.RMSNorm",
                "recipes/llm/train_eagle3.py: TrainEagle3Recipe.setup (draft config, dtype cast, embeddings, "
                "set_vocab_mapping, freeze), _build_checkpointer / save_checkpoint (Checkpointer.save_model)",
            ],
            "path": "Eagle3TrainerModule.forward, ttt_steps=3, eager attention, live-target supervision "
                    "(random target logits: they only feed the loss); logits recorded by wrapping "
                    "draft_model.compute_logits. Single CPU process (gloo world of 1 for the checkpointer).",
            "weights": "the draft is trained in bf16 (the recipe's CUDA compute dtype) and the consolidated "
                       "export keeps bf16; logits_bf16 from that bf16 model, logits_fp32 from a fresh fp32 "
                       "build (draft_cls(config).to(float32)) with the consolidated safetensors loaded strictly",
            "project": ("h0 = fc(cat(fc_norm[i](chunk_i(g)))), nn.RMSNorm eps=rms_norm_eps"
                        if flags.get("fc_norm") else "h0 = fc(g)"),
            "layer": ("r = h_k; x = cat(input_layernorm(embed(ids_k)), hidden_norm(h_k)); "
                      "a = r + o_proj(attn(x)); out = a + mlp(post_attention_layernorm(a))"),
            "attention": (
                "MLA on the 2H input: q = q_b_proj(q_a_layernorm(q_a_proj(x))) [or q_proj(x) when "
                "q_lora_rank is null], split per head into q_nope[qk_nope] | q_pe[qk_rope]; "
                "kv_a_proj_with_mqa(x) -> latent[kv_lora_rank] | k_pe[qk_rope] (one shared rope head); "
                "kv_b_proj(kv_a_layernorm(latent)) -> per head k_nope[qk_nope] | v[v_head_dim]; "
                "RoPE rotates ADJACENT pairs (2i, 2i+1) of q_pe and k_pe (interleaved, no de-interleave "
                "permutation); q = [q_nope, q_pe], k = [k_nope, k_pe]; scale (qk_nope+qk_rope)^-0.5, "
                "NO yarn mscale on the scale or on cos/sin; o_proj(heads*v_head_dim -> H)"
                if mla else "Llama GQA (q/k/v/o_proj), rotate_half RoPE, scale head_dim^-0.5"),
            "rope_frequencies": (
                "yarn: freqs = base^(-2i/d); blended freqs/factor*(1-smooth) + freqs*smooth with the "
                "beta_fast/beta_slow correction range of original_max_position_embeddings, applied only "
                "because max_position_embeddings > original_max_position_embeddings; no mscale"
                if rope.get("rope_type") == "yarn" else "plain base^(-2i/d), theta from rope_parameters"),
            "logits": ("norm_output true: forward returns norm(out); compute_logits = lm_head(that) "
                       "(= lm_head(norm(out)))" if flags.get("norm_output") else "lm_head(norm(out))"),
        },
        "alignment": {
            "raw": "input_ids[0, t] = x_t, aux_hidden_states[0, t] = g_t",
            "step0": "position t takes g_t and embed(x_{t+1}) (input ids shifted left by one, 0 at the end) "
                     "and predicts x_{t+2}",
            "kit_inputs": "aux_hidden = aux_hidden_states (all T positions), next_ids = [x_1..x_{T-1}, 0]",
        },
        "steps": {
            "k>=1 hidden": ("norm(out_{k-1}) (norm_output true: the normed state is fed back, then "
                            "hidden_norm'd and used as the residual)" if flags.get("norm_output")
                            else "the raw layer output out_{k-1} (pre-final-norm)"),
            "k>=1 token": "teacher forcing: ids shifted left once more per step (0-padded); ids_step{k}",
            "rope": "step k uses position t+k for the query and the new key (position_ids + len(cache)); "
                    "the cached step-0 keys keep position s",
            "attention_mask": "step k: the step-0 keys of positions <= t (causal) plus, for each j=1..k, the "
                              "diagonal key of step j at t; one fp32 softmax",
        },
        "reference_pt": {
            "input_ids": "[1,T] int64 raw tokens x_t (target ids)",
            "aux_hidden_states": "[1,T,3*Ht] fp32 raw g_t",
            "aux_hidden": "[1,T,3*Ht] fp32, same as aux_hidden_states",
            "next_ids": "[1,T] int64 step-0 ids (x_{t+1}, last 0)",
            "ids_step{k}": "[1,T] int64",
            "position_ids": "[1,T] int64 step-0 RoPE positions (0..T-1); step k adds k",
            "logits_fp32_step{k}": "[1,T,draft_vocab] fp32",
            "logits_bf16_step{k}": "[1,T,draft_vocab] bf16",
            "d2t": "[draft_vocab] int64 offsets (target = draft + d2t[draft]); NOT monotonic: the draft "
                   "vocab is in frequency order with bos/eos first, so offsets can be negative",
            "selected_token_ids": "[draft_vocab] int64, target id of each draft id (what the trainer keeps in "
                                  "eagle_meta.pt)",
        },
        "notes": [
            "fixture files are model/consolidated/ of the checkpoint as written: model-00001-of-00001.safetensors "
            "+ model.safetensors.index.json (there is no plain model.safetensors)",
            "keys carry the wrapper prefix: model.embed_tokens / model.fc / model.layers.0.* / model.norm, "
            "top-level lm_head.weight, d2t, t2d; embed_tokens is saved (frozen copy of the target's)",
            "d2t (int64 offsets) and t2d (bool) are persistent buffers inside the safetensors",
            "config.json is the TARGET's config plus the draft fields: num_hidden_layers, "
            "(for MLA) MoE fields, etc. describe the target, not the 1-layer draft",
        ],
    }


def main():
    out_root, llama_target, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29561")
        dist.init_process_group("gloo", rank=0, world_size=1)
    ds_target = os.path.join(out_root, "target_deepseek_v3")
    write_deepseek_target(ds_target, llama_target)
    embed = load_file(os.path.join(llama_target, "model.safetensors"))["model.embed_tokens.weight"].float()
    selected, _mask = token_mapping()
    inputs = C.fixed_inputs()
    for i, (variant, (kind, flags, overrides)) in enumerate(VARIANTS.items()):
        if kind == "llama":
            tcfg, tdir = AutoConfig.from_pretrained(llama_target), llama_target
        else:
            tcfg, tdir = deepseek_target_config(overrides), ds_target
        draft_cls = resolve_eagle3_draft_spec(tcfg.architectures).draft_cls
        cfg = draft_config(tcfg, flags)
        model = build(draft_cls, cfg, embed, selected, seed=300 + i)
        ckpt = save_with_checkpointer(model, os.path.join(work, variant), tdir)
        cons = os.path.join(ckpt, "model", "consolidated")
        fixture = os.path.join(out_root, f"nemo_{variant}")
        shutil.rmtree(fixture, ignore_errors=True)
        shutil.copytree(cons, fixture)
        # the export as a state dict (one shard here)
        with open(os.path.join(fixture, "model.safetensors.index.json")) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        exported = {}
        for s in shards:
            exported.update(load_file(os.path.join(fixture, s)))
        sd = model.state_dict()
        assert set(exported) == set(sd), (set(exported) ^ set(sd))
        assert all(torch.equal(exported[k], sd[k]) for k in sd), "consolidated export != trained weights"
        ref = {k: v for k, v in inputs.items()}
        ref["aux_hidden"] = inputs["aux_hidden_states"].clone()
        model.eval()
        shifted, lg_bf16 = ttt_logits(model, selected, inputs, torch.bfloat16)
        fp32 = draft_cls(cfg).to(dtype=torch.float32)
        fp32.load_state_dict(exported, strict=True)
        fp32.eval()
        _, lg_fp32 = ttt_logits(fp32, selected, inputs, torch.float32)
        for k in range(C.STEPS):
            ref[f"logits_fp32_step{k}"] = lg_fp32[k].float().contiguous()
            ref[f"logits_bf16_step{k}"] = lg_bf16[k].to(torch.bfloat16).contiguous()
        ref["next_ids"] = shifted.clone()
        ids = shifted
        for k in range(C.STEPS):
            ref[f"ids_step{k}"] = ids.clone()
            ids = _shift_left_with_zero(ids)
        ref["position_ids"] = torch.arange(C.T).unsqueeze(0)
        ref["d2t"] = exported["d2t"].clone()
        ref["selected_token_ids"] = selected.clone()
        torch.save(ref, os.path.join(fixture, "reference.pt"))
        C.check_weights_only(os.path.join(fixture, "reference.pt"))
        files = sorted(os.listdir(fixture)) + ["reference.json"]
        weight_keys = sorted(k for k in exported if "fc_norm" in k or "self_attn" in k)
        C.write_json(os.path.join(fixture, "reference.json"),
                     reference_json(variant, kind, flags, cfg, files, ckpt_tree(ckpt), weight_keys,
                                    os.path.relpath(tdir, fixture)))
        d = [(lg_fp32[k] - lg_bf16[k]).abs().max().item() for k in range(C.STEPS)]
        print(f"nemo_{variant}: {files}  |fp32-bf16| max per step {['%.3g' % x for x in d]}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
