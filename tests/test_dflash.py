"""DFlash / DSpark / XPress drafts: recognised, inspected and doctored by vLLM's rules.

The configs in tests/fixtures/dflash are public files, byte for byte (README there). The checkpoints
with weights are written here: a fixture's config with its sizes shrunk (ids, block and d2t rules
unchanged) and real safetensors of those sizes.
"""
from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from helpers.engines.registry import engine_at
from helpers.doctor.diagnose import diagnose
from helpers.doctor.inspection import inspect_path
from helpers.model.dflash import (
    default_layer_ids,
    dflash_draft,
    vllm_aux_ids,
)
from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "dflash"
DFLASH2 = FIX / "zlab-dflash2"
DSPARK = FIX / "specforge-qwen3-8b-dspark"
PUBLISHED = {DFLASH2: "cb684d6f688a22619a63ea1debe7d30c139c195bf3141fd86a763763ab34b5d9",
             DSPARK: "e3ca0349c563fcc4179fe9f0c588190c6b56c49c090fd714d6089aad7f753b7d"}
EAGLE3_CODES = {"key-layout", "fc-shape", "lm-head-missing", "embed-missing", "aux-layers", "vocab-size-mismatch",
                "d2t-missing", "variant-fc-norm", "layer-count", "mla-draft", "eagle3-as-eagle", "aux-config"}
V = 512  # the shrunk vocab
H = 32


def _cfg(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


def _target(n_layers: int = 52, vocab: int = V, hidden: int = H) -> dict:
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": n_layers,
            "vocab_size": vocab, "hidden_size": hidden}


def _config_only(tmp_path: Path, cfg: dict, name: str = "draft-dflash") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _tiny(tmp_path: Path, *, arch: str = "DFlashDraftModel", draft_vocab: int | None = None, d2t=None,
          lm_head: bool = False, edit=None, drop=(), extra=None, name: str = "tiny-dflash") -> Path:
    """A small real DFlash checkpoint: the z-lab config shrunk (2 layers, hidden 32, vocab 512), the
    published layer ids kept, fc sized for them, weights seeded."""
    cfg = copy.deepcopy(_cfg(DFLASH2))
    cfg.update(architectures=[arch], hidden_size=H, intermediate_size=64, num_attention_heads=2,
               num_key_value_heads=1, head_dim=16, num_hidden_layers=2, vocab_size=V,
               layer_types=["sliding_attention"] * 2)
    cfg["dflash_config"]["mask_token_id"] = V - 1  # the published one is past the shrunk vocab
    if draft_vocab is not None:
        cfg["draft_vocab_size"] = draft_vocab
    if edit:
        edit(cfg)
    g = torch.Generator().manual_seed(0)

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    n_ids = len(cfg["dflash_config"].get("target_layer_ids") or [1, 2, 3])
    t = {"fc.weight": w(H, n_ids * H), "hidden_norm.weight": torch.ones(H), "norm.weight": torch.ones(H)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        t |= {p + "input_layernorm.weight": torch.ones(H), p + "post_attention_layernorm.weight": torch.ones(H),
              p + "self_attn.q_proj.weight": w(32, H), p + "self_attn.k_proj.weight": w(16, H),
              p + "self_attn.v_proj.weight": w(16, H), p + "self_attn.o_proj.weight": w(H, 32),
              p + "self_attn.q_norm.weight": torch.ones(16), p + "self_attn.k_norm.weight": torch.ones(16),
              p + "mlp.gate_proj.weight": w(64, H), p + "mlp.up_proj.weight": w(64, H),
              p + "mlp.down_proj.weight": w(H, 64)}
    if lm_head:
        t["lm_head.weight"] = w(draft_vocab or V, H)
    if d2t is not None:
        t["d2t"] = d2t
    for k in drop:
        t.pop(k)
    t |= extra or {}
    out = tmp_path / name
    out.mkdir()
    (out / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in t.items()}, str(out / "model.safetensors"))
    return out


def _codes(findings, severity=None) -> set[str]:
    return {f.code for f in findings if severity is None or f.severity == severity}


def _one(findings, code, severity):
    hits = [f for f in findings if f.code == code and f.severity == severity]
    assert hits, [(f.code, f.severity, f.message) for f in findings]
    return hits[0]


