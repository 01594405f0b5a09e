"""The doctor on failure modes of the draft checkpoint itself (public cases of 2026), each with its
predicted outcome per engine.

- a draft with no lm_head that declares draft_vocab_size (SGLang #27829, nvidia/Kimi-K2.6-Eagle3):
  SGLang keeps a random head (about 1), vLLM shares the target's head;
- EAGLE-3.1 flags and weights disagreeing: fc_norm weights without the switch (trained, or still at
  their init 1.0), fc_norm with norm_before_fc (normalised twice; speculators 0.9.0 refuses it), and
  SpecForge 0.2.0's own config without norm_output (the same forward as the engines': no finding);
- an untrained embed_tokens shipped in the draft (TorchSpec #38), with and without the target;
- a stale mapping (SpecForge #534), made with SpecForge's own mapping code.

Fixtures: tests/fixtures/checkpoint_defects/ (SOURCE.md); weights are copies of the bundled engine pairs' drafts
changed at test time.
"""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers.doctor.diagnose import diagnose
from helpers.doctor.registry import NO_EFFECT
from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "checkpoint_defects"
LLAMA, KIMI = SAMPLES / "engine_llama", SAMPLES / "engine_kimi"


def _copy(src: Path, dst: Path, tensors=None, config=None) -> Path:
    """A copy of a draft folder with its tensors and/or config changed in place by the given functions."""
    dst.mkdir(parents=True)
    t = load_file(str(src / "model.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    if tensors:
        tensors(t)
    if config:
        config(cfg)
    save_file({k: v.contiguous() for k, v in t.items()}, str(dst / "model.safetensors"))
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst


def _of(fs, code, engine=None):
    return [f for f in fs if f.code == code and (engine is None or f.engine == engine)]


def _accept(f, engine):
    o = f.outcome[engine]
    return o["result"] if o["result"] != "serves" else o["accept"]


# -- 1. no lm_head, draft_vocab_size declared -------------------------------------------------------
_KIMI_K2_SHAPES = {  # Model-Optimizer's KIMIK2_EAGLE_SINGLE_LAYER names at Kimi-K2 sizes (EAGLE-3: layer input 2 x hidden)
    "midlayer.self_attn.q_a_proj.weight": [1536, 14336], "midlayer.self_attn.q_a_layernorm.weight": [1536],
    "midlayer.self_attn.q_b_proj.weight": [64 * 192, 1536],
    "midlayer.self_attn.kv_a_proj_with_mqa.weight": [576, 14336], "midlayer.self_attn.kv_a_layernorm.weight": [512],
    "midlayer.self_attn.kv_b_proj.weight": [64 * 256, 512], "midlayer.self_attn.o_proj.weight": [7168, 64 * 128],
    "midlayer.mlp.gate_proj.weight": [18432, 7168], "midlayer.mlp.up_proj.weight": [18432, 7168],
    "midlayer.mlp.down_proj.weight": [7168, 18432], "midlayer.hidden_norm.weight": [7168],
    "midlayer.input_layernorm.weight": [7168], "midlayer.post_attention_layernorm.weight": [7168],
    "norm.weight": [7168], "fc.weight": [7168, 3 * 7168],
}


def _sparse_safetensors(path: Path, shapes: dict) -> None:
    """A valid safetensors file (bf16) whose data region is a hole: only the header is written."""
    header, pos = {}, 0
    for name, shape in shapes.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [pos, pos + n]}
        pos += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + pos)


@pytest.fixture(scope="module")
def kimi_k26(tmp_path_factory):
    """nvidia/Kimi-K2.6-Eagle3 as SGLang #27829 describes it (config: tests/fixtures/checkpoint_defects), and its sibling
    with lm_head (Kimi-K2.5-Thinking-Eagle3: the same config, a head shipped)."""
    out = tmp_path_factory.mktemp("kimi_k26")
    no_head, head = out / "no_head", out / "with_head"
    for d, extra in ((no_head, {}), (head, {"lm_head.weight": [163840, 7168]})):
        d.mkdir()
        shutil.copy(FIXTURES / "kimi_k26_eagle3" / "config.json", d / "config.json")
        _sparse_safetensors(d / "model.safetensors", _KIMI_K2_SHAPES | extra)
    return no_head, head


