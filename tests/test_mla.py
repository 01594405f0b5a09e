"""The MLA draft layer (issue 28) against transformers' own DeepSeek-V3 attention, and its configs.

The NeMo Automodel fixtures (data_samples/producers/nemo_mla*, tests/test_producers.py) check the
layer against a producer's own training code; here the attention is checked against
`transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3Attention` run by transformers
itself (eager attention, its rotary embedding, a causal mask), with YaRN scaling and
mscale_all_dim as SGLang's `kimi_k25_eagle3` configs carry them, and an SGLang-layout MLA draft
(`midlayer.*` keys, EAGLE-3.1 fc_norm + norm_output) is loaded and drafted from.
"""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from helpers.core.errors import BadInputError
from helpers.model.config import DraftConfig
from helpers.model.draft import Eagle3Draft, load_draft
from helpers.model.drafter import Drafter
from helpers.model.keys import expected_shapes
from helpers.model.layer import DraftKV, MLAttention, deepseek_config

H, HEADS, V, VD = 32, 4, 96, 48


def kimi_config(**over) -> dict:
    """A tiny config in the shape SGLang's kimi_k25_eagle3 reads (Kimi-K2.5 EAGLE-3.1 MLA drafts)."""
    cfg = {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2",
        "hidden_size": H, "intermediate_size": 64, "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
        "num_hidden_layers": 1, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 8, "v_head_dim": 12, "vocab_size": V, "draft_vocab_size": VD,
        "target_hidden_size": H, "rms_norm_eps": 1e-6, "max_position_embeddings": 256, "rope_theta": 50000.0,
        "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32,
                         "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
        "fc_norm": True, "norm_output": True,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]},
    }
    cfg.update(over)
    return cfg


def test_kimi_config_is_read_as_mla():
    cfg = DraftConfig.from_dict(kimi_config())
    assert cfg.attention == "mla" and cfg.q_lora_rank == 24 and cfg.kv_lora_rank == 16
    assert (cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim) == (8, 8, 12)
    assert cfg.rope_scaling["rope_type"] == "yarn" and cfg.yarn_scale  # SGLang applies mscale^2
    assert cfg.fc_norm and cfg.final_norm and cfg.feed_normed  # EAGLE-3.1: norm_output feeds norm(h)
    assert cfg.aux_layer_ids == [1, 3, 5]
    shapes = expected_shapes(cfg)
    assert shapes["midlayer.self_attn.kv_a_proj_with_mqa.weight"] == (16 + 8, 2 * H)
    assert shapes["midlayer.self_attn.kv_b_proj.weight"] == (HEADS * (8 + 12), 16)
    assert shapes["midlayer.self_attn.q_b_proj.weight"] == (HEADS * 16, 24)
    assert "midlayer.self_attn.k_proj.weight" not in shapes
    nolora = DraftConfig.from_dict(kimi_config(q_lora_rank=None, model_type="deepseek_v3"))
    assert expected_shapes(nolora)["midlayer.self_attn.q_proj.weight"] == (HEADS * 16, 2 * H)


@pytest.mark.parametrize("over, why", [
    ({"qk_rope_head_dim": None}, "qk_rope_head_dim"),
    ({"model_type": "llama"}, "model_type"),
    ({"q_lora_rank": -3}, "q_lora_rank"),
    ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "dynamic"),
])
def test_bad_mla_configs_are_refused_in_one_line(over, why):
    with pytest.raises(BadInputError, match=why):
        DraftConfig.from_dict(kimi_config(**over), source="config.json")


@pytest.mark.parametrize("q_lora", [24, None])
@pytest.mark.parametrize("rope", ["yarn", "default"])
def test_mla_attention_equals_transformers_deepseek_v3(q_lora, rope):
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3Attention,
        DeepseekV3RotaryEmbedding,
    )

    over = {"q_lora_rank": q_lora} | ({} if rope == "yarn" else {"rope_scaling": None})
    cfg = DraftConfig.from_dict(kimi_config(**over))
    torch.manual_seed(0)
    ours = MLAttention(cfg).float()
    for p in ours.parameters():
        torch.nn.init.normal_(p, std=0.2)
    dcfg = deepseek_config(cfg)
    dcfg._attn_implementation = "eager"
    ref = DeepseekV3Attention(dcfg, layer_idx=0)
    ref.o_proj = torch.nn.Linear(HEADS * 12, H, bias=False)
    ref.load_state_dict({k: v for k, v in ours.state_dict().items() if not k.startswith("rotary")}, strict=True)
    T = 20  # longer than original_max_position_embeddings: YaRN's interpolation matters
    x = torch.randn(1, T, 2 * H)
    pos = torch.arange(T)
    cos, sin = DeepseekV3RotaryEmbedding(dcfg)(x, pos[None])
    mask = torch.full((T, T), torch.finfo(torch.float32).min).triu(1)[None, None]
    want, _ = ref(x, (cos, sin), mask)
    with torch.no_grad():
        got = ours(x, pos, DraftKV())
    assert (got - want).abs().max().item() < 1e-5
    if rope == "yarn":  # the softmax scale carries mscale(4, 1)^2 as transformers and SGLang apply it
        assert ours.scale == pytest.approx(16 ** -0.5 * (0.1 * torch.log(torch.tensor(4.0)).item() + 1) ** 2)


def _save_sglang_mla(folder, cfg_dict, seed=0):
    """An MLA draft in the layout SGLang's kimi_k25_eagle3 loads (midlayer.*, d2t offsets, t2d)."""
    cfg = DraftConfig.from_dict(cfg_dict)
    torch.manual_seed(seed)
    model = Eagle3Draft(cfg)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()
             if not k.startswith("midlayer.self_attn.rotary")}
    kept = torch.sort(torch.randperm(V)[:VD]).values
    state["d2t"] = kept - torch.arange(VD)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[kept] = True
    state["t2d"] = t2d
    folder.mkdir()
    save_file(state, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(cfg_dict))
    return folder


def test_sglang_layout_mla_draft_loads_and_drafts(tmp_path):
    folder = _save_sglang_mla(tmp_path / "mla", kimi_config())
    model = load_draft(folder, device="cpu", dtype=torch.float32)
    assert model.config.attention == "mla" and model.d2t is not None
    aux, nxt = torch.randn(1, 12, 3 * H), torch.randint(0, V, (1, 12))
    steps = model.draft_steps(aux, nxt, steps=3)
    assert [tuple(s.shape) for s in steps] == [(1, 12, VD)] * 3
    drafter = Drafter(model)
    drafter.extend(aux, nxt)
    prop = drafter.propose(int(nxt[0, -1]), steps=3, topk=1, draft_tokens=4)
    assert prop.draft_ids[1:] == [int(s[0, -1].argmax()) for s in steps]
    # a tree over the same cache: SGLang's steps 3 / topk 2 / 6 draft tokens
    tree = drafter.propose(int(nxt[0, -1]), steps=3, topk=2, draft_tokens=6)
    assert tree.size == 6 and tree.draft_ids[1] == prop.draft_ids[1]


def test_mla_checkpoint_with_llama_keys_is_refused(tmp_path):
    folder = _save_sglang_mla(tmp_path / "mla", kimi_config())
    from safetensors.torch import load_file

    state = load_file(folder / "model.safetensors")
    state["midlayer.self_attn.k_proj.weight"] = torch.zeros(32, 2 * H)
    save_file(state, folder / "model.safetensors")
    with pytest.raises(BadInputError, match="k_proj"):
        load_draft(folder, device="cpu", dtype=torch.float32)
