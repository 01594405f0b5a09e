"""Plain-torch re-implementation of the MLA EAGLE-3 draft step as documented in docs/producer-variants.md
(NeMo Automodel DeepseekV3Eagle3DraftModel). Checks a fixture folder against its recorded fp32 logits:
    python check_mla_plain.py data_samples/producers/nemo_mla_yarn [noyarn]
"""
import json, math, sys, torch
from safetensors.torch import load_file
d = sys.argv[1]; cfg = json.load(open(f"{d}/config.json")); ref = torch.load(f"{d}/reference.pt")
W = {k: v.float() for k, v in load_file(f"{d}/model-00001-of-00001.safetensors").items()}
eps = cfg["rms_norm_eps"]; nh = cfg["num_attention_heads"]; dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
rms = lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
rp = cfg["rope_parameters"]; base = rp["rope_theta"]
freqs = 1.0 / (base ** (torch.arange(0, dr, 2).float() / dr))
yarn = rp.get("rope_type") == "yarn" and (sys.argv[2:] != ["noyarn"])
if yarn and cfg["max_position_embeddings"] > rp["original_max_position_embeddings"]:
    f, bf, bs, L = rp["factor"], rp["beta_fast"], rp["beta_slow"], rp["original_max_position_embeddings"]
    cd = lambda r: dr * math.log(L / (r * 2 * math.pi)) / (2 * math.log(base))
    lo, hi = max(math.floor(cd(bf)), 0), min(math.ceil(cd(bs)), dr - 1)
    if lo == hi: hi += 0.001
    ramp = ((torch.arange(dr // 2).float() - lo) / (hi - lo)).clamp(0, 1)
    freqs = freqs / f * ramp + freqs * (1 - ramp)
def rope(x, pos):  # adjacent pairs
    ang = pos[:, None].float() * freqs[None]
    c, s = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    if x.dim() == 3: c, s = c[:, None], s[:, None]
    return torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], -1).flatten(-2)
p = "model.layers.0."; T = ref["input_ids"].shape[1]
g = ref["aux_hidden"][0]; h = g @ W["model.fc.weight"].T
Ks, Vs = [], []
for k in range(3):
    e = W["model.embed_tokens.weight"][ref[f"ids_step{k}"][0]]
    x = torch.cat([rms(e, W[p+"input_layernorm.weight"]), rms(h, W[p+"hidden_norm.weight"])], -1)
    if p+"self_attn.q_a_proj.weight" in W:
        q = rms(x @ W[p+"self_attn.q_a_proj.weight"].T, W[p+"self_attn.q_a_layernorm.weight"]) @ W[p+"self_attn.q_b_proj.weight"].T
    else:
        q = x @ W[p+"self_attn.q_proj.weight"].T
    q = q.view(T, nh, dn + dr); kv = x @ W[p+"self_attn.kv_a_proj_with_mqa.weight"].T
    lat, kpe = kv[:, :-dr], kv[:, -dr:]
    pos = torch.arange(T) + k
    qpe = rope(q[..., dn:], pos); kpe = rope(kpe, pos)
    kvb = (rms(lat, W[p+"self_attn.kv_a_layernorm.weight"]) @ W[p+"self_attn.kv_b_proj.weight"].T).view(T, nh, dn + dv)
    K = torch.cat([kvb[..., :dn], kpe[:, None].expand(T, nh, dr)], -1); V = kvb[..., dn:]
    Q = torch.cat([q[..., :dn], qpe], -1)
    Ks.append(K); Vs.append(V)
    sc = (dn + dr) ** -0.5
    s0 = torch.einsum("thd,shd->hts", Q, Ks[0]) * sc
    s0 = s0.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    diag = [torch.einsum("thd,thd->ht", Q, Kj)[..., None] * sc for Kj in Ks[1:]]
    pr = torch.softmax(torch.cat([s0] + diag, -1), -1)
    o = torch.einsum("hts,shd->thd", pr[..., :T], Vs[0])
    for j, Vj in enumerate(Vs[1:]): o = o + pr[..., T + j].T[..., None] * Vj
    a = h + o.reshape(T, -1) @ W[p+"self_attn.o_proj.weight"].T
    m = rms(a, W[p+"post_attention_layernorm.weight"])
    out = a + (torch.nn.functional.silu(m @ W[p+"mlp.gate_proj.weight"].T) * (m @ W[p+"mlp.up_proj.weight"].T)) @ W[p+"mlp.down_proj.weight"].T
    lg = rms(out, W["model.norm.weight"]) @ W["lm_head.weight"].T
    print(d.split("/")[-1], "step", k, "max|diff|", (lg - ref[f"logits_fp32_step{k}"][0]).abs().max().item())
    h = out