def test_kimi_k26_eagle3_without_head_is_random_in_sglang_and_shared_in_vllm(kimi_k26):
    no_head, head = kimi_k26
    fs = diagnose(no_head, "all", check_weights=False)
    sg = _of(fs, "lm-head-borrowed", "sglang")
    assert [f.severity for f in sg] == ["error"], [(f.code, f.message) for f in fs if "head" in f.code]
    assert "random init" in sg[0].message and "163,840" in sg[0].message and "#27829" in sg[0].message
    assert sg[0].effect == "lm-head-missing.random" and _accept(sg[0], "sglang") == "about-1"
    assert "read in sglang 0.5.23" in sg[0].outcome["sglang"]["source"]
    assert "delete draft_vocab_size" in sg[0].fix
    # vLLM shares the target's lm_head when the checkpoint has none (has_own_lm_head): full vocab, no d2t
    vl = _of(fs, "lm-head-missing", "vllm")
    assert [f.severity for f in vl] == ["warning"] and vl[0].effect == "lm-head-missing.borrowed"
    assert "shares the target model's lm_head" in vl[0].message and "random" not in vl[0].message
    assert not _of(fs, "lm-head-missing", "sglang")  # SGLang's fate is said once, under lm-head-borrowed
    # the sibling with a head and the same config: no head finding at all
    ok = diagnose(head, "all", check_weights=False)
    assert not [f for f in ok if f.code in ("lm-head-borrowed", "lm-head-missing")]


def test_kimi_k26_eagle3_in_older_releases(kimi_k26):
    no_head, _ = kimi_k26
    old = _of(diagnose(no_head, "sglang==0.5.1", check_weights=False), "lm-head-borrowed")
    assert [f.severity for f in old] == ["error"] and "never borrows it in this release" in old[0].message
    v110 = _of(diagnose(no_head, "vllm==0.11.0", check_weights=False), "lm-head-missing")
    assert [f.severity for f in v110] == ["warning"]  # same shape as the target's head: shared
    v102 = _of(diagnose(no_head, "vllm==0.10.1", check_weights=False), "lm-head-missing")
    assert [f.severity for f in v102] == ["error"] and "has not read" in v102[0].message


def test_small_kimi_draft_without_head_follows_draft_vocab_size(tmp_path):
    """The same situation on the Kimi-shaped engine pair's MLA draft, made full-vocab (no d2t/t2d)."""
    def drop(t):
        for k in ("lm_head.weight", "d2t", "t2d"):
            del t[k]

    def full(cfg):
        cfg.update(draft_vocab_size=cfg["vocab_size"], model_type="kimi_k2")

    declared = _copy(KIMI / "draft", tmp_path / "declared", drop, full)
    fs = diagnose(declared, "sglang", KIMI / "target" / "config.json", check_weights=False)
    assert [f.severity for f in _of(fs, "lm-head-borrowed")] == ["error"]

    def absent(cfg):
        full(cfg)
        del cfg["draft_vocab_size"]

    fs = diagnose(_copy(KIMI / "draft", tmp_path / "absent", drop, absent), "sglang", KIMI / "target" / "config.json",
                  check_weights=False)
    assert not [f for f in fs if f.severity == "error" and "head" in f.code], [f.message for f in fs]
    borrowed = _of(fs, "lm-head-missing", "sglang")
    assert [f.severity for f in borrowed] == ["warning"] and "load_lm_head_from_target" in borrowed[0].message


def test_reduced_vocab_without_head_in_vllm_is_the_measured_row(tmp_path):
    """The engine-truth row lm-head-missing (vLLM 0.32.0 served it at 1.002): the target's head shared, its
    first 800 scores scattered through d2t."""
    d = _copy(LLAMA / "draft", tmp_path / "d", lambda t: t.pop("lm_head.weight"))
    fs = diagnose(d, "vllm==0.32.0", LLAMA / "target" / "config.json", check_weights=False)
    f = _of(fs, "lm-head-missing", "vllm")
    assert [x.severity for x in f] == ["error"] and "first 800" in f[0].message
    assert _accept(f[0], "vllm") == "about-1" and f[0].outcome["vllm"]["checked"]
    assert fs.predicted_outcome()["vllm"]["accept"] == "about-1"
    sg = _of(diagnose(d, "sglang", check_weights=False), "lm-head-missing", "sglang")
    assert sg and sg[0].effect == "lm-head-missing.random" and _accept(sg[0], "sglang") == "about-1"


# -- 2. EAGLE-3.1 flags and weights -----------------------------------------------------------------
def _fc_norm(values):
    def f(t):
        for i in range(3):
            t[f"fc_norm.{i}.weight"] = values(i)
    return f


def _trained(i):
    return (1 + 0.1 * torch.randn(64, generator=torch.Generator().manual_seed(i))).to(torch.bfloat16)


