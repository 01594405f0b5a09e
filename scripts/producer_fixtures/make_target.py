"""The tiny target both producers' fixtures share: data_samples/producers/target/.

config.json (Llama, 8 layers, H 64, vocab 512) and model.safetensors holding only what a draft
borrows from its target: model.embed_tokens.weight, lm_head.weight, model.norm.weight (bf16).
speculators reads embed_tokens / lm_head[t2d] / norm from it as the verifier; SpecForge's draft
checkpoints leave embed_tokens out, and SGLang/the kit take it from here.
Usage (cwd = repository root): python -m scripts.producer_fixtures.make_target OUT_DIR
"""
import os
import sys

import torch
from safetensors.torch import save_file

from scripts.producer_fixtures.common import EPS, HEADS, HT, INTER, KV_HEADS, ROPE_THETA, TARGET_LAYERS, VOCAB, write_json


def main(out):
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "config.json"), {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB,
        "hidden_size": HT,
        "intermediate_size": INTER,
        "num_hidden_layers": TARGET_LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HT // HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "initializer_range": 0.02,
        "rms_norm_eps": EPS,
        "rope_theta": ROPE_THETA,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    })
    g = torch.Generator().manual_seed(7)
    tensors = {
        "model.embed_tokens.weight": torch.randn(VOCAB, HT, generator=g),
        "lm_head.weight": torch.randn(VOCAB, HT, generator=g) / HT ** 0.5,
        "model.norm.weight": 1.0 + 0.3 * torch.randn(HT, generator=g),
    }
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()},
              os.path.join(out, "model.safetensors"), metadata={"format": "pt"})


if __name__ == "__main__":
    main(sys.argv[1])
