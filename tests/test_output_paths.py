"""Every command that writes refuses a bad output path with one line on stderr and exit 2.

For each writing command (`figures -o`, `logs --plot`, `fix DST`, `report -o`): a folder that
does not exist where one must, a file where a folder is wanted, a folder where a file is wanted.
The CLI runs in this process (`helpers.__main__.main`); each test checks the exit code, that
stderr is one `error:` line naming the path, that there is no traceback, and that nothing new
appears under the test's folder.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.__main__ import main
from helpers.core.errors import BadInputError
from helpers.core.outputs import new_output_dir, output_dir, output_file
from conftest import SAMPLES


LOG = SAMPLES / "logs" / "sglang.log"
DRAFT = SAMPLES / "tiny_draft_sglang"
FIXABLE = SAMPLES / "tiny_draft_absolute"


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def box(tmp_path):
    """tmp_path holding `a_file` (a plain file) and `a_folder/` (an empty folder)."""
    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "a_folder").mkdir()
    return tmp_path


def _refused(capsys, box: Path, argv: list, names: str) -> str:
    before = _tree(box)
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in out + err
    assert names in lines[0], lines[0]
    assert _tree(box) == before, "something was created"
    return lines[0]


# (command, bad path builder, fragment of the message)
CASES = {
    "logs-plot-missing-parent": (lambda b: ["logs", LOG, "--plot", b / "nope" / "x.png"], "does not exist"),
    "logs-plot-parent-is-file": (lambda b: ["logs", LOG, "--plot", b / "a_file" / "x.png"], "is a file, not a folder"),
    "logs-plot-is-folder": (lambda b: ["logs", LOG, "--plot", b / "a_folder"], "is a folder"),
    "logs-plot-trailing-slash": (lambda b: ["logs", LOG, "--plot", f"{b / 'new'}/"], "is not a file name"),
    "logs-plot-unknown-format": (lambda b: ["logs", LOG, "--plot", b / "x.foo"], "unknown plot format"),
    "figures-out-is-file": (lambda b: ["figures", DRAFT, "-o", b / "a_file"], "is a file"),
    "figures-out-through-file": (lambda b: ["figures", DRAFT, "-o", b / "a_file" / "sub" / "figs"], "is a file, not a folder"),
    "fix-missing-parent": (lambda b: ["fix", FIXABLE, b / "nope" / "dst"], "does not exist"),
    "fix-dst-is-file": (lambda b: ["fix", FIXABLE, b / "a_file"], "already exists"),
    "fix-dst-is-folder": (lambda b: ["fix", FIXABLE, b / "a_folder"], "already exists"),
    "fix-parent-is-file": (lambda b: ["fix", FIXABLE, b / "a_file" / "dst"], "is a file, not a folder"),
    "report-out-is-file": (lambda b: ["report", DRAFT, "-o", b / "a_file"], "is a file"),
    "report-out-through-file": (lambda b: ["report", DRAFT, "-o", b / "a_file" / "sub" / "rep"], "is a file, not a folder"),
}
CASES.update({
    "diff-out-missing-parent": (lambda b: ["diff", DRAFT, FIXABLE, "-o", b / "nope" / "x.png"], "does not exist"),
    "diff-out-is-folder": (lambda b: ["diff", DRAFT, FIXABLE, "-o", b / "a_folder"], "is a folder"),
    "diff-out-unknown-format": (lambda b: ["diff", DRAFT, FIXABLE, "-o", b / "x.foo"], "unknown figure format"),
})


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_output_path_is_one_line(case, box, capsys):
    build, fragment = CASES[case]
    argv = build(box)
    line = _refused(capsys, box, argv, fragment)
    assert str(box) in line  # the line names the path it refuses


def test_figures_refuses_a_folder_where_a_figure_file_goes(box, capsys):
    out = box / "figs"
    (out / f"{DRAFT.name}_staircase.png").mkdir(parents=True)
    _refused(capsys, box, ["figures", DRAFT, "-o", out], "_staircase.png")


def test_figures_prefix_must_not_be_a_path(box, capsys):
    """A prefix such as ../x would put the figures outside OUTDIR."""
    _refused(capsys, box, ["figures", DRAFT, "-o", box / "figs", "--prefix", "../x"], "--prefix '../x'")


def test_report_refuses_before_running_a_notebook(box, capsys):
    import time

    t0 = time.perf_counter()
    _refused(capsys, box, ["report", DRAFT, "-o", box / "a_file"], "report folder")
    assert time.perf_counter() - t0 < 5  # no notebook kernel was started


def test_good_output_paths_are_written(box, capsys):
    """Controls: the same commands write where the path is good (figures creates missing parents)."""
    assert main(["logs", str(LOG), "--plot", str(box / "plot.png")]) == 0
    assert (box / "plot.png").stat().st_size > 0
    assert main(["figures", str(DRAFT), "-o", str(box / "new" / "figs")]) == 0
    assert len(list((box / "new" / "figs").glob("*.png"))) == 5
    capsys.readouterr()


def test_output_helpers_directly(box):
    assert output_file(box / "a_file") == box / "a_file"  # an existing file may be replaced
    assert output_dir(box / "x" / "y") == box / "x" / "y" and (box / "x" / "y").is_dir()
    assert not (box / "p" / "q").exists() and output_dir(box / "p" / "q", create=False) == box / "p" / "q"
    assert not (box / "p").exists()
    assert new_output_dir(box / "fresh") == box / "fresh" and not (box / "fresh").exists()
    with pytest.raises(BadInputError, match="is a folder"):
        output_file(box / "a_folder")
    with pytest.raises(BadInputError, match="is a file"):
        output_dir(box / "a_file")
    with pytest.raises(BadInputError, match="already exists"):
        new_output_dir(box / "a_folder")


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="no /proc")
def test_unwritable_folder_is_refused_even_for_root():
    """os.access says yes to root everywhere; the check must try, as /proc takes no new files."""
    with pytest.raises(BadInputError, match="not writable"):
        output_file("/proc/d2t-plot.png")
    with pytest.raises(BadInputError, match="not writable"):
        output_dir("/proc/d2t-figures/sub")
    assert not os.path.exists("/proc/d2t-figures")


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path):
    """`d2t-lab logs LOG --json | head -c 10`: the pipe closes early; no traceback on stderr."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    p = subprocess.Popen([sys.executable, "-m", "helpers", "logs", str(SAMPLES / "logs" / "sglang.log"),
                          "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=os.environ | {"PYTHONPATH": os.fspath(root)})
    p.stdout.read(10)
    p.stdout.close()  # the reader leaves with most of the 140 kB JSON unread
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141 and "Traceback" not in err, err
