"""`fix` writes a copy only when the copy resolves an error finding for the chosen engine.

Each test copies a bundled sample into its own folder, runs the real command line (in this
process via `helpers.__main__.main`, once as a subprocess) and checks what was printed, the exit
code, which folders exist afterwards and that the source files are byte-for-byte unchanged.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from helpers.__main__ import main
from helpers.doctor.diagnose import diagnose
from helpers.doctor.findings import has_error
from helpers.core.errors import BadInputError
from helpers.doctor.fix import fix_checkpoint, plan_fix
from conftest import SAMPLES, side_file_draft


pytestmark = pytest.mark.skipif(not (SAMPLES / "tiny_draft_sglang").is_dir(), reason="bundled samples missing")


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def sample(tmp_path):
    """Copy a bundled sample to tmp_path/src; return (src, its file hashes)."""
    def make(name: str):
        src = tmp_path / "src"
        shutil.copytree(SAMPLES / name, src)
        return src, _hashes(src)
    return make


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _only_src_left(tmp_path: Path) -> None:
    """Nothing beside SRC: no DST, no `.DST.tmp-*` folder."""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


@pytest.mark.parametrize("engine", ["all", "sglang", "vllm"])
def test_healthy_checkpoint_is_refused_and_nothing_written(engine, sample, tmp_path, capsys):
    src, before = sample("tiny_draft_sglang")
    code, out, err = _cli(capsys, "fix", src, tmp_path / "dst", "--engine", engine)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {src}: nothing to fix for ")
    assert "--force" in lines[0] and "Traceback" not in err
    _only_src_left(tmp_path)
    assert _hashes(src) == before


def test_cosmetic_renames_do_not_count(sample):
    """For vLLM the SGLang-style keys would be renamed to layers.0.*, but vLLM loads both."""
    src, _ = sample("tiny_draft_sglang")
    plan = plan_fix(src, "vllm")
    assert any(c.startswith("renamed 10 keys") for c in plan.changes)
    assert plan.fixes == [] and plan.unfixable == [] and not plan.matters
    assert plan.refusal.startswith("nothing to fix for vllm")


def test_no_d2t_is_refused_naming_the_error(sample, tmp_path, capsys):
    src, before = sample("tiny_draft_no_d2t")
    code, out, err = _cli(capsys, "fix", src, tmp_path / "dst")
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "cannot repair d2t-missing" in lines[0] and "nothing written" in lines[0]
    _only_src_left(tmp_path)
    assert _hashes(src) == before


@pytest.mark.slow  # a real interpreter start
def test_refusal_through_a_real_subprocess(sample, tmp_path, cli_subprocess):
    src, before = sample("tiny_draft_no_d2t")
    r = cli_subprocess("fix", src, tmp_path / "dst", "--engine", "sglang")
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "d2t-missing" in r.stderr
    _only_src_left(tmp_path)
    assert _hashes(src) == before


def test_api_refuses_before_creating_anything(sample, tmp_path):
    src, before = sample("tiny_draft_sglang")
    with pytest.raises(BadInputError) as e:
        fix_checkpoint(src, tmp_path / "dst", "sglang")
    assert "nothing to fix for sglang" in str(e.value)
    _only_src_left(tmp_path)
    assert _hashes(src) == before


def test_force_writes_a_healthy_copy(sample, tmp_path, capsys):
    src, before = sample("tiny_draft_sglang")
    dst = tmp_path / "dst"
    code, out, err = _cli(capsys, "fix", src, dst, "--force")
    assert code == 0, err
    assert f"wrote {dst}" in out and "nothing needed changing" in out
    assert (dst / "model.safetensors").is_file() and (dst / "config.json").is_file()
    assert not has_error(diagnose(dst))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst", "src"]
    assert _hashes(src) == before


def test_force_writes_an_unrepairable_copy_and_exits_1(sample, tmp_path, capsys):
    src, before = sample("tiny_draft_no_d2t")
    res = fix_checkpoint(src, tmp_path / "api_dst", force=True)
    assert res.dst.is_dir() and not res.ok and "d2t-missing" in {f.code for f in res.findings}
    code, out, _ = _cli(capsys, "fix", src, tmp_path / "dst", "--force")
    assert code == 1 and "d2t-missing" in out and (tmp_path / "dst" / "model.safetensors").is_file()
    assert _hashes(src) == before


def test_dry_run_lists_the_changes_and_writes_nothing(sample, tmp_path, capsys):
    src, before = sample("tiny_draft_absolute")
    code, out, err = _cli(capsys, "fix", src, tmp_path / "dst", "--dry-run")
    assert code == 0, err
    assert "d2t: absolute target ids converted to offsets" in out
    assert "resolves: d2t-absolute" in out and "would write" in out
    _only_src_left(tmp_path)
    assert _hashes(src) == before


def test_dry_run_of_a_refusal_exits_2(sample, tmp_path, capsys):
    src, before = sample("tiny_draft_no_d2t")
    code, out, err = _cli(capsys, "fix", src, tmp_path / "dst", "--dry-run")
    assert code == 2 and "would refuse" in out
    assert len(err.splitlines()) == 1 and "d2t-missing" in err
    _only_src_left(tmp_path)
    assert _hashes(src) == before


def test_fixable_checkpoint_still_written(sample, tmp_path, capsys):
    src, before = sample("tiny_draft_absolute")
    dst = tmp_path / "dst"
    code, out, err = _cli(capsys, "fix", src, dst)
    assert code == 0, err
    assert "resolves: d2t-absolute" in out and "0 error(s)" in out
    assert not has_error(diagnose(dst))
    assert _hashes(src) == before


def test_json_for_a_written_copy(tmp_path, capsys):
    """A speculators-layout draft for SGLang 0.5.11 (it skips layers.0.* up to that release): d2t only in
    d2t.npy and layers.0.* keys, both fixed."""
    src = side_file_draft(tmp_path / "src")
    before = _hashes(src)
    dst = tmp_path / "dst"
    code, out, err = _cli(capsys, "fix", src, dst, "--engine", "sglang==0.5.11", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["src"] == str(src) and d["dst"] == str(dst) and d["engine"] == "sglang==0.5.11"
    assert d["written"] is True and d["dry_run"] is False and d["refusal"] is None
    assert set(d["fixes"]) == {"d2t-missing", "key-layout"} and d["unfixable"] == []
    assert any("renamed 10 keys" in c for c in d["changes"])
    assert d["findings"] and not any(f["severity"] == "error" for f in d["findings"])
    assert (dst / "model.safetensors").is_file()
    assert _hashes(src) == before


def test_json_for_a_refusal(sample, tmp_path, capsys):
    src, before = sample("tiny_draft_no_d2t")
    code, out, err = _cli(capsys, "fix", src, tmp_path / "dst", "--json")
    assert code == 2 and len(err.splitlines()) == 1
    d = json.loads(out)
    assert d["written"] is False and d["findings"] is None and d["fixes"] == []
    assert d["unfixable"] == ["d2t-missing"] and "cannot repair d2t-missing" in d["refusal"]
    _only_src_left(tmp_path)
    assert _hashes(src) == before
