"""`d2t-lab report`: inputs checked before any notebook runs; a mapping-only folder."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[1] / "data_samples"



@pytest.mark.slow
def test_report_on_mapping_only_folder_says_what_was_not_given(cli, tmp_path):
    ck = shutil.copytree(SAMPLES / "kimi_k25_mapping", tmp_path / "mapping")
    out = tmp_path / "kimi"
    r = cli("report", ck, "-o", out)
    assert r.returncode == 0, r.stdout + r.stderr
    # one line of progress per notebook, and no kernel chatter
    assert sum(line.startswith("[") for line in r.stdout.splitlines()) == 5
    assert "KeyboardInterrupt" not in r.stdout + r.stderr and "IPKernelApp" not in r.stdout + r.stderr
    md = (out / "summary.md").read_text()
    assert "**OFFSET**" in md
    assert "not given: pass --samples DIR" in md and "not given: pass --log FILE" in md
    assert "No prediction: no samples were given" in md
    # a mapping beside no weights: the engines would not read it (d2t only in d2t.pt)
    assert "doctor errors d2t-missing" in md
    summary = json.loads((out / "summary.json").read_text())
    assert all(nb["ok"] for nb in summary["notebooks"])
    assert "accuracy" not in summary["numbers"] and "replay" not in summary["numbers"]
    for nb in summary["notebooks"]:
        assert (out / "html" / f"{nb['name']}.html").exists()
        assert (out / "notebooks" / f"{nb['name']}.ipynb").exists()


def test_report_refuses_to_write_inside_the_checkpoint(cli, tmp_path):
    r = cli("report", SAMPLES / "kimi_k25_mapping", "-o", SAMPLES / "kimi_k25_mapping" / "report")
    assert r.returncode == 2 and "must not be written inside" in r.stderr
    assert not (SAMPLES / "kimi_k25_mapping" / "report").exists()


@pytest.mark.parametrize("bad, expect", [
    (["--samples", "{empty}"], "holds no hidden-state samples"),
    (["--samples", "{missing}"], "no such samples folder"),
    (["--log", "{empty_log}"], "no SGLang 'Decode batch' or vLLM 'SpecDecoding metrics' line"),
    (["--log", "{missing}"], "no such"),
    (["--topk", "4"], "needs --draft-tokens"),
    (["--device", "tpu:7"], "device"),
    (["--dtype", "int3"], "--dtype"),
    (["--baseline-tps", "-5"], "--baseline-tps must be a positive"),
])
def test_report_checks_every_input_before_any_notebook_runs(tmp_path, capsys, bad, expect):
    from helpers.__main__ import main

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty.log").write_text("nothing an engine printed\n")
    subst = {"{empty}": tmp_path / "empty", "{missing}": tmp_path / "missing", "{empty_log}": tmp_path / "empty.log"}
    args = [str(subst.get(a, a)) for a in bad]
    out = tmp_path / "out"
    code = main(["report", str(SAMPLES / "tiny_draft_sglang"), *args, "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error:") and expect in err and len(err.strip().splitlines()) == 1, err
    assert not (out / "notebooks").exists()
