"""The doctor's `eagle3-as-eagle` for a server's stated algorithm goes through the registry, and its fix
has one home (`helpers.engines.registry.EAGLE3_FLAGS`): the finding a log, launch command or server
states alone (`helpers.serving.startup.Setup.wrong_algorithm`), the doctor's own check on a checkpoint
(`helpers.doctor.checks_target.check_algorithm`) and what `probe`, `logs --checkpoint` and `report
--log` print (`helpers.doctor.served_algorithm.algorithm_findings`) name the same flags."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers.doctor.registry import check_finding
from helpers.doctor.served_algorithm import algorithm_findings, finding_lines
from helpers.engines.registry import EAGLE3_FLAGS
from helpers.serving.startup import read_setup, setup_from_text
from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "fixtures" / "serving"
DRAFT = SAMPLES / "engine_llama" / "draft"


@pytest.mark.parametrize("log", ["sglang_0.5.23_eagle_flag.log", "vllm_0.34.0_eagle_method.log"])
def test_the_finding_a_log_states_is_the_registrys_and_names_the_one_fix(log):
    setup = read_setup(LOGS / log)
    wrong = setup.wrong_algorithm()
    check_finding(wrong["code"], wrong["severity"], None, None)  # declared: code and severity
    assert wrong["code"] == "eagle3-as-eagle" and wrong["fix"] == f"serve with {EAGLE3_FLAGS}"
    (found,) = algorithm_findings(setup)
    assert found == wrong
    (line,) = finding_lines([found])
    assert line.startswith("  finding: eagle3-as-eagle (error): ") and line.endswith(f"; fix: serve with {EAGLE3_FLAGS}")


def test_the_doctors_own_check_names_the_same_fix():
    setup = read_setup(LOGS / "sglang_0.5.23_eagle_flag.log")
    (found,) = algorithm_findings(setup, str(DRAFT))  # the draft's fc width decides: EAGLE-3
    assert found["code"] == "eagle3-as-eagle" and found["fix"] == setup.wrong_algorithm()["fix"]
    assert found["algorithm"] == setup.algorithm


def test_no_finding_where_the_algorithm_is_eagle3_or_the_draft_unknown():
    assert algorithm_findings(setup_from_text("--speculative-algorithm EAGLE3 --speculative-draft-model-path "
                                              "x/EAGLE3-8B", "--launch-command")) == []
    assert algorithm_findings(setup_from_text("--speculative-algorithm EAGLE", "--launch-command")) == []


def test_a_finding_the_registry_does_not_declare_is_refused():
    class Stated:  # a setup whose finding has a severity the registry does not declare for the code
        family = "eagle"

        def wrong_algorithm(self):
            return {"code": "eagle3-as-eagle", "severity": "info", "message": "m", "fix": "f"}

    with pytest.raises(ValueError, match="eagle3-as-eagle"):
        algorithm_findings(Stated())


@pytest.fixture(scope="module")
def drafts(tmp_path_factory):
    """Every bundled draft, and every mutated copy of the two engine pairs' drafts (broken configs,
    tensors and mappings: `scripts.engine_mutations`), GGUF and MLA included."""
    from scripts.engine_truth import make_mutations

    bundled = [SAMPLES / d for d in ("tiny_draft_sglang", "tiny_draft_absolute", "tiny_draft_no_d2t",
                                     "tiny_draft_speculators", "kimi_draft_mla", "kimi_k25_mapping")]
    bundled += [SAMPLES / "engine_llama" / "draft", SAMPLES / "engine_kimi" / "draft"]
    bundled += sorted(p for p in (SAMPLES / "producers").iterdir() if p.is_dir())
    return bundled + sorted(make_mutations(tmp_path_factory.mktemp("mutations")).values())


def test_the_served_check_is_the_doctors_finding_without_the_other_checks(drafts):
    """`served_as_eagle` runs check_algorithm alone; the doctor run whole with algorithm 'eagle' must find
    exactly the same eagle3-as-eagle (message, fix, predicted outcomes) on every draft, broken or not."""
    from helpers.core.errors import BadInputError
    from helpers.doctor.diagnose import diagnose, served_as_eagle

    seen = {"found": 0, "none": 0, "refused": 0}
    for d in drafts:
        try:
            whole = [f.as_dict() for f in diagnose(d, check_weights=False, algorithm="eagle")
                     if f.code == "eagle3-as-eagle"][:1]
        except BadInputError as e:
            with pytest.raises(BadInputError) as alone:
                served_as_eagle(d)
            assert str(alone.value) == str(e), d
            seen["refused"] += 1
            continue
        assert [f.as_dict() for f in served_as_eagle(d)] == whole, d
        seen["found" if whole else "none"] += 1
    assert seen["found"] >= 10 and seen["none"] >= 3, seen  # both answers were compared, on many drafts
