"""Hostile inputs to the newer commands (capture, speculate, doctor --target/--previous, diff, report
--target, metrics): every case is exit 2, one line naming the input, nothing written, in time.

The companion of `test_hostile_inputs.py` (which covers the mapping and sample readers): the
corpus is built by the tests into a temporary folder. Each case runs the real command line in this
process (`cli`), and asserts:

- exit code 2, stderr one line starting `error: `, no `Traceback`;
- the line names the input (the path, or the flag) and matches the case's own fragment;
- nothing was written: the temporary folder holds the same files before and after, and the
  command's output folder does not exist;
- it ended before anything heavy loaded (no target loaded, no notebook run), well within a
  timeout.

The cases come from issue 31's new-user tries, and their neighbours.
"""
from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]
DRAFT = SAMPLES / "tiny_draft_sglang"
TARGET = SAMPLES / "tiny_target"
PROMPTS = SAMPLES / "prompts.jsonl"
MAPPING_ONLY = SAMPLES / "kimi_k25_mapping"  # d2t/t2d for a 163,840-token target, no config, no weights
LIMIT_S = 30.0  # an input check that takes longer has loaded something it should not have


@dataclass
class Case:
    name: str
    args: list  # "{tmp}" in a string is the case's folder; "{out}" its output folder
    names: str  # what the one line must name ("{tmp}" expanded)
    match: str  # a regular expression the line must match


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*"))}


@pytest.fixture
def corpus(tmp_path) -> Path:
    """The bad inputs, each in its own file or folder."""
    (tmp_path / "latin1.jsonl").write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9 au lait"}\n')
    (tmp_path / "no_user.jsonl").write_text(
        '{"prompt": "fine", "response": "yes"}\n'
        '{"messages": [{"role": "system", "content": "be brief"}, {"role": "assistant", "content": "hi"}]}\n')
    (tmp_path / "no_answer.jsonl").write_text('{"prompt": "what is 2+2?"}\n')
    (tmp_path / "blank.jsonl").write_text("\n\n")
    (tmp_path / "cut.jsonl").write_text('{"prompt": "fine"}\n{"prompt": "no closing brace"\n')
    (tmp_path / "prompts_dir").mkdir()
    (tmp_path / "bad_config.json").write_text('{"vocab_size": 4096,\n "hidden_size": 64, oops}\n')
    wide = tmp_path / "wide_draft"  # a draft built for a target with hidden size 128
    shutil.copytree(DRAFT, wide)
    cfg = json.loads((wide / "config.json").read_text())
    cfg["target_hidden_size"] = 128
    (wide / "config.json").write_text(json.dumps(cfg))
    return tmp_path


