"""Every declared config.json field, set to null, a wrong type and out of range, in the draft's
config (a copy of data_samples/tiny_draft_sglang) and the target's (a copy of tiny_target):
`inspect`, `doctor` and `fix` (fast) and `evaluate` and `speculate` (slow) end with exit 0, 1 or 2
and no traceback, a refusal is one line naming the field, and wherever `evaluate` or `speculate`
refuses a value the doctor reports an error naming that field (it never passes what they reject).
"""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import SAMPLES, run_main
from helpers.model import config_fields as cf
from helpers.model.config_fields import DRAFT_FIELDS, TARGET_FIELDS

# the bad values of each kind of field: null (absent), a wrong type, out of range
BAD = {
    cf.POSITIVE_INT: {"null": None, "string": "abc", "integral float": 2.0, "zero": 0},
    cf.POSITIVE_NUMBER: {"null": None, "string": "abc", "negative": -1.0},
    cf.BOOL: {"null": None, "string": "yes", "number": 2},
    cf.TEXT: {"null": None, "number": 5, "list": ["silu"]},
    cf.TEXTS: {"null": None, "string": "abc", "numbers": [5]},
    cf.OBJECT: {"null": None, "number": 5, "list": [1, 2]},
    cf.LAYER_IDS: {"null": None, "string": "abc", "negative id": [-1, 2, 3], "empty": []},
}
EXTRA = {  # out of range for fields whose kind has no range of its own
    "rope_scaling": {"unknown type": {"rope_type": "zz", "factor": 2.0}, "factor 0": {"rope_type": "linear", "factor": 0}},
    "hidden_act": {"unknown": "zz-act"},
    "rms_norm_eps": {"1.5": 1.5},
    "num_key_value_heads": {"not a divisor": 3},
    "vocab_size": {"past int32": 2**31},
}


def _cases(fields, who):
    seen = set()
    for f in fields:
        for label, value in (BAD[f.kind] | EXTRA.get(f.name, {})).items():
            key = (f.label, f.place, label)
            if key not in seen:
                seen.add(key)
                yield pytest.param(who, f, value, id=f"{who}-{f.label}{'@top' if f.place == 'top' else ''}-{label}")


DRAFT_CASES = list(_cases(DRAFT_FIELDS, "draft"))
TARGET_CASES = list(_cases(TARGET_FIELDS, "target"))
ALL_CASES = DRAFT_CASES + TARGET_CASES
# the fast subset: each field once with a value of the wrong type, and the cases the trial found
_FIELD = {(f.label, f.place): f for f in DRAFT_FIELDS}
TRIAL = [pytest.param("draft", _FIELD["eagle_config", "top"], None, id="trial-eagle_config-null"),
         pytest.param("draft", _FIELD["eagle_config", "top"], 5, id="trial-eagle_config-5"),
         pytest.param("draft", _FIELD["draft_vocab_size", "flat"], 800.0, id="trial-draft_vocab_size-800.0"),
         pytest.param("draft", _FIELD["eagle_config.eagle_aux_hidden_state_layer_ids", "eagle"], "abc",
                      id="trial-aux-ids-abc"),
         pytest.param("draft", _FIELD["num_attention_heads", "flat"], 0, id="trial-num_attention_heads-0")]
FAST_CASES = [c for c in ALL_CASES if c.id.split("-")[-1] in ("string", "number")] + TRIAL


def _set(cfg: dict, f: cf.Field, value) -> None:
    if f.place == "eagle":
        cfg["eagle_config"] = dict(cfg.get("eagle_config") or {}, **{f.name: value})
    else:
        cfg[f.name] = value


@pytest.fixture
def pair(tmp_path):
    """(draft folder, target folder, a fresh output path), copies of the bundled tiny pair."""
    draft, target = tmp_path / "draft", tmp_path / "target"
    shutil.copytree(SAMPLES / "tiny_draft_sglang", draft)
    shutil.copytree(SAMPLES / "tiny_target", target)
    return draft, target, tmp_path / "fixed"


def _edit(pair, who, f, value):
    draft, target, _ = pair
    path = (draft if who == "draft" else target) / "config.json"
    cfg = json.loads(path.read_text())
    _set(cfg, f, value)
    path.write_text(json.dumps(cfg))
    return path


