"""Write data_samples/engine_kimi/: a Kimi-shaped (MLA + MoE) target and its MLA draft, which vLLM's CPU build serves.

The bundled Kimi-shaped pair (scripts/make_kimi_samples.py: kimi_target, kimi_draft_mla) cannot be
served by vLLM's CPU build (0.32.0):

- its target config lacks `topk_method: noaux_tc` / `scoring_func: sigmoid` (what DeepSeek-V3 and
  Kimi-K2 configs say), so vLLM builds no `gate.e_score_correction_bias` and refuses that weight;
- its latent is kv_lora_rank 16 + qk_rope_head_dim 8 = 24, and vLLM's CPU MLA backend
  (vllm/v1/attention/backends/mla/cpu_mla.py, `get_supported_head_sizes`) takes only the real
  576 = 512 + 64 ("Head dimension 24 is not supported by MLA").

This pair is made by the same pipeline (scripts/make_kimi_samples.py's text, tokenizer, RoPE and
target training loop; scripts/make_samples.py's draft training; scripts/make_engine_pair.py's
vLLM-convention capture into a temporary folder) with these sizes:

- target: transformers' `DeepseekV3ForCausalLM`, H 64, 4 layers (the first dense, the rest MoE with
  4 routed experts (2 per token, sigmoid scores with the noaux_tc correction bias) + 1 shared), MLA
  with the real latent sizes kv_lora_rank 512 and qk_rope_head_dim 64, 2 heads with
  qk_nope_head_dim 8 / v_head_dim 16 and q_lora_rank 32, interleaved RoPE with YaRN scaling;
  the tiny tokenizer and chat template of data_samples/tiny_target;
- draft: the kit's `Eagle3Draft` with the MLA layer (2 heads, the target's MLA sizes, MLP 64),
  EAGLE-3.1's fc_norm + norm_output (vLLM 0.32.0's deepseek_eagle3.py reads both), aux ids
  [1, 2, 3] in vLLM's convention (the input of layer id: the ids are used as given), captured with
  `engine="vllm"`; saved without embed_tokens: vLLM shares the target's (llm_base_proposer.py
  `_maybe_share_embeddings`), the kit borrows it with `--embed-from TARGET`.
  Its model_type is `deepseek_v2`, the one DeepSeek type vLLM 0.32.0 both starts and detects as
  MLA for an EAGLE draft: `deepseek_v3` is rewritten for every draft into DeepSeek's MTP model
  (config/speculative.py `hf_config_override`), so start-up fails with "Model architectures
  ['Eagle3DeepSeekMTPModel'] are not supported for now"; `kimi_k2` starts but is not on the
  EAGLE branch's list in model_arch_config_convertor.py `is_deepseek_mla` (vLLM issue #45760), so
  the draft's ModelConfig says use_mla False and head size 64 (its draft layer is MLA all the
  same, and on the CPU build it serves the same tokens and acceptance as `deepseek_v2`).

Only the target and the SGLang-layout draft (`midlayer.*`, `d2t` offsets and `t2d`) are bundled,
about 2.2 MiB on disk together; the hidden states stay in a temporary folder. The script prints
step-0 accuracy on the training and validation captures. Deterministic (fixed seeds, one thread);
about 7 minutes on one CPU core (1,600 target steps, see TARGET_STEPS).

Usage: .venv/bin/python -m scripts.make_kimi_engine_pair [--out data_samples/engine_kimi]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from helpers.io.checkpoint import open_checkpoint
from helpers.io.mapping import build_from_frequencies
from helpers.model.draft import Eagle3Draft
from scripts import make_engine_pair as mp  # the vLLM-convention capture
from scripts import make_kimi_samples as mk  # the Kimi-shaped pair: seed, RoPE, draft config
from scripts import make_samples as ms  # text, training loops, stacking, scoring

SEED = mk.SEED
LAYERS, HEADS = 4, 2
AUX_IDS = [1, 2, 3]  # vLLM's reading: the inputs of target layers 1, 2, 3 (3 distinct layers of 4)
MLA = {"q_lora_rank": 32, "kv_lora_rank": 512, "qk_nope_head_dim": 8, "qk_rope_head_dim": 64, "v_head_dim": 16}
INTER, MOE_INTER, EXPERTS, PER_TOKEN = 128, 16, 4, 2
DRAFT_HEADS, DRAFT_INTER = 2, 64
DRAFT_MODEL_TYPE = "deepseek_v2"  # vLLM 0.32.0 refuses deepseek_v3 (MTP rewrite), misses kimi_k2's MLA
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


# 1,600 target steps: with fewer this small target learns to copy less (800 steps: 929 distinct generated
# tokens, 1,200: 1,381) and leaves near-ties in its greedy continuations that bf16 rounding flips between
# vLLM's kernels and transformers' (1,200 steps: 14 of the 16 bundled prompts token-identical in bf16;
# 1,600: 16 of 16, and the same accept length to the last digit in bf16 and fp32).
TARGET_STEPS = 1600

def target_config():
    from transformers import DeepseekV3Config

    return DeepseekV3Config(
        vocab_size=ms.VOCAB, hidden_size=ms.H, intermediate_size=INTER, moe_intermediate_size=MOE_INTER,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS, n_shared_experts=1,
        n_routed_experts=EXPERTS, num_experts_per_tok=PER_TOKEN, n_group=1, topk_group=1, first_k_dense_replace=1,
        routed_scaling_factor=2.5, norm_topk_prob=True, topk_method="noaux_tc", scoring_func="sigmoid",
        max_position_embeddings=512, rms_norm_eps=1e-6, rope_parameters=dict(mk.ROPE), rope_interleave=True,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0, **MLA)


def save_target(folder: Path, model) -> Path:
    """The target in bf16 with data_samples/tiny_target's tokenizer and chat template."""
    if folder.exists():
        shutil.rmtree(folder)
    model.to(torch.bfloat16).save_pretrained(folder)
    for f in TOKENIZER_FILES:
        shutil.copy(ms.ROOT / "data_samples" / "tiny_target" / f, folder / f)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.pop("transformers_version", None)  # byte-identical across transformers releases
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (folder / "generation_config.json").unlink(missing_ok=True)
    return folder


