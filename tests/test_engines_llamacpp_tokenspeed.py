"""llama.cpp and TokenSpeed as engines the doctor knows: their names and releases, and the findings
that differ from SGLang's and vLLM's on the engine pair's draft and on broken copies of it.

The rules were read in released code (docs/doctor-findings.md, "Engine rules by version"): llama.cpp's
converter (conversion/llama.py) and EAGLE-3 graph (src/models/eagle3.cpp) at build tags b9606, b10157,
b10158 (#25794) and b10470; TokenSpeed's wheels 0.1.0 and 0.1.1. Every copy is the engine pair's real
safetensors with one thing changed.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers.engines.table import ENGINE_TABLE
from helpers.engines.registry import ENGINES, engine_at, engines_at, key_fate
from helpers.doctor.diagnose import diagnose
from conftest import SAMPLES


PAIR = SAMPLES / "engine_llama"
DRAFT, TCFG = PAIR / "draft", PAIR / "target" / "config.json"
KIMI = SAMPLES / "engine_kimi" / "draft"
# the newest releases read, asked of the table (a release read later changes no test)
LC_NEWEST, TS_NEWEST = ENGINE_TABLE["llamacpp"].newest, ENGINE_TABLE["tokenspeed"].newest


def _copy(tmp_path: Path, name: str, cfg=None, tensors=None) -> Path:
    """The engine pair's draft with its config and/or tensors changed (the source is never written)."""
    out = tmp_path / name
    out.mkdir()
    c = json.loads((DRAFT / "config.json").read_text())
    t = load_file(DRAFT / "model.safetensors")
    if cfg:
        cfg(c)
    if tensors:
        t = tensors(t)
    (out / "config.json").write_text(json.dumps(c, indent=2))
    save_file(t, out / "model.safetensors")
    return out


