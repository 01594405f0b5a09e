"""A llama.cpp EAGLE-3 draft GGUF as a checkpoint (`helpers.io.gguf_files`): written as the converter writes
it, read back under HF names with q/k un-permuted, the same draft model as the HF checkpoint it came
from, and bad GGUF input as one line naming the file. The GGUFs are made here from the bundled
data_samples/engine_llama pair with the kit's writer (no llama.cpp needed).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from helpers.core.errors import BadInputError
from helpers.io.checkpoint import load_mapping, open_checkpoint
from helpers.io.gguf_files import (
    GGUF_TO_HF,
    copy_gguf,
    gguf_name,
    hf_name,
    permute_qk,
    read_gguf,
    stored_d2t,
    unpermute_qk,
    write_draft_gguf,
)
from conftest import SAMPLES


PAIR = SAMPLES / "engine_llama"
DRAFT = PAIR / "draft"


def _hf():
    return load_file(str(DRAFT / "model.safetensors")), json.loads((DRAFT / "config.json").read_text()), \
        json.loads((PAIR / "target" / "config.json").read_text())


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """{name: path}: the draft as GGUF (f32 and bf16), the same with offsets in d2t, a target-like GGUF,
    truncated and non-GGUF files."""
    import gguf

    d = tmp_path_factory.mktemp("gguf")
    tensors, cfg, tcfg = _hf()
    out = {"f32": write_draft_gguf(d / "draft.gguf", tensors, cfg, tcfg, model_dir=DRAFT),
           "bf16": write_draft_gguf(d / "draft-bf16.gguf", tensors, cfg, tcfg, outtype="bf16", model_dir=DRAFT)}
    ids = stored_d2t(out["f32"])
    out["offsets"] = copy_gguf(out["f32"], d / "offsets.gguf", {"d2t": ids - np.arange(ids.size)})
    w = gguf.GGUFWriter(d / "target.gguf", "llama")
    w.add_block_count(8)
    w.add_tensor("token_embd.weight", np.zeros((16, 4), dtype=np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    out["target"] = d / "target.gguf"
    raw = out["f32"].read_bytes()
    for name, n in (("cut_data", len(raw) // 2), ("cut_header", 200)):
        (d / f"{name}.gguf").write_bytes(raw[:n])
        out[name] = d / f"{name}.gguf"
    (d / "text.gguf").write_text("not a gguf at all\n")
    out["text"] = d / "text.gguf"
    return out


def test_writer_names_dtypes_shapes_and_d2t_as_the_converter(made):
    tensors, cfg, tcfg = _hf()
    r = read_gguf(made["f32"])
    names = [t.name for t in r.tensors]
    assert names == ["token_embd.weight", "fc.weight", "output.weight", "blk.0.attn_norm_2.weight",
                     "blk.0.attn_norm.weight", "blk.0.ffn_down.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight",
                     "blk.0.ffn_norm.weight", "blk.0.attn_k.weight", "blk.0.attn_output.weight", "blk.0.attn_q.weight",
                     "blk.0.attn_v.weight", "output_norm.weight", "d2t"]  # t2d dropped, d2t last
    by = {t.name: t for t in r.tensors}
    assert [int(x) for x in by["token_embd.weight"].shape] == [64, 4096]  # ne[0] first
    assert [int(x) for x in by["output.weight"].shape] == [64, 800]
    assert by["d2t"].tensor_type.name == "I64"
    assert all(t.tensor_type.name == "F32" for t in r.tensors if t.name != "d2t")
    np.testing.assert_array_equal(np.array(by["d2t"].data), tensors["d2t"].numpy() + np.arange(800))
    q = tensors["midlayer.self_attn.q_proj.weight"].float().numpy()
    k = tensors["midlayer.self_attn.k_proj.weight"].float().numpy()
    np.testing.assert_array_equal(np.array(by["blk.0.attn_q.weight"].data), permute_qk(q, 2, 2))
    np.testing.assert_array_equal(np.array(by["blk.0.attn_k.weight"].data), permute_qk(k, 2, 1))
    assert not np.array_equal(np.array(by["blk.0.attn_k.weight"].data), k)  # the permutation is not a no-op here
    f = lambda key: r.fields[key].contents()  # noqa: E731
    assert f("general.architecture") == "eagle3"
    assert f("eagle3.target_layers") == [2, 4, 5]  # nested eagle_config ids are not read: [2, L//2, L-3], L = 8
    assert f("eagle3.vocab_size") == 4096 and f("eagle3.block_count") == 1
    assert f("eagle3.attention.head_count_kv") == 1 and f("eagle3.attention.key_length") == 32
    assert f("eagle3.norm_before_fc") is False and f("eagle3.target_hidden_size") == 64
    assert f("general.name") == "Draft" and f("general.size_label") == "396K" and f("general.file_type") == 0
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    assert keys[:5] == ["general.architecture", "eagle3.target_layers", "eagle3.target_hidden_size",
                        "eagle3.norm_before_residual", "eagle3.norm_before_fc"]


def test_bf16_outtype_keeps_norms_f32(made):
    by = {t.name: t.tensor_type.name for t in read_gguf(made["bf16"]).tensors}
    assert by["fc.weight"] == "BF16" and by["blk.0.attn_q.weight"] == "BF16"
    assert by["output_norm.weight"] == "F32" and by["blk.0.attn_norm_2.weight"] == "F32" and by["d2t"] == "I64"


def test_permutation_round_trips():
    w = torch.randn(96, 7)
    for heads, kv in ((4, 4), (4, 2), (3, 1)):
        assert torch.equal(unpermute_qk(permute_qk(w, heads, kv), heads, kv), w)
    assert not torch.equal(permute_qk(w, 4, 4), w)


def test_names_both_ways():
    assert gguf_name("layers.0.self_attn.q_proj.weight") == "blk.0.attn_q.weight"
    assert gguf_name("model.midlayer.hidden_norm.weight") == "blk.0.attn_norm_2.weight"
    assert gguf_name("input_norm.weight") == "enc_output_norm.weight"
    assert gguf_name("t2d") is None
    assert all(gguf_name(hf_name(g)) == g for g in GGUF_TO_HF)


@pytest.mark.parametrize("kind", ["f32", "bf16"])
def test_opened_as_a_checkpoint_under_hf_names(made, kind):
    tensors, cfg, _ = _hf()
    ck = open_checkpoint(made[kind])
    assert ck.format == "gguf" and ck.d2t_convention == "absolute" and ck.d2t_readers == ("llama.cpp",)
    c = ck.config
    assert (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]) == (64, 2, 1, 32)
    assert (c["vocab_size"], c["draft_vocab_size"], c["intermediate_size"]) == (4096, 800, 256)
    assert c["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5] and c["rms_norm_eps"] == 1e-6
    assert c["architectures"] == ["LlamaForCausalLMEagle3"] and c["num_hidden_layers"] == 1
    assert sorted(ck.tensors.keys()) == sorted(k for k in tensors if k != "t2d")
    for k in ck.tensors.keys():
        want = tensors[k] + torch.arange(800) if k == "d2t" else tensors[k]
        got = ck.tensors.get(k)
        assert tuple(got.shape) == ck.tensors.shape(k) == tuple(want.shape), k
        assert torch.equal(got.to(want.dtype), want), k  # bf16 -> f32 -> bf16 is exact
    assert load_mapping(ck).verdict().encoding == "absolute"


def test_a_folder_holding_the_draft_gguf(made, tmp_path):
    import shutil

    shutil.copy(made["f32"], tmp_path / "draft.gguf")
    shutil.copy(made["target"], tmp_path / "target.gguf")  # the target beside it is passed over
    ck = open_checkpoint(tmp_path)
    assert ck.format == "gguf" and ck.path.name == "draft.gguf"


def test_the_draft_built_from_the_gguf_is_the_hf_one(made):
    from helpers.model.draft import load_draft

    hf = load_draft(DRAFT, device="cpu", dtype=torch.float32)
    gg = load_draft(made["f32"], device="cpu", dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    aux = torch.randn(2, 9, 3 * 64, generator=g)
    ids = torch.randint(0, 4096, (2, 9), generator=g)
    a = hf.draft_steps(aux, ids, steps=3, reading="offset")
    b = gg.draft_steps(aux, ids, steps=3, reading="absolute")  # the GGUF stores absolute ids
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert torch.equal(hf.mapping.targets("offset"), gg.mapping.targets("absolute"))
    wrong = gg.draft_steps(aux, ids, steps=3, reading="offset")  # offsets read from a GGUF: another draft
    assert not torch.equal(wrong[-1], b[-1])


@pytest.mark.parametrize("kind,words", [("cut_data", "truncated"), ("cut_header", "truncated"),
                                        ("text", "not a GGUF file"), ("target", "not an EAGLE-3 draft")])
def test_bad_gguf_is_one_line_naming_the_file(made, kind, words, cli_subprocess):
    with pytest.raises(BadInputError) as e:
        open_checkpoint(made[kind])
    assert str(made[kind]) in str(e.value) and words in str(e.value)
    r = cli_subprocess("inspect", made[kind])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and str(made[kind]) in r.stderr and words in r.stderr


def test_copy_with_nothing_replaced_is_byte_identical(made, tmp_path):
    copy_gguf(made["bf16"], tmp_path / "c.gguf", {})
    assert (tmp_path / "c.gguf").read_bytes() == made["bf16"].read_bytes()
