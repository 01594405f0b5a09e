"""Usage: python check_modelopt_plain.py data_samples/producers/modelopt_eagle3 data_samples/producers/target [single]
Plain-torch check of the documented ModelOpt EAGLE-3 semantics in anchor alignment:
anchor a at step k: ids next_ids[a+k] (roll(-1)), rope position a+k, hidden = raw out of step k-1,
attn over step-0 keys s<=a + diagonal keys of steps 1..k; carried hidden through input_layernorm then hidden_norm."""
import json, sys, torch
from safetensors.torch import load_file
d, tgt = sys.argv[1], sys.argv[2]
cfg = json.load(open(f"{d}/config.json")); ref = torch.load(f"{d}/reference.pt")
W = {k: v.float() for k, v in load_file(f"{d}/model.safetensors").items()}
E = load_file(f"{tgt}/model.safetensors")["model.embed_tokens.weight"].float()
eps = cfg["rms_norm_eps"]; nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
rms = lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
def rope(x, pos):
    ang = pos[:, None].float() * inv[None]; emb = torch.cat([ang, ang], -1)
    c, s = emb.cos()[:, None], emb.sin()[:, None]
    x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
    return x * c + torch.cat([-x2, x1], -1) * s
double = "single" not in sys.argv
p = "layers.0."; T = ref["input_ids"].shape[1]
nxt = ref["next_ids"][0]; h = ref["aux_hidden"][0] @ W["fc.weight"].T
Ks, Vs = [], []
for k in range(3):
    ids = torch.cat([nxt[k:], torch.zeros(k, dtype=torch.long)])
    e = E[ids]
    u = rms(h, W[p+"input_layernorm.weight"]) if double else h
    x = torch.cat([rms(e, W[p+"input_layernorm.weight"]), rms(u, W[p+"hidden_norm.weight"])], -1)
    pos = torch.arange(T) + k
    q = rope((x @ W[p+"self_attn.q_proj.weight"].T).view(T, nh, hd), pos)
    K = rope((x @ W[p+"self_attn.k_proj.weight"].T).view(T, nkv, hd), pos).repeat_interleave(nh // nkv, 1)
    V = (x @ W[p+"self_attn.v_proj.weight"].T).view(T, nkv, hd).repeat_interleave(nh // nkv, 1)
    Ks.append(K); Vs.append(V); sc = hd ** -0.5
    s0 = torch.einsum("thd,shd->hts", q, Ks[0]) * sc
    s0 = s0.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    diag = [(torch.einsum("thd,thd->ht", q, Kj) * sc)[..., None] for Kj in Ks[1:]]
    pr = torch.softmax(torch.cat([s0] + diag, -1), -1)
    o = torch.einsum("hts,shd->thd", pr[..., :T], Vs[0])
    for j, Vj in enumerate(Vs[1:]): o = o + pr[..., T + j].T[..., None] * Vj
    a = h + o.reshape(T, -1) @ W[p+"self_attn.o_proj.weight"].T
    m = rms(a, W[p+"post_attention_layernorm.weight"])
    out = a + (torch.nn.functional.silu(m @ W[p+"mlp.gate_proj.weight"].T) * (m @ W[p+"mlp.up_proj.weight"].T)) @ W[p+"mlp.down_proj.weight"].T
    lg = rms(out, W["norm.weight"]) @ W["lm_head.weight"].T
    r = ref[f"logits_fp32_anchor_step{k}"][0]
    print("step", k, "max|diff| anchors 0..T-1-k:", (lg[: T - k] - r).abs().max().item())
    h = out
