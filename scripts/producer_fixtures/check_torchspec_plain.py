"""Plain-torch re-implementation of TorchSpec's MLA EAGLE-3 draft step (Eagle3DeepseekV2ForCausalLM) as
documented in docs/producer-variants.md. Checks the fixture against its recorded fp32 logits:
    python -m scripts.producer_fixtures.check_torchspec_plain data_samples/producers/torchspec_mla_pruned [base=50000] [nomscale]
Yarn as TorchSpec runs it: rope base 10000 whatever rope_theta says (LlamaYarnRotaryEmbedding is built
without base=), ramp always applied, softmax scale * mscale(factor, mscale_all_dim)^2.
"""
import math
import sys

from scripts.producer_fixtures.plain import inv_freqs, load, mla_steps, rope_adjacent, yarn


def _nemo_name(k):  # TorchSpec keys -> the names the shared step uses
    if k.startswith("midlayer."):
        return "model.layers.0." + k[len("midlayer."):]
    return "model." + k if k in ("embed_tokens.weight", "fc.weight", "norm.weight") else k


d, args = sys.argv[1], sys.argv[2:]
cfg, ref, W = load(d, "model.safetensors", _nemo_name)
dn, dr = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"]
rp = dict(cfg["rope_scaling"])
base = next((float(a.split("=")[1]) for a in args if a.startswith("base=")), 10000.0)
freqs = inv_freqs(base, dr)
if rp.get("type", rp.get("rope_type")) == "yarn":
    freqs = yarn(freqs, rp, dr, base)
msc = 0.1 * rp["mscale_all_dim"] * math.log(rp["factor"]) + 1.0 if "nomscale" not in args else 1.0
mla_steps(d.split("/")[-1], cfg, ref, W, rope_adjacent(freqs), msc * msc * (dn + dr) ** -0.5)
