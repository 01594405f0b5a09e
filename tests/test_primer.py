"""The primer's toy vocabularies, failure modes, exercise checkers and engine mimics; notebook 00
executed with and without solutions, and every number in its prose found in its outputs."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SAMPLES, check_executed
from teaching_text import answers_in_prose_above, check_cells, printed, printed_text, prose_numbers

from helpers.teach import primer
from helpers.teach import primer_exercises as ex
from helpers.io.checkpoint import load_mapping

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PRIMER = NOTEBOOKS / "00_offset_encoding_primer.ipynb"

TOY, P = primer.TOY, primer.PRACTICE


def _independent_answers() -> dict:
    """The answers worked out here with numpy from the files and the counts, not with the library."""
    from safetensors import safe_open

    counts = np.array(P.counts)
    n, v = P.draft_vocab_size, P.target_vocab_size
    top = np.argsort(-counts, kind="stable")[:n]  # stable: ties by smaller id
    kept = sorted(int(i) for i in top)
    d2t = [k - i for i, k in enumerate(kept)]
    zero_run = next((i for i, x in enumerate(d2t) if x != 0), n)

    def valid(t):  # offsets of n sorted distinct ids in 0..v-1
        t = np.array(t)
        return t.size == n and t.min() >= 0 and bool(np.all(np.diff(t) >= 0)) and int((t + np.arange(n)).max()) < v

    with safe_open(str(SAMPLES / "tiny_draft_sglang" / "model.safetensors"), "np") as f:
        small_d2t, small_t2d = f.get_tensor("d2t").astype(np.int64), f.get_tensor("t2d")
    kimi_d2t = torch.load(SAMPLES / "kimi_k25_mapping" / "d2t.pt", weights_only=True).numpy()
    kimi_t2d = torch.load(SAMPLES / "kimi_k25_mapping" / "t2d.pt", weights_only=True).numpy()
    abs_d2t = torch.load(SAMPLES / "kimi_k25_mapping_absolute" / "d2t.pt", weights_only=True).numpy()
    kn, kv = kimi_d2t.size, kimi_t2d.size
    zero_cases = {"A": np.flatnonzero(kimi_t2d), "B": np.arange(kv), "C": np.arange(kn), "D": np.arange(124, kn + 124)}
    return {
        1: kept, 2: d2t, 3: "".join(k for k, t in ex.CANDIDATES.items() if valid(t)), 4: 4 + d2t[4],
        5: int((~np.isin(small_d2t[1:], np.flatnonzero(small_t2d))).sum()),
        6: "".join(k for k, ids in zero_cases.items() if np.array_equal(ids, np.arange(ids.size))),
        7: zero_run,
        8: int((np.arange(abs_d2t.size) + abs_d2t >= kv).sum()),
        9: int(20_000 + kimi_d2t[20_000]),
        10: int(kimi_t2d[:kn].sum()),
        11: round(_tree_by_hand(ex.TREE_Q, **ex.TREE_SHAPE), 2),
    }


def _tree_by_hand(q, steps, topk, num_draft_tokens) -> float:
    """SGLang's tree the long way: the root's topk children, then the topk children of the topk most probable
    nodes of each depth; the num_draft_tokens - 1 most probable candidates kept; 1 + their path probabilities."""
    q = np.asarray(q, dtype=float)
    candidates, beam = [], [1.0]
    for d in range(steps):
        layer = [p * q[d, r] for p in beam for r in range(topk)]
        candidates += layer
        beam = sorted(layer, reverse=True)[:topk]
    return 1 + float(sum(sorted(candidates, reverse=True)[:num_draft_tokens - 1]))


def test_practice_answers_are_what_a_person_works_out_by_hand():
    a = _independent_answers()
    assert a[1] == [0, 1, 3, 6, 9] and a[2] == [0, 0, 1, 3, 5] and a[3] == "ADE" and a[6] == "BC" and a[7] == 2
    assert a[11] == round(1 + 0.7 + 0.7 * 0.6 + 0.15, 2)  # the three most probable: 0.7, 0.42, 0.15
    assert ex.solutions() == a
    for n, answer in a.items():
        assert ex.is_right(n, answer), n  # the stored hashes are those of the computed answers


def test_answers_are_not_in_the_module_source():
    src = (Path(ex.__file__)).read_text()
    a = _independent_answers()
    for answer in ("[0, 1, 3, 6, 9]", "[0, 0, 1, 3, 5]", "'ADE'", '"ADE"', "'BC'", '"BC"'):
        assert answer not in src
    for n in (5, 8, 9, 10):
        assert str(a[n]) not in src and f"{a[n]:,}" not in src, n


@pytest.mark.parametrize("n", sorted(ex.EXERCISES))
def test_checker_accepts_the_right_answer_in_any_reasonable_form(n):
    a = _independent_answers()[n]
    assert ex.check(n, a).startswith("✓ right")
    if isinstance(a, list):
        assert ex.check(n, torch.tensor(a)).startswith("✓ right")
        assert ex.check(n, tuple(a)).startswith("✓ right")
    elif isinstance(a, str):
        assert ex.check(n, list(a.lower())).startswith("✓ right")
        assert ex.check(n, ", ".join(reversed(a))).startswith("✓ right")
    elif isinstance(a, float):
        assert ex.check(n, np.float64(a)).startswith("✓ right") and ex.check(n, a + 0.004).startswith("✓ right")
        assert ex.check(n, a + 0.02).startswith("✗ wrong")
    else:
        assert ex.check(n, np.int64(a)).startswith("✓ right")
    if n == 4:
        assert ex.check(4, "!").startswith("✓ right")


@pytest.mark.parametrize("n", sorted(ex.EXERCISES))
def test_placeholder_gets_the_question_and_a_hint_but_not_the_answer(n):
    msg = ex.check(n, None)
    assert msg.startswith("✗ not answered yet") and "Hint" in msg and f"answer_{n}" in msg
    a = _independent_answers()[n]
    if isinstance(a, (list, str)):
        assert str(a) not in msg


@pytest.mark.parametrize(
    "n, answer, says",
    [
        (1, [0, 1, 3, 6, 8], "not among"),
        (1, [9, 6, 3, 1, 0], "wrong order"),
        (1, [0, 3, 4], "expected 5 numbers"),
        (1, "abc", "wrong type"),
        (2, [0, 1, 3, 6, 9], "absolute ids"),
        (2, [0, 0, -1, -3, -5], "sign flipped"),
        (2, [0, 0, 1, 3, 4], "wrong at draft id(s) [4]"),
        (3, "ABDE", "B decreases"),
        (3, "ACDE", "past the largest target id"),
        (3, "AD", "not the whole set"),
        (3, 5, "wrong type"),
        (4, 5, "absolute id"),
        (4, 4, "draft id itself"),
        (4, 7, "is not it"),
        (4, object(), "wrong type"),
        (5, 1, "is not it"),
        (6, "ABC", "keeps the frequent ids"),
        (6, "BCD", "not starting at 0"),
        (6, "B", "not the whole set"),
        (7, 5, "identity is right only where"),
        (8, 0, "is not it"),
        (9, 20_000, "draft id itself"),
        (9, True, "wrong type"),
        (10, 32_000, "not every id below N"),
        (11, 1 + 0.7 + 0.7 * 0.6, "that is the chain"),
        (11, 1 + 0.7 + 0.15 + 0.42 + 0.14 + 0.09 + 0.03, "keeps every candidate"),
        (11, 0.5, "never below 1"),
        (11, "two", "wrong type"),
    ],
)
def test_checker_says_what_is_wrong(n, answer, says):
    msg = ex.check(n, answer)
    assert msg.startswith("✗") and says in msg
    sol = ex.solutions()[n]
    assert str(sol) not in msg or (isinstance(sol, int) and sol < 10)


def test_checker_for_an_unknown_exercise():
    assert ex.check(99, 1).startswith("✗ there is no exercise 99")


def test_variants_decode_as_the_engines_do():
    t = primer.variant_table(TOY)
    kept = torch.nonzero(TOY.mapping().t2d).flatten().tolist()
    assert t.loc["offsets (correct)", "engines propose i + d2t[i]"] == str(kept)
    assert t.loc["all zeros", "draft ids right"] == f"{TOY.mapping().leading_zero_run} of {TOY.draft_vocab_size}"
    assert t.loc["missing", "engines propose i + d2t[i]"] == t.loc["all zeros", "engines propose i + d2t[i]"]
    assert t.loc["arange", "engines propose i + d2t[i]"] == str([2 * i for i in range(TOY.draft_vocab_size)])
    assert t.loc["absolute ids", "which"] == "[0]"  # i + d2t[i] == d2t[i] only at i = 0
    cases = primer.all_zero_cases(TOY)
    assert cases["t2d keeps exactly 0..N-1"].tolist() == [True, False, True]
    assert cases["t2d keeps exactly 0..N-1"].tolist() == cases["offset reading (i + 0) equals t2d"].tolist()


@pytest.mark.parametrize("path", ["kimi_k25_mapping", "tiny_draft_sglang"])
def test_bounds_hold_on_real_mappings(path):
    m = load_mapping(SAMPLES / path)
    b = primer.bounds(m)
    assert 0 <= b["min d2t"] and b["max d2t"] <= b["V - N"] and b["non-decreasing"]
    assert b["leading zero run K"] == b["lowest target id not kept"] and b["kept[0..K-1] == 0..K-1"]
    assert b["leading zero run K"] == (124 if path.startswith("kimi") else 0)


def test_sampled_drafts_are_seeded_and_right_under_both_readings_only_at_draft_id_0():
    m = TOY.mapping()
    a, b = primer.sampled_drafts(m, seed=3, positions=40), primer.sampled_drafts(m, seed=3, positions=40)
    assert a.equals(b)
    both = a[a["absolute right"]]
    assert len(both) and set(both["draft id (argmax)"]) == {0}
    assert (a["draft id (argmax)"] == 0).sum() == len(both)


def test_step0_breakdown_agrees_with_evaluate():
    from helpers.measure.evaluate import evaluate

    ckpt, val = SAMPLES / "tiny_draft_sglang", SAMPLES / "tiny_hidden_states" / "val"
    b = primer.step0_breakdown(ckpt, val, max_samples=16)
    r = evaluate(ckpt, val, readings=("offset", "absolute"), steps=1, topk=1, max_samples=16, progress=False)
    assert b["labelled positions"] == r.overall.readings["offset"].tokens
    assert b["offset right"] == round(r.overall.readings["offset"].top1 * b["labelled positions"])
    assert b["absolute right"] == round(r.overall.readings["absolute"].top1 * b["labelled positions"])
    assert b["absolute right"] == b["absolute right at draft id 0"] + b["absolute right by coincidence (j > 0)"]


@pytest.mark.slow
def test_step0_none_count_agrees_with_evaluate_without_d2t():
    import warnings

    from helpers.measure.evaluate import evaluate

    b = primer.step0_breakdown(SAMPLES / "tiny_draft_sglang", SAMPLES / "tiny_hidden_states" / "val", max_samples=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = evaluate(SAMPLES / "tiny_draft_no_d2t", SAMPLES / "tiny_hidden_states" / "val", steps=1, topk=1,
                     max_samples=16, progress=False)
    none = r.overall.readings["none"]
    assert b["none right (draft id j equal to the real token)"] == round(none.top1 * none.tokens)
    assert (b["draft vocab N"], b["target vocab V"]) == (800, 4096)


@pytest.mark.slow
def test_accuracy_numbers_tie_top1_to_coverage_and_accept_length_to_the_step_rates():
    from helpers.measure.evaluate import evaluate

    ckpt, val = SAMPLES / "tiny_draft_sglang", SAMPLES / "tiny_hidden_states" / "val"
    r = evaluate(ckpt, val, readings=("offset", "absolute"), steps=1, topk=1, max_samples=8, progress=False)
    t = primer.accuracy_numbers(r)
    assert (abs(t["top-1 %"] - t["coverage x covered top-1 %"]) <= 0.1).all()
    assert t.loc["offset", "coverage %"] == round(100 * r.overall.coverage, 1)  # the right reading's ceiling is t2d's
    ex_ = primer.accept_length_example(ckpt, val, draft_tokens=3, max_samples=8)
    a = [ex_.loc["offset", f"a_{k}"] for k in range(3)]
    assert abs(ex_.loc["offset", "accept length"] - (1 + a[0] + a[0] * a[1] + a[0] * a[1] * a[2])) < 0.01
    assert ex_.loc["absolute", "accept length"] < 1.1 < ex_.loc["offset", "accept length"]


# The quoted lines are checked against the engines' released wheels, read as zip files and never
# installed or imported. They come from the package index (`pip download --no-deps`, about 660 MB
# for the three releases quoted, kept in D2T_ENGINE_WHEELS or ~/.cache/d2t-lab/engine-wheels); with no
# index to reach, the tests are skipped and say so.
WHEELS = Path(os.environ.get("D2T_ENGINE_WHEELS", Path.home() / ".cache" / "d2t-lab" / "engine-wheels"))


@pytest.fixture(scope="module")  # module scope: the file runs on one worker, so one download at a time
def released_wheels(tmp_path_factory) -> dict[tuple[str, str], Path]:
    wanted = sorted({(engine.lower(), release) for engine, release, *_ in primer.ENGINE_LINES})
    found = {}
    for name, release in wanted:
        pattern = f"{name}-{release}-*.whl"
        if not list(WHEELS.glob(pattern)):
            part = tmp_path_factory.mktemp("wheel")  # a download cut short never lands in the cache
            r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                                "-q", "-d", str(part), f"{name}=={release}"], capture_output=True, text=True,
                               timeout=900)
            if r.returncode != 0:
                pytest.skip(f"{name}=={release}: its wheel could not be downloaded "
                            f"({(r.stderr.strip().splitlines() or ['pip failed'])[-1][:200]})")
            WHEELS.mkdir(parents=True, exist_ok=True)
            for whl in part.glob("*.whl"):
                shutil.copyfile(whl, WHEELS / f"{whl.name}.part")
                os.replace(WHEELS / f"{whl.name}.part", WHEELS / whl.name)
        found[name, release] = sorted(WHEELS.glob(pattern))[-1]
    return found


@pytest.mark.slow
@pytest.mark.parametrize("engine, release, file, line, text, _what", primer.ENGINE_LINES)
def test_quoted_engine_lines_are_the_released_lines(engine, release, file, line, text, _what, released_wheels):
    with zipfile.ZipFile(released_wheels[engine.lower(), release]) as whl:
        src = whl.read(file).decode("utf-8")
    assert src.splitlines()[line - 1].strip() == text


def test_engine_lines_are_short_and_name_their_release():
    t = primer.engine_lines()
    assert set(t["engine"]) == {"SGLang", "vLLM"} and t["release"].str.match(r"^\d+\.\d+\.\d+$").all()
    assert (t["line"].str.len() < 100).all() and len(primer.engine_lines("vllm")) == (t["engine"] == "vLLM").sum()


def test_t2d_for_training_keeps_the_draft_vocab_columns():
    t = primer.t2d_for_training(TOY, positions=50, seed=1)
    kept = t[t["kept (t2d[argmax])"]]
    assert (kept["target argmax"] == kept["= token"]).all()  # a kept argmax stays the argmax on the draft vocab
    assert (t["counts in the loss"] == t["kept (t2d[argmax])"]).all() and (~t["counts in the loss"]).any()


def test_engines_all_read_offsets_and_agree():
    m = TOY.mapping()
    logits = torch.randn(64, TOY.draft_vocab_size, generator=torch.Generator().manual_seed(0))
    draft = logits.argmax(-1)
    expected = torch.nonzero(m.t2d).flatten()[draft]  # the reference, read from t2d (not from d2t)
    from helpers.engines.registry import ENGINE_KEYS

    for engine in ENGINE_KEYS + ("tensorrt-llm",):
        assert torch.equal(primer.engine_propose(logits, m.d2t, engine, TOY.target_vocab_size), expected), engine
    assert not torch.equal(m.d2t[draft], expected)  # the absolute reading does not
    with pytest.raises(ValueError):
        primer.engine_propose(logits, m.d2t, "tgi", TOY.target_vocab_size)


def test_offset_runs_explain_the_20954_distinct_values():
    kimi = load_mapping(SAMPLES / "kimi_k25_mapping")
    r = primer.offset_runs(kimi)
    assert r["distinct_values"] == 20_954 and r["offset_distinct_targets"] == 32_000
    kept = np.flatnonzero(kimi.t2d.numpy())
    consecutive = int((np.diff(kept) == 1).sum())
    assert r["consecutive_kept_pairs"] == consecutive == 32_000 - 20_954
    assert r["identity_holds"] is True and r["longest_run"] == 124
    assert r["longest_run_value"] == 0 and r["leading_zero_run"] == r["longest_run"]  # the same run
    mis = primer.offset_runs(load_mapping(SAMPLES / "kimi_k25_mapping_absolute"))
    assert mis["consecutive_kept_pairs"] == 0 and mis["repeated_neighbours"] == 0 and mis["distinct_values"] == 32_000


def test_decode_table_shows_both_readings():
    t = primer.decode_table(TOY.mapping())
    assert t["offset token"].tolist() == ["<s>", "the", "cat", "a", "dog", "."]
    assert t["absolute: d2t[i]"].tolist() == [0, 2, 2, 5, 5, 6]
    assert t["offset: i + d2t[i]"].tolist() == t["t2d's i-th True id"].tolist()


# -- the notebook -------------------------------------------------------------------------------
# Numbers in the prose that are not claims to compute: why each may stand unprinted.
WHITELIST = [
    (r"^# 00 ", "the notebook's own number in its title"),
    (r"^#+ \d+\.", "section numbers in headings"),
    (r"\b[Ss]ections? \d+( to \d+)?", "references to sections"),
    (r"\bExercise \d+", "exercise numbers"),
    (r"\b[Nn]otebook 0\d", "references to other notebooks"),
    (r"EAGLE-3", "the model family's name"),
    (r"\b\d+\.\d+\.\d+\b", "engine releases (section 3's table names the release of each quoted line)"),
]


def test_prose_number_extraction_and_matching():
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "## 3. Title\nExercise 4 in section 2 of EAGLE-3: 20,954 of 32,000, ids 0 to 123, 81.6 %, `d2t[i + 1]`")])
    assert prose_numbers(nb, WHITELIST) == {"20,954", "32,000", "0", "123", "81.6", "1"}
    assert printed("123", "ids 0..123 kept") and printed("81.6", "offset 81.6 %") and printed("20,954", "x: 20,954")
    assert not printed("954", "20,954") and not printed("81", "81.6") and not printed("12", "123")
    assert not printed("6", "0.6") and not printed("20", "20,954")


def test_no_exercise_answer_is_in_the_prose_above_it():
    import nbformat

    nb = nbformat.read(PRIMER, as_version=4)
    assert len([c for c in nb.cells if "primer_exercises.check(" in c.source]) == len(ex.EXERCISES)
    assert answers_in_prose_above(nb, "primer_exercises", ex.solutions(), WHITELIST) == []
    # the search finds an answer that is there
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(f"the kept ids are {ex.solutions()[1]}"))
    assert (1, ex.solutions()[1]) in answers_in_prose_above(nb, "primer_exercises", ex.solutions(), WHITELIST)


@pytest.mark.slow
def test_primer_with_solutions_every_check_is_right_and_every_prose_number_is_computed(tmp_path, run_notebook):
    nb = run_notebook(PRIMER, tmp_path, {"solutions": True, "output_dir": str(tmp_path / "out")})
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    checks = check_cells(nb, "primer_exercises")
    assert len(checks) == len(ex.EXERCISES)
    assert all(c.startswith("✓ right") for c in checks), checks
    text = printed_text(nb)
    numbers = prose_numbers(nb, WHITELIST)
    assert {"20,954", "11,046", "32,000", "124", "123"} <= numbers  # the test sees the prose's claims
    missing = [x for x in numbers if not printed(x, text)]
    assert not missing, f"numbers in the prose that no cell prints: {missing}"
    assert "distinct_values: 20,954" in text and "consecutive_kept_pairs: 11,046" in text
    assert "longest_run: 124" in text and "leading_zero_run: 124" in text


@pytest.mark.slow
def test_primer_by_default_reports_nothing_right_and_prints_no_answer(tmp_path, run_notebook):
    """Notebook 00 on its defaults (tests/test_notebooks.py leaves this run to this test)."""
    nb = run_notebook(PRIMER, tmp_path, {"output_dir": str(tmp_path / "out")})
    check_executed(nb, tmp_path / "out")
    checks = check_cells(nb, "primer_exercises")
    assert len(checks) == len(ex.EXERCISES)
    assert all(c.startswith("✗ not answered yet") for c in checks), checks
    text = printed_text(nb)
    assert "✓" not in text
    for n, answer in ex.solutions().items():
        if isinstance(answer, list):
            assert str(answer) not in text, n
        elif isinstance(answer, str):
            assert f"'{answer}'" not in text and f" {answer} " not in text, n
        elif answer >= 100:  # a large count is an answer wherever it is printed (small ints are everywhere)
            assert not printed(str(answer), text) and not printed(f"{answer:,}", text), n
    # the practice vocab is never decoded: none of its mapped tokens' tables appear
    assert "practice" in text and str(P.mapping().d2t.tolist()) not in text