def test_fc_norm_weights_without_the_switch_per_engine(tmp_path):
    trained = _copy(LLAMA / "draft", tmp_path / "trained", _fc_norm(_trained))
    fs = diagnose(trained, "all", check_weights=False)
    sg, vl = _of(fs, "variant-fc-norm", "sglang"), _of(fs, "variant-fc-norm", "vllm")
    assert [f.severity for f in sg] == ["error"] and sg[0].effect == "variant-fc-norm.dropped"
    assert _accept(sg[0], "sglang") == "at-most" and "1.0" not in sg[0].message
    assert [f.severity for f in vl] == ["error"] and _accept(vl[0], "vllm") == "refuses"
    # never trained: every weight exactly 1.0 (the run applied no fc_norm): said, with the fix to drop them
    idle = _copy(LLAMA / "draft", tmp_path / "idle", _fc_norm(lambda i: torch.ones(64, dtype=torch.bfloat16)))
    fs = diagnose(idle, "all", check_weights=False)
    sg = _of(fs, "variant-fc-norm", "sglang")
    assert "exactly 1.0" in sg[0].message and sg[0].effect == "variant-fc-norm.dropped-init"
    assert sg[0].fix.startswith("drop the fc_norm.* tensors")
    assert _of(fs, "variant-fc-norm", "vllm")[0].outcome["vllm"]["result"] == "refuses"


def test_fc_norm_with_norm_before_fc_normalises_twice(tmp_path):
    def weights(t):
        _fc_norm(_trained)(t)
        t["input_norm.weight"] = (1 + 0.1 * torch.randn(192, generator=torch.Generator().manual_seed(9))).to(torch.bfloat16)

    both = _copy(LLAMA / "draft", tmp_path / "both", weights,
                 lambda cfg: cfg.update(fc_norm=True, norm_before_fc=True))
    fs = diagnose(both, "all", check_weights=False)
    twice = _of(fs, "variant-norm-twice")
    assert sorted(f.engine for f in twice) == ["sglang", "vllm"] and {f.severity for f in twice} == {"warning"}
    assert all(f.effect == NO_EFFECT for f in twice)
    assert "mutually exclusive" in twice[0].message and "speculators 0.9.0" in twice[0].message
    assert "never trained" not in twice[0].message
    # one switch only: nothing to say
    one = _copy(LLAMA / "draft", tmp_path / "one", _fc_norm(_trained), lambda cfg: cfg.update(fc_norm=True))
    assert not _of(diagnose(one, "all", check_weights=False), "variant-norm-twice")
    # an engine release without fc_norm has no second norm to apply: the per-option findings speak
    assert not _of(diagnose(both, "sglang==0.5.10", check_weights=False), "variant-norm-twice")


def test_specforge_config_without_norm_output_is_served_as_trained(tmp_path):
    """SpecForge 0.2.0 writes no norm_output and reads it as True (final norm before lm_head, pre-norm state
    fed back); SGLang and vLLM read it as False (pre-norm state fed back, final norm before lm_head): one forward."""
    cfg = json.loads((FIXTURES / "specforge" / "config.json").read_text())
    assert "norm_output" not in cfg and cfg["architectures"] == ["LlamaForCausalLMEagle3"]

    def use(extra):
        return lambda c: (c.clear(), c.update(cfg | extra))

    plain = _copy(LLAMA / "draft", tmp_path / "plain", config=use({}))
    fs = diagnose(plain, "all", LLAMA / "target" / "config.json", check_weights=False)
    assert not _of(fs, "variant-norm-output"), [f.message for f in _of(fs, "variant-norm-output")]
    assert fs.predicted_outcome()["vllm"]["accept"] != "at-most"
    # SpecForge 0.2.0's norm_output: true is its EAGLE-3 forward; the engines read EAGLE-3.1 (#879)
    on = diagnose(_copy(LLAMA / "draft", tmp_path / "on", config=use({"norm_output": True})), "all", check_weights=False)
    assert {f.severity for f in _of(on, "variant-norm-output")} == {"warning"}
    off = diagnose(_copy(LLAMA / "draft", tmp_path / "off", config=use({"norm_output": False})), "all", check_weights=False)
    assert {f.severity for f in _of(off, "variant-norm-output")} == {"error"}


# -- 3. an untrained embed_tokens -----------------------------------------------------------------------
def _fresh(std=0.02, seed=0):
    def f(t):
        e = t["embed_tokens.weight"]
        t["embed_tokens.weight"] = (torch.randn(e.shape, generator=torch.Generator().manual_seed(seed)) * std).to(e.dtype)
    return f


