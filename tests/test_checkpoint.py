"""Reading d2t/t2d from every place producers keep it, and only those tensors."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from helpers.io.checkpoint import find_checkpoints, key_layout, load_mapping, open_checkpoint
from helpers.core.errors import BadInputError

N, V, H = 6, 20, 8
KEPT = torch.tensor([0, 1, 4, 5, 11, 19])
D2T = KEPT - torch.arange(N)
T2D = torch.zeros(V, dtype=torch.bool)
T2D[KEPT] = True


def weights(layout="midlayer"):
    w = {
        "fc.weight": torch.randn(H, 3 * H),
        f"{layout}.self_attn.q_proj.weight": torch.randn(H, 2 * H),
        "norm.weight": torch.ones(H),
        "lm_head.weight": torch.randn(N, H),
    }
    return w


def config(tmp, **extra):
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "vocab_size": V, "draft_vocab_size": N, "hidden_size": H}
    cfg.update(extra)
    (tmp / "config.json").write_text(json.dumps(cfg))


def check(m, *, t2d=True):
    assert torch.equal(m.d2t, D2T)
    assert m.draft_vocab_size == N
    assert m.target_vocab_size == V
    if t2d:
        assert torch.equal(m.t2d, T2D)
    assert m.verdict().encoding == "offset"


def test_folder_with_model_safetensors(tmp_path):
    config(tmp_path)
    save_file({**weights(), "d2t": D2T, "t2d": T2D}, tmp_path / "model.safetensors")
    ck = open_checkpoint(tmp_path)
    assert ck.key_layout == "midlayer"
    m = load_mapping(ck)
    check(m)
    assert m.sources == [str(tmp_path / "model.safetensors")] * 1


def test_sharded_index(tmp_path):
    config(tmp_path)
    save_file(weights(), tmp_path / "model-00001-of-00002.safetensors")
    save_file({"d2t": D2T, "t2d": T2D}, tmp_path / "model-00002-of-00002.safetensors")
    wm = {k: "model-00001-of-00002.safetensors" for k in weights()}
    wm.update(d2t="model-00002-of-00002.safetensors", t2d="model-00002-of-00002.safetensors")
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    check(load_mapping(tmp_path))
    check(load_mapping(tmp_path / "model.safetensors.index.json"))


def test_pytorch_model_bin(tmp_path):
    config(tmp_path)
    torch.save({**weights("layers.0"), "d2t": D2T, "t2d": T2D}, tmp_path / "pytorch_model.bin")
    ck = open_checkpoint(tmp_path)
    assert ck.key_layout == "layers.0"
    check(load_mapping(ck))


def test_single_pt_dict_without_config(tmp_path):
    torch.save({"d2t": D2T, "t2d": T2D}, tmp_path / "cache.pt")
    check(load_mapping(tmp_path / "cache.pt"))
    check(load_mapping(tmp_path))


def test_separate_pt_files(tmp_path):
    torch.save(D2T, tmp_path / "d2t.pt")
    torch.save(T2D, tmp_path / "t2d.pt")
    check(load_mapping(tmp_path))
    check(load_mapping(tmp_path / "d2t.pt"))


@pytest.mark.parametrize("names", [("d2t.npy", "t2d.npy"), ("d2t-6.npy", "t2d-6.npy")])
def test_npy_files_with_speculators_nested_config(tmp_path, names):
    cfg = {
        "architectures": ["Eagle3Speculator"], "draft_vocab_size": N, "target_hidden_size": H,
        "transformer_layer_config": {"vocab_size": V, "hidden_size": H},
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    save_file(weights("layers.0"), tmp_path / "model.safetensors")
    np.save(tmp_path / names[0], D2T.numpy())
    np.save(tmp_path / names[1], T2D.numpy())
    check(load_mapping(tmp_path))


def test_no_t2d_gives_sizes_from_config(tmp_path):
    config(tmp_path)
    save_file({**weights(), "d2t": D2T}, tmp_path / "model.safetensors")
    m = load_mapping(tmp_path)
    check(m, t2d=False)
    assert m.t2d is None


def test_only_the_mapping_tensors_are_read(tmp_path, monkeypatch):
    """get() is called for d2t and t2d only, never for a weight."""
    from helpers.io import checkpoint

    config(tmp_path)
    save_file({**weights(), "d2t": D2T, "t2d": T2D}, tmp_path / "model.safetensors")
    asked = []
    real_get = checkpoint.TensorStore.get
    monkeypatch.setattr(checkpoint.TensorStore, "get", lambda self, k, *a, **kw: asked.append(k) or real_get(self, k, *a, **kw))
    load_mapping(tmp_path)
    assert sorted(asked) == ["d2t", "t2d"]


def test_config_disagrees_with_d2t(tmp_path):
    config(tmp_path, draft_vocab_size=7)
    save_file({**weights(), "d2t": D2T, "t2d": T2D}, tmp_path / "model.safetensors")
    with pytest.raises(BadInputError, match="draft_vocab_size=7"):
        load_mapping(tmp_path)


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda p: p / "missing", "no such file"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "empty folder"),
        (lambda p: ((p / "x.txt").write_text("hi"), p)[1], "holds no checkpoint"),
        (lambda p: ((p / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json"), p / "model.safetensors")[1], "not a readable safetensors"),
    ],
)
def test_unreadable_input(tmp_path, make, fragment):
    path = make(tmp_path)
    with pytest.raises(BadInputError) as e:
        load_mapping(path)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_truncated_safetensors(tmp_path):
    save_file({**weights(), "d2t": D2T, "t2d": T2D}, tmp_path / "model.safetensors")
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(BadInputError, match="model.safetensors"):
        load_mapping(tmp_path)


def test_pickle_that_runs_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    torch.save({"d2t": D2T, "evil": Evil()}, tmp_path / "cache.pt")
    with pytest.raises(BadInputError, match="refused"):
        load_mapping(tmp_path / "cache.pt")
    assert not marker.exists()


def test_key_layout_and_find_checkpoints(samples_dir):
    assert key_layout(["midlayer.mlp.up_proj.weight", "fc.weight"]) == "midlayer"
    assert key_layout(["layers.0.mlp.up_proj.weight"]) == "layers.0"
    assert key_layout(["midlayer.a", "layers.0.b"]) == "mixed"
    found = {p.name for p in find_checkpoints(samples_dir)}
    assert {"kimi_k25_mapping", "kimi_k25_mapping_absolute"} <= found


@pytest.mark.parametrize("give", ["folder", "file"])
def test_config_is_read_before_the_weights_for_a_folder_and_a_file(tmp_path, give):
    """One order however the checkpoint is named: its config.json first, then its weights, so a
    broken config beside broken weights is the one error either way."""
    (tmp_path / "config.json").write_text("{not json")
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 7)
    with pytest.raises(BadInputError) as e:
        open_checkpoint(tmp_path if give == "folder" else tmp_path / "model.safetensors")
    assert str(e.value.path).endswith("config.json") and "not valid JSON" in e.value.problem
