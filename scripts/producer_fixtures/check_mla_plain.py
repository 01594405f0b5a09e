"""Plain-torch re-implementation of the MLA EAGLE-3 draft step as documented in docs/producer-variants.md
(NeMo Automodel DeepseekV3Eagle3DraftModel). Checks a fixture folder against its recorded fp32 logits:
    python -m scripts.producer_fixtures.check_mla_plain data_samples/producers/nemo_mla_yarn [noyarn]
"""
import sys

from scripts.producer_fixtures.plain import inv_freqs, load, mla_steps, rope_adjacent, yarn

d = sys.argv[1]
cfg, ref, W = load(d, "model-00001-of-00001.safetensors")
dr = cfg["qk_rope_head_dim"]
rp = cfg["rope_parameters"]
base = rp["rope_theta"]
freqs = inv_freqs(base, dr)
if (rp.get("rope_type") == "yarn" and sys.argv[2:] != ["noyarn"]
        and cfg["max_position_embeddings"] > rp["original_max_position_embeddings"]):
    freqs = yarn(freqs, rp, dr, base)
mla_steps(d.split("/")[-1], cfg, ref, W, rope_adjacent(freqs), (cfg["qk_nope_head_dim"] + dr) ** -0.5)
