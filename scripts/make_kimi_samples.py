"""Write the Kimi-shaped bundled pair: a tiny DeepSeek-V3 (MLA + MoE) target and its MLA EAGLE-3.1 draft.

The seed's users serve Kimi-K2.5 / K2.6 with MLA drafts (SGLang `kimi_k25_eagle3.py`); this is a
miniature of that pair, made the way such a pair is made (capture -> train -> save), with the
kit's own tools. Deterministic (fixed seeds, one thread); about 15 minutes on one CPU core.

1. Text, tokenizer and prompts: the Llama pair's (scripts/make_samples.py: stdlib docstrings,
   repeat units, data_samples/tiny_target's tokenizer and chat template, data_samples/prompts/).
2. Target `kimi_target`: transformers' own `DeepseekV3ForCausalLM` (H 64, 8 layers, the first dense
   and the rest MoE with 4 routed experts (2 per token) + 1 shared, MLA with q_lora_rank 32,
   kv_lora_rank 16, nope/rope/v head dims 16/8/16, interleaved RoPE with YaRN scaling: the
   shape of Kimi-K2's config), trained on the repeat units as the Llama target is; saved in bf16
   with the tokenizer and chat template.
3. Hidden states: the kit's `capture` (engine sglang, configured aux ids [1, 3, 4], i.e. the
   inputs of layers 2, 4, 5; the target answers each prompt greedily): train prompts into a
   temporary folder, the 32 held-out prompts (data_samples/prompts.jsonl) bundled as
   `kimi_hidden_states` (tests/test_kimi_pair.py re-captures them and compares).
4. Draft vocab: the 800 most frequent generated target ids (`build_from_frequencies`).
5. Draft `kimi_draft_mla`: the kit's `Eagle3Draft` with the MLA layer (`DraftConfig.attention ==
   "mla"`) and EAGLE-3.1's fc_norm + norm_output, trained with its own `draft_steps` (3-step
   training-time test, teacher forcing, soft targets over the draft vocab, SpecForge's position
   mask) and saved in the layout SGLang's kimi_k25_eagle3 loads: `midlayer.*` keys, `d2t`
   offsets and `t2d` in model.safetensors, config with architectures
   `Eagle3DeepseekV2ForCausalLM` and model_type `kimi_k2`.

Usage: .venv/bin/python -m scripts.make_kimi_samples [--out data_samples]
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
from helpers.model.config import DraftConfig
from helpers.model.draft import Eagle3Draft
from scripts import make_samples as ms  # the Llama pair's text, prompts and stacking

SEED = 4321
VOCAB, DRAFT_VOCAB, H, LAYERS = ms.VOCAB, ms.DRAFT_VOCAB, ms.H, ms.LAYERS
AUX_CONFIG_IDS = ms.AUX_CONFIG_IDS  # [1, 3, 4]: SGLang captures the inputs of layers 2, 4, 5
ROPE = {"rope_type": "yarn", "rope_theta": 50000.0, "factor": 4.0, "original_max_position_embeddings": 128,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
MLA = {"q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}


def target_config():
    from transformers import DeepseekV3Config

    return DeepseekV3Config(
        vocab_size=VOCAB, hidden_size=H, intermediate_size=128, moe_intermediate_size=48, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2,
        n_group=1, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
        max_position_embeddings=512, rms_norm_eps=1e-6, rope_parameters=dict(ROPE), rope_interleave=True,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0, **MLA)


def train_target(units: torch.Tensor, steps: int, batch: int = 16, lr: float = 3e-3, config=None,
                 label: str = "kimi target"):
    """transformers' DeepseekV3ForCausalLM (`config`, default this pair's) trained on the repeat units by
    make_samples' loop (scripts/make_kimi_engine_pair.py trains its own config with it)."""
    from transformers import DeepseekV3ForCausalLM

    torch.manual_seed(SEED)
    model = DeepseekV3ForCausalLM(config or target_config())
    return ms.fit_target(model, lambda x: model(input_ids=x).logits, units, steps, batch, lr, label, seed=SEED)


def save_target(out: Path, model) -> Path:
    folder = out / "kimi_target"
    if folder.exists():
        shutil.rmtree(folder)
    model.to(torch.bfloat16).save_pretrained(folder)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "vocab.json"):
        shutil.copy(out / "tiny_target" / f, folder / f)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.pop("transformers_version", None)  # byte-identical across transformers releases
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (folder / "generation_config.json").unlink(missing_ok=True)
    return folder


def capture(target_dir: Path, prompts: Path, dest: Path) -> None:
    from helpers.model.capture import CaptureSettings, capture as kit_capture
    from helpers.model.target import load_target

    if dest.exists():
        shutil.rmtree(dest)
    tgt = load_target(target_dir, device="cpu", dtype=torch.float32)
    kit_capture(tgt, prompts, dest, CaptureSettings(engine="sglang", aux_layers=AUX_CONFIG_IDS, regenerate=True,
                                                    max_new_tokens=ms.GEN), progress=True)


