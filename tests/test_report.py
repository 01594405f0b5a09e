"""`d2t-lab report`: inputs checked before any notebook runs (a mapping-only folder is reported on
in tests/test_wheel.py, from an installed wheel)."""
from __future__ import annotations


import pytest

from conftest import SAMPLES




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
    (["--batch-size", "0"], "--batch-size must be at least 1"),
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


def test_report_batch_size_reaches_notebook_07(tmp_path):
    """--batch-size has speculate's meaning and default, and is notebook 07's `batch_size` parameter."""
    import argparse

    import papermill as pm

    from helpers.commands import report
    from helpers.speculate.result import DEFAULT_BATCH_SIZE
    from helpers.ui.notebook import SPECULATE
    from helpers.ui.report import NOTEBOOK_DIR

    p = argparse.ArgumentParser()
    report.add_arguments(p)
    declared = pm.inspect_notebook(str(NOTEBOOK_DIR / f"{SPECULATE}.ipynb"))
    for given, expect in (([], DEFAULT_BATCH_SIZE), (["--batch-size", "3"], 3)):
        args = p.parse_args([str(SAMPLES / "tiny_draft_sglang"), "-o", str(tmp_path / "out"), *given])
        s = report.settings_from_args(args)
        assert s.batch_size == expect
        assert s.notebook_parameters(declared)["batch_size"] == expect
