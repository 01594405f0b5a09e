"""Engine rules by release (issue 27): the `--engine NAME==VERSION` values, the table's ranges, and
the doctor's findings changing at the release where an engine started reading a producer option.

The fixtures are the producers' own (data_samples/producers: SpecForge 0.2.0 and speculators 0.9.0
wrote them); the Kimi-K2.5 MLA draft is its config (tests/fixtures/kimi_k25_mla_draft) beside
the Kimi-K2.5 mapping. The release numbers are those the table was read in (helpers.engines.table).
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from packaging.version import Version

from helpers.engines import table as engine_table
from helpers.engines.outcomes import Span
from helpers.engines.table import ENGINE_TABLE
from helpers.engines.registry import ENGINES, engine_at, engines_at
from helpers.doctor.diagnose import diagnose
from helpers.doctor.findings import has_error
from helpers.doctor.inspection import inspect_path
from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]
PRODUCERS = SAMPLES / "producers"
KIMI_MLA_CONFIG = ROOT / "tests" / "fixtures" / "kimi_k25_mla_draft" / "config.json"


def _errors(path, engine, code=None):
    return [f for f in diagnose(path, engine, check_weights=False)
            if f.severity == "error" and (code is None or f.code == code)]


# -- the table --------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(ENGINE_TABLE))
def test_every_rule_is_ordered_ranges_over_the_releases_read(key):
    e = ENGINE_TABLE[key]
    assert [Version(r) for r in e.releases] == sorted(Version(r) for r in e.releases)
    assert e.releases or e.snapshot, "an engine is read at releases or at one commit"
    for rule, spans in e.rules.items():
        assert spans and all(isinstance(sp, Span) for sp in spans), rule
        assert spans[0].since is None and spans[-1].until is None, f"{key} {rule}: open at both ends"
        for a, b in zip(spans, spans[1:]):
            assert a.until is not None and b.since is not None, f"{key} {rule}"
            assert Version(a.until) < Version(b.since), f"{key} {rule}: {a.until} .. {b.since}"
            assert a.value != b.value, f"{key} {rule}: two ranges with one behaviour"
            if e.releases:  # a change names the release read on each side of it
                assert a.until in e.releases and b.since in e.releases, f"{key} {rule}: {a.until}/{b.since} not read"


def test_engine_values_name_a_release():
    assert [a.key for a in engines_at("all")] == list(ENGINES) == ["sglang", "vllm"]
    newest = engines_at("sglang")[0]
    assert newest.assumed and newest.version == ENGINE_TABLE["sglang"].releases[-1] and "newest" in newest.note
    assert engine_at("sglang==0.5.10").version == "0.5.10" and not engine_at("sglang==0.5.10").assumed
    assert engine_at("vllm>=0.30").version == "0.31.0"  # the oldest release read inside the range
    assert engine_at("vllm<0.22").version == "0.21.0"  # the newest inside it
    later = engine_at("vllm==9.0.0")
    assert later.version == ENGINE_TABLE["vllm"].releases[-1] and "newer than every release read" in later.note
    assert engine_at("tensorrt-llm").key == "trtllm" and engine_at("trtllm").version is None
    for bad in ("sglang=0.5", "sglang==x.y", "tgi", "all==1.0"):
        with pytest.raises(ValueError):
            engines_at(bad)


def test_cli_takes_a_version_and_refuses_a_bad_one_in_one_line(cli):
    run = ["doctor", str(PRODUCERS / "specforge_fc_norm"), "--no-weights"]
    ok = cli(*run, "--engine", "sglang==0.5.11", "--json")
    data = json.loads(ok.stdout)
    assert ok.returncode == 1 and data["engine"] == "sglang==0.5.11"
    assert data["engine_versions"] == [{"engine": "sglang", "version": "0.5.11", "assumed": False, "asked": "==0.5.11",
                                        "note": None}]
    bad = cli(*run, "--engine", "sglang~0.5")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert [ln for ln in bad.stderr.splitlines() if ln.startswith("d2t-lab doctor: error:") or "error:" in ln]


# -- EAGLE-3.1 drafts by release ---------------------------------------------------------------------
@pytest.mark.parametrize("engine,before,since", [("sglang", "0.5.11", "0.5.12"), ("vllm", "0.21.0", "0.22.0")])
def test_fc_norm_draft_is_an_error_before_the_engine_read_it_and_not_since(engine, before, since):
    draft = PRODUCERS / "specforge_fc_norm"  # SpecForge 0.2.0's own export: fc_norm + norm_output
    for v in (since, ENGINE_TABLE[engine].releases[-1], None):
        spec = engine if v is None else f"{engine}=={v}"
        assert not has_error(diagnose(draft, spec, check_weights=False)), spec
        fc = [f for f in diagnose(draft, spec, check_weights=False) if f.code == "variant-fc-norm"]
        assert fc and fc[0].severity == "info" and f"since {ENGINE_TABLE[engine].name} {since}" in fc[0].message
    old = _errors(draft, f"{engine}=={before}", "variant-fc-norm")
    assert old, f"{engine}=={before}: the old error"
    says = "would serve with these weights missing" if engine == "sglang" else "vLLM will not start"
    assert says in old[0].message and f"from {since}" in old[0].message
    assert old[0].message.startswith(f"{ENGINE_TABLE[engine].name} {before} ")


def test_without_a_version_every_engine_finding_names_the_release_it_assumed():
    fs = diagnose(PRODUCERS / "specforge_fc_norm", "all", check_weights=False)
    newest = {ENGINE_TABLE[k].name: ENGINE_TABLE[k].releases[-1] for k in ENGINES}
    per_engine = [f for f in fs if f.code.startswith("variant-")]
    assert len(per_engine) == 4  # fc_norm and norm_output, each engine
    for f in per_engine:
        name = f.message.split()[0]
        assert f.message.startswith(f"{name} {newest[name]} "), f.message
    assert all(a.assumed and "newest release read" in a.note for a in fs.versions)
    assert "no SGLang version given" in fs.report()


@pytest.mark.parametrize("engine,before,since", [("sglang", "0.5.16", "0.5.17"),
                                                 ("vllm", "0.18.1", "0.19.0")])  # speculators' config: 0.19.0
def test_norm_before_fc_draft_by_release(engine, before, since):
    draft = PRODUCERS / "speculators_norm_before_fc"  # speculators 0.9.0's own export
    assert not _errors(draft, f"{engine}=={since}") and not _errors(draft, engine)
    old = _errors(draft, f"{engine}=={before}", "variant-norm-before-fc")
    assert old and f"from {since}" in old[0].message


def test_vllm_reads_norm_before_fc_in_its_own_config_a_release_before_speculators_configs():
    # vLLM 0.18.0 builds input_norm, but copies norm_before_fc out of a speculators config only from 0.19.0
    flat = engine_at("vllm==0.18.0")
    assert flat.value("norm_before_fc") == "reads" and flat.value("norm_before_fc.speculators") == "absent"
    assert _errors(PRODUCERS / "speculators_norm_before_fc", "vllm==0.18.0", "variant-norm-before-fc")


def test_speculators_norm_output_is_fed_normed_from_the_release_that_reads_it():
    draft = PRODUCERS / "speculators_norm_output"
    sev = {v: [f.severity for f in diagnose(draft, f"vllm=={v}", check_weights=False) if f.code == "variant-norm-output"]
           for v in ("0.24.0", "0.25.0")}
    assert sev == {"0.24.0": ["warning"], "0.25.0": ["info"]}


# -- MLA drafts (Kimi-K2.5: model_type kimi_k2) ------------------------------------------------------
@pytest.fixture()
def kimi_mla(tmp_path):
    """The Kimi-K2.5 MLA draft config beside the Kimi-K2.5 d2t/t2d: a checkpoint without layer weights."""
    dst = tmp_path / "kimi_mla"
    dst.mkdir()
    shutil.copy(KIMI_MLA_CONFIG, dst)
    for f in ("d2t.pt", "t2d.pt"):
        shutil.copy(SAMPLES / "kimi_k25_mapping" / f, dst)
    return dst


def test_inspect_recognises_a_kimi_mla_draft(kimi_mla):
    r = inspect_path(kimi_mla)
    assert r["draft"] == {"attention": "mla", "model_type": "kimi_k2", "architectures": ["Eagle3DeepseekV2ForCausalLM"]}
    assert inspect_path(PRODUCERS / "specforge_control")["draft"]["attention"] == "mha"


def _mla(path, engine):
    return [f for f in diagnose(path, engine, check_weights=False) if f.code == "mla-draft"]


def test_doctor_recognises_a_kimi_mla_draft_and_names_the_vllm_detection_gap(kimi_mla):
    sg = _mla(kimi_mla, "sglang")
    assert [f.severity for f in sg] == ["info"] and "kimi_k25_eagle3.py" in sg[0].message
    assert any(f.severity == "error" and "no MLA EAGLE-3 draft class" in f.message for f in _mla(kimi_mla, "sglang==0.5.11"))
    assert any(f.severity == "error" and "no MLA EAGLE-3 draft class" in f.message for f in _mla(kimi_mla, "vllm==0.17.1"))
    for v in ENGINE_TABLE["vllm"].releases:
        if Version(v) >= Version("0.18.0"):  # every release with an MLA draft class misses kimi_k2 (#45760)
            gap = [f for f in _mla(kimi_mla, f"vllm=={v}") if f.severity == "warning"]
            assert gap and "#45760" in gap[0].message and "#45764" in gap[0].message, v
    # run in vLLM's CPU build 0.32.0 (scripts/make_kimi_engine_pair.py): the kimi_k2 draft served exactly as
    # the same draft typed deepseek_v2, so the gap is a warning, and the predicted outcome is to serve
    gap = [f for f in _mla(kimi_mla, "vllm==0.32.0") if f.severity == "warning"][0]
    assert gap.outcome["vllm"]["result"] == "serves" and gap.outcome["vllm"]["checked"]
    ds = json.loads(KIMI_MLA_CONFIG.read_text())
    ds["model_type"] = "deepseek_v3"  # on vLLM's detection list, but rewritten into DeepSeek's MTP model: no start
    (kimi_mla / "config.json").write_text(json.dumps(ds))
    mtp = [f for f in _mla(kimi_mla, "vllm==0.32.0") if f.severity == "error"]
    assert mtp and "Eagle3DeepSeekMTPModel" in mtp[0].message and mtp[0].outcome["vllm"]["result"] == "refuses"
    assert not [f for f in _mla(kimi_mla, "vllm==0.31.0") if f.severity == "error"]  # not read before 0.32.0
    ds["model_type"] = "deepseek_v2"  # detected as MLA, and it starts
    (kimi_mla / "config.json").write_text(json.dumps(ds))
    assert not [f for f in _mla(kimi_mla, "vllm") if f.severity in ("error", "warning")]


def test_a_release_carrying_the_kimi_fix_is_one_table_entry(kimi_mla, monkeypatch):
    """#45764 is in no release read; a later release that carries it is one more range in the table."""
    v = ENGINE_TABLE["vllm"]
    rules = dict(v.rules, **{"mla.detect": (Span(None, v.newest, "misses", "#45760"), Span("9.0.0", None, "reads", "#45764"))})
    monkeypatch.setitem(engine_table.ENGINE_TABLE, "vllm",
                        dataclasses.replace(v, releases=v.releases + ("9.0.0",), rules=rules))
    assert [f for f in _mla(kimi_mla, f"vllm=={v.newest}") if f.severity == "warning"]
    assert not [f for f in _mla(kimi_mla, "vllm==9.0.0") if f.severity == "warning"]


