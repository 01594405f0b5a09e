"""Usage: python -m scripts.producer_fixtures.check_modelopt_plain data_samples/producers/pending/modelopt_eagle3 data_samples/producers/target [single]
Plain-torch check of the documented ModelOpt EAGLE-3 semantics in anchor alignment:
anchor a at step k: ids next_ids[a+k] (roll(-1)), rope position a+k, hidden = raw out of step k-1,
attn over step-0 keys s<=a + diagonal keys of steps 1..k; carried hidden through input_layernorm then hidden_norm."""
import sys

from safetensors.torch import load_file

from scripts.producer_fixtures.plain import inv_freqs, llama_steps, load, rope_half

d, tgt = sys.argv[1], sys.argv[2]
cfg, ref, W = load(d, "model.safetensors")
E = load_file(f"{tgt}/model.safetensors")["model.embed_tokens.weight"].float()
hd = cfg["head_dim"]
llama_steps(cfg, ref, W, E, ref["aux_hidden"][0] @ W["fc.weight"].T, rope_half(inv_freqs(cfg["rope_theta"], hd), hd),
            double="single" not in sys.argv, ref_key="logits_fp32_anchor_step{}")