def _run(*args):
    """One command in process; an exception escaping main fails the test (a traceback)."""
    r = run_main(*args)
    assert r.returncode in (0, 1, 2), (args, r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    if r.returncode == 2:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return r


def _doctor(pair, who):
    draft, target, _ = pair
    r = _run("doctor", draft, "--target", target, "--no-weights", "--json")
    if r.returncode == 2:
        return r, None
    return r, json.loads(r.stdout)


def _doctor_errs_on(doc, f) -> bool:
    return any(x["severity"] == "error" and f.name in x["message"] for x in doc["findings"])


def _config_commands(pair, who, f):
    """inspect, doctor and fix on the edited pair; each refusal names the field."""
    draft, target, out = pair
    for r in (_run("inspect", draft),
              _run("fix", draft, out, "--target-config", target / "config.json", "--dry-run")):
        if r.returncode == 2 and "config.json:" in r.stderr and who == "draft":  # a refusal of the config
            assert f.name in r.stderr, r.stderr
    r, doc = _doctor(pair, who)
    return r, doc


def test_the_unedited_pair_passes_inspect_and_doctor(pair):
    draft, target, out = pair
    assert _run("inspect", draft).returncode == 0
    r, doc = _doctor(pair, "draft")
    assert r.returncode == 0 and not any(x["code"] == "config-invalid" for x in doc["findings"])


@pytest.mark.slow
def test_the_unedited_pair_passes_evaluate_and_speculate(pair):
    draft, target, out = pair
    assert _run("evaluate", draft, "--samples", SAMPLES / "tiny_hidden_states", "--max-samples", 1,
                "--readings", "offset").returncode == 0
    assert _run("speculate", draft, "--target", target, "--max-prompts", 1, "--max-new-tokens", 2,
                "--readings", "offset", "--steps", 1).returncode == 0


def _config_only(pair, who, f, value):
    _edit(pair, who, f, value)
    r, doc = _config_commands(pair, who, f)
    if (value is not None or f.required) and doc is not None:
        # a present value of the wrong type or out of range (or a required size absent) is an error naming it
        assert _doctor_errs_on(doc, f), (f.label, value, [x["message"] for x in doc["findings"]])
    return doc


@pytest.mark.parametrize(("who", "f", "value"), FAST_CASES)
def test_config_commands_never_trace_back(pair, who, f, value):
    doc = _config_only(pair, who, f, value)
    if value is None:  # null is absent: no finding names the field
        assert not any(x["code"] == "config-invalid" for x in doc["findings"]), doc["findings"]


@pytest.mark.slow
@pytest.mark.parametrize(("who", "f", "value"), ALL_CASES)
def test_doctor_errs_wherever_evaluate_or_speculate_refuse(pair, who, f, value):
    draft, target, _ = pair
    doc = _config_only(pair, who, f, value)
    runs = [_run("speculate", draft, "--target", target, "--max-prompts", 1, "--max-new-tokens", 2,
                 "--readings", "offset", "--steps", 1)]
    if who == "draft":
        runs.append(_run("evaluate", draft, "--samples", SAMPLES / "tiny_hidden_states", "--max-samples", 1,
                         "--readings", "offset"))
    refused = [r for r in runs if r.returncode == 2]
    if refused:
        assert doc is not None and _doctor_errs_on(doc, f), (f.label, value, refused[0].stderr,
                                                            [x["message"] for x in (doc or {}).get("findings", [])])
        if value is not None:  # a value refused is named; an absent one may be refused by what it implies
            assert any(f.name in r.stderr for r in refused), [r.stderr for r in refused]


TARGET = {f.name: f for f in TARGET_FIELDS}
# what the doctor said when it read a wrong value as an absent one
MISREAD = {"draft_vocab_size": ("has no draft_vocab_size",),
           "eagle_config": ("names no aux layer ids", "no ids (default)"),
           "eagle_config.eagle_aux_hidden_state_layer_ids": ("names no aux layer ids", "no ids (default)")}


@pytest.mark.parametrize(("who", "f", "value"), TRIAL + [
    pytest.param("target", TARGET["rope_theta"], "abc", id="trial-target-rope_theta-abc"),
    pytest.param("target", TARGET["max_position_embeddings"], "4096", id="trial-target-max_position_embeddings-str")])
def test_the_trial_cases_are_named_not_misread(pair, who, f, value):
    """The trial's cases: a value present but wrong is refused by name (evaluate, speculate) and is the
    doctor's config-invalid error naming it, never read as absent; null is absent and passes."""
    draft, target, _ = pair
    doc = _config_only(pair, who, f, value)
    said = [x["message"] for x in doc["findings"]]
    if value is not None:
        assert not [m for m in said if any(w in m for w in MISREAD.get(f.label, ()))], said
    invalid = [x for x in doc["findings"] if x["code"] == "config-invalid"]
    if value is None:
        assert not invalid, invalid
        return
    assert invalid and all(x["severity"] == "error" and f.name in x["message"] for x in invalid), invalid
    r = _run("speculate", draft, "--target", target, "--max-prompts", 1, "--max-new-tokens", 2, "--readings", "offset")
    assert r.returncode == 2 and f.name in r.stderr and "config.json" in r.stderr, r.stderr
    if who == "draft":
        r = _run("evaluate", draft, "--samples", SAMPLES / "tiny_hidden_states", "--max-samples", 1)
        assert r.returncode == 2 and f.name in r.stderr and "config.json" in r.stderr, r.stderr
