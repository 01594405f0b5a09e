"""Edge cases across the kit: notebooks' parameters, long runs, the files the kit writes, the words
of its messages, UX gaps and the doctor on small targets. Real files, real CLI runs (in-process
through `run_cli` where a subprocess adds nothing)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, run_cli

ROOT = Path(__file__).parents[1]
DATA = SAMPLES


# -- 6. the doctor on small targets ---------------------------------------------------------------------
def _target_config(tmp_path: Path, layers: int) -> Path:
    cfg = json.loads((DATA / "tiny_target" / "config.json").read_text())
    cfg["num_hidden_layers"] = layers
    p = tmp_path / f"target_{layers}" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(cfg))
    return p


def _draft_with_ids(tmp_path: Path, ids) -> Path:
    d = tmp_path / f"draft_{'none' if ids is None else '_'.join(map(str, ids))}"
    shutil.copytree(DATA / "tiny_draft_sglang", d)
    cfg = json.loads((d / "config.json").read_text())
    if ids is None:
        cfg.pop("eagle_config", None)
    else:
        cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(ids)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


# what arrives at fc per engine (SGLang adds 1 to configured ids; vLLM reads only the top-level key,
# so the nested ids leave it on its default 2, L//2, L-3); each engine captures by membership in its
# layer loop: a layer twice is captured once, one outside 0..L-1 never
SMALL = {  # L: (SGLang with ids [0, 1, 2] -> layers [1, 2, 3], the default capture with no ids)
    1: ([], [0]),
    2: ([1], [1]),
    3: ([1, 2], [0, 1, 2]),
    4: ([1, 2, 3], [1, 2]),
    5: ([1, 2, 3], [2]),
}


@pytest.mark.parametrize("layers", sorted(SMALL))
def test_aux_check_on_a_target_of_few_layers(tmp_path, layers):
    from helpers.engines.registry import arriving_layers
    from helpers.doctor.diagnose import diagnose

    sglang_arrive, default_arrive = SMALL[layers]
    assert arriving_layers("sglang", [0, 1, 2], layers) == sglang_arrive
    assert arriving_layers("vllm", None, layers) == default_arrive
    cfg = _target_config(tmp_path, layers)
    for ids, engine, arrive in (([0, 1, 2], "sglang", sglang_arrive), (None, "vllm", default_arrive)):
        (tmp_path / engine).mkdir()
        found = diagnose(str(_draft_with_ids(tmp_path / engine, ids)), engine, str(cfg), check_weights=False)
        aux = [f for f in found if f.code == "aux-layers"]
        assert aux, [f.message for f in found]
        assert not any("no usable num_hidden_layers" in f.message for f in aux)
        errors = [f for f in aux if f.severity == "error"]
        if len(arrive) == 3:  # three distinct layers the target has: no error
            assert not errors, [f.message for f in errors]
        else:
            assert len(errors) == 1, [f.message for f in aux]
            assert f"{len(arrive)} hidden state" in errors[0].message and str(arrive) in errors[0].message
            assert f"target's {layers} layer" in errors[0].message or "named twice" in errors[0].message
            predicted = found.predicted_outcome()[engine]
            assert predicted["result"] in ("crashes", "refuses"), predicted


def test_aux_check_cli_on_a_two_layer_target_is_an_error_not_a_healthy_serve(tmp_path):
    cfg = _target_config(tmp_path, 2)
    r = run_cli("doctor", str(DATA / "tiny_draft_sglang"), "--target-config", str(cfg), "--engine", "sglang", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 1
    assert out["predicted_outcome"]["sglang"]["result"] == "crashes"


def test_doctor_on_an_engine_whose_capture_is_unread_names_it(tmp_path):
    r = run_cli("doctor", str(DATA / "tiny_draft_sglang"), "--engine", "trtllm")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if "aux-layers" in x)
    assert "not checked" in line and "TensorRT-LLM" in line
    assert not re.search(r":\s*;|:\s*$", line)  # no empty list


# -- 4. words ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", ["3/1/3", "0", "3/0/4", "3/2/100", "3/2/1"])
def test_evaluate_predict_errors_name_only_evaluate_flags(shape):
    r = run_cli("evaluate", str(DATA / "tiny_draft_sglang"), "--samples", str(DATA / "tiny_hidden_states" / "val"),
                "--predict", shape)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    _flags_exist("evaluate", r.stderr)
    assert "--draft-tokens" not in r.stderr and "--num-speculative-tokens" not in r.stderr


def _parser_flags(command: str) -> set[str]:
    from helpers.__main__ import build_parser

    parser = build_parser([command])
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {o for a in sub.choices[command]._actions for o in a.option_strings}


def _flags_exist(command: str, text: str) -> None:
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", text))
    missing = named - _parser_flags(command)
    assert not missing, f"{command} recommends {sorted(missing)}, which it does not take: {text}"


# -- 1. notebooks' parameters -----------------------------------------------------------------------------
NB = ROOT / "notebooks"
BAD_PARAMETERS = [  # notebook, parameters, what the one line says
    ("07_speculative_decoding", {"steps": 3, "topk": 1, "draft_tokens": 3},
     r"parameters steps/topk/draft_tokens: draft_tokens=3: with topk=1 a 3-step chain verifies 4 tokens"),
    ("03_accuracy_with_and_without_mapping", {"steps": 0}, r"parameter steps must be at least 1"),
    ("03_accuracy_with_and_without_mapping", {"mask_at": "banana"}, r"parameter mask_at must be one of 'label'"),
    ("04_accept_length_simulation", {"logs": str(DATA / "logs" / "sglang.log")},
     r"parameter logs must be a list of paths, not one string: write logs = \["),
    ("06_checkpoint_doctor", {"compare_with": str(DATA / "tiny_draft_sglang")},
     r"parameter compare_with must be a list of paths"),
    ("04_accept_length_simulation", {"steps": 3, "topk": 1, "draft_tokens": 3}, r"draft_tokens=3: with topk=1"),
]


def test_parameter_rules_cover_every_notebook_parameter():
    """Every parameter any notebook declares has a rule (a new one cannot slip past the door)."""
    import papermill as pm

    from helpers.ui.parameters import RULES

    for nb in sorted(NB.glob("[0-9]*.ipynb")):
        missing = set(pm.inspect_notebook(str(nb))) - set(RULES)
        assert not missing, (nb.name, missing)
        assert "helpers.ui.notebook.setup(" in json.dumps(json.loads(nb.read_text())["cells"][:4])


@pytest.mark.slow  # a kernel per case
@pytest.mark.parametrize("name,params,match", BAD_PARAMETERS, ids=[f"{n[:2]}-{'-'.join(p)}" for n, p, _ in BAD_PARAMETERS])
def test_a_bad_notebook_parameter_is_one_line(tmp_path, run_notebook, name, params, match):
    import papermill as pm

    with pytest.raises(pm.PapermillExecutionError) as e:
        run_notebook(NB / f"{name}.ipynb", tmp_path, params)
    assert e.value.ename == "BadInputError", (e.value.ename, e.value.evalue)
    assert re.search(match, e.value.evalue), e.value.evalue
    executed = json.loads((tmp_path / f"{name}.ipynb").read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert len(errors) == 1 and len(errors[0]["traceback"]) == 1, errors


@pytest.mark.slow  # runs notebook 04
@pytest.mark.parametrize("drafting_from", ["log", "flags"])
def test_report_log_against_a_flag_runs_notebook_04(tmp_path, drafting_from):
    """`report --log LOG --num-speculative-tokens 3`: the conflict is named and resolved as documented
    (the log's shape by default, the flags' with --drafting-from flags); notebook 04 runs with it."""
    from helpers.__main__ import build_parser
    from helpers.commands.report import settings_from_args
    from helpers.ui.report import run_report

    log = DATA / "logs" / "sglang.log"
    args = build_parser(["report"]).parse_args(["report", str(DATA / "tiny_draft_sglang"), "-o", str(tmp_path / "r"),
                                                "--log", str(log), "--num-speculative-tokens", "3",
                                                "--drafting-from", drafting_from, "--max-samples", "2"])
    s = settings_from_args(args)
    assert "drafting settings conflict" in s.sources["drafting_conflict"]
    res = run_report(s, tmp_path / "r", notebooks=("04_accept_length_simulation",), progress=None)
    assert res.ok, [r.error for r in res.runs]
    drafting = res.runs[0].numbers["drafting"]
    assert (drafting["steps"], drafting["topk"], drafting["draft_tokens"]) == \
        ((5, 4, 16) if drafting_from == "log" else (3, 1, 4))
    assert s.sources["drafting_conflict"] in res.summary["conclusion"]


def test_a_failed_notebook_is_never_concluded_from(tmp_path):
    """A notebook that failed part-way may have recorded numbers: the summary uses none of them and
    says which section failed and why, instead of calling the checkpoint healthy."""
    from helpers.ui.report import NotebookRun
    from helpers.ui.settings import RunSettings, note_defaults
    from helpers.ui.summary import summary_dict

    s = note_defaults(RunSettings(checkpoint=str(DATA / "tiny_draft_sglang"), samples=str(DATA / "tiny_hidden_states")))
    ok = {"01_mapping_inspection": {}, "04_accept_length_simulation": {}}
    runs = [NotebookRun(n, True, 1.0, numbers=v) for n, v in ok.items()]
    runs.append(NotebookRun("03_accuracy_with_and_without_mapping", False, 1.0,
                            error="RuntimeError: CUDA out of memory (cell 4)",
                            numbers={"accuracy": {"offset": {"top1": 0.9}}, "diagnosis": "healthy",
                                     "conclusion": "healthy"}))
    runs.append(NotebookRun("06_checkpoint_doctor", True, 1.0, numbers={"findings": []}))
    summary = summary_dict(s, runs, {})
    assert "accuracy" not in summary["numbers"]
    head = summary["conclusion"][0]
    assert "No conclusion" in head and "CUDA out of memory" in head and "Healthy" not in head
    assert any(line.startswith("Accuracy: not concluded") for line in summary["conclusion"])


# -- 2. long runs ---------------------------------------------------------------------------------------------
def test_speculate_more_tokens_than_the_target_holds_is_refused_at_the_door():
    """The bundled target has 512 positions: 100,000 new tokens is one line at once, naming the limit
    and what to pass (engines refuse such a request at once too)."""
    import time

    t0 = time.monotonic()
    r = run_cli("speculate", str(DATA / "tiny_draft_sglang"), "--max-new-tokens", "100000")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "max_position_embeddings is 512" in r.stderr and "pass --max-new-tokens 506 or less" in r.stderr
    assert time.monotonic() - t0 < 60


def test_a_prompt_too_long_for_the_target_is_refused_before_generating(tmp_path):
    from tests.conftest import run_main

    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"prompt": "short"}) + "\n" + json.dumps({"prompt": "hello world " * 220}) + "\n")
    r = run_main("speculate", DATA / "tiny_draft_sglang", "--prompts", long, "--max-new-tokens", "16")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "prompt record 1 is" in r.stderr and "max_position_embeddings is 512" in r.stderr
    _flags_exist("speculate", r.stderr)


def test_positions_fit_is_the_prompt_plus_tokens_plus_the_draft_depth():
    from helpers.core.errors import BadInputError
    from helpers.speculate.builder import check_positions, spec_settings

    target = DATA / "tiny_target"
    check_positions(target, spec_settings(5, max_new_tokens=406), 100)  # 100 + 406 + 5 = 511
    check_positions(target, spec_settings(5, max_new_tokens=407), 100)  # 512
    with pytest.raises(BadInputError, match="pass --max-new-tokens 407 or less"):
        check_positions(target, spec_settings(5, max_new_tokens=408), 100)


def test_a_long_speculate_run_off_a_terminal_prints_progress_lines(monkeypatch):
    """Off a terminal the per-prompt bar moves only when a prompt ends; a long prompt still prints a
    plain line each PROGRESS_EVERY_S (shortened here), and a run shorter than it prints none."""
    import time

    from helpers.commands import _options
    from tests.conftest import run_main

    monkeypatch.setattr(_options, "PROGRESS_EVERY_S", 0.2)
    t0 = time.monotonic()
    r = run_main("speculate", DATA / "tiny_draft_sglang", "--max-prompts", "1", "--max-new-tokens", "150",
                 "--readings", "offset")
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if "tokens generated" in x]
    assert lines or took < 1.0, r.stderr
    assert all(re.match(r"speculate: [\d,]+ of at most 150 tokens generated, \d+ of 1 prompt runs done", x) for x in lines)
    monkeypatch.setattr(_options, "PROGRESS_EVERY_S", 600)
    r = run_main("speculate", DATA / "tiny_draft_sglang", "--max-prompts", "1", "--max-new-tokens", "8",
                 "--readings", "offset")
    assert r.returncode == 0 and "tokens generated" not in r.stderr


# -- 5. UX gaps -------------------------------------------------------------------------------------------------
def test_speculate_a_draft_without_embed_tokens_uses_the_given_target_s(tmp_path):
    """The bundled Kimi engine pair: its draft has no embed_tokens; with --target given, the target's
    embedding is used (as the engines do), said in one stderr line and in the JSON."""
    from tests.conftest import run_main

    pair = DATA / "engine_kimi"
    if not (pair / "draft").exists():
        pytest.skip("the Kimi engine pair is not in this checkout")
    r = run_main("speculate", pair / "draft", "--target", pair / "target", "--engine", "vllm", "--max-prompts", "1",
                 "--max-new-tokens", "4", "--readings", "offset", "--json")
    assert r.returncode == 0, r.stderr
    assert "has no embed_tokens; using the target's" in r.stderr
    out = json.loads(r.stdout)
    assert out["embed_from"]["path"] == str(pair / "target") and "the target's" in out["embed_from"]["why"]


# -- 3. files the kit writes -----------------------------------------------------------------------------------
def test_fix_writes_normal_modes_under_the_umask(tmp_path):
    import os
    import stat

    from helpers.doctor.fix import fix_checkpoint

    old = os.umask(0o022)
    try:
        fix_checkpoint(DATA / "tiny_draft_absolute", tmp_path / "fixed", check_weights=False)
    finally:
        os.umask(old)
    for p in [tmp_path / "fixed", *(tmp_path / "fixed").iterdir()]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o755 if p.is_dir() else 0o644), (p.name, oct(mode))


def test_fix_refuses_a_symlink_out_of_the_checkpoint_and_copies_one_inside(tmp_path):
    from helpers.core.errors import BadInputError
    from helpers.doctor.fix import fix_checkpoint

    src = shutil.copytree(DATA / "tiny_draft_absolute", tmp_path / "src")
    (tmp_path / "elsewhere.txt").write_text("not the checkpoint's")
    (src / "notes.txt").symlink_to(tmp_path / "elsewhere.txt")
    with pytest.raises(BadInputError, match="is a symlink out of the checkpoint"):
        fix_checkpoint(src, tmp_path / "out", check_weights=False)
    assert not (tmp_path / "out").exists()
    (src / "notes.txt").unlink()
    (src / "readme.txt").write_text("the checkpoint's own")
    (src / "alias.txt").symlink_to("readme.txt")
    fix_checkpoint(src, tmp_path / "out", check_weights=False)
    copied = tmp_path / "out" / "alias.txt"
    assert copied.read_text() == "the checkpoint's own" and not copied.is_symlink()


def test_capture_refuses_an_output_folder_inside_the_target(tmp_path):
    target = shutil.copytree(DATA / "tiny_target", tmp_path / "target")
    before = sorted(p.name for p in target.iterdir())
    r = run_cli("capture", str(target), "--prompts", str(DATA / "prompts.jsonl"), "--regenerate",
                "-o", str(target / "captured"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "is inside TARGET" in r.stderr
    assert sorted(p.name for p in target.iterdir()) == before
