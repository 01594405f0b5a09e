"""The checkpoint doctor and fixer on a corpus of broken checkpoints made from the good sample.

Each broken checkpoint is the bundled SGLang-style sample (`data_samples/tiny_draft_sglang`)
with one known deployment bug put in (real safetensors / torch files on disk), and must yield
its code; the good one must yield no error. When the bundled sample is not there yet, a small
checkpoint with the same key names is written instead.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers.__main__ import main
from helpers.engines.table import ENGINE_TABLE
from helpers.io.checkpoint import open_checkpoint
from helpers.doctor.checks_weights import row_chunks as _row_chunks
from helpers.doctor.diagnose import diagnose
from helpers.doctor.findings import has_error
from helpers.doctor.fix import fix_checkpoint
from conftest import SAMPLES, side_file_draft


GOOD_SAMPLE = SAMPLES / "tiny_draft_sglang"
TARGET_SAMPLE = SAMPLES / "tiny_target"


# -- building the corpus ------------------------------------------------------------------------
def _synth_good(folder: Path, V: int = 96, N: int = 24, H: int = 8) -> None:
    g = torch.Generator().manual_seed(0)
    kept = torch.unique(torch.cat([torch.arange(5), torch.randperm(V, generator=g)[: N * 2]]))[:N]
    kept = torch.sort(kept).values
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[kept] = True

    def r(*s):
        return torch.randn(*s, generator=g) * 0.1

    L = "midlayer"
    t = {
        "embed_tokens.weight": r(V, H), "fc.weight": r(H, 3 * H), "norm.weight": 1 + r(H), "lm_head.weight": r(N, H),
        f"{L}.input_layernorm.weight": 1 + r(H), f"{L}.hidden_norm.weight": 1 + r(H),
        f"{L}.post_attention_layernorm.weight": 1 + r(H),
        f"{L}.self_attn.q_proj.weight": r(8, 2 * H), f"{L}.self_attn.k_proj.weight": r(4, 2 * H),
        f"{L}.self_attn.v_proj.weight": r(4, 2 * H), f"{L}.self_attn.o_proj.weight": r(H, 8),
        f"{L}.mlp.gate_proj.weight": r(16, H), f"{L}.mlp.up_proj.weight": r(16, H), f"{L}.mlp.down_proj.weight": r(H, 16),
        "d2t": kept - torch.arange(N), "t2d": t2d,
    }
    folder.mkdir(parents=True)
    save_file(t, str(folder / "model.safetensors"))
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H, "target_hidden_size": H,
        "vocab_size": V, "draft_vocab_size": N, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
        "intermediate_size": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "num_hidden_layers": 1,
        "tie_word_embeddings": False,
    }
    (folder / "config.json").write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("corpus") / "good"
    if GOOD_SAMPLE.is_dir():
        shutil.copytree(GOOD_SAMPLE, dst)
    else:
        _synth_good(dst)
    return dst


@pytest.fixture(scope="module")
def target_config(good, tmp_path_factory) -> Path:
    if (TARGET_SAMPLE / "config.json").exists():
        return TARGET_SAMPLE / "config.json"
    cfg = json.loads((good / "config.json").read_text())
    p = tmp_path_factory.mktemp("target") / "config.json"
    p.write_text(json.dumps({"hidden_size": cfg.get("target_hidden_size", cfg["hidden_size"]),
                             "vocab_size": cfg["vocab_size"], "num_hidden_layers": 8}))
    return p


def _weights_file(folder: Path) -> Path:
    return folder / "model.safetensors"


def variant(good: Path, dst: Path, tensors=None, config=None) -> Path:
    """Copy `good` to `dst`, passing its tensors (dict) and config (dict) through the mutators."""
    shutil.copytree(good, dst)
    t = load_file(str(_weights_file(dst)))
    if tensors:
        t = tensors(t) or t
    save_file({k: v.contiguous() for k, v in t.items()}, str(_weights_file(dst)))
    if config:
        cfg = json.loads((dst / "config.json").read_text())
        cfg = config(cfg) or cfg
        (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def _key(t: dict, short: str) -> str:
    return next(k for k in t if k == short or k.endswith("." + short))


def _to_absolute(t):
    k = _key(t, "d2t")
    t[k] = t[k] + torch.arange(t[k].numel())


def _zero_d2t(t):
    k = _key(t, "d2t")
    t[k] = torch.zeros_like(t[k])


def _arange_d2t(t):
    k = _key(t, "d2t")
    t[k] = torch.arange(t[k].numel())


def _shift_t2d(t):
    k = _key(t, "t2d")
    t[k] = torch.roll(t[k], 1)


def _drop(*shorts):
    def f(t):
        for s in shorts:
            for k in [k for k in t if k == s or k.endswith("." + s)]:
                del t[k]
    return f


def _to_layers0(t):
    return {k.replace("midlayer.", "layers.0."): v for k, v in t.items()}


def _narrow_fc(t):
    k = _key(t, "fc.weight")
    t[k] = t[k][:, : t[k].shape[1] * 2 // 3].clone()


def _nan(t):
    k = _key(t, "fc.weight")
    t[k] = t[k].clone()
    t[k][-1, -1] = float("nan")


def _draft_vocab_plus_one(cfg):
    key = "draft_vocab_size"
    cfg[key] = cfg[key] + 1


def _aux_out_of_range(target_config):
    layers = json.loads(Path(target_config).read_text())
    layers = layers.get("text_config", layers)["num_hidden_layers"]

    def f(cfg):
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, layers // 2, layers - 1]}
    return f


CASES = {
    # code: (tensor mutator, config mutator, engine, severity)
    "d2t-missing": (_drop("d2t", "t2d"), None, "all", "error"),
    "d2t-absolute": (_to_absolute, None, "all", "error"),
    "d2t-identity-reduced-vocab": (_zero_d2t, None, "all", "error"),
    "d2t-arange": (_arange_d2t, None, "all", "error"),
    "t2d-mismatch": (_shift_t2d, None, "all", "error"),
    "vocab-size-mismatch": (None, _draft_vocab_plus_one, "all", "error"),
    "key-layout": (_to_layers0, None, "sglang==0.5.11", "error"),  # SGLang skips layers.0.* up to 0.5.11
    "lm-head-missing": (_drop("lm_head.weight"), None, "all", "error"),
    "fc-shape": (_narrow_fc, None, "all", "error"),
    "embed-missing": (_drop("embed_tokens.weight"), None, "all", "info"),
    "nonfinite-weights": (_nan, None, "all", "error"),
}


# -- the doctor ---------------------------------------------------------------------------------
def test_cli_good_checkpoint_has_no_error(good, target_config, cli):
    for engine in ("sglang", "vllm", "all"):
        findings = diagnose(good, engine, target_config)
        assert not has_error(findings), [f for f in findings if f.severity == "error"]
    r = cli("doctor", good, "--json", "--target-config", target_config)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["path"] == str(good) and data["engine"] == "all" and data["ok"] is True
    assert data["counts"] == {s: sum(d["severity"] == s for d in data["findings"]) for s in ("error", "warning", "info")}
    base = {"code", "severity", "message", "fix"}
    assert all(base <= set(d) <= base | {"outcome"} for d in data["findings"])  # outcome: where an engine's is known


@pytest.mark.parametrize("code", sorted(CASES))
def test_each_broken_checkpoint_yields_its_code(code, good, tmp_path, capsys):
    tensors, config, engine, severity = CASES[code]
    bad = variant(good, tmp_path / code, tensors, config)
    findings = diagnose(bad, engine)
    hits = [f for f in findings if f.code == code]
    assert hits, f"{code} not found in {[(f.code, f.severity) for f in findings]}"
    assert any(f.severity == severity for f in hits)
    for f in findings:
        assert f.message and "\n" not in f.message and f.fix and "\n" not in f.fix
    # the CLI agrees (in-process here; test_cli_* run it as a subprocess), exit 1 exactly on an error
    rc = main(["doctor", str(bad), "--engine", engine, "--json"])
    codes = {(d["code"], d["severity"]) for d in json.loads(capsys.readouterr().out)["findings"]}
    assert (code, severity) in codes
    assert rc == (1 if any(s == "error" for _, s in codes) else 0)


def test_aux_layers_out_of_range_and_engine_capture(good, target_config, tmp_path):
    bad = variant(good, tmp_path / "aux", None, _aux_out_of_range(target_config))
    n_layers = json.loads(Path(target_config).read_text())
    n_layers = n_layers.get("text_config", n_layers)["num_hidden_layers"]
    findings = diagnose(bad, "sglang", target_config)
    errs = [f for f in findings if f.code == "aux-layers" and f.severity == "error"]
    assert errs and str(n_layers) in errs[0].message  # SGLang adds 1: id L-1 -> layer L, outside 0..L-1
    # vLLM uses the same ids as given: input of layers up to L-1, all in range (from 0.34.0 only the top-level
    # list is read, so the ids are written there too)
    def both(cfg):
        _aux_out_of_range(target_config)(cfg)
        cfg["eagle_aux_hidden_state_layer_ids"] = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    vllm = diagnose(variant(good, tmp_path / "aux_both", None, both), "vllm", target_config)
    assert not any(f.code == "aux-layers" and f.severity == "error" for f in vllm)
    assert any(f"[1, {n_layers // 2}, {n_layers - 1}]" in f.message for f in vllm if f.code == "aux-layers")


def test_aux_layers_default_when_unset(good, target_config, tmp_path):
    def unset(cfg):
        cfg.pop("eagle_config", None)
        cfg.pop("eagle_aux_hidden_state_layer_ids", None)
    plain = variant(good, tmp_path / "plain", None, unset)
    n = json.loads(Path(target_config).read_text())
    n = n.get("text_config", n)["num_hidden_layers"]
    for eng in ("sglang", "vllm"):
        msgs = [f.message for f in diagnose(plain, eng, target_config) if f.code == "aux-layers"]
        assert any(f"captures the input of target layers [2, {n // 2}, {n - 3}]" in m for m in msgs), msgs


def test_aux_layers_same_ids_differ_between_engines(good, target_config, tmp_path):
    def both(cfg):  # in both places: SGLang reads eagle_config's list, vLLM (0.34.0 on) the top-level one
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}
        cfg["eagle_aux_hidden_state_layer_ids"] = [1, 2, 3]
    bad = variant(good, tmp_path / "aux2", None, both)
    findings = diagnose(bad, "all", target_config)
    msgs = " | ".join(f.message for f in findings if f.code == "aux-layers")
    sglang, vllm = ENGINE_TABLE["sglang"].newest, ENGINE_TABLE["vllm"].newest
    assert f"SGLang {sglang}: ids [1, 2, 3] -> captures the input of target layers [2, 3, 4]" in msgs
    assert f"vLLM {vllm}: ids [1, 2, 3] -> captures the input of target layers [1, 2, 3]" in msgs
    assert any(f.code == "aux-layers" and f.severity == "warning" for f in findings)


def test_layers0_is_fine_for_vllm_and_model_prefix_is_not(good, tmp_path):
    l0 = variant(good, tmp_path / "l0", _to_layers0)
    assert not has_error(diagnose(l0, "vllm"))
    # SGLang: start-up fails up to 0.4.8.post1, silently skipped 0.4.9..0.5.11, its own layout from 0.5.12
    sev = {v: [f for f in diagnose(l0, f"sglang=={v}") if f.code == "key-layout" and f.severity == "error"]
           for v in ("0.4.8", "0.5.11", "0.5.12")}
    assert "fails at start-up" in sev["0.4.8"][0].message and "skips them without a word" in sev["0.5.11"][0].message
    assert "from 0.5.12" in sev["0.5.11"][0].message and not sev["0.5.12"]
    pre = variant(good, tmp_path / "pre", lambda t: {("model." + k if not k.startswith("lm_head") and k not in ("d2t", "t2d")
                                                        else k): v for k, v in t.items()})
    assert not has_error(diagnose(pre, "sglang"))  # SGLang looks names up as NAME or model.NAME
    head = variant(good, tmp_path / "head", lambda t: {("model." + k if k == "lm_head.weight" else k): v for k, v in t.items()})
    assert any(f.code == "key-layout" and f.severity == "error" and "lm_head" in f.message for f in diagnose(head, "sglang"))
    fixed = fix_checkpoint(head, tmp_path / "head_fixed")
    assert fixed.ok and "lm_head.weight" in open_checkpoint(fixed.dst).tensors.keys()
    f = [f for f in diagnose(pre, "vllm") if f.code == "key-layout" and f.severity == "error"]
    assert f and "model." in f[0].message


def test_negative_d2t_is_a_finding_not_a_crash(good, tmp_path):
    def neg(t):
        k = _key(t, "d2t")
        t[k] = t[k].clone()
        t[k][3] = -5
    bad = variant(good, tmp_path / "neg", neg)
    findings = diagnose(bad)
    assert any(f.code == "d2t-invalid" and "negative" in f.message for f in findings)


def test_cli_unreadable_input_exits_2_with_one_line(good, tmp_path, cli):
    bad = tmp_path / "corrupt"
    shutil.copytree(good, bad)
    _weights_file(bad).write_bytes(b"\x00garbage" * 10)
    r = cli("doctor", bad)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "model.safetensors" in r.stderr
    r = cli("doctor", tmp_path / "nope")
    assert r.returncode == 2 and "no such file" in r.stderr


def test_nan_found_in_the_last_chunk_for_safetensors_and_bin(good, tmp_path):
    bad = variant(good, tmp_path / "nan", _nan)
    ck = open_checkpoint(bad)
    k = next(k for k in ck.tensors.keys() if k.endswith("fc.weight"))
    chunks = list(_row_chunks(ck, k, max_bytes=ck.tensors.nbytes(k) // 5))
    assert len(chunks) >= 5 and sum(c.shape[0] for c in chunks) == ck.tensors.shape(k)[0]
    assert torch.isnan(chunks[-1]).any() and not any(torch.isnan(c).any() for c in chunks[:-1])
    # the same weights as pytorch_model.bin
    binf = tmp_path / "nan_bin"
    binf.mkdir()
    shutil.copy(bad / "config.json", binf / "config.json")
    torch.save(load_file(str(_weights_file(bad))), binf / "pytorch_model.bin")
    ck = open_checkpoint(binf)
    chunks = list(_row_chunks(ck, k, max_bytes=ck.tensors.nbytes(k) // 5))
    assert len(chunks) >= 5 and torch.isnan(chunks[-1]).any()
    assert any(f.code == "nonfinite-weights" for f in diagnose(binf))
    assert not any(f.code == "nonfinite-weights" for f in diagnose(binf, check_weights=False))


def test_inf_in_a_norm_and_clean_weights(good, tmp_path):
    def inf(t):
        k = _key(t, "norm.weight")
        t[k] = t[k].clone()
        t[k][0] = float("-inf")
    bad = variant(good, tmp_path / "inf", inf)
    hits = [f for f in diagnose(bad) if f.code == "nonfinite-weights"]
    assert hits and "norm.weight" in hits[0].message and "fc.weight" not in hits[0].message
    assert not any(f.code == "nonfinite-weights" for f in diagnose(good))


# -- the fixer ----------------------------------------------------------------------------------
def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _canonical_tensors(folder: Path) -> dict[str, torch.Tensor]:
    ck = open_checkpoint(folder)
    out = {k.removeprefix("model.").replace("layers.0.", "midlayer."): ck.tensors.get(k) for k in ck.tensors.keys()}
    return out


def _assert_same_weights(a: Path, b: Path):
    ta, tb = _canonical_tensors(a), _canonical_tensors(b)
    assert set(ta) == set(tb)
    for k in ta:
        assert ta[k].dtype == tb[k].dtype and torch.equal(ta[k], tb[k]), k


@pytest.mark.parametrize("case,engine", [("absolute", "all"), ("layers0", "sglang==0.5.11"), ("layers0", "sglang>=0.4.9")])
def test_fix_gives_the_good_checkpoint_back(case, engine, good, tmp_path, cli):
    src = variant(good, tmp_path / "src", _to_absolute if case == "absolute" else _to_layers0)
    before = _hashes(src)
    assert has_error(diagnose(src, engine))
    dst = tmp_path / "fixed"
    if case == "absolute":  # once through the real command line
        r = cli("fix", src, dst, "--engine", engine)
        assert r.returncode == 0, r.stdout + r.stderr
    else:
        assert fix_checkpoint(src, dst, engine).ok
    assert _hashes(src) == before  # SRC byte-for-byte unchanged
    assert not has_error(diagnose(dst, engine))
    _assert_same_weights(dst, good)
    assert open_checkpoint(dst).key_layout == "midlayer"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".fixed.tmp")]  # no temporary folder left


def test_fixed_checkpoints_give_the_good_logits(good, tmp_path):
    from helpers.model.draft import load_draft

    ref = load_draft(good, device="cpu", dtype=torch.float32)
    cfg = ref.config
    g = torch.Generator().manual_seed(1)
    aux = torch.randn(2, 7, 3 * cfg.target_hidden_size, generator=g)  # [B, T, 3Ht]
    ids = torch.randint(0, cfg.vocab_size, (2, 7), generator=g)  # [B, T] target ids of token t+1
    want = ref(aux, ids)  # [B, T, draft_vocab]
    for case, mut in (("absolute", _to_absolute), ("layers0", _to_layers0)):
        src = variant(good, tmp_path / case, mut)
        dst = fix_checkpoint(src, tmp_path / f"{case}_fixed", "sglang==0.5.11").dst
        got = load_draft(dst, device="cpu", dtype=torch.float32)
        assert torch.equal(got(aux, ids), want), case
        assert torch.equal(got.d2t, ref.d2t), case


def test_bundled_speculators_sample_is_speculators_0_9_shaped():
    """The bundled sample as speculators 0.9.0 writes a draft: speculators_config, d2t/t2d in the weights. SGLang
    0.5.11 skips its layers.0.* names (key-layout) but reads its mapping."""
    spec = SAMPLES / "tiny_draft_speculators"
    cfg = json.loads((spec / "config.json").read_text())
    assert cfg["speculators_config"]["algorithm"] == "eagle3" and cfg["speculators_version"] == "0.9.0"
    assert {"d2t", "t2d"} <= set(open_checkpoint(spec).tensors.keys()) and not (spec / "d2t.npy").exists()
    errors = {f.code for f in diagnose(spec, "sglang==0.5.11") if f.severity == "error"}
    assert "key-layout" in errors and "d2t-missing" not in errors


def test_fix_side_file_speculators_draft(good, tmp_path):
    """The older speculators-layout shape (d2t / t2d only in side files) is fixed for SGLang 0.5.11."""
    spec = side_file_draft(tmp_path / "side_files")
    from helpers.model.draft import load_draft

    before = _hashes(spec)
    assert {"d2t-missing", "key-layout"} <= {f.code for f in diagnose(spec, "sglang==0.5.11") if f.severity == "error"}
    assert "key-layout" not in {f.code for f in diagnose(spec, "sglang==0.5.12") if f.severity == "error"}
    res = fix_checkpoint(spec, tmp_path / "spec_fixed", "sglang==0.5.11")
    assert res.ok, [f for f in res.findings if f.severity == "error"]
    assert _hashes(spec) == before
    # the same weights as before the fix (the kit's loader reads layers.0.* and d2t.npy itself), and
    # the SGLang-style sample's mapping; embed_tokens comes from the target (fp32, not the sample's bf16)
    ref = load_draft(spec, device="cpu", dtype=torch.float32, embed_from=TARGET_SAMPLE)
    got = load_draft(res.dst, device="cpu", dtype=torch.float32, embed_from=TARGET_SAMPLE)
    g = torch.Generator().manual_seed(2)
    aux = torch.randn(1, 9, 3 * ref.config.target_hidden_size, generator=g)  # [B, T, 3Ht]
    ids = torch.randint(0, ref.config.vocab_size, (1, 9), generator=g)  # [B, T]
    assert torch.equal(got(aux, ids), ref(aux, ids))
    assert torch.equal(got.d2t, load_draft(GOOD_SAMPLE, device="cpu").d2t)
    assert {k for k in open_checkpoint(res.dst).tensors.keys()} >= {"d2t", "t2d", "midlayer.self_attn.q_proj.weight"}


def test_fix_from_pytorch_model_bin(good, tmp_path):
    src = variant(good, tmp_path / "binsrc", _to_absolute)
    torch.save(load_file(str(_weights_file(src))), src / "pytorch_model.bin")
    _weights_file(src).unlink()
    res = fix_checkpoint(src, tmp_path / "binfixed")
    assert res.ok and (res.dst / "model.safetensors").exists() and not (res.dst / "pytorch_model.bin").exists()
    _assert_same_weights(res.dst, good)


def test_fix_moves_side_mapping_into_weights(good, tmp_path):
    src = variant(good, tmp_path / "side", None)
    t = load_file(str(_weights_file(src)))
    d2t, t2d = t.pop(_key(t, "d2t")), t.pop(_key(t, "t2d"))
    save_file(t, str(_weights_file(src)))
    np.save(src / "d2t.npy", (d2t + torch.arange(d2t.numel())).numpy())  # absolute, and only beside the weights
    np.save(src / "t2d.npy", t2d.numpy())
    codes = {f.code for f in diagnose(src) if f.severity == "error"}
    assert {"d2t-missing", "d2t-absolute"} <= codes
    res = fix_checkpoint(src, tmp_path / "side_fixed")
    assert res.ok, res.findings
    ck = open_checkpoint(res.dst)
    assert torch.equal(ck.tensors.get(ck.tensors.find("d2t")), d2t)
    assert torch.equal(torch.from_numpy(np.load(res.dst / "d2t.npy")), d2t)  # no stale absolute copy left


def test_fix_adds_draft_vocab_size_to_config(good, tmp_path):
    src = variant(good, tmp_path / "nocfg", None, lambda c: {k: v for k, v in c.items() if k != "draft_vocab_size"})
    assert any(f.code == "vocab-size-mismatch" for f in diagnose(src))
    res = fix_checkpoint(src, tmp_path / "nocfg_fixed")
    n = open_checkpoint(good).tensors.shape("lm_head.weight")[0]
    assert json.loads((res.dst / "config.json").read_text())["draft_vocab_size"] == n
    assert res.ok


def test_cli_fix_refuses_existing_dst_and_reports_unfixable(good, tmp_path, cli):
    src = variant(good, tmp_path / "arange", _arange_d2t)
    dst = tmp_path / "exists"
    dst.mkdir()
    (dst / "keep.txt").write_text("mine")
    r = cli("fix", src, dst)
    assert r.returncode == 2 and "already exists" in r.stderr
    assert [p.name for p in dst.iterdir()] == ["keep.txt"]
    r = cli("fix", src, tmp_path / "still_bad")  # nothing fix can repair: refused, nothing written
    assert r.returncode == 2 and "cannot repair d2t-arange" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "still_bad").exists()
    r = cli("fix", src, tmp_path / "still_bad", "--force")  # written anyway; the doctor still objects
    assert r.returncode == 1 and "d2t-arange" in r.stdout and (tmp_path / "still_bad").is_dir()


@pytest.mark.parametrize("place", ["top", "nested"])
def test_engines_capturing_apart_are_named_from_the_table(tmp_path, place):
    """`--engine all`: two engines that capture different layers for the same config are one warning,
    whose reason comes from the table (where each reads its ids, what it adds to them)."""
    from helpers.engines.registry import engine_at
    from helpers.doctor.checks_aux import _why_apart

    d = tmp_path / "d"
    shutil.copytree(GOOD_SAMPLE, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("eagle_config", None)
    cfg.pop("eagle_aux_hidden_state_layer_ids", None)
    if place == "top":
        cfg["eagle_aux_hidden_state_layer_ids"] = [1, 3, 5]
    else:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}
    (d / "config.json").write_text(json.dumps(cfg))
    sg, vl = engine_at("sglang"), engine_at("vllm")
    apart = [f for f in diagnose(d, "all", TARGET_SAMPLE / "config.json")
             if f.code == "aux-layers" and f.severity == "warning" and "capture different" in f.message]
    reads = {at.key: place in at.value("aux.from") for at in (sg, vl)}
    assert len(apart) == (1 if reads["sglang"] != reads["vllm"] or all(reads.values()) else 0)
    if apart and reads["sglang"] != reads["vllm"]:
        deaf = sg if not reads["sglang"] else vl
        assert f"which {deaf.name} does not read (it uses its default)" in apart[0].message
    # both read the ids: the conventions differ (SGLang adds its shift, a release of vLLM that reads nested ids none)
    both = next(engine_at(f"vllm=={r}") for r in reversed(ENGINE_TABLE["vllm"].releases)
                if "nested" in engine_at(f"vllm=={r}").value("aux.from", ()))
    words = _why_apart(sg, both, {"sglang": [1, 3, 5], "vllm": [1, 3, 5]}, "llama")
    assert words == f"SGLang adds {sg.value('aux.shift')} to each configured id, vLLM uses them as given"