# -- the fixtures --------------------------------------------------------------------------------------
@pytest.mark.parametrize("folder", sorted(PUBLISHED, key=str))
def test_fixture_configs_are_the_published_bytes(folder):
    assert hashlib.sha256((folder / "config.json").read_bytes()).hexdigest() == PUBLISHED[folder]


def test_recognised_from_config_and_names_and_an_eagle3_draft_is_not():
    d = dflash_draft(_cfg(DFLASH2))
    assert (d.kind, d.method, d.variant, d.architecture) == ("dflash", "dflash", "dflash2", "DFlash2DraftModel")
    assert d.trained_ids == [1, 13, 25, 37, 49] and d.block_size == 16 and d.mask_token_id == 201818
    s = dflash_draft(_cfg(DSPARK))
    assert (s.kind, s.method, s.trained_ids) == ("dspark", "dspark", [1, 9, 17, 25, 33])
    assert dflash_draft({"architectures": ["Qwen3XPressModel"]}).method == "dflash"  # XPress runs as dflash
    assert dflash_draft({}, ["markov_head.markov_w1.weight"]).kind == "dspark"  # names alone
    assert dflash_draft({"speculators_model_type": "dflash", "aux_hidden_state_layer_ids": [2, 10]}).trained_ids \
        == [1, 9]  # speculators' aux ids are vLLM's (id + 1)
    for sample in ("engine_llama/draft", "tiny_draft_sglang", "tiny_draft_speculators", "kimi_draft_mla"):
        eagle = json.loads((SAMPLES / sample / "config.json").read_text())
        assert dflash_draft(eagle, ["midlayer.hidden_norm.weight", "fc.weight"]) is None, sample


def test_z_labs_default_ids():
    assert default_layer_ids(36, 5) == [1, 9, 17, 25, 33]  # z-lab/Qwen3-8B-DFlash-b16
    assert default_layer_ids(52, 5) == [1, 13, 25, 37, 49]  # the fixture


# -- the ids vLLM hands the target ----------------------------------------------------------------------
def test_vllm_adds_one_to_dflash_ids_and_takes_eagle3_ids_as_given():
    at = engine_at("vllm==0.34.0")
    base = {"architectures": ["DFlashDraftModel"]}
    assert vllm_aux_ids(dflash_draft(base | {"dflash_config": {"target_layer_ids": [1, 9]}}), at) == ([2, 10], "dflash")
    assert vllm_aux_ids(dflash_draft(base | {"eagle_aux_hidden_state_layer_ids": [1, 9]}), at) == ([1, 9], "top")
    both = base | {"eagle_aux_hidden_state_layer_ids": [5, 6], "dflash_config": {"target_layer_ids": [1, 9]}}
    assert vllm_aux_ids(dflash_draft(both), at) == ([5, 6], "top")  # the EAGLE-3 key wins
    assert vllm_aux_ids(dflash_draft(base | {"target_layer_ids": [3]}), at) == ([4], "target")
    v4 = {"architectures": ["DSparkV41DraftModel"], "model_type": "deepseek_v41", "dspark_target_layer_ids": [7]}
    assert vllm_aux_ids(dflash_draft(v4), at) == ([7], "dspark")  # DeepSeek-V4.1 DSpark: as given
    assert vllm_aux_ids(dflash_draft(base), at) == (None, None)  # the target's default capture
    # 0.33.0's V1 runner reads no top-level target_layer_ids, and an eagle_config dict replaces the DFlash ids
    old = engine_at("vllm==0.33.0")
    assert vllm_aux_ids(dflash_draft(base | {"target_layer_ids": [3]}), old) == (None, None)
    nested = base | {"dflash_config": {"target_layer_ids": [1]},
                     "eagle_config": {"eagle_aux_hidden_state_layer_ids": [8]}}
    assert vllm_aux_ids(dflash_draft(nested), old) == ([8], "nested")
    assert vllm_aux_ids(dflash_draft(nested), at) == ([2], "dflash")  # model runner V2 reads no eagle_config ids
    other = base | {"dflash_config": {"target_layer_ids": [1]}, "eagle_config": {"use_aux_hidden_state": True}}
    assert vllm_aux_ids(dflash_draft(other), old) == (None, None)  # ... and one naming none leaves the default
    with pytest.raises(ValueError, match="has not read"):
        vllm_aux_ids(dflash_draft(base), engine_at("vllm==0.21.0"))


