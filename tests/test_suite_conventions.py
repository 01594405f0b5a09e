"""The suite's own conventions: each test file is named by what it tests, never by when it was written, and
the bundled samples' path is built once, in conftest (`SAMPLES`, the `samples_dir` fixture), not by each test file."""
from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

TESTS = ROOT / "tests"

# words that say when a file was written, not what it tests; a year; a version number alone
WHEN = re.compile(r"(?:^|_)(?:wave\d*|first|second|third|fourth|fifth|round\d*|more|extra|misc|new|old|latest|later|"
                  r"again|part\d*|batch\d*|followup|v?\d+)(?:_|$)")


def name_says_when(name: str) -> str | None:
    """The part of a test file's name (`test_doctor_wave3.py`) that says when rather than what, or None."""
    stem = name.removeprefix("test_").removesuffix(".py")
    m = WHEN.search(stem)
    return m.group(0).strip("_") if m else None


def test_test_files_are_named_by_subject():
    bad = {p.name: name_says_when(p.name) for p in sorted(TESTS.glob("test_*.py")) if name_says_when(p.name)}
    assert not bad, f"test files named by when, not by what they test: {bad}"


def test_the_when_words_catch_the_old_names():
    for old in ("test_doctor_wave3.py", "test_doctor_second_wave.py", "test_doctor_aux_2026.py", "test_serving_2026.py",
                "test_vllm_034.py", "test_engines_more.py", "test_reliability_round4.py", "test_misc.py",
                "test_extra_checks.py", "test_new_findings.py", "test_vllm_0_34.py", "test_v2.py"):
        assert name_says_when(old), old
    for subject in ("test_doctor.py", "test_engine_truth_llamacpp_live.py", "test_mla.py", "test_gguf_loader.py",
                    "test_one_forward.py", "test_open_once.py", "test_remote_deadline.py", "test_wheel.py"):
        assert name_says_when(subject) is None, subject


# the bundled samples' folder built from the checkout's root: ROOT / "data_samples", parents[1] / "data_samples", ...
BUILDS_SAMPLES = re.compile(r"""(?:ROOT|parents\[\d\]|\.parent|NOTEBOOKS\.parent)\s*/\s*["']data_samples["']""")


def test_only_conftest_builds_the_samples_path():
    built = [f"{p.name}:{n}" for p in sorted(TESTS.rglob("*.py")) if p.name not in ("conftest.py", Path(__file__).name)
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if BUILDS_SAMPLES.search(line)]
    assert not built, "build the samples' path from conftest's SAMPLES (or the `samples_dir` fixture):\n" + "\n".join(built)
    assert BUILDS_SAMPLES.search('SAMPLES = ROOT / "data_samples"')
    assert BUILDS_SAMPLES.search('Path(__file__).resolve().parents[1] / "data_samples" / "logs"')
    assert not BUILDS_SAMPLES.search('(tmp_path / "data_samples" / "tiny_target").mkdir(parents=True)')