CASES = [
    # prompt files: encoding, records, counts, kinds
    Case("capture non-UTF-8 prompts", ["capture", TARGET, "--prompts", "{tmp}/latin1.jsonl", "-o", "{out}"],
         "{tmp}/latin1.jsonl", r"not UTF-8 text: byte 0xe9 at line 2"),
    Case("speculate non-UTF-8 prompts", ["speculate", DRAFT, "--prompts", "{tmp}/latin1.jsonl"],
         "{tmp}/latin1.jsonl", r"not UTF-8 text: byte 0xe9 at line 2"),
    Case("capture record without a user turn", ["capture", TARGET, "--prompts", "{tmp}/no_user.jsonl", "-o", "{out}"],
         "{tmp}/no_user.jsonl", r"line 2: the conversation has no user turn \(roles: system, assistant\)"),
    Case("capture --regenerate record without a user turn",
         ["capture", TARGET, "--prompts", "{tmp}/no_user.jsonl", "--regenerate", "-o", "{out}"],
         "{tmp}/no_user.jsonl", r"line 2: the conversation has no user turn"),
    Case("speculate record without a user turn", ["speculate", DRAFT, "--prompts", "{tmp}/no_user.jsonl"],
         "{tmp}/no_user.jsonl", r"line 2: the conversation has no user turn"),
    Case("capture teacher-forced record without an answer",
         ["capture", TARGET, "--prompts", "{tmp}/no_answer.jsonl", "-o", "{out}"],
         "{tmp}/no_answer.jsonl", r"line 1: the record has no assistant answer to teacher-force \(pass --regenerate"),
    Case("speculate blank prompt file", ["speculate", DRAFT, "--prompts", "{tmp}/blank.jsonl"],
         "{tmp}/blank.jsonl", r"holds no prompt records \(every line is blank\)"),
    # probe reads its prompts at the same door with or without --target (no server is asked first)
    Case("probe non-UTF-8 prompts", ["probe", "http://127.0.0.1:9", "--prompts", "{tmp}/latin1.jsonl"],
         "{tmp}/latin1.jsonl", r"not UTF-8 text: byte 0xe9 at line 2"),
    Case("probe --target non-UTF-8 prompts",
         ["probe", "http://127.0.0.1:9", "--target", TARGET, "--prompts", "{tmp}/latin1.jsonl"],
         "{tmp}/latin1.jsonl", r"not UTF-8 text: byte 0xe9 at line 2"),
    Case("probe blank prompt file", ["probe", "http://127.0.0.1:9", "--prompts", "{tmp}/blank.jsonl"],
         "{tmp}/blank.jsonl", r"holds no prompt records \(every line is blank\)"),
    Case("probe a missing --log", ["probe", "http://127.0.0.1:9", "--log", "{tmp}/nothing.log"],
         "{tmp}/nothing.log", r"no such log file$"),
    Case("speculate JSON cut short", ["speculate", DRAFT, "--prompts", "{tmp}/cut.jsonl"],
         "{tmp}/cut.jsonl", r"line 2 is not JSON \(Expecting ',' delimiter at column \d+\)$"),
    Case("speculate --max-prompts 0 blames the flag, not the file",
         ["speculate", DRAFT, "--max-prompts", "0"], "--max-prompts", r"--max-prompts must be at least 1, got 0"),
    Case("capture --max-prompts 0", ["capture", TARGET, "--prompts", PROMPTS, "--regenerate", "--max-prompts", "0", "-o", "{out}"],
         "--max-prompts", r"--max-prompts must be at least 1, got 0"),
    Case("capture --max-samples 0 (the older spelling)",
         ["capture", TARGET, "--prompts", PROMPTS, "--regenerate", "--max-samples", "0", "-o", "{out}"],
         "--max-prompts", r"must be at least 1, got 0"),
    Case("speculate a folder as --prompts", ["speculate", DRAFT, "--prompts", "{tmp}/prompts_dir"],
         "{tmp}/prompts_dir", r"is a folder, not a prompt file$"),
    Case("capture a folder as --prompts", ["capture", TARGET, "--prompts", "{tmp}/prompts_dir", "-o", "{out}"],
         "{tmp}/prompts_dir", r"is a folder, not a prompt file$"),
    Case("speculate a missing prompt file", ["speculate", DRAFT, "--prompts", "{tmp}/nothing.jsonl"],
         "{tmp}/nothing.jsonl", r"no such prompt file$"),
    # the draft and the target
    Case("capture --draft whose vocab does not fit the target",
         ["capture", TARGET, "--prompts", PROMPTS, "--regenerate", "--draft", MAPPING_ONLY, "-o", "{out}"],
         str(MAPPING_ONLY), r"does not fit the target .*163,840-token vocab, the target has 4,096"),
    Case("capture --draft whose hidden size does not fit",
         ["capture", TARGET, "--prompts", PROMPTS, "--regenerate", "--draft", "{tmp}/wide_draft", "-o", "{out}"],
         "{tmp}/wide_draft", r"does not fit the target .*hidden_size: the draft expects target hidden size 128"),
    Case("capture --aux-layers 1,2 against a 3-layer fc width",
         ["capture", TARGET, "--prompts", PROMPTS, "--regenerate", "--draft", DRAFT, "--aux-layers", "1,2", "-o", "{out}"],
         "--aux-layers 1,2", r"2 layer\(s\), but the draft's fc takes 192 inputs = 3 x the target's hidden size 64"),
    Case("capture --aux-layers 1,2 without a draft",
         ["capture", TARGET, "--prompts", PROMPTS, "--regenerate", "--aux-layers", "1,2", "-o", "{out}"],
         "--aux-layers 1,2", r"an EAGLE-3 draft concatenates 3 hidden states: give 3 ids"),
    Case("capture --aux-layers outside the target",
         ["capture", TARGET, "--prompts", PROMPTS, "--regenerate", "--aux-layers", "1,3,7", "-o", "{out}"],
         "--aux-layers 1,3,7", r"capture the input of layers \[2, 4, 8\].*the target has 8 layers"),
    Case("speculate a draft that does not fit", ["speculate", "{tmp}/wide_draft"],
         "{tmp}/wide_draft", r"does not fit the target"),
    Case("speculate --embed-from MISSING", ["speculate", DRAFT, "--embed-from", "{tmp}/MISSING"],
         "{tmp}/MISSING", r"no such embed_tokens file or folder$"),
    Case("speculate a missing draft (before the target loads)", ["speculate", "{tmp}/no_draft"],
         "{tmp}/no_draft", r"no such file or folder"),
    Case("speculate a mapping-only folder suggests no flag it lacks", ["speculate", MAPPING_ONLY],
         str(MAPPING_ONLY), r"holds no config.json: speculate runs the draft.*only a d2t/t2d mapping"),
    Case("speculate --target given a draft", ["speculate", DRAFT, "--target", DRAFT],
         str(DRAFT), r"is a draft checkpoint .*not the target"),
    Case("speculate --target X/config.json", ["speculate", DRAFT, "--target", TARGET / "config.json"],
         str(TARGET / "config.json"), r"is a config file: --target takes the target folder that holds it"),
    Case("speculate --readings bogus", ["speculate", DRAFT, "--readings", "offset,bogus"],
         "--readings", r"unknown reading bogus"),
    # doctor, diff
    Case("doctor --previous MISSING", ["doctor", DRAFT, "--previous", "{tmp}/MISSING", "--no-weights"],
         "{tmp}/MISSING", r"no such previous checkpoint"),
    Case("doctor --target given a draft folder", ["doctor", DRAFT, "--target", SAMPLES / "tiny_draft_absolute"],
         str(SAMPLES / "tiny_draft_absolute"), r"is a draft checkpoint \(architectures .*\), not the target"),
    Case("doctor --target and --target-config together",
         ["doctor", DRAFT, "--target", TARGET, "--target-config", TARGET / "config.json"],
         "--target and --target-config", r"given together"),
    Case("doctor --target-config with bad JSON", ["doctor", DRAFT, "--target-config", "{tmp}/bad_config.json"],
         "{tmp}/bad_config.json", r"is not valid JSON \(line 2: Expecting property name enclosed in double quotes\)$"),
    Case("doctor --target a missing folder", ["doctor", DRAFT, "--target", "{tmp}/no_target"],
         "{tmp}/no_target", r"no such target folder"),
    Case("diff a missing checkpoint", ["diff", DRAFT, "{tmp}/MISSING"], "{tmp}/MISSING", r"no such file or folder"),
    Case("evaluate --reading bogus", ["evaluate", DRAFT, "--samples", SAMPLES / "tiny_hidden_states",
                                      "--reading", "bogus"], "--readings", r"unknown reading bogus"),
    # metrics, report
    Case("metrics hf://o/r keeps both slashes", ["metrics", "hf://o/r"], "hf://o/r", r"not from the Hub"),
    Case("report --target X/config.json",
         ["report", DRAFT, "-o", "{out}", "--target", TARGET / "config.json", "--prompts", PROMPTS],
         str(TARGET / "config.json"), r"is a config file: --target takes the target folder"),
    Case("report --target with bad prompts",
         ["report", DRAFT, "-o", "{out}", "--target", TARGET, "--prompts", "{tmp}/no_user.jsonl"],
         "{tmp}/no_user.jsonl", r"line 2: the conversation has no user turn"),
    Case("report a draft that does not fit --target",
         ["report", "{tmp}/wide_draft", "-o", "{out}", "--target", TARGET, "--prompts", PROMPTS],
         "{tmp}/wide_draft", r"does not fit the target"),
    Case("report --max-prompts 0", ["report", DRAFT, "-o", "{out}", "--target", TARGET, "--prompts", PROMPTS,
                                    "--max-prompts", "0"], "--max-prompts", r"must be at least 1, got 0"),
    Case("report --target and --target-config together",
         ["report", DRAFT, "-o", "{out}", "--target", TARGET, "--prompts", PROMPTS, "--target-config",
          TARGET / "config.json"], "--target and --target-config", r"given together"),
]