# -- inspect ---------------------------------------------------------------------------------------------
def test_inspect_fixture_says_dflash_with_its_layer_ids(cli):
    r = cli("inspect", DFLASH2)
    assert r.returncode == 0, r.stderr
    assert "draft kind: dflash" in r.stdout and "[1, 13, 25, 37, 49]" in r.stdout
    assert "aux ids [2, 14, 26, 38, 50]" in r.stdout
    j = json.loads(cli("inspect", DFLASH2, "--json").stdout)
    assert j["draft_kind"] == "dflash" and j["dflash_layer_ids"] == [1, 13, 25, 37, 49]
    assert j["dflash"]["capture"]["vllm"]["aux_ids"] == [2, 14, 26, 38, 50]
    assert j["dflash"]["capture"]["vllm"]["output_of_layers"] == [1, 13, 25, 37, 49]
    assert j["dflash"]["config_only"] is True and j["verdict"] == "identity"
    s = json.loads(cli("inspect", DSPARK, "--json").stdout)
    assert s["draft_kind"] == "dspark" and s["dflash_layer_ids"] == [1, 9, 17, 25, 33]


def test_inspect_a_dflash_checkpoint_without_d2t_or_lm_head(tmp_path):
    r = inspect_path(_tiny(tmp_path))  # z-lab drafts store neither: this used to fail with "has no d2t tensor"
    assert r["verdict"] == "identity" and r["draft_kind"] == "dflash" and r["dflash"]["config_only"] is False


def test_inspect_an_eagle3_draft_has_no_draft_kind():
    r = inspect_path(SAMPLES / "tiny_draft_sglang")
    assert r["draft_kind"] is None and r["dflash"] is None and r["dflash_layer_ids"] is None


def test_a_config_that_is_not_a_dflash_draft_still_fails_inspect(tmp_path, cli):
    r = cli("inspect", _config_only(tmp_path, {"architectures": ["LlamaForCausalLMEagle3"]}))
    assert r.returncode == 2 and "holds no checkpoint" in r.stderr


# -- doctor: the fixture ------------------------------------------------------------------------------------
def test_doctor_fixture_gives_dflash_findings_and_no_eagle3_alarms(cli):
    r = cli("doctor", DFLASH2, "--engine", "vllm")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dflash-draft" in r.stdout and "served by vLLM" in r.stdout
    j = json.loads(cli("doctor", DFLASH2, "--engine", "vllm", "--json").stdout)
    codes = {f["code"] for f in j["findings"]}
    assert {"dflash-draft", "dflash-aux", "dflash-vocab"} <= codes and not codes & EAGLE3_CODES, codes
    assert j["predicted_outcome"]["vllm"]["result"] == "serves"


def test_doctor_dspark_fixture_markov_rank_where_vllm_does_not_look(cli):
    j = json.loads(cli("doctor", DSPARK, "--engine", "vllm", "--json").stdout)
    err = [f for f in j["findings"] if f["severity"] == "error"]
    assert [f["code"] for f in err] == ["dflash-config"] and "markov_rank" in err[0]["message"]
    assert err[0]["outcome"]["vllm"]["result"] == "refuses" and err[0]["outcome"]["vllm"]["checked"] is False
    assert j["predicted_outcome"]["vllm"]["result"] == "refuses"


# -- doctor: the layer ids against a target ------------------------------------------------------------------
def _with_ids(tmp_path, ids=None, eagle=None, name="d"):
    cfg = _cfg(DFLASH2)
    if ids is not None:
        cfg["dflash_config"]["target_layer_ids"] = ids
    if eagle is not None:
        cfg["eagle_aux_hidden_state_layer_ids"] = eagle
    return _config_only(tmp_path, cfg, name)


def test_published_ids_against_their_target_are_fine(tmp_path):
    fs = diagnose(_with_ids(tmp_path), "vllm", _target(vocab=202048))
    assert _codes(fs, "error") == set() and _codes(fs, "warning") == set(), [f.message for f in fs]
    aux = _one(fs, "dflash-aux", "info")
    assert "output of target layers [1, 13, 25, 37, 49] of 52" in aux.message


def test_ids_written_in_the_eagle3_convention_are_one_layer_late(tmp_path):
    fs = diagnose(_with_ids(tmp_path, [2, 14, 26, 38, 50]), "vllm", _target(vocab=202048))
    f = _one(fs, "dflash-aux", "warning")
    assert "EAGLE-3 convention" in f.message and "[1, 13, 25, 37, 49]" in f.fix
    assert f.outcome["vllm"]["result"] == "serves" and f.outcome["vllm"]["accept"] == "at-most"