def test_init_signature_tells_fresh_inits_from_trained_tables():
    from helpers.model.fit import init_signature

    trained = load_file(str(LLAMA / "draft" / "model.safetensors"))["embed_tokens.weight"]
    assert not init_signature(trained).untrained  # the engine pair's draft copy (= its target's), 800 steps
    for name in ("tiny_target", "kimi_target", "engine_kimi/target"):
        t = load_file(str(SAMPLES / name / "model.safetensors"))["model.embed_tokens.weight"]
        assert not init_signature(t).untrained, name
    g = torch.Generator().manual_seed(3)
    for fresh in (torch.randn(4096, 64, generator=g) * 0.02, torch.randn(4096, 64, generator=g),
                  torch.rand(4096, 64, generator=g) - 0.5, torch.randn(512, 1024, generator=g) * 0.02):
        sig = init_signature(fresh)
        assert sig.untrained and abs(sig.isotropy - 1) < 0.15, sig
    assert init_signature(torch.ones(8, 4)) is None


def test_untrained_embedding_without_target(tmp_path):
    d = _copy(LLAMA / "draft", tmp_path / "d", _fresh())
    fs = diagnose(d, "all", LLAMA / "target" / "config.json", check_weights=False)
    vl, sg = _of(fs, "embed-untrained", "vllm"), _of(fs, "embed-untrained", "sglang")
    assert [f.severity for f in vl] == ["warning"] and _accept(vl[0], "vllm") == "about-1"
    assert "initializer_range 0.02" not in vl[0].message  # the engine pair's config states none
    assert [f.severity for f in sg] == ["info"] and _accept(sg[0], "sglang") == "as-trained"
    assert fs.predicted_outcome()["vllm"]["accept"] == "about-1"
    # torch's nn.Embedding default N(0, 1) is named as such
    big = _of(diagnose(_copy(LLAMA / "draft", tmp_path / "n01", _fresh(1.0)), "vllm", check_weights=False),
              "embed-untrained")
    assert big and "N(0, 1)" in big[0].message
    # the trained copy (the engine pair's draft: its target's own table) does not trigger it
    assert not _of(diagnose(LLAMA / "draft", "all", LLAMA / "target" / "config.json", check_weights=False),
                   "embed-untrained")


def test_untrained_embedding_against_the_target(tmp_path):
    d = _copy(LLAMA / "draft", tmp_path / "d", _fresh())
    fs = diagnose(d, "all", check_weights=False, target=LLAMA / "target")
    assert not _of(fs, "embed-untrained")  # superseded by the comparison
    vl, sg = _of(fs, "embed-mismatch", "vllm"), _of(fs, "embed-mismatch", "sglang")
    assert [f.severity for f in vl] == ["error"] and "untrained" in vl[0].message and "mean cosine" in vl[0].message
    assert vl[0].effect == "embed.untrained-kept" and _accept(vl[0], "vllm") == "about-1"
    assert [f.severity for f in sg] == ["info"] and _accept(sg[0], "sglang") == "as-trained"
    # another trained revision is still the plain mismatch (SGLang: replaced by the target's, an error)
    def revised(t):
        e = t["embed_tokens.weight"].float()
        t["embed_tokens.weight"] = (e + 0.05 * torch.randn(e.shape, generator=torch.Generator().manual_seed(1))).to(torch.bfloat16)

    other = diagnose(_copy(LLAMA / "draft", tmp_path / "rev", revised), "all", check_weights=False, target=LLAMA / "target")
    assert [f.severity for f in _of(other, "embed-mismatch", "sglang")] == ["error"]
    assert "untrained" not in _of(other, "embed-mismatch", "vllm")[0].message


def test_untrained_table_that_is_the_targets_own(tmp_path):
    """A toy target whose embedding is itself a fresh init, copied into the draft: vLLM shares it (equal)."""
    tgt = tmp_path / "target"
    shutil.copytree(LLAMA / "target", tgt)
    t = load_file(str(tgt / "model.safetensors"))
    fresh = (torch.randn(t["model.embed_tokens.weight"].shape, generator=torch.Generator().manual_seed(5)) * 0.02)
    t["model.embed_tokens.weight"] = fresh.to(torch.bfloat16)
    save_file(t, str(tgt / "model.safetensors"))
    d = _copy(LLAMA / "draft", tmp_path / "d", lambda x: x.update({"embed_tokens.weight": fresh.to(torch.bfloat16)}))
    fs = diagnose(d, "all", check_weights=False, target=tgt)
    left = _of(fs, "embed-untrained")
    assert [f.severity for f in left] == ["info"] and left[0].effect == NO_EFFECT and "target's own table" in left[0].message
    assert not _of(fs, "embed-mismatch") and fs.predicted_outcome()["vllm"]["accept"] != "about-1"