@pytest.fixture
def spies(monkeypatch):
    """Count what must not happen before the door closes: a target loaded, a notebook run."""
    import helpers.model.target as target_mod
    import helpers.ui.report as report_mod

    calls = {"load_target": 0, "run_notebook": 0}

    def counted(name, real):
        def wrapper(*a, **kw):
            calls[name] += 1
            return real(*a, **kw)
        return wrapper

    monkeypatch.setattr(target_mod, "load_target", counted("load_target", target_mod.load_target))
    monkeypatch.setattr(report_mod, "run_notebook", counted("run_notebook", report_mod.run_notebook))
    return calls


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_bad_input_is_one_line_exit_2_nothing_written(case, corpus, cli, spies):
    out = corpus / "out"
    args = [str(a).replace("{tmp}", str(corpus)).replace("{out}", str(out)) for a in case.args]
    before = _files(corpus)
    t0 = time.monotonic()
    r = cli(*args)
    took = time.monotonic() - t0
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:], r.stdout[-500:])
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    line = lines[0]
    assert case.names.replace("{tmp}", str(corpus)) in line, line
    assert re.search(case.match, line), line
    assert _files(corpus) == before and not out.exists(), "something was written"
    assert spies == {"load_target": 0, "run_notebook": 0}, spies  # refused before anything heavy ran
    assert took < LIMIT_S, took
    assert_flags_taken(args[0], line)