def test_an_id_past_the_last_layer_refuses(tmp_path):
    fs = diagnose(_with_ids(tmp_path, [1, 13, 25, 37, 52]), "vllm", _target(vocab=202048))
    f = _one(fs, "dflash-aux", "error")
    assert "[53]" in f.message and f.outcome["vllm"]["says"] == "DFlash drafter expects"
    # the last layer itself is fine: aux id 52 is the output of layer 51
    assert "error" not in {g.severity for g in diagnose(_with_ids(tmp_path, [1, 13, 25, 37, 51], name="e"), "vllm",
                                                        _target(vocab=202048)) if g.code == "dflash-aux"}


def test_eagle3_ids_copied_without_the_plus_one_override_the_dflash_ids(tmp_path):
    fs = diagnose(_with_ids(tmp_path, eagle=[1, 13, 25, 37, 49]), "vllm", _target(vocab=202048))
    f = _one(fs, "dflash-aux", "warning")
    assert "one layer earlier" in f.message and "[2, 14, 26, 38, 50]" in f.fix
    ok = diagnose(_with_ids(tmp_path, eagle=[2, 14, 26, 38, 50], name="e"), "vllm", _target(vocab=202048))
    assert _codes(ok, "warning") == set()  # the speculators / vLLM way of writing both


def test_a_target_of_another_depth(tmp_path):
    fs = diagnose(_with_ids(tmp_path), "vllm", _target(n_layers=36, vocab=202048))
    assert "num_target_layers = 52" in _one(fs, "dflash-aux", "warning").message
    assert "[53]" not in " ".join(f.message for f in fs) and _codes(fs, "error") == {"dflash-aux"}  # 50 > 36


def test_no_ids_at_all_leaves_fc_too_wide_for_the_default_capture(tmp_path):
    cfg = _cfg(DFLASH2)
    del cfg["dflash_config"]["target_layer_ids"]
    fs = diagnose(_config_only(tmp_path, cfg), "vllm", _target(vocab=202048))
    f = _one(fs, "dflash-aux", "error")
    assert "num_hidden_layers = 5" in f.message and f.outcome["vllm"]["result"] == "refuses"


def test_missing_fields(tmp_path):
    cfg = _cfg(DFLASH2)
    del cfg["dflash_config"]["mask_token_id"]
    cfg["architectures"] = ["Qwen3ForCausalLM"]  # dflash_config still says DFlash
    fs = diagnose(_config_only(tmp_path, cfg), "vllm")
    msgs = " ".join(f.message for f in fs if f.code == "dflash-config" and f.severity == "error")
    assert "no mask token" in msgs and "DFlashQwen3ForCausalLM" in msgs
    assert {f.outcome["vllm"]["says"] for f in fs if f.code == "dflash-config" and f.severity == "error"} == \
        {"Model config must specify", "are not supported"}


def test_0_33_takes_the_method_from_the_path_name(tmp_path):
    plain = _with_ids(tmp_path, name="my-draft")
    assert "plain draft model" in _one(diagnose(plain, "vllm==0.33.0"), "dflash-config", "warning").message
    assert "warning" not in {f.severity for f in diagnose(plain, "vllm==0.34.0")}  # 0.34: from the architecture


def test_other_engines_are_not_judged(tmp_path):
    fs = diagnose(_with_ids(tmp_path), "sglang")
    assert _codes(fs) == {"config-only", "dflash-draft"} and "has not read" in " ".join(f.message for f in fs)


# -- doctor: weights ---------------------------------------------------------------------------------------------
def test_a_healthy_tiny_checkpoint(tmp_path):
    fs = diagnose(_tiny(tmp_path), "vllm", _target())
    assert _codes(fs, "error") == set() and _codes(fs, "warning") == set(), [f.message for f in fs]
    assert not _codes(fs) & EAGLE3_CODES
    assert fs.predicted_outcome()["vllm"]["accept"] == "as-trained"