# -- the release a serving log states, in the report ---------------------------------------------------
def test_a_serving_logs_release_names_the_engine_the_doctor_checks(tmp_path):
    from helpers.serving.startup import engine_version_from_line, read_engine_version
    from helpers.ui.settings import RunSettings, resolve_engine

    assert read_engine_version(SAMPLES / "logs" / "vllm.log") == ("vllm", "0.10.1")  # "vLLM API server version"
    assert read_engine_version(SAMPLES / "logs" / "sglang.log") is None  # SGLang logs no version of its own
    assert engine_version_from_line("INFO 05-01 [startup.py:40] vLLM server version 0.33.0, serving model m") == \
        ("vllm", "0.33.0")
    assert engine_version_from_line("sglang: 0.5.11") == ("sglang", "0.5.11")  # python -m sglang.check_env
    ck = str(PRODUCERS / "specforge_fc_norm")
    vllm = resolve_engine(RunSettings(checkpoint=ck, logs=(str(SAMPLES / "logs" / "vllm.log"),)))
    assert vllm.engine == "vllm==0.10.1" and "vllm.log" in vllm.sources["engine"]
    given = resolve_engine(RunSettings(checkpoint=ck, engine="vllm==0.33.0", logs=(str(SAMPLES / "logs" / "vllm.log"),)))
    assert given.engine == "vllm==0.33.0"  # a version given is kept
    other = resolve_engine(RunSettings(checkpoint=ck, engine="sglang", logs=(str(SAMPLES / "logs" / "vllm.log"),)))
    assert other.engine == "sglang"  # a log of another engine says nothing about this one