def assert_flags_taken(command: str, line: str) -> None:
    """Every flag an error line names (echoed or recommended) is one `command` takes."""
    from helpers.__main__ import build_parser

    parser = build_parser([command])
    sub = next(a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    taken = {o for a in sub.choices[command]._actions for o in a.option_strings}
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", line))
    assert named <= taken, f"{command} names {sorted(named - taken)}, which it does not take: {line}"


def test_command_modules_recommend_only_their_own_flags():
    """Flags named in the messages a command module raises (helpers/commands/NAME.py) are NAME's flags."""
    import ast

    from helpers.__main__ import command_modules

    for name, module in command_modules().items():
        tree = ast.parse((ROOT / "helpers" / "commands" / f"{module}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and node.exc is not None:
                text = " ".join(s.value for s in ast.walk(node.exc)
                                if isinstance(s, ast.Constant) and isinstance(s.value, str))
                assert_flags_taken(name, text)


def test_speculate_draft_config_flag_is_never_suggested(cli):
    r = cli("speculate", MAPPING_ONLY)
    assert r.returncode == 2 and "--draft-config" not in r.stderr


@pytest.mark.slow  # loads the tiny target and captures two samples
def test_capture_corrected_rerun_is_never_blocked(corpus, cli):
    """A failed capture leaves nothing that refuses the corrected run: bad prompts are refused at the
    door (no folder written), and a manifest left without samples (an older run that failed after
    writing it) is replaced, not held against the new prompt file."""
    out = corpus / "captured"
    args = ["capture", TARGET, "--regenerate", "--max-new-tokens", "3", "--max-prompts", "2", "--device", "cpu",
            "--json", "-o", out]
    bad = cli(*args, "--prompts", corpus / "no_user.jsonl")
    assert bad.returncode == 2 and not out.exists()
    out.mkdir()  # what an older failed run left: its manifest, for another prompt file, and no sample
    (out / "capture.json").write_text(json.dumps({"format": "specforge-offline", "prompts_sha256": "0" * 64,
                                                  "engine": "sglang"}))
    fixed = corpus / "fixed.jsonl"
    fixed.write_text('{"prompt": "fine", "response": "yes"}\n'
                     '{"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]}\n')
    good = cli(*args, "--prompts", fixed)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["written"] == 2
    manifest = json.loads((out / "capture.json").read_text())
    from helpers.io.prompts import file_sha256

    assert manifest["prompts_sha256"] == file_sha256(fixed)
    # once samples exist, a capture with other settings in the same folder is still refused
    other = cli(*args, "--prompts", PROMPTS)
    assert other.returncode == 2 and "other settings" in other.stderr


def test_good_inputs_still_pass_the_door():
    """The door lets through every bundled input the commands' own examples use."""
    from helpers.model.preflight import Door, Inputs, preflight

    c = preflight(Inputs(checkpoint=str(DRAFT), target=str(TARGET), prompts=str(PROMPTS), aux_layers=[1, 3, 4]),
                  Door(need_weights=True))
    assert c.prompt_records == 32 and c.aux_layers == (1, 3, 4) and Path(c.checkpoint).is_absolute()
    bom = Path(c.prompts).read_bytes()
    assert bom  # and a file with a UTF-8 byte-order mark reads like one without
    from helpers.io.prompts import read_prompts

    tmp = Path(c.prompts).parent  # read-only use: the BOM copy goes to a temporary file
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "bom.jsonl"
        p.write_bytes(b"\xef\xbb\xbf" + bom)
        assert [r.messages for r in read_prompts(p)] == [r.messages for r in read_prompts(tmp / PROMPTS.name)]


def test_notebook_setup_checks_the_parameters():
    """`setup()` with a notebook's inputs runs the same door (outside IPython: keywords)."""
    from helpers.core.errors import BadInputError
    from helpers.ui.notebook import setup

    setup(checkpoint=str(DRAFT), target=str(TARGET), prompts=str(PROMPTS), max_prompts=2)
    with pytest.raises(BadInputError, match="is a draft checkpoint"):
        setup(checkpoint=str(DRAFT), target=str(DRAFT), prompts=str(PROMPTS))
    with pytest.raises(BadInputError, match="max_prompts must be at least 1"):
        setup(checkpoint=str(DRAFT), target=str(TARGET), prompts=str(PROMPTS), max_prompts=0)


@pytest.mark.slow  # a real interpreter start
def test_progress_off_a_terminal_is_plain_lines_only_for_long_waits(tmp_path):
    """Off a terminal (a log, a pipe) a long wait prints one plain line per interval, a short one
    nothing; with --json never. (The interval is shortened here to 1 s for the long wait; the short
    one is 30 ms against 30 s, and the long one's line count is bounded by its own measured length,
    so a loaded machine cannot fail either.)"""
    import os
    import subprocess
    import sys

    script = tmp_path / "p.py"
    script.write_text(
        "import sys, time\nfrom types import SimpleNamespace\nfrom helpers.commands import _options\n"
        "_options.PROGRESS_EVERY_S = float(sys.argv[2])\n"
        "assert _options.show_progress(SimpleNamespace(json=False))\n"
        "assert not _options.show_progress(SimpleNamespace(json=True))\n"
        "from tqdm.auto import tqdm\n"
        "t0 = time.monotonic()\n"
        "for _ in tqdm(range(int(sys.argv[1])), desc='capture', unit='sample'):\n    time.sleep(float(sys.argv[3]))\n"
        "print(time.monotonic() - t0)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TQDM_DISABLE", None)
    long = subprocess.run([sys.executable, str(script), "15", "1", "0.2"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert long.returncode == 0, long.stderr
    lines, took = long.stderr.splitlines(), float(long.stdout)
    assert 1 <= len(lines) <= int(took) + 1, (lines, took)  # one a second at most, and the last
    assert all(line.startswith("capture:") and "\r" not in line for line in lines), lines
    assert lines[-1].startswith("capture: 100%") and "15/15" in lines[-1]
    short = subprocess.run([sys.executable, str(script), "3", "30", "0.01"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert short.returncode == 0 and short.stderr == "", short.stderr


@pytest.mark.slow
def test_ctrl_c_on_capture_says_how_to_resume(tmp_path):
    """Ctrl-C (SIGINT) during a capture: one line that says how to resume, and the re-run does.

    Deterministic on any machine: the capture runs under a hook that lets the first batch through and
    then holds the second one until the signal comes (it waits on a file nobody writes), so the signal
    always arrives mid-capture, with one sample written, however fast or loaded the machine is."""
    import os
    import signal
    import subprocess
    import sys

    out = tmp_path / "o"
    args = ["capture", str(TARGET), "--prompts", str(PROMPTS), "--regenerate", "--max-new-tokens", "8",
            "--batch-size", "1", "--max-prompts", "4", "--device", "cpu", "--json", "-o", str(out)]
    hook = tmp_path / "held_capture.py"
    hook.write_text(
        "import sys, time\nfrom pathlib import Path\nimport helpers.model.capture as c\n"
        "real, calls = c._sequences, []\n"
        "def held(*a, **kw):\n"
        "    calls.append(1)\n"
        "    if len(calls) > 1:  # the first batch is written; the second waits for the signal\n"
        "        never = Path(sys.argv[1])\n"
        "        t0 = time.monotonic()\n"
        "        while not never.exists() and time.monotonic() - t0 < 300:\n"
        "            time.sleep(0.05)\n"
        "    return real(*a, **kw)\n"
        "c._sequences = held\n"
        "from helpers.__main__ import main\n"
        "sys.exit(main(sys.argv[2:]))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, str(hook), str(tmp_path / "never"), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    deadline = time.time() + 240
    while time.time() < deadline and not list(out.rglob("data_*.ckpt")) and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1][-2000:]  # held: it cannot have finished
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "interrupted: re-run the same command to resume (finished samples are kept)"
    done = len(list(out.rglob("data_*.ckpt")))
    assert done == 1
    again = subprocess.run([sys.executable, "-m", "helpers", *args], env=env, capture_output=True, text=True,
                           timeout=300, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["skipped"] == done


@pytest.mark.slow  # writes a whole summary
def test_report_passes_the_target_to_the_doctor_and_the_run_settings_to_07(tmp_path, monkeypatch, cli):
    """`report --target T --prompts P --max-prompts N --max-new-tokens M --temperature X`: notebook 06
    gets T's config for the doctor, notebook 07 gets N, M and X under its own parameter names.
    (The notebooks' execution is replaced by a recorder: what is checked is what they are given.)"""
    import helpers.ui.report as report_mod

    given = {}

    def record(name, out, parameters, timeout=3600):
        given[name] = parameters
        return report_mod.NotebookRun(name, True, 0.0)

    monkeypatch.setattr(report_mod, "run_notebook", record)
    from helpers.ui.settings import RunSettings

    s = RunSettings(checkpoint=str(DRAFT), target=str(TARGET), prompts=str(PROMPTS), max_prompts=3,
                    max_new_tokens=7, temperature=0.5, max_samples=40)
    report_mod.run_report(s, tmp_path / "out", notebooks=("06_checkpoint_doctor",), progress=None)
    assert given["06_checkpoint_doctor"]["target_config"] == str(TARGET)
    spec = given["07_speculative_decoding"]
    assert (spec["max_prompts"], spec["max_new_tokens"], spec["temperature"]) == (3, 7, 0.5)
    assert spec["max_samples"] is None  # 07's older name for max_prompts: never the files-per-split value
    r = cli("report", "--help")
    assert "07_speculative_decoding" in r.stdout and "--max-prompts" in r.stdout and "--temperature" in r.stdout


def test_an_error_printed_after_progress_is_switched_on_keeps_its_newline():
    """Off a terminal, stderr goes through the progress line writer; `print` writes a message and
    its newline separately, and the newline must survive (a bar's closing newline alone is dropped)."""
    import io

    from tqdm import tqdm

    from helpers.commands import _options

    out = io.StringIO()
    lines = _options._ProgressLines(out)
    print("error: config.json: draft_vocab_size is 800.0, expected a positive integer", file=lines)
    for _ in tqdm(range(3), desc="scoring", file=lines):
        pass
    print("second line", file=lines)
    text = out.getvalue()
    assert text.startswith("error: config.json: draft_vocab_size is 800.0, expected a positive integer\n"), text
    assert text.endswith("\nsecond line\n") and "\n\n" not in text, text
