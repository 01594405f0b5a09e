"""The findings registry (`helpers/doctor/registry.py`) holds one entry per code, both ways.

A code the package can emit without an entry fails here (the source is scanned for every way a
finding is made), and so does an entry no test names; `Finding` refuses what its entry does not
declare; docs/doctor-findings.md's "Every finding" table is the registry rendered; the outcome
tables' keys each belong to an entry. The four codes no other test names are built here, on
copies of the bundled draft.
"""
from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers.engines import table as engine_table
from helpers.doctor.diagnose import diagnose
from helpers.doctor.findings import Finding
from helpers.doctor.registry import REGISTRY, cannot_repair, markdown_table, render_docs
from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]
HELPERS = ROOT / "helpers"
SAMPLE = SAMPLES / "tiny_draft_sglang"
CODE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)+$")
# first arguments of `c.add(...)` that are not a literal: each such call site picks among codes it
# states as literals nearby (a tuple's first item, a dict's value, a module constant), scanned below
DYNAMIC_ADDS = {("checks_target.py", "code"), ("checks_variants.py", "code"), ("checks_config.py", "CODE")}
# outcome-table rows no finding names today (the doctor reports t2d-mismatch as an error only)
UNNAMED_ROWS = {"t2d-mismatch.warning"}
# codes no other test names: built by the test here that is named
TESTED_HERE = {"config-missing": "test_weights_without_config_json", "config-incomplete":
               "test_a_speculators_config_without_its_layer_section", "kit-unmodelled":
               "test_an_activation_the_kits_forward_does_not_model", "d2t-unverified":
               "test_d2t_neither_reading_can_be_checked"}


def _emitted() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """{code: files} for every code literal the package makes a finding with, and the non-literal
    first arguments of `.add(` calls in helpers/doctor."""
    codes: dict[str, set[str]] = {}
    dynamic = set()

    def note(value, path):
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and CODE.match(value.value):
            codes.setdefault(value.value, set()).add(path.name)

    for path in HELPERS.rglob("*.py"):
        if path.name == "registry.py":
            continue
        doctor = path.parent.name == "doctor"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args:
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                if doctor and name == "add" and isinstance(fn, ast.Attribute) and getattr(fn.value, "id", "") == "c":
                    if isinstance(node.args[0], ast.Constant):
                        note(node.args[0], path)
                    else:
                        dynamic.add((path.name, ast.unparse(node.args[0])))
                elif name == "Finding":
                    note(node.args[0], path)
            elif isinstance(node, ast.Dict):  # {"code": "...", ...} (serving's findings as dicts)
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and k.value == "code":
                        note(v, path)
            elif doctor and isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CODE" for t in node.targets):
                note(node.value, path)
        if path.name == "checks_variants.py":  # (code, keys, severity, message, rule) tuples, and code-keyed dicts
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Tuple) and node.elts:
                    note(node.elts[0], path)
                elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                    note(node.slice, path)
        if path.name == "checks_target.py":  # {field: code} of the target comparison
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
                    for v in node.values:
                        note(v, path)
    return codes, dynamic


def test_every_code_emitted_has_an_entry():
    codes, dynamic = _emitted()
    assert dynamic == DYNAMIC_ADDS, f"a finding made from a non-literal code; list it here: {dynamic - DYNAMIC_ADDS}"
    assert len(codes) >= 50, sorted(codes)  # the scan finds the codes (it would pass vacuously otherwise)
    missing = {c: sorted(codes[c]) for c in codes if c not in REGISTRY}
    assert not missing, f"finding codes without an entry in helpers/doctor/registry.py: {missing}"


def test_every_entry_is_emitted_and_has_a_test():
    codes, _ = _emitted()
    unused = sorted(set(REGISTRY) - set(codes))
    assert not unused, f"registry entries no check emits: {unused}"
    texts = {p.name: p.read_text() for p in (ROOT / "tests").glob("test_*.py") if p.name != Path(__file__).name}
    here = Path(__file__).read_text()
    untested = []
    for code in REGISTRY:
        if code in TESTED_HERE:
            name = TESTED_HERE[code]
            body = here.split(f"def {name}(", 1)
            assert len(body) == 2, f"{name} (named for {code}) does not exist"
            assert f'"{code}"' in body[1].split("\ndef ", 1)[0], f"{name} does not check {code}"
        elif not any(re.search(rf"[\"'`]{re.escape(code)}[\"'`]", t) for t in texts.values()):
            untested.append(code)
    assert not untested, f"registry entries no test names: {untested}"