@pytest.mark.slow
def test_report_bundle_shows_the_doctor_at_the_logs_sglang_release(tmp_path):
    from helpers.ui.report import run_report
    from helpers.ui.settings import RunSettings, resolve_engine

    log = tmp_path / "server.log"  # the check_env output kept above the server's own lines
    log.write_text("sglang: 0.5.11\n" + (SAMPLES / "logs" / "sglang.log").read_text())
    draft = shutil.copytree(PRODUCERS / "specforge_fc_norm", tmp_path / "my_draft")
    s = resolve_engine(RunSettings(checkpoint=str(draft), logs=(str(log),)))
    assert s.engine == "sglang==0.5.11"
    r = run_report(s, tmp_path / "bundle", notebooks=("06_checkpoint_doctor",), progress=lambda *a: None)
    assert r.ok, [x.error for x in r.runs]
    found = r.summary["numbers"]["doctor"]
    fc = [f for f in found if f["code"] == "variant-fc-norm"]
    assert fc and fc[0]["severity"] == "error" and fc[0]["message"].startswith("SGLang 0.5.11 ")
    md = (tmp_path / "bundle" / "summary.md").read_text()
    assert "sglang==0.5.11 (the sglang release stated in" in md and "SGLang 0.5.11 (llama_eagle3.py)" in md


