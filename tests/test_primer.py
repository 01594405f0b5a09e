"""The primer's toy vocab, exercise checkers and engine mimics; notebook 00 with and without solutions."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import primer
from helpers.checkpoint import load_mapping

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
SAMPLES = Path(__file__).resolve().parents[1] / "data_samples"

TOY = primer.TOY


def _independent_answers() -> dict:
    """The four answers worked out here with numpy, not with the library."""
    counts = np.array(TOY.counts)
    top = np.argsort(-counts, kind="stable")[: TOY.draft_vocab_size]  # stable: ties by smaller id
    kept = sorted(int(i) for i in top)
    d2t = [k - i for i, k in enumerate(kept)]
    ex4 = np.array(TOY.exercise_4_d2t)
    return {1: kept, 2: d2t, 3: 4 + d2t[4], 4: len(set((ex4 + np.arange(ex4.size)).tolist()))}


def test_toy_answers_are_what_a_person_works_out_by_hand():
    a = _independent_answers()
    assert a[1] == [0, 3, 4, 8, 9, 11] and a[2] == [0, 2, 2, 5, 5, 6] and a[3] == 9 and a[4] == 10
    for n in range(1, 5):
        assert primer.solution(n) == a[n]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_checker_accepts_the_right_answer_in_any_reasonable_form(n):
    a = _independent_answers()[n]
    assert primer.check_exercise(n, a).startswith("✓")
    if isinstance(a, list):
        assert primer.check_exercise(n, torch.tensor(a)).startswith("✓")
        assert primer.check_exercise(n, tuple(a)).startswith("✓")
    else:
        assert primer.check_exercise(n, np.int64(a)).startswith("✓")
    if n == 3:
        assert primer.check_exercise(3, "dog").startswith("✓")


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_checker_gives_a_hint_for_the_placeholder_without_raising(n):
    msg = primer.check_exercise(n, None)
    assert msg.startswith("✗ not answered yet") and "Hint" in msg and f"answer_{n}" in msg


@pytest.mark.parametrize(
    "n, answer, says",
    [
        (1, [0, 3, 4, 8, 9, 10], "missing [11]"),
        (1, [11, 9, 8, 4, 3, 0], "wrong order"),
        (1, [0, 3, 4], "expected 6 numbers"),
        (1, "abc", "expected"),
        (2, [0, 3, 4, 8, 9, 11], "absolute ids"),
        (2, [0, -2, -2, -5, -5, -6], "sign flipped"),
        (2, [0, 2, 2, 5, 5, 7], "wrong at draft id(s) [5]"),
        (3, 5, "absolute id"),
        (3, 4, "draft id itself"),
        (3, 7, "is not it"),
        (3, object(), "expected"),
        (4, 4, "red herring"),
        (4, 9, "is not it"),
    ],
)
def test_checker_says_what_is_wrong(n, answer, says):
    msg = primer.check_exercise(n, answer)
    assert msg.startswith("✗") and says in msg


def test_checker_for_an_unknown_exercise():
    assert primer.check_exercise(9, 1).startswith("✗ there is no exercise 9")


def test_engines_all_read_offsets_and_agree():
    m = TOY.mapping()
    torch.manual_seed(0)
    logits = torch.randn(64, TOY.draft_vocab_size)
    draft = logits.argmax(-1)
    # the reference: the i-th kept target id, read from t2d (not from d2t)
    expected = torch.nonzero(m.t2d).flatten()[draft]
    for engine in primer.ENGINES:
        assert torch.equal(primer.engine_propose(logits, m.d2t, engine, TOY.target_vocab_size), expected), engine
    assert not torch.equal(m.d2t[draft], expected)  # the absolute reading does not
    with pytest.raises(ValueError):
        primer.engine_propose(logits, m.d2t, "llama.cpp", TOY.target_vocab_size)


def test_offset_runs_explain_the_20954_distinct_values():
    kimi = load_mapping(SAMPLES / "kimi_k25_mapping")
    r = primer.offset_runs(kimi)
    assert r["distinct_values"] == 20_954 and r["offset_distinct_targets"] == 32_000
    kept = np.flatnonzero(kimi.t2d.numpy())
    consecutive = int((np.diff(kept) == 1).sum())
    assert r["consecutive_kept_pairs"] == consecutive == 32_000 - 20_954
    assert r["identity_holds"] is True and r["longest_run"] == 124
    mis = primer.offset_runs(load_mapping(SAMPLES / "kimi_k25_mapping_absolute"))
    # read as offsets, the misencoded copy has no consecutive kept ids and so no repeated value
    assert mis["consecutive_kept_pairs"] == 0 and mis["repeated_neighbours"] == 0 and mis["distinct_values"] == 32_000


def test_decode_table_shows_both_readings():
    t = primer.decode_table(TOY.mapping())
    assert t["offset token"].tolist() == ["<s>", "the", "cat", "a", "dog", "."]
    assert t["absolute: d2t[i]"].tolist() == [0, 2, 2, 5, 5, 6]
    assert t["offset: i + d2t[i]"].tolist() == t["t2d's i-th True id"].tolist()


def _stdout(nb) -> str:
    return "".join(
        "".join(o.get("text", "")) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
        if o.get("output_type") == "stream"
    )


@pytest.mark.slow
@pytest.mark.parametrize("solutions", [False, True])
def test_primer_notebook_runs_with_and_without_solutions(tmp_path, solutions, run_notebook):
    nb = run_notebook(NOTEBOOKS / "00_offset_encoding_primer.ipynb", tmp_path, {"solutions": solutions})
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    out = _stdout(nb)
    if solutions:
        assert out.count("✓ correct") == 4 and "not answered yet" not in out
    else:
        assert out.count("✗ not answered yet") == 4 and "✓ correct" not in out
    assert "distinct_values: 20,954" in out and "consecutive_kept_pairs: 11,046" in out