# -- 4. a stale mapping (SpecForge's own mapping code on two token-frequency sets) -------------------
@pytest.fixture(scope="module")
def stale(tmp_path_factory):
    out = tmp_path_factory.mktemp("stale")
    m = load_file(str(FIXTURES / "specforge" / "mappings.safetensors"))

    def mapping(tag, head_follows=None):
        def f(t):
            if head_follows is not None:  # lm_head rows moved to follow this mapping (a healthy re-export)
                old = (m["d2t_a"] + torch.arange(800)).tolist()
                new = (m[f"d2t_{tag}"] + torch.arange(800)).tolist()
                slot = {tid: i for i, tid in enumerate(old)}
                head = t["lm_head.weight"]
                g = torch.Generator().manual_seed(2)
                t["lm_head.weight"] = torch.stack([head[slot[x]] if x in slot else
                                                   torch.randn(64, generator=g).to(head.dtype) for x in new])
            t["d2t"], t["t2d"] = m[f"d2t_{tag}"], m[f"t2d_{tag}"]
        return f

    a = _copy(LLAMA / "draft", out / "a", mapping("a"))
    b = _copy(LLAMA / "draft", out / "b", mapping("b"))  # fine-tuned from a, mapping regenerated, head carried over
    twin = _copy(LLAMA / "draft", out / "twin", mapping("b", head_follows=True))
    return a, b, twin


def test_stale_mapping_from_specforge_fires_with_its_outcome(stale):
    a, b, twin = stale
    fs = diagnose(b, "all", check_weights=False, previous=a)
    drift = _of(fs, "mapping-drift")
    assert [f.severity for f in drift] == ["error"], [f.message for f in drift]
    assert "160 of 800 draft slots (20%)" in drift[0].message and "SpecForge #534" in drift[0].message
    assert drift[0].effect == "mapping-drift.partial" and _accept(drift[0], "sglang") == "at-most"
    assert drift[0].outcome["vllm"]["result"] == "unknown"  # no vLLM run of a partial drift yet
    assert "mapping-drift" in fs.predicted_outcome()["vllm"]["unknown_for"]
    # without --previous the checkpoint alone looks healthy: the stale mapping is invisible
    assert not [f for f in diagnose(b, "all", check_weights=False) if f.severity == "error"]
    # the head re-exported to follow the new mapping: no drift error
    ok = _of(diagnose(twin, "all", check_weights=False, previous=a), "mapping-drift")
    assert [f.severity for f in ok] == ["info"]


def test_stale_mapping_moving_most_slots_serves_about_one(tmp_path, stale):
    a, _, _ = stale
    m = load_file(str(FIXTURES / "specforge" / "mappings.safetensors"))

    def shifted(t):  # the first kept id dropped, one above the last added: every slot shifts by one
        ids = (m["d2t_a"] + torch.arange(800)).tolist()
        new = ids[1:] + [max(ids) + 1]
        t["d2t"] = torch.tensor(new) - torch.arange(800)
        t2d = torch.zeros(4096, dtype=torch.bool)
        t2d[new] = True
        t["t2d"] = t2d

    fs = diagnose(_copy(a, tmp_path / "shift", shifted), "all", check_weights=False, previous=a)
    drift = _of(fs, "mapping-drift")
    assert [f.severity for f in drift] == ["error"] and "about 1" in drift[0].message
    assert _accept(drift[0], "vllm") == "about-1" and _accept(drift[0], "sglang") == "about-1"


def test_the_top_singular_value_from_the_gram_matrix_is_the_svds():
    """The init signature's top singular value (LOBPCG on the Gram matrix: an SVD of a Kimi-wide sample
    takes seconds) equals the SVD's, for a fresh and an anisotropic table, and draws no random state."""
    from helpers.model.fit import _top_eigenvalue

    g = torch.Generator().manual_seed(3)
    for scale in (torch.ones(1200), torch.linspace(0.1, 4.0, 1200)):
        x = torch.randn(700, 1200, generator=g) * 0.02 * scale
        c = x - x.mean(dim=0, keepdim=True)
        before = torch.random.get_rng_state()
        got = _top_eigenvalue(c)
        assert torch.equal(before, torch.random.get_rng_state())
        assert got == pytest.approx(float(torch.linalg.matrix_norm(c, ord=2)) ** 2, rel=1e-3)
