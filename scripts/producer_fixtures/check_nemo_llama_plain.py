"""Plain-torch check of the NeMo Automodel Llama EAGLE-3 draft as documented in docs/producer-variants.md
(SpecForge alignment and masks; fc_norm per aux chunk; norm_output feeds norm(out) back):
    python -m scripts.producer_fixtures.check_nemo_llama_plain data_samples/producers/nemo_llama_fc_norm_norm_output _ single
(the second argument is unused; 'single' = the carried hidden goes through hidden_norm only, as NeMo does).
Compares positions 0..T-1-k of each step (those whose step-k input ids are real tokens or the final pad).
"""
import sys

import torch

from scripts.producer_fixtures.plain import inv_freqs, llama_steps, load, rms_norm, rope_half

d = sys.argv[1]
cfg, ref, W = load(d, "model-00001-of-00001.safetensors", lambda k: k.removeprefix("model."))
rms = rms_norm(cfg["rms_norm_eps"])
hd = cfg["head_dim"]
g = ref["aux_hidden"][0]
if cfg.get("fc_norm"):
    g = torch.cat([rms(c, W[f"fc_norm.{i}.weight"]) for i, c in enumerate(g.chunk(3, -1))], -1)
llama_steps(cfg, ref, W, W["embed_tokens.weight"], g @ W["fc.weight"].T,
            rope_half(inv_freqs(cfg["rope_parameters"]["rope_theta"], hd), hd),
            double="single" not in sys.argv, ref_key="logits_fp32_step{}", norm_output=bool(cfg.get("norm_output")))