def test_pruned_vocab_needs_d2t_and_its_own_head(tmp_path):
    fs = diagnose(_tiny(tmp_path, draft_vocab=256), "vllm", _target())
    msgs = {f.outcome["vllm"]["result"] + "/" + str(f.outcome["vllm"]["accept"]) for f in fs
            if f.code == "dflash-vocab" and f.severity == "error"}
    assert msgs == {"serves/about-1", "refuses/None"}  # zeros d2t: first 256 ids; the target's head does not fit
    kept = torch.sort(torch.randperm(V, generator=torch.Generator().manual_seed(1))[:256]).values
    d2t = kept - torch.arange(256)  # offsets: target = i + d2t[i]
    ok = diagnose(_tiny(tmp_path, draft_vocab=256, d2t=d2t, lm_head=True, name="ok"), "vllm", _target())
    assert _codes(ok, "error") == set(), [f.message for f in ok]


def test_absolute_d2t_is_the_eagle3_finding_with_its_outcome(tmp_path):
    ids = torch.arange(256, dtype=torch.int64) + 200  # absolute ids; read as offsets they run past 512
    fs = diagnose(_tiny(tmp_path, draft_vocab=256, d2t=ids, lm_head=True), "vllm", _target())
    f = _one(fs, "d2t-absolute", "error")
    assert f.outcome["vllm"]["result"] == "crashes"


def test_a_d2t_stored_where_vllm_builds_no_map(tmp_path):
    fs = diagnose(_tiny(tmp_path, d2t=torch.zeros(V, dtype=torch.int64)), "vllm", _target())
    f = _one(fs, "dflash-vocab", "error")
    assert f.outcome["vllm"]["says"] == "There is no module or parameter named"


def test_padded_dspark_is_identity_but_pruned_dspark_is_refused_by_0_33(tmp_path):
    def dspark(cfg):
        cfg["architectures"], cfg["markov_rank"] = ["Qwen3DSparkModel"], 4

    pad = _tiny(tmp_path, arch="Qwen3DSparkModel", draft_vocab=V + 64, edit=dspark, lm_head=True, name="pad")
    assert "vllm#55133" in _one(diagnose(pad, "vllm", _target()), "dflash-vocab", "info").message
    pruned = _tiny(tmp_path, arch="Qwen3DSparkModel", draft_vocab=256, edit=dspark, lm_head=True, name="pruned")
    old = _one(diagnose(pruned, "vllm==0.33.0", _target()), "dflash-vocab", "error")
    new = _one(diagnose(pruned, "vllm==0.34.0", _target()), "dflash-vocab", "error")
    assert old.outcome["vllm"]["result"] == "refuses" and new.outcome["vllm"]["accept"] == "about-1"


def test_xpress_takes_only_the_full_vocab(tmp_path):
    x = _tiny(tmp_path, arch="Qwen3XPressModel", draft_vocab=256, lm_head=True,
              d2t=torch.zeros(256, dtype=torch.int64))
    f = _one(diagnose(x, "vllm", _target()), "dflash-vocab", "error")
    assert "XPress" in f.message and f.outcome["vllm"]["result"] == "refuses"


def test_names_the_loader_stops_on_and_weights_it_never_gets(tmp_path):
    pre = _tiny(tmp_path, extra={"model.fc.weight": torch.zeros(H, 5 * H)}, drop=("fc.weight",), name="pre")
    assert "model.model" in _one(diagnose(pre, "vllm", _target()), "dflash-keys", "error").message
    gone = _tiny(tmp_path, drop=("layers.1.mlp.down_proj.weight",), name="gone")
    f = _one(diagnose(gone, "vllm", _target()), "dflash-keys", "error")
    assert "layers.1.mlp.down_proj.weight" in f.message and f.outcome["vllm"]["accept"] == "about-1"
    extra = _tiny(tmp_path, extra={"layers.2.mlp.up_proj.weight": torch.zeros(64, H)}, name="extra")
    assert _one(diagnose(extra, "vllm", _target()), "dflash-keys", "error").outcome["vllm"]["result"] == "refuses"


def test_fc_width_against_the_ids(tmp_path):
    narrow = _tiny(tmp_path, drop=("fc.weight",), extra={"fc.weight": torch.zeros(H, 3 * H)})
    f = _one(diagnose(narrow, "vllm", _target()), "dflash-fc-shape", "error")
    assert "5 aux ids" in f.message and f.outcome["vllm"]["says"] == "Tried to load weights of size"


def test_nan_weights_are_scanned(tmp_path):
    bad = _tiny(tmp_path, drop=("norm.weight",), extra={"norm.weight": torch.full((H,), float("nan"))})
    assert "nonfinite-weights" in _codes(diagnose(bad, "vllm", _target()), "error")
