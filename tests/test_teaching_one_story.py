"""Notebooks 00 and 08 state each engine behaviour only as the engine table does (teaching, fifth edition).

- what an engine does with a d2t id past the target vocab, with a full-vocab d2t, with a side file: rendered from
  the engine table (helpers.teach.lessons), never written by hand in the notebooks' source;
- the setting dimension: where the released code splits an outcome row by setting (SGLang's tensor parallelism),
  the engine table holds the split (`Engine.settings`), the doctor's outcome carries it, and the notebooks render it;
  the released lines it rests on are compared with the unpacked wheel when it is at hand;
- the words behind every accept-length number are defined once and their identities hold on a real run;
- the two lessons' exercises compute their answers with the kit.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest

from helpers.engines.table import ENGINE_TABLE, QUOTED
from helpers.teach import lessons
from helpers.teach import primer_exercises as ex
from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]
NB00 = ROOT / "notebooks" / "00_offset_encoding_primer.ipynb"
NB08 = ROOT / "notebooks" / "08_debug_a_checkpoint.ipynb"


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


def test_every_past_vocab_row_is_the_engine_tables_own():
    rows = [r for r in lessons.version_story() if r["key"] == "d2t.past-vocab"]
    table = {(e.name, sp.pr, sp.value) for e in ENGINE_TABLE.values()
             for spans in (e.outcomes.get("d2t.past-vocab", ()),
                           *(st.spans for st in e.settings.get("d2t.past-vocab", ()) if st.spans))
             for sp in spans if sp.value is not None}
    words = {(name, pr, lessons._value_words(v)) for name, pr, v in table}
    for r in rows:
        assert any((r["engine"], r["source"]) == (n, pr) and r["what it does"].startswith(w) for n, pr, w in words), r
        assert "not in the engine table" not in r["source"]
    # SGLang's table row is labelled with the setting it holds for, and the other setting follows it, both the table's
    sg = [r for r in rows if r["engine"] == "SGLang"]
    own = [st for st in ENGINE_TABLE["sglang"].settings["d2t.past-vocab"] if st.spans is None]
    assert [r["setting"] for r in sg] == [st.name for st in ENGINE_TABLE["sglang"].settings["d2t.past-vocab"]]
    assert sg[0]["setting"] == own[0].name and not sg[0]["split"] and sg[1]["split"]
    assert sg[0]["what it does"].startswith("starts, then dies on the first request that meets it")
    assert sg[1]["what it does"].startswith("serves, accept length about 1")
    # a row the table does not split says so, never "every setting"
    assert {r["setting"] for r in rows if r["engine"] != "SGLang"} == {lessons.ANY_SETTING}


def test_the_setting_split_is_the_engine_tables_and_the_doctor_carries_it(tmp_path):
    """The split lives in helpers.engines.table (Engine.settings): a table without it renders no split, a bad split
    is refused by check_table, and the doctor's predicted outcome names the setting its line holds for."""
    from dataclasses import replace

    from helpers.engines.outcomes import Serve, s
    from helpers.engines.table import Setting
    from helpers.engines.registry import check_table, engine_at
    from helpers.doctor.diagnose import diagnose

    sg = ENGINE_TABLE["sglang"]
    o = engine_at("sglang").outcome("d2t.past-vocab")
    assert o["setting"] == "one GPU (tp = 1), or CPU" and o["result"] == "crashes"
    assert [(x["setting"], x["result"], x["accept"]) for x in o["other_settings"]] == \
        [("tensor parallel (tp > 1)", "serves", "about-1")]
    assert "setting" not in engine_at("vllm").outcome("d2t.past-vocab")  # vLLM's row is not split
    notes = lessons.setting_notes(diagnose(SAMPLES / "tiny_draft_absolute", "sglang"))
    assert len(notes) == 1 and "tensor parallel (tp > 1)" in notes[0] and "about 1" in notes[0]
    assert lessons.setting_notes(diagnose(SAMPLES / "tiny_draft_absolute", "vllm")) == []
    # the story follows the table: without the split, SGLang's row is one row for any setting
    table = dict(ENGINE_TABLE)
    try:
        ENGINE_TABLE["sglang"] = replace(sg, settings={})
        rows = [r for r in lessons.version_story(["sglang"]) if r["key"] == "d2t.past-vocab"]
        assert [r["setting"] for r in rows] == [lessons.ANY_SETTING]
    finally:
        ENGINE_TABLE.clear()
        ENGINE_TABLE.update(table)
    own = Setting("a", "x")
    other = Setting("b", "y", (s(None, None, Serve("serves", "about-1")),))
    for bad in ({"d2t.past-vocab": (own,)},  # one setting is no split
                {"d2t.past-vocab": (own, replace(other, spans=None))},  # two settings claim the row
                {"no.such.outcome": (own, other)},  # no such outcome row
                {"d2t.past-vocab": (own, replace(other, spans=(s(None, None, "serves"),)))}):  # not an outcome
        with pytest.raises(ValueError):
            check_table({"sglang": replace(sg, settings=bad)})
    check_table({"sglang": replace(sg, settings={"d2t.past-vocab": (own, other)})})


def test_the_full_vocab_rule_is_a_row_of_the_version_story():
    """vLLM's mapping parameter for a full-vocab draft: the engine table's rule d2t.param, rendered in the version
    story, and what the notebooks and the quoted line point to."""
    v = ENGINE_TABLE["vllm"]
    spans = v.rules["d2t.param"]
    assert [sp.value for sp in spans] == ["always", "reduced-only"]
    rows = [r for r in lessons.version_story(["vllm"]) if r["key"] == "d2t.param"]
    topic = dict((k, t) for _kind, k, t in lessons.STORY)["d2t.param"]
    assert len(rows) == 2 and rows[1]["releases"].startswith(spans[1].since) and "There is no module" in rows[1]["source"]
    assert "first released in 0.30.0" in rows[1]["source"]  # the release between the two read ones, said in words
    quoted = [w for _e, _r, f, _n, text, w in __import__("helpers.teach.primer", fromlist=["x"]).ENGINE_LINES
              if "draft_vocab_size != target_vocab_size" in text]
    assert quoted and f"'{topic.split(' (')[0]}'" in quoted[0]
    src00 = "\n".join(_cells(NB00, "markdown"))
    assert topic.split(" (")[0] in src00  # section 3 and 6 point to that topic by name


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


def test_each_quoted_setting_line_names_a_setting_of_the_engine_table():
    """The quotations are keyed by the table's own setting names: renaming or dropping a setting fails here."""
    names = {(k, key, st.name) for k, e in ENGINE_TABLE.items() for key, sts in e.settings.items() for st in sts}
    assert set(lessons.SETTING_LINES) <= names
    assert {n for n in names if n[0] == "sglang"} == set(lessons.SETTING_LINES)  # every setting of SGLang's split quoted


def test_setting_lines_are_the_released_ones_when_the_wheel_is_at_hand():
    wheel = _sglang_wheel()
    if wheel is None:
        pytest.skip("sglang 0.5.23 not unpacked (pip download --no-deps sglang==0.5.23 -d /tmp/sg && unzip)")
    lines = [x for (key, _name, _setting), more in lessons.SETTING_LINES.items() if key == "sglang" for x in more]
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
    from helpers.acceptance.sampling import exact_chain_acceptance  # noqa: F401  (the kit's closed form)
    from helpers.engines.acceptance_rules import get_rule  # noqa: F401
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
