"""Notebooks 00 and 08 state each engine behaviour only as the engine table does (teaching, fifth edition).

- what an engine does with a d2t id past the target vocab, with a full-vocab d2t, with a side file: rendered from
  the engine table (helpers.teach.lessons), never written by hand in the notebooks' source;
- the one setting split the table lacks (SGLang's tensor parallelism) is stated once, in `lessons.SETTINGS`, with
  the released lines it rests on (compared with the unpacked wheel when it is at hand);
- the words behind every accept-length number are defined once and their identities hold on a real run;
- the two lessons' exercises compute their answers with the kit.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest

from helpers.core.engine_table import ENGINE_TABLE, QUOTED
from helpers.teach import lessons
from helpers.teach import primer_exercises as ex

ROOT = Path(__file__).resolve().parents[1]
NB00 = ROOT / "notebooks" / "00_offset_encoding_primer.ipynb"
NB08 = ROOT / "notebooks" / "08_debug_a_checkpoint.ipynb"
SAMPLES = ROOT / "data_samples"


def _cells(path, kind=None):
    return [c.source for c in nbformat.read(path, as_version=4).cells if kind is None or c.cell_type == kind]


# Phrases that state an engine's behaviour with a broken mapping in words of their own: the notebooks render these
# facts from the table (lessons.version_story_table / past_vocab_story / outcomes_for), so none may be typed by hand.
HAND_WRITTEN = [
    r"dies on the first request", r"starts,? then dies", r"masked to a zero vector", r"out-of-bounds read",
    r"silent(ly)? (wrong|reject)", r"device-side assert", r"no engine opens", r"served by vLLM with its zero tensor",
    r"exists only with a reduced vocab", r"an error \(on a GPU", r"says the checkpoint has no\s+`?d2t`? tensor",
    r"wrong ids in range \(absolute ids",
]


@pytest.mark.parametrize("path", [NB00, NB08], ids=["00", "08"])
def test_no_engine_behaviour_is_written_by_hand_in_the_notebooks(path):
    text = "\n".join(_cells(path))
    found = [p for p in HAND_WRITTEN if re.search(p, text, flags=re.IGNORECASE)]
    assert not found, f"{path.name} states by hand what the engine table holds: {found}"


def test_the_notebooks_render_the_past_vocab_story_and_the_outcomes_from_the_table():
    src00, src08 = "\n".join(_cells(NB00, "code")), "\n".join(_cells(NB08, "code"))
    assert "lessons.version_story_table()" in src00 and "lessons.past_vocab_story()" in src00
    assert "lessons.past_vocab_lines()" in src00 and "lessons.past_vocab_counts(" in src00
    assert "lessons.outcomes_for(" in src08 and "lessons.past_vocab_counts(" in src08


def test_every_past_vocab_row_is_the_tables_or_says_it_is_not():
    rows = [r for r in lessons._story_rows() if r["key"] == "d2t.past-vocab"]
    table = {(e.name, sp.pr) for e in ENGINE_TABLE.values() for sp in e.outcomes.get("d2t.past-vocab", ())
             if sp.value is not None}
    for r in rows:
        assert (r["engine"], r["source"]) in table or "not in the engine table" in r["source"], r
    # SGLang's table row is labelled with the setting it describes, and the split-off setting follows it
    sg = [r for r in rows if r["engine"] == "SGLang"]
    assert [r["setting"] for r in sg] == ["one GPU (tp = 1), or CPU", "tensor parallel (tp > 1)"]
    assert sg[0]["what it does"].startswith("starts, then dies on the first request that meets it")
    assert sg[1]["what it does"].startswith("serves, accept length about 1")
    # the version story keeps one row per span of the table (the split row is only added in the rendered table)
    assert len(lessons.version_story()) + len(lessons.setting_rows()) == len(lessons.version_story_table())


def test_the_wrong_ids_topic_no_longer_claims_absolute_ids_stay_in_range():
    topics = {key: topic for _k, key, topic in lessons.STORY}
    assert "below V" in topics["d2t.wrong-ids"] and "past" in topics["d2t.past-vocab"]
    reach = lessons.past_vocab_counts(SAMPLES / "tiny_draft_absolute")
    assert reach["largest i + d2t[i]"] >= reach["V"] and reach["outcome key"] == "d2t.past-vocab"
    assert lessons.past_vocab_counts(SAMPLES / "tiny_draft_sglang")["outcome key"] == "d2t.wrong-ids"


def _sglang_wheel() -> Path | None:
    for base in (os.environ.get("D2T_SGLANG_WHEEL_DIR"), "/tmp/sg"):
        if base and (Path(base) / "sglang" / "srt").is_dir():
            return Path(base)
    return None


def test_setting_lines_are_the_released_ones_when_the_wheel_is_at_hand():
    wheel = _sglang_wheel()
    if wheel is None:
        pytest.skip("sglang 0.5.23 not unpacked (pip download --no-deps sglang==0.5.23 -d /tmp/sg && unzip)")
    lines = list(lessons.SETTING_LINES[("sglang", "d2t.past-vocab")])
    for _setting, _value, _how, more in lessons.SETTINGS[("sglang", "d2t.past-vocab")][1]:
        lines.extend(more)
    assert QUOTED["sglang"].release == "0.5.23"
    for file, n, text in lines:
        got = (wheel / file).read_text().splitlines()[n - 1].strip()
        assert got == text, (file, n, got)


def test_definitions_and_their_identities_hold_on_a_run():
    from types import SimpleNamespace

    import numpy as np

    run = SimpleNamespace(verify_steps=10, accepted_per_position=np.array([6, 3, 1]), mean=2.0,
                          per_position_unconditional=[0.6, 0.3, 0.1],
                          per_position_conditional=[0.6, 0.5, 1 / 3])
    t = lessons.rate_identity(run)
    assert list(t["product of conditional 0..j"]) == pytest.approx(list(t["unconditional"]), abs=1e-3)
    assert t.attrs["1 + sum of unconditional"] == pytest.approx(run.mean)
    text = lessons.define("draft", "draft tokens", "interval mean", "pooled mean")
    assert "NOT a drafted token" in text and "min(K, tokens left - 1)" in text and "last interval" in text
    with pytest.raises(KeyError):
        lessons.define("no such word")


@pytest.mark.parametrize("path", [NB00, NB08], ids=["00", "08"])
def test_each_rate_and_mean_is_defined_where_the_notebook_prints_it(path):
    src = "\n".join(_cells(path, "code"))
    # 00 prints each definition where its number first appears; 08, read after it, names them (recall)
    assert ("lessons.define(" if path == NB00 else "lessons.recall(") in src
    if path == NB08:
        assert "lessons.step_count(" in src and "lessons.rate_identity(" in src
        assert '"interval mean", "pooled mean"' in src


def test_the_lessons_exercises_compute_their_answers():
    from helpers.core.acceptance_rules import exact_chain_acceptance, get_rule  # noqa: F401  (the kit's closed form)
    from helpers.io.checkpoint import load_mapping

    sol = ex.lesson_solutions()
    p = ex.SAMPLED_P
    assert sol[12] == round(1 + p[0] + p[0] * p[1] + p[0] * p[1] * p[2], 2)
    small = load_mapping(SAMPLES / "tiny_draft_sglang")
    assert sol[13] == ex.GGUF_DRAFT_ID + int(small.d2t[ex.GGUF_DRAFT_ID])
    for n, answer in sol.items():
        assert ex.check_lesson(n, answer).startswith("✓ right")
        assert ex.check_lesson(n, None).startswith("✗ not answered yet")
    assert "temperature 0" in ex.check_lesson(12, 1 + len(p))
    assert "offset" in ex.check_lesson(13, int(small.d2t[ex.GGUF_DRAFT_ID]))
    assert ex.check_lesson(12, "x").startswith("✗ wrong type")
    src = "\n".join(_cells(NB00))
    assert src.count("primer_exercises.check_lesson(") == 2 and str(sol[13]) not in src


def test_the_engine_pair_served_table_reads_the_recorded_runs():
    from helpers.ui import checkpoint_debug as debug

    t = debug.served_per_run()
    healthy = t.xs("healthy", level="run").iloc[0]
    assert healthy["drafts"] * 3 == healthy["draft tokens"]  # vLLM: every draft a chain of K
    assert healthy["pooled: /metrics"] == pytest.approx(1 + healthy["accepted"] / healthy["drafts"], abs=1e-4)
    assert healthy["pooled: answers"] == healthy["pooled: /metrics"] == healthy["pooled: log lines"]
    assert healthy["log's last interval mean"] != healthy["pooled: /metrics"]  # the interval is not the run
    lc = t.xs("healthy (converted to GGUF)", level="run").iloc[0]
    assert lc["draft tokens"] < 3 * lc["drafts"]  # llama.cpp: min(K, tokens left - 1)
    assert t.xs("d2t-absolute", level="run").iloc[0]["engine's error"].startswith("IndexError")


@pytest.mark.slow
def test_notebook_08_without_the_engine_environments(tmp_path, run_notebook, monkeypatch):
    """live_engine = True with D2T_ENGINE_VENV / D2T_LLAMACPP_VENV pointing at missing folders: the recorded runs."""
    monkeypatch.setenv("D2T_ENGINE_VENV", str(tmp_path / "no-engine"))
    monkeypatch.setenv("D2T_LLAMACPP_VENV", str(tmp_path / "no-llamacpp"))
    nb = run_notebook(NB08, tmp_path, {"live_engine": True, "work_dir": str(tmp_path / "work"),
                                       "output_dir": str(tmp_path / "out")})
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outs if o.get("output_type") == "error"]
    text = "\n".join(o.get("text", "") for o in outs if o.get("output_type") == "stream")
    assert "no engine environment" in text and "recorded real runs" in text
    assert re.search(r"healthy copy: predicted [\d.]+ .*engine-free [\d.]+; served by vLLM [\d.]+", text)
