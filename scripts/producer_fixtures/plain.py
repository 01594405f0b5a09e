"""The parts the check_*_plain.py scripts share: plain torch, no kit code, written from the
producers' documented semantics (docs/producer-variants.md) to check a fixture's recorded fp32
logits. Each script keeps what makes its producer different; the draft step itself is here.
"""
import json
import math

import torch
from safetensors.torch import load_file


def load(d, weights, rename=lambda k: k):
    """(config, reference tensors, fp32 weights with `rename` applied to their keys) of fixture folder d."""
    cfg = json.load(open(f"{d}/config.json"))
    ref = torch.load(f"{d}/reference.pt", weights_only=True)
    return cfg, ref, {rename(k): v.float() for k, v in load_file(f"{d}/{weights}").items()}


def rms_norm(eps):
    return lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def inv_freqs(base, dim):
    return 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))


def yarn(freqs, rp, dim, base):
    """YaRN's ramp between interpolated (freqs / factor) and original frequencies."""
    f, bf, bs, L = rp["factor"], rp["beta_fast"], rp["beta_slow"], rp["original_max_position_embeddings"]
    cd = lambda r: dim * math.log(L / (r * 2 * math.pi)) / (2 * math.log(base))
    lo, hi = max(math.floor(cd(bf)), 0), min(math.ceil(cd(bs)), dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = ((torch.arange(dim // 2).float() - lo) / (hi - lo)).clamp(0, 1)
    return freqs / f * ramp + freqs * (1 - ramp)


def rope_adjacent(freqs):
    """Rotary embedding on adjacent pairs (DeepSeek's MLA rope part)."""
    def rope(x, pos):
        ang = pos[:, None].float() * freqs[None]
        c, s = torch.cos(ang), torch.sin(ang)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        if x.dim() == 3:
            c, s = c[:, None], s[:, None]
        return torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], -1).flatten(-2)
    return rope


def rope_half(inv, hd):
    """Rotary embedding on the two halves of the head (Llama's rotate_half)."""
    def rope(x, pos):
        ang = pos[:, None].float() * inv[None]
        emb = torch.cat([ang, ang], -1)
        c, s = emb.cos()[:, None], emb.sin()[:, None]
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * c + torch.cat([-x2, x1], -1) * s
    return rope


def attend(q, Ks, Vs, sc):
    """Step k's attention: causal over step 0's keys, plus each later step's key at the same position."""
    T = q.shape[0]
    s0 = torch.einsum("thd,shd->hts", q, Ks[0]) * sc
    s0 = s0.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    diag = [(torch.einsum("thd,thd->ht", q, Kj) * sc)[..., None] for Kj in Ks[1:]]
    pr = torch.softmax(torch.cat([s0] + diag, -1), -1)
    o = torch.einsum("hts,shd->thd", pr[..., :T], Vs[0])
    for j, Vj in enumerate(Vs[1:]):
        o = o + pr[..., T + j].T[..., None] * Vj
    return o


def residual_mlp(h, o, W, p, rms):
    """o_proj onto the residual h, then the post-attention norm and the SiLU MLP."""
    a = h + o.reshape(o.shape[0], -1) @ W[p + "self_attn.o_proj.weight"].T
    m = rms(a, W[p + "post_attention_layernorm.weight"])
    mlp = torch.nn.functional.silu(m @ W[p + "mlp.gate_proj.weight"].T) * (m @ W[p + "mlp.up_proj.weight"].T)
    return a + mlp @ W[p + "mlp.down_proj.weight"].T


def mla_steps(name, cfg, ref, W, rope, sc):
    """Three MLA draft steps (NeMo's key names) against ref's logits_fp32_step{k}; `sc` the softmax scale."""
    rms = rms_norm(cfg["rms_norm_eps"])
    nh, dn, dr, dv = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                      cfg["v_head_dim"])
    p = "model.layers.0."
    T = ref["input_ids"].shape[1]
    h = ref["aux_hidden"][0] @ W["model.fc.weight"].T
    Ks, Vs = [], []
    for k in range(3):
        e = W["model.embed_tokens.weight"][ref[f"ids_step{k}"][0]]
        x = torch.cat([rms(e, W[p + "input_layernorm.weight"]), rms(h, W[p + "hidden_norm.weight"])], -1)
        if p + "self_attn.q_a_proj.weight" in W:
            q = rms(x @ W[p + "self_attn.q_a_proj.weight"].T, W[p + "self_attn.q_a_layernorm.weight"])
            q = q @ W[p + "self_attn.q_b_proj.weight"].T
        else:
            q = x @ W[p + "self_attn.q_proj.weight"].T
        q = q.view(T, nh, dn + dr)
        kv = x @ W[p + "self_attn.kv_a_proj_with_mqa.weight"].T
        lat, kpe = kv[:, :-dr], kv[:, -dr:]
        pos = torch.arange(T) + k
        qpe, kpe = rope(q[..., dn:], pos), rope(kpe, pos)
        kvb = (rms(lat, W[p + "self_attn.kv_a_layernorm.weight"]) @ W[p + "self_attn.kv_b_proj.weight"].T)
        kvb = kvb.view(T, nh, dn + dv)
        Ks.append(torch.cat([kvb[..., :dn], kpe[:, None].expand(T, nh, dr)], -1))
        Vs.append(kvb[..., dn:])
        out = residual_mlp(h, attend(torch.cat([q[..., :dn], qpe], -1), Ks, Vs, sc), W, p, rms)
        lg = rms(out, W["model.norm.weight"]) @ W["lm_head.weight"].T
        print(name, "step", k, "max|diff|", (lg - ref[f"logits_fp32_step{k}"][0]).abs().max().item())
        h = out


def llama_steps(cfg, ref, W, E, h, rope, *, double, ref_key, norm_output=False):
    """Three Llama draft steps in anchor alignment (layers.0. key names) against ref[ref_key.format(k)]
    at anchors 0..T-1-k. `double`: the carried hidden goes through input_layernorm, then hidden_norm;
    `norm_output`: the step's normed output is carried."""
    rms = rms_norm(cfg["rms_norm_eps"])
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    p = "layers.0."
    T = ref["input_ids"].shape[1]
    nxt = ref["next_ids"][0]
    Ks, Vs = [], []
    for k in range(3):
        e = E[torch.cat([nxt[k:], torch.zeros(k, dtype=torch.long)])]
        u = rms(h, W[p + "input_layernorm.weight"]) if double else h
        x = torch.cat([rms(e, W[p + "input_layernorm.weight"]), rms(u, W[p + "hidden_norm.weight"])], -1)
        pos = torch.arange(T) + k
        q = rope((x @ W[p + "self_attn.q_proj.weight"].T).view(T, nh, hd), pos)
        Ks.append(rope((x @ W[p + "self_attn.k_proj.weight"].T).view(T, nkv, hd), pos).repeat_interleave(nh // nkv, 1))
        Vs.append((x @ W[p + "self_attn.v_proj.weight"].T).view(T, nkv, hd).repeat_interleave(nh // nkv, 1))
        out = residual_mlp(h, attend(q, Ks, Vs, hd ** -0.5), W, p, rms)
        lg = rms(out, W["norm.weight"]) @ W["lm_head.weight"].T
        if norm_output:
            out = rms(out, W["norm.weight"])
        r = ref[ref_key.format(k)][0][: T - k]
        print("step", k, "max|diff| anchors 0..T-1-k:", (lg[: T - k] - r).abs().max().item())
        h = out