def _ids(ids, nested=True, top=False, keep_eagle_config=True):
    def edit(c):
        if nested:
            c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
        else:
            del c["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
            if not keep_eagle_config:
                del c["eagle_config"]
        if top:
            c["eagle_aux_hidden_state_layer_ids"] = ids
    return edit


def _found(path, engine, code=None, severity=None, target=TCFG):
    return [f for f in diagnose(path, engine, target, check_weights=False)
            if (code is None or f.code == code) and (severity is None or f.severity == severity)]


def _predicted(path, engine, target=TCFG):
    fs = diagnose(path, engine, target, check_weights=False)
    return fs.predicted_outcome()[engine_at(engine).key]


# -- names and releases ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["llamacpp", "llama.cpp", "llama-cpp", "LLaMA.cpp"])
def test_llamacpp_names_and_build_tags(name):
    at = engine_at(name)
    assert at.key == "llamacpp" and at.version == LC_NEWEST and at.label == f"llama.cpp b{LC_NEWEST}" and at.assumed
    assert f"b{LC_NEWEST}" in at.note
    tagged, plain = engine_at(f"{name}==b10158"), engine_at(f"{name}==10158")
    assert tagged.version == plain.version == "10158" and tagged.label == "llama.cpp b10158" and not tagged.note
    assert engine_at(f"{name}<b10158").version == "10157"  # the newest read inside the range
    assert engine_at(f"{name}>=b9700").version == "10157"  # the oldest read inside it
    between = engine_at(f"{name}==b10000")
    assert between.version == "10000" and "b10000 was not read itself" in between.note


def test_tokenspeed_releases_and_all_still_means_sglang_and_vllm():
    assert engine_at("tokenspeed").version == TS_NEWEST and engine_at("token-speed==0.1.0").label == "TokenSpeed 0.1.0"
    assert [a.key for a in engines_at("all")] == list(ENGINES) == ["sglang", "vllm"]  # both only when named
    for bad in ("llamacpp==bx", "llama.cpp=b10158", "tokenspeed==zero"):
        with pytest.raises(ValueError):
            engines_at(bad)


def test_key_fates_that_differ_from_vllm_and_sglang():
    llama, ts, vllm = engine_at("llamacpp"), engine_at("tokenspeed"), engine_at("vllm")
    # llama.cpp's converter maps model.layers.0.* (and model.norm, model.embed_tokens) but never renames
    # model.midlayer.*; vLLM puts model. before every name
    assert key_fate(llama, "model.layers.0.mlp.up_proj.weight") == "loads"
    assert key_fate(llama, "model.midlayer.mlp.up_proj.weight") == "fails"
    assert key_fate(vllm, "model.layers.0.mlp.up_proj.weight") == "fails"
    # a name it has no parameter for: no GGUF (llama.cpp); dropped without a word (TokenSpeed)
    assert key_fate(llama, "extra.weight") == "fails" and key_fate(ts, "extra.weight") == "skips"
    assert key_fate(llama, "fc.bias") == "fails" and key_fate(ts, "fc.bias") == "skips"


# -- the engine pair's own draft, by CLI -------------------------------------------------------------
def test_cli_llamacpp_on_the_engine_pair_names_the_ids_it_does_not_read(cli):
    r = cli("doctor", DRAFT, "--engine", "llama.cpp", "--target-config", TCFG, "--no-weights", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["ok"], r.stdout
    assert out["engine_versions"] == [{"engine": "llamacpp", "version": LC_NEWEST, "assumed": True, "asked": None,
                                       "note": f"no llama.cpp version given: the rules of b{LC_NEWEST}, the newest "
                                               "release read"}]
    unread = [f for f in out["findings"] if f["code"] == "aux-ids-unread"]
    # its converter reads only the top-level list; this config nests it, and on the 8-layer target the
    # default capture happens to be the draft's [2, 4, 5]
    assert len(unread) == 1 and unread[0]["severity"] == "info" and "[2, 4, 5]" in unread[0]["message"]
    assert "top-level" in unread[0]["message"] and f"llama.cpp b{LC_NEWEST}" in unread[0]["message"]
    pred = out["predicted_outcome"]["llamacpp"]
    # b11434 was run (docs/engine-truth.md, "llama.cpp b11434"): the healthy row is one of the runs
    assert (pred["result"], pred["accept"], pred["release"], pred["checked"]) == ("serves", "as-trained", f"b{LC_NEWEST}", True)
    assert pred["source"] == "run in llama.cpp b11434" and pred["run_in"] == ["11434"]
    text = cli("doctor", DRAFT, "--engine", "llamacpp", "--target-config", TCFG, "--no-weights").stdout
    assert f"rules of llama.cpp b{LC_NEWEST}" in text and f"served by llama.cpp b{LC_NEWEST}: starts and serves" in text


@pytest.mark.parametrize("version", [None, "0.1.0"])
def test_cli_tokenspeed_on_the_engine_pair_adds_one_as_sglang_does(cli, version):
    engine = "tokenspeed" + (f"=={version}" if version else "")
    r = cli("doctor", DRAFT, "--engine", engine, "--target-config", TCFG, "--no-weights", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["engine_versions"][0]["version"] == (version or TS_NEWEST)
    aux = [f for f in out["findings"] if f["code"] == "aux-layers"]
    # the draft was trained on vLLM's convention ([2, 4, 5] as given); TokenSpeed captures id + 1
    assert len(aux) == 1 and "captures the input of target layers [3, 5, 6]" in aux[0]["message"]
    assert not [f for f in out["findings"] if f["code"] == "aux-ids-unread"]  # it reads eagle_config's list
    assert {k: out["predicted_outcome"]["tokenspeed"][k] for k in ("result", "accept")} == \
        {"result": "serves", "accept": "at-most"}
    vllm = json.loads(cli("doctor", DRAFT, "--engine", "vllm==0.33.0", "--target-config", TCFG, "--no-weights",
                          "--json").stdout)
    assert vllm["predicted_outcome"]["vllm"]["accept"] == "as-trained"  # the convention it was trained on


def test_engine_all_output_does_not_name_the_new_engines(cli):
    out = json.loads(cli("doctor", DRAFT, "--target-config", TCFG, "--no-weights", "--json").stdout)
    assert [v["engine"] for v in out["engine_versions"]] == ["sglang", "vllm"]
    assert set(out["predicted_outcome"]) <= {"sglang", "vllm"}
    assert not [f for f in out["findings"] if "llama.cpp" in f["message"] or "TokenSpeed" in f["message"]]
    assert not [f for f in out["findings"] if f["code"] == "aux-ids-unread" and not f["message"].startswith("vLLM")]


# -- the capture: ids named where the release does not look ------------------------------------------
def test_llamacpp_hard_coded_capture_feeds_a_draft_other_layers(tmp_path):
    """b9606-b10157 wrote the target layers 2, L//2, L-3 whatever the config said (PR #25794 read the ids)."""
    nested = _copy(tmp_path, "nested", cfg=_ids([1, 3, 5]))
    both = _copy(tmp_path, "both", cfg=_ids([1, 3, 5], top=True))
    old = _found(both, "llamacpp==b10157", "aux-ids-unread", "error")
    assert len(old) == 1 and "reads no aux-layer ids from the config" in old[0].message
    assert "captures the inputs of target layers [2, 4, 5] of 8" in old[0].message and "[1, 3, 5]" in old[0].message
    assert "from llama.cpp b10158 (#25794)" in old[0].message
    assert not _found(both, "llamacpp==b10158", "aux-ids-unread")  # the top-level list is read from #25794
    new = _found(nested, "llamacpp", "aux-ids-unread", "error")  # ... but never eagle_config's
    assert len(new) == 1 and "only from the top-level" in new[0].message
    assert "into the top-level eagle_aux_hidden_state_layer_ids" in new[0].fix
    for engine in ("llamacpp", "llamacpp==b9606"):
        assert {k: _predicted(nested, engine)[k] for k in ("result", "accept")} == {"result": "serves", "accept": "at-most"}
    # SGLang and vLLM 0.33.0 read eagle_config's list: no such finding, whatever else they say
    assert not _found(nested, "sglang", "aux-ids-unread") and not _found(nested, "vllm==0.33.0", "aux-ids-unread")


def test_without_the_target_config_the_unread_ids_are_a_warning(tmp_path):
    nested = _copy(tmp_path, "nested", cfg=_ids([1, 3, 5]))
    w = _found(nested, "llamacpp", "aux-ids-unread", target=None)
    assert len(w) == 1 and w[0].severity == "warning" and "--target-config" in w[0].fix


def test_tokenspeed_reads_top_level_ids_only_without_eagle_config(tmp_path):
    alone = _copy(tmp_path, "alone", cfg=_ids([1, 3, 5], nested=False, top=True, keep_eagle_config=False))
    beside = _copy(tmp_path, "beside", cfg=_ids([1, 3, 5], nested=False, top=True))
    read = [f for f in _found(alone, "tokenspeed", "aux-layers") if "ids [1, 3, 5]" in f.message]
    assert read and "captures the input of target layers [2, 4, 6]" in read[0].message  # id + 1
    assert not _found(alone, "tokenspeed", "aux-ids-unread")
    unread = _found(beside, "tokenspeed", "aux-ids-unread", "error")  # an eagle_config without the list
    assert len(unread) == 1 and "without eagle_config" in unread[0].message and "[2, 4, 5]" in unread[0].message


# -- keys, mapping, options ------------------------------------------------------------------------------
def test_an_unknown_key_stops_llamacpp_and_tokenspeed_drops_it(tmp_path):
    d = _copy(tmp_path, "unknown", tensors=lambda t: {**t, "extra.weight": torch.zeros(4)})
    llama = _found(d, "llamacpp", "key-layout", "error")
    assert llama and "extra.weight" in llama[0].message and _predicted(d, "llamacpp")["result"] == "refuses"
    ts = _found(d, "tokenspeed", "key-layout")
    assert [f.severity for f in ts if "extra.weight" in f.message] == ["warning"]
    assert _predicted(d, "tokenspeed")["result"] == "serves"


def test_prefixed_layers_0_converts_for_llamacpp_but_not_prefixed_midlayer(tmp_path):
    def prefixed(layout):
        def edit(t):
            out = {}
            for k, v in t.items():
                if k in ("d2t", "t2d", "lm_head.weight"):
                    out[k] = v
                else:
                    out["model." + k.replace("midlayer.", layout + ".")] = v
            return out
        return edit
    layers0 = _copy(tmp_path, "layers0", tensors=prefixed("layers.0"))
    midlayer = _copy(tmp_path, "midlayer", tensors=prefixed("midlayer"))
    assert not _found(layers0, "llamacpp", "key-layout", "error")
    assert _found(layers0, "vllm", "key-layout", "error")  # vLLM makes them model.model.*
    bad = _found(midlayer, "llamacpp", "key-layout", "error")
    assert bad and "model.midlayer." in bad[0].message


def test_the_mapping_as_llamacpp_converts_it(tmp_path):
    no_d2t = _copy(tmp_path, "no_d2t", tensors=lambda t: {k: v for k, v in t.items() if k not in ("d2t", "t2d")})
    absolute = _copy(tmp_path, "absolute", tensors=lambda t: {**t, "d2t": t["d2t"] + torch.arange(t["d2t"].numel())})
    # no d2t: the GGUF's draft vocab is taken as the target's and the 800-row head does not fit
    p = _predicted(no_d2t, "llamacpp")
    assert (p["result"], p["says"]) == ("refuses", "wrong shape")
    assert (_predicted(no_d2t, "tokenspeed")["accept"], _predicted(no_d2t, "vllm")["accept"]) == ("about-1", "about-1")
    # absolute ids: the converter adds arange itself and refuses ids past the target vocab
    p = _predicted(absolute, "llamacpp")
    assert (p["result"], p["says"]) == ("refuses", "d2t target ids out of range")
    assert _predicted(absolute, "vllm")["result"] == "crashes"


def test_eagle31_options_by_engine_and_release(tmp_path):
    fc_norm = SAMPLES / "producers" / "specforge_fc_norm"
    llama = _found(fc_norm, "llamacpp", "variant-fc-norm", target=None)
    assert llama and llama[0].severity == "error" and "llama.cpp will not start" in llama[0].message
    assert [f.severity for f in _found(fc_norm, "tokenspeed", "variant-fc-norm", target=None)] == ["info"]
    # input_norm (norm_before_fc): converted from llama.cpp b10158 (#25794)
    nbf = _copy(tmp_path, "nbf", cfg=lambda c: c.update(norm_before_fc=True),
                tensors=lambda t: {**t, "input_norm.weight": torch.ones(3 * 64)})
    old = _found(nbf, "llamacpp==b10157", "variant-norm-before-fc")
    new = _found(nbf, "llamacpp==b10158", "variant-norm-before-fc")
    assert old[0].severity == "error" and "from b10158 (#25794)" in old[0].message
    assert new[0].severity == "info" and "since llama.cpp b10158 (#25794)" in new[0].message


def test_mla_draft_tokenspeed_reads_fc_norm_from_0_1_1_and_llamacpp_has_no_mla(tmp_path):
    old = _found(KIMI, "tokenspeed==0.1.0", "variant-fc-norm", target=None)
    assert old[0].severity == "error" and "without a word" in old[0].message and "from 0.1.1" in old[0].message
    assert _found(KIMI, "tokenspeed==0.1.1", "variant-fc-norm", target=None)[0].severity == "info"
    assert _found(KIMI, "tokenspeed", "mla-draft", target=None)[0].severity == "info"
    llama = _found(KIMI, "llamacpp", "mla-draft", "error", target=None)
    assert llama and "no MLA EAGLE-3 draft class" in llama[0].message
    assert _predicted(KIMI, "llamacpp", target=None)["result"] == "refuses"


def test_two_layers_in_the_config_refuse_in_both(tmp_path):
    d = _copy(tmp_path, "two", cfg=lambda c: c.update(num_hidden_layers=2))
    for engine in ("llamacpp", "tokenspeed"):
        layers = _found(d, engine, "draft-layers", "error")
        assert layers and "raises at start-up" in layers[0].message, engine
        assert _predicted(d, engine)["result"] == "refuses", engine


def test_tokenspeed_sizes_fc_from_the_top_level_list_and_captures_eagle_configs(tmp_path):
    """TokenSpeed builds fc for the top-level id count (else 3) and captures eagle_config's ids: four
    nested ids beside a 3-wide fc load, then fail on the shape; the same four at the top level too size
    fc 4-wide, which the stored 3-wide fc does not fill."""
    nested = _copy(tmp_path, "nested4", cfg=_ids([1, 2, 3, 4]))
    both = _copy(tmp_path, "both4", cfg=_ids([1, 2, 3, 4], top=True))
    err = _found(nested, "tokenspeed", "aux-layers", "error")
    assert len(err) == 1 and "captures 4 hidden states" in err[0].message and "builds fc for 3" in err[0].message
    assert _predicted(nested, "tokenspeed")["result"] == "crashes"
    assert _predicted(both, "tokenspeed")["result"] == "refuses"
    assert _predicted(_copy(tmp_path, "three", cfg=_ids([1, 3, 4])), "tokenspeed")["result"] == "serves"