def test_a_finding_its_entry_does_not_declare_is_refused():
    ok = Finding("d2t-absolute", "error", "m", "f", effect="d2t.past-vocab")
    assert ok.effect_key == "d2t.past-vocab"
    with pytest.raises(ValueError, match="no entry"):
        Finding("no-such-code", "error", "m", "f")
    with pytest.raises(ValueError, match="severity 'info'"):
        Finding("d2t-absolute", "info", "m", "f")
    with pytest.raises(ValueError, match="effect 'keys.missing'"):
        Finding("d2t-absolute", "error", "m", "f", effect="keys.missing")
    with pytest.raises(ValueError, match="engine 'sglang'"):
        Finding("peagle-draft", "error", "m", "f", effect="peagle.speculators", engine="sglang")


def test_every_outcome_table_key_belongs_to_an_entry():
    keys = set()
    for name in dir(engine_table):
        table = getattr(engine_table, name)
        if name.endswith("_OUTCOMES") and isinstance(table, dict):
            keys |= set(table)
    assert len(keys) > 40
    declared = {k for e in REGISTRY.values() for k in e.effect_keys}
    assert UNNAMED_ROWS <= keys and not UNNAMED_ROWS & declared, "UNNAMED_ROWS is stale: update it"
    assert not sorted(keys - {"healthy"} - declared - UNNAMED_ROWS), "outcome rows no finding can name"


def test_docs_table_is_the_registry_rendered():
    doc = (ROOT / "docs" / "doctor-findings.md").read_text()
    assert render_docs(doc) == doc, "stale: run python -m helpers.doctor.registry docs/doctor-findings.md"
    rows = [ln for ln in markdown_table().splitlines()[2:]]
    assert [re.match(r"\| `([a-z0-9-]+)`", r).group(1) for r in rows] == sorted(REGISTRY)


def test_fix_refusal_reads_the_registry():
    assert cannot_repair("d2t-arange") == REGISTRY["d2t-arange"].cannot_repair == "needs the producer's d2t tensor"
    assert cannot_repair("context-length") == "not something fix changes"
    repairable = sorted(c for c, e in REGISTRY.items() if e.repairs)
    assert repairable == ["d2t-absolute", "d2t-missing", "gguf-d2t-offsets", "key-layout", "vocab-size-mismatch"]


# -- the codes no other test names, each on a copy of the bundled draft -----------------------------
def _copy(tmp_path: Path, cfg_edit=None, tensors_edit=None, config=True) -> Path:
    d = tmp_path / "draft"
    shutil.copytree(SAMPLE, d)
    if tensors_edit:
        t = load_file(str(d / "model.safetensors"))
        tensors_edit(t)
        save_file(t, str(d / "model.safetensors"))
    cfg = json.loads((d / "config.json").read_text())
    if cfg_edit:
        cfg_edit(cfg)
    (d / "config.json").write_text(json.dumps(cfg))
    if not config:
        (d / "config.json").unlink()
    return d


def _codes(path: Path) -> dict[str, str]:
    return {f.code: f.severity for f in diagnose(path, "all")}


def test_weights_without_config_json(tmp_path):
    assert _codes(_copy(tmp_path, config=False)).get("config-missing") == "warning"


def test_a_speculators_config_without_its_layer_section(tmp_path):
    found = _codes(_copy(tmp_path, lambda c: c.update(speculators_model_type="eagle3")))
    assert found.get("config-incomplete") == "error"


def test_an_activation_the_kits_forward_does_not_model(tmp_path):
    found = _codes(_copy(tmp_path, lambda c: c.update(hidden_act="gelu_pytorch_tanh")))
    assert found.get("kit-unmodelled") == "info"
    assert "error" not in found.values()


def test_d2t_neither_reading_can_be_checked(tmp_path):
    def zeros(t):  # all zeros, no t2d and no embedding: the target vocab is unknown
        t["d2t"] = torch.zeros_like(t["d2t"])
        del t["t2d"], t["embed_tokens.weight"]

    assert _codes(_copy(tmp_path / "a", tensors_edit=zeros, config=False)).get("d2t-unverified") == "warning"

    def interleaved(t):  # no t2d; evens then odds: distinct and in range read either way, not monotonic
        del t["t2d"]
        i = torch.arange(t["d2t"].numel())
        h = i.numel() // 2
        t["d2t"] = torch.where(i < h, 2 * i, 2 * (i - h) + 1).to(t["d2t"].dtype)

    assert _codes(_copy(tmp_path / "b", tensors_edit=interleaved)).get("d2t-unverified") == "info"
