"""The EAGLE-3 draft: forward against an independent implementation, k-step drafting, loading."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn as nn
from safetensors.torch import save_file

from helpers.model.draft import Eagle3Draft, estimate_load_bytes, load_draft
from helpers.model.config import DraftConfig, rope_inv_freq
from helpers.core.errors import BadInputError
from helpers.io.mapping import VocabMapping
from conftest import SAMPLES


V, VD, H, HT = 64, 24, 32, 48


def make_cfg(heads=4, kv=4, nbr=False, rope_scaling=None, head_dim=None) -> dict:
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": H, "intermediate_size": 56,
        "num_attention_heads": heads, "num_key_value_heads": kv, "rms_norm_eps": 1e-5, "rope_theta": 500.0,
        "vocab_size": V, "draft_vocab_size": VD, "target_hidden_size": HT, "norm_before_residual": nbr,
        "max_position_embeddings": 256,
    }
    if rope_scaling is not None:
        cfg["rope_scaling"] = rope_scaling
    if head_dim is not None:
        cfg["head_dim"] = head_dim
    return cfg


def random_draft(cfg: dict, seed=0) -> Eagle3Draft:
    torch.manual_seed(seed)
    m = Eagle3Draft(DraftConfig.from_dict(cfg))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))  # non-trivial norm weights
            else:
                p.normal_(0, 0.3)
    return m.eval()


def hf_reference_logits(m: Eagle3Draft, aux, next_ids):
    """The same layer composed from transformers' Llama pieces, q/k/v widened to 2H inputs."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaAttention,
        LlamaMLP,
        LlamaRMSNorm,
        LlamaRotaryEmbedding,
    )

    c = m.config
    rope = {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.rope_scaling:
        rope = {**c.rope_scaling, "rope_theta": c.rope_theta}
    hc = LlamaConfig(
        hidden_size=c.hidden_size, intermediate_size=c.intermediate_size, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
        vocab_size=c.vocab_size, max_position_embeddings=c.max_position_embeddings, rope_parameters=rope,
        attention_bias=False, mlp_bias=False,
    )
    hc._attn_implementation = "eager"
    attn = LlamaAttention(hc, layer_idx=0)
    for name in ("q_proj", "k_proj", "v_proj"):
        setattr(attn, name, nn.Linear(2 * c.hidden_size, getattr(attn, name).out_features, bias=False))
    mlp, rot = LlamaMLP(hc), LlamaRotaryEmbedding(hc)
    norms = {n: LlamaRMSNorm(c.hidden_size, eps=c.rms_norm_eps) for n in
             ("hidden_norm", "input_layernorm", "post_attention_layernorm", "norm")}
    ml = m.midlayer
    with torch.no_grad():
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(attn, name).weight.copy_(getattr(ml.self_attn, name).weight)
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(mlp, name).weight.copy_(getattr(ml.mlp, name).weight)
        for name, n in norms.items():
            n.weight.copy_((m.norm if name == "norm" else getattr(ml, name)).weight)
    B, T = next_ids.shape
    with torch.no_grad():
        h = aux @ m.fc.weight.T
        emb = m.embed_tokens.weight[next_ids]
        hn = norms["hidden_norm"](h)
        residual = hn if c.norm_before_residual else h
        x = torch.cat([norms["input_layernorm"](emb), hn], dim=-1)
        pos = torch.arange(T)[None].expand(B, T)
        cos, sin = rot(x, pos)
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
        a, _ = attn(x, position_embeddings=(cos, sin), attention_mask=mask)
        h = residual + a
        h = h + mlp(norms["post_attention_layernorm"](h))
        return norms["norm"](h) @ m.lm_head.weight.T


@pytest.mark.parametrize("heads,kv", [(4, 4), (4, 2), (8, 1)])
@pytest.mark.parametrize("nbr", [False, True])
def test_forward_matches_transformers_reference(heads, kv, nbr):
    m = random_draft(make_cfg(heads, kv, nbr), seed=heads + kv + nbr)
    aux = torch.randn(2, 11, 3 * HT)
    ids = torch.randint(0, V, (2, 11))
    ours = m(aux, ids)
    ref = hf_reference_logits(m, aux, ids)
    assert ours.shape == (2, 11, VD)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scaling", [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 16},
])
def test_rope_scaling_matches_transformers(scaling):
    m = random_draft(make_cfg(4, 2, head_dim=16, rope_scaling=scaling), seed=3)
    plain = random_draft(make_cfg(4, 2, head_dim=16), seed=3)
    aux, ids = torch.randn(1, 40, 3 * HT), torch.randint(0, V, (1, 40))
    torch.testing.assert_close(m(aux, ids), hf_reference_logits(m, aux, ids), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(rope_inv_freq(m.config), rope_inv_freq(plain.config))  # scaling changed RoPE


def test_rope_scaling_legacy_type_key_and_unknown_refused(tmp_path):
    cfg = DraftConfig.from_dict(make_cfg(rope_scaling={"type": "linear", "factor": 2.0}))
    assert cfg.rope_scaling["rope_type"] == "linear"
    assert DraftConfig.from_dict(make_cfg(rope_scaling={"rope_type": "default"})).rope_scaling is None
    for kind in ("yarn", "dynamic", "longrope"):
        with pytest.raises(BadInputError, match=kind):
            DraftConfig.from_dict(make_cfg(rope_scaling={"rope_type": kind, "factor": 2.0}), source="cfg.json")


def naive_steps(m: Eagle3Draft, aux, ids, steps, d2t=None, reading="offset"):
    """One position and one step at a time, with an explicit list of the keys/values it may see."""
    c, ml, at = m.config, m.midlayer, m.midlayer.self_attn
    T = ids.shape[0]
    inv = rope_inv_freq(c)

    def rope(x, p):  # x [heads, d]
        ang = p * inv
        cos, sin = torch.cat([ang, ang]).cos(), torch.cat([ang, ang]).sin()
        a, b = x[..., : c.head_dim // 2], x[..., c.head_dim // 2 :]
        return x * cos + torch.cat([-b, a], -1) * sin

    def layer(h, tok, p):
        hn = ml.hidden_norm(h)
        res = hn if c.norm_before_residual else h
        x = torch.cat([ml.input_layernorm(m.embed_tokens.weight[tok]), hn])
        q = rope((at.q_proj.weight @ x).view(c.num_attention_heads, c.head_dim), p)
        k = rope((at.k_proj.weight @ x).view(c.num_key_value_heads, c.head_dim), p)
        v = (at.v_proj.weight @ x).view(c.num_key_value_heads, c.head_dim)
        return q, k, v, res

    def attend(q, ks, vs):
        g = c.num_attention_heads // c.num_key_value_heads
        K = torch.stack(ks).repeat_interleave(g, dim=1)  # [n, heads, d]
        Vv = torch.stack(vs).repeat_interleave(g, dim=1)
        w = torch.softmax((K * q).sum(-1) / c.head_dim**0.5, dim=0)  # [n, heads]
        return (w[..., None] * Vv).sum(0).reshape(-1)

    def finish(res, o):
        h = res + at.o_proj.weight @ o
        h = h + ml.mlp(ml.post_attention_layernorm(h))
        return h, m.lm_head(m.norm(h))

    with torch.no_grad():
        h0 = aux @ m.fc.weight.T
        step0 = [layer(h0[t], ids[t], t) for t in range(T)]
        out = torch.zeros(steps, T, c.draft_vocab_size)
        for t in range(T):
            ks = [step0[s][1] for s in range(t + 1)]
            vs = [step0[s][2] for s in range(t + 1)]
            q, _, _, res = step0[t]
            h, logits = finish(res, attend(q, ks, vs))
            out[0, t] = logits
            for j in range(1, steps):
                d = int(logits.argmax())
                tok = d if d2t is None else (d + int(d2t[d]) if reading == "offset" else int(d2t[d]))
                q, k, v, res = layer(h, tok, t + j)
                ks.append(k)
                vs.append(v)
                h, logits = finish(res, attend(q, ks, vs))
                out[j, t] = logits
    return out


@pytest.mark.parametrize("reading", ["offset", "absolute"])
def test_draft_steps_match_naive_per_position_chains(reading):
    m = random_draft(make_cfg(4, 2), seed=7)
    kept = torch.sort(torch.randperm(V)[:VD]).values
    m.set_mapping(VocabMapping(kept - torch.arange(VD), target_vocab_size=V))
    aux, ids = torch.randn(1, 9, 3 * HT), torch.randint(0, V, (1, 9))
    with torch.no_grad():
        fast = m.draft_steps(aux, ids, steps=4, reading=reading)
    naive = naive_steps(m, aux[0], ids[0], 4, d2t=m.d2t, reading=reading)
    assert len(fast) == 4
    for j in range(4):
        torch.testing.assert_close(fast[j][0], naive[j], rtol=1e-4, atol=1e-4)
    # step 0 is the plain forward; later steps differ from it
    torch.testing.assert_close(fast[0], m(aux, ids))
    assert not torch.allclose(fast[1], fast[0])


def test_draft_steps_reading_changes_the_fed_tokens():
    m = random_draft(make_cfg(4, 2), seed=8)
    kept = torch.sort(torch.randperm(V)[:VD]).values
    m.set_mapping(VocabMapping(kept - torch.arange(VD), target_vocab_size=V))
    aux, ids = torch.randn(1, 9, 3 * HT), torch.randint(0, V, (1, 9))
    with torch.no_grad():
        off = m.draft_steps(aux, ids, steps=2, reading="offset")
        none = m.draft_steps(aux, ids, steps=2, reading="none")
    torch.testing.assert_close(off[0], none[0])
    assert not torch.allclose(off[1], none[1])


def save_sglang(m: Eagle3Draft, folder, drop=(), d2t=None):
    folder.mkdir(parents=True, exist_ok=True)
    cfg = m.config
    raw = make_cfg(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.norm_before_residual)
    (folder / "config.json").write_text(json.dumps(raw))
    sd = {k: v.contiguous() for k, v in m.state_dict().items() if k not in drop}
    if d2t is not None:
        sd["d2t"] = d2t
    save_file(sd, str(folder / "model.safetensors"))
    return folder


def test_sglang_and_speculators_layouts_load_identically(tmp_path):
    m = random_draft(make_cfg(4, 2), seed=11)
    kept = torch.sort(torch.randperm(V)[:VD]).values
    d2t = kept - torch.arange(VD)
    save_sglang(m, tmp_path / "sg", d2t=d2t)
    spec = tmp_path / "spec"
    spec.mkdir()
    flat = make_cfg(4, 2)
    layer = {k: v for k, v in flat.items() if k not in ("draft_vocab_size", "target_hidden_size", "norm_before_residual")}
    (spec / "config.json").write_text(json.dumps({
        "architectures": ["Eagle3Speculator"], "transformer_layer_config": layer, "draft_vocab_size": VD,
        "target_hidden_size": HT, "norm_before_residual": False}))
    sd = {"model." + k.replace("midlayer.", "layers.0."): v for k, v in m.state_dict().items() if k != "embed_tokens.weight"}
    save_file(sd, str(spec / "model.safetensors"))
    np.save(spec / "d2t.npy", d2t.numpy())
    target = tmp_path / "target"
    target.mkdir()
    save_file({"model.embed_tokens.weight": m.embed_tokens.weight.detach().clone()}, str(target / "model.safetensors"))

    a = load_draft(tmp_path / "sg", device="cpu")
    b = load_draft(spec, device="cpu", embed_from=target)
    assert a.fc.weight.dtype == torch.float32 and b.midlayer.self_attn.q_proj.weight.device.type == "cpu"
    aux, ids = torch.randn(2, 7, 3 * HT), torch.randint(0, V, (2, 7))
    with torch.no_grad():
        la, lb, lm = a(aux, ids), b(aux, ids), m(aux, ids)
    assert torch.equal(la, lb)
    torch.testing.assert_close(la, lm)
    assert torch.equal(a.d2t, d2t) and torch.equal(b.d2t, d2t)
    with pytest.raises(BadInputError, match="embed_from"):
        load_draft(spec, device="cpu")
    bf = load_draft(tmp_path / "sg", device="cpu", dtype=torch.bfloat16)
    assert bf.lm_head.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("missing", ["fc.weight", "lm_head.weight"])
def test_missing_fc_or_lm_head_is_one_line_error(tmp_path, missing):
    folder = save_sglang(random_draft(make_cfg()), tmp_path / "ck", drop=(missing,))
    with pytest.raises(BadInputError) as e:
        load_draft(folder, device="cpu")
    msg = str(e.value)
    assert "\n" not in msg and "model.safetensors" in msg and missing.split(".")[0] in msg


def test_shape_mismatch_and_no_d2t(tmp_path):
    m = random_draft(make_cfg())
    folder = save_sglang(m, tmp_path / "ck")
    loaded = load_draft(folder, device="cpu")
    assert loaded.mapping is None and loaded.d2t is None
    cfg = json.loads((folder / "config.json").read_text())
    cfg["target_hidden_size"] = HT + 8
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BadInputError, match="fc.weight has shape"):
        load_draft(folder, device="cpu")


def test_estimate_load_bytes_counts_every_tensor(tmp_path):
    m = random_draft(make_cfg())
    folder = save_sglang(m, tmp_path / "ck")
    n = sum(p.numel() for p in m.parameters())
    assert estimate_load_bytes(folder, torch.float32) == 4 * n + 8 * VD
    assert estimate_load_bytes(folder, torch.bfloat16) == 2 * n + 8 * VD


@pytest.mark.skipif(not (SAMPLES / "tiny_draft_sglang").exists(), reason="bundled draft not generated")
def test_bundled_copies_agree():
    from helpers.io.samples import iter_samples

    s = next(iter_samples(SAMPLES / "tiny_hidden_states" / "val"))
    aux, ids = s.aux_hidden_state[None, :-1].float(), s.input_ids[None, 1:]
    sg = load_draft(SAMPLES / "tiny_draft_sglang", device="cpu")
    sp = load_draft(SAMPLES / "tiny_draft_speculators", device="cpu", embed_from=SAMPLES / "tiny_target")
    ab = load_draft(SAMPLES / "tiny_draft_absolute", device="cpu")
    nd = load_draft(SAMPLES / "tiny_draft_no_d2t", device="cpu")
    with torch.no_grad():
        ref = sg(aux, ids)
        for other in (sp, ab, nd):
            assert torch.equal(other(aux, ids), ref)
    assert torch.equal(sg.mapping.targets("offset"), ab.mapping.targets("absolute"))
    assert nd.mapping is None
    assert sg.config.aux_layer_ids == sp.config.aux_layer_ids