def test_docs_rule_table_is_the_engine_table():
    from helpers.engines.docs import rule_table_markdown

    doc = (ROOT / "docs" / "doctor-findings.md").read_text()
    shown = doc.split("<!-- rule-table: generated -->\n", 1)[1].split("\n<!-- /rule-table -->", 1)[0]
    assert shown == rule_table_markdown(), "regenerate the table: python -c 'from helpers.engines.docs import " \
        "rule_table_markdown; print(rule_table_markdown())'"


def test_sglang_shifts_deepseek_family_aux_ids_only_when_the_first_is_1_from_0_5_13():
    from helpers.engines.registry import captured_layers

    for target in ("kimi_k2", "deepseek_v3"):
        assert captured_layers("sglang==0.5.12", [2, 30, 58], 61, target) == [3, 31, 59]  # unconditional +1
        assert captured_layers("sglang==0.5.13", [2, 30, 58], 61, target) == [2, 30, 58]  # as given
        assert captured_layers("sglang==0.5.13", [1, 29, 57], 61, target) == [2, 30, 58]
    assert captured_layers("sglang==0.5.13", [2, 30, 58], 61, "llama") == [3, 31, 59]  # other targets: +1
    assert captured_layers("vllm", [2, 30, 58], 61, "kimi_k2") == [2, 30, 58]  # vLLM: never shifted
    assert captured_layers("sglang==0.5.13", None, 61, "kimi_k2") == [2, 30, 58]  # the default is not shifted


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> dict:
    from conftest import script_module

    out = tmp_path_factory.mktemp("broken")
    script_module("make_broken_drafts").build(out)
    return json.loads((out / "cases.json").read_text())


def _codes(case, engine):
    args = case["args"]
    target = args[args.index("--target") + 1] if "--target" in args else None
    tcfg = args[args.index("--target-config") + 1] if "--target-config" in args else None
    return {(f.code, f.severity) for f in diagnose(case["draft"], engine, tcfg, check_weights=False, target=target)}


def test_head_and_embedding_borrowing_follow_the_release(broken):
    head = broken["head-replaced-by-target"]  # trained full-vocab head, no draft_vocab_size
    assert ("lm-head-borrowed", "warning") in _codes(head, "sglang==0.5.2")
    assert not {c for c in _codes(head, "sglang==0.5.1.post3") if c[0] == "lm-head-borrowed"}  # never borrowed then
    emb = broken["embed-other-revision"]
    assert ("embed-mismatch", "error") in _codes(emb, "vllm==0.10.0")  # 0.9.0-0.11.0 take the target's
    assert ("embed-mismatch", "warning") in _codes(emb, "vllm==0.11.1")  # its own kept from 0.11.1
    assert ("embed-mismatch", "error") in _codes(emb, "sglang")


def test_a_five_aux_layer_draft_loads_where_fc_is_sized_from_the_ids(broken):
    case = broken["aux-five-layer-draft"]
    warned = lambda engine: [f for f in diagnose(case["draft"], engine, check_weights=False)  # noqa: E731
                             if f.code == "aux-layers" and f.severity == "warning"]
    assert warned("sglang==0.5.11") and "from 0.5.12" in warned("sglang==0.5.11")[0].message
    assert warned("vllm==0.21.0") and not warned("sglang==0.5.12") and not warned("vllm==0.22.0")