def draft_config_dict() -> dict:
    """Kimi-K2.5 EAGLE-3.1 MLA draft config, in the fields SGLang's kimi_k25_eagle3 reads."""
    return {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "hidden_size": H,
        "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, **MLA, "rope_interleave": True,
        "rope_theta": ROPE["rope_theta"], "rope_scaling": {k: v for k, v in ROPE.items() if k != "rope_theta"},
        "max_position_embeddings": 512, "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB,
        "target_hidden_size": H, "tie_word_embeddings": False, "fc_norm": True, "norm_output": True,
        "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_CONFIG_IDS, "use_aux_hidden_state": True},
    }


def train_draft(embed: torch.Tensor, head: torch.Tensor, train: dict, kept: torch.Tensor, epochs: int,
                steps: int = 3, config: dict | None = None, desc: str = "kimi draft") -> Eagle3Draft:
    """The MLA draft (`config`, default this pair's), trained as make_samples trains the Llama one
    (frozen borrowed embedding, soft targets from `head`); make_kimi_engine_pair.py passes its own config."""
    torch.manual_seed(SEED + 1)
    draft = Eagle3Draft(DraftConfig.from_dict(config or draft_config_dict()))
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(embed)
        draft.lm_head.weight.copy_(head[kept])
    draft.embed_tokens.weight.requires_grad_(False)
    return ms.fit_draft(draft, train, head, kept, epochs, steps, seed=SEED + 2, desc=desc)


def save_draft(out: Path, draft: Eagle3Draft, mapping) -> Path:
    folder = out / "kimi_draft_mla"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(draft_config_dict(), indent=2) + "\n")
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in draft.state_dict().items()}
    state |= {"d2t": mapping.d2t.clone(), "t2d": mapping.t2d.clone()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ms.ROOT / "data_samples"))
    ap.add_argument("--target-steps", type=int, default=200)
    ap.add_argument("--draft-epochs", type=int, default=12)
    args = ap.parse_args()
    out = Path(args.out).resolve()
    os.chdir(ms.ROOT)  # capture manifests name their inputs relative to the repository root
    t0 = time.time()
    torch.manual_seed(SEED)
    torch.set_num_threads(ms.THREADS)
    torch.use_deterministic_algorithms(True)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out / "tiny_target")
    docs = ms.stdlib_docstrings()
    encoded = [ms.encode(tok, d) for d in docs]
    sep = ms.encode(tok, "\n\n")
    P = ms.PROMPT
    chunks = [e[s : s + P] for e in encoded for s in range(0, len(e) - P + 1, P)]
    units = torch.tensor([c + sep + c + sep for c in chunks], dtype=torch.int64)
    print(f"kimi target trains on {len(chunks):,} repeat units of {units.shape[1]} tokens")
    target_dir = save_target(out, train_target(units, args.target_steps))
    rel = Path(os.path.relpath(target_dir))
    with tempfile.TemporaryDirectory() as tmp:
        capture(rel, Path(os.path.relpath(out / "prompts" / "train.jsonl")), Path(tmp) / "train")
        capture(rel, Path(os.path.relpath(out / "prompts.jsonl")), out / "kimi_hidden_states")
        train = ms.stack_samples(Path(tmp) / "train")
    gen_ids = train["input_ids"][train["loss_mask"] == 1]
    print(f"captured {len(train['input_ids'])} train samples; {len(torch.unique(gen_ids))} distinct generated tokens")
    mapping = build_from_frequencies(torch.bincount(gen_ids, minlength=VOCAB), DRAFT_VOCAB, VOCAB)
    kept = mapping.targets("offset")
    ck = open_checkpoint(target_dir)
    head = ck.tensors.get("lm_head.weight", "cpu", torch.float32)
    embed = ck.tensors.get("model.embed_tokens.weight", "cpu", torch.float32)
    draft = train_draft(embed, head, train, kept, args.draft_epochs)
    draft_dir = save_draft(out, draft, mapping)
    acc = ms.quick_accuracy(draft_dir, out / "kimi_hidden_states", target_dir)
    print(f"kimi draft: held-out step-0 top-1 {acc['top1_token']:.3f} (label), {acc['top1_target_argmax']:.3f} "
          f"(target argmax) over {acc['tokens']} tokens")
    size = sum(p.stat().st_size for d in (target_dir, draft_dir, out / "kimi_hidden_states") for p in d.rglob("*"))
    print(f"done in {time.time() - t0:.0f} s; {size / 2**20:.2f} MiB written")


if __name__ == "__main__":
    main()