def draft_config() -> dict:
    """make_kimi_samples' MLA draft config with this pair's sizes, model type and vLLM aux ids."""
    cfg = mk.draft_config_dict()
    cfg.update(MLA, model_type=DRAFT_MODEL_TYPE, num_attention_heads=DRAFT_HEADS, num_key_value_heads=DRAFT_HEADS,
               intermediate_size=DRAFT_INTER)
    cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": AUX_IDS, "use_aux_hidden_state": True}
    return cfg


def save_draft(folder: Path, draft: Eagle3Draft, mapping, with_embed: bool) -> Path:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(draft_config(), indent=2) + "\n")
    save_file({**ms.state_dict_bf16(draft, "midlayer.", with_embed), "d2t": mapping.d2t.clone(),
               "t2d": mapping.t2d.clone()}, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ms.ROOT / "data_samples" / "engine_kimi"))
    ap.add_argument("--target-steps", type=int, default=TARGET_STEPS)
    ap.add_argument("--draft-epochs", type=int, default=20)
    args = ap.parse_args()
    out = Path(args.out).resolve()
    mp.AUX_IDS = AUX_IDS  # make_engine_pair.capture captures with these ids (vLLM's convention)
    os.chdir(ms.ROOT)
    t0 = time.time()
    torch.manual_seed(SEED)
    torch.set_num_threads(ms.THREADS)
    torch.use_deterministic_algorithms(True)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ms.ROOT / "data_samples" / "tiny_target")
    encoded = [ms.encode(tok, d) for d in ms.stdlib_docstrings()]
    sep = ms.encode(tok, "\n\n")
    P = ms.PROMPT
    chunks = [e[s : s + P] for e in encoded for s in range(0, len(e) - P + 1, P)]
    units = torch.tensor([c + sep + c + sep for c in chunks], dtype=torch.int64)
    print(f"kimi engine target trains on {len(chunks):,} repeat units of {units.shape[1]} tokens")
    target = mk.train_target(units, args.target_steps, config=target_config(), label="kimi engine target")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        target_dir = save_target(tmp / "target", target)
        samples = tmp / "hidden_states"
        for split in ("train", "val"):  # the tiny pair's prompt files (make_samples.py writes them)
            mp.capture(target_dir, ms.ROOT / "data_samples" / "prompts" / f"{split}.jsonl", samples / split)
        train = ms.stack_samples(samples / "train")
        gen_ids = train["input_ids"][train["loss_mask"] == 1]
        print(f"captured {len(train['input_ids'])} train samples; {len(torch.unique(gen_ids))} distinct generated "
              "tokens")
        mapping = build_from_frequencies(torch.bincount(gen_ids, minlength=ms.VOCAB), ms.DRAFT_VOCAB, ms.VOCAB)
        kept = mapping.targets("offset")
        ck = open_checkpoint(target_dir)
        head = ck.tensors.get("lm_head.weight", "cpu", torch.float32)
        embed = ck.tensors.get("model.embed_tokens.weight", "cpu", torch.float32)
        draft = mk.train_draft(embed, head, train, kept, args.draft_epochs, config=draft_config(), desc="kimi engine draft")
        scored = save_draft(tmp / "draft_with_embed", draft, mapping, with_embed=True)  # ms.quick_accuracy loads it
        for split in ("train", "val"):
            acc = ms.quick_accuracy(scored, samples / split, target_dir)
            print(f"{split}: step-0 top-1 (offset reading) {acc['top1_token']:.2%} vs token t+2, "
                  f"{acc['top1_target_argmax']:.2%} vs target argmax, {acc['tokens']} tokens")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        shutil.copytree(target_dir, out / "target")
        save_draft(out / "draft", draft, mapping, with_embed=False)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} in {time.time() - t0:.0f} s; {size / 2**20:.2f} MiB")


if __name__ == "__main__":
    main()
