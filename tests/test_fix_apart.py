"""`fix SRC DST` never writes inside its source: DST inside SRC (directly, through a symlink, or
SRC named by one of its files) is one line, exit 2, and nothing is written anywhere (issue 40)."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from conftest import SAMPLES


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("case", ["inside", "through-a-link", "link-as-source", "file-as-source"])
def test_a_destination_inside_the_source_is_refused(case, tmp_path, cli):
    src = tmp_path / "src"
    shutil.copytree(SAMPLES / "tiny_draft_sglang", src)
    (tmp_path / "link").symlink_to(src, target_is_directory=True)
    given, dst = {"inside": (src, src / "inner"), "through-a-link": (src, tmp_path / "link" / "inner"),
                  "link-as-source": (tmp_path / "link", src / "inner"),
                  "file-as-source": (src / "model.safetensors", src / "inner")}[case]
    before, around = _tree(src), sorted(p.name for p in tmp_path.iterdir())
    r = cli("fix", given, dst, "--force")  # --force: a copy would be written anywhere else
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {dst}: is inside the checkpoint being fixed"), r.stderr
    assert _tree(src) == before and sorted(p.name for p in tmp_path.iterdir()) == around
    assert r.stdout == ""


def test_a_destination_beside_the_source_is_written(tmp_path, cli):
    src = tmp_path / "src"
    shutil.copytree(SAMPLES / "tiny_draft_sglang", src)
    before = _tree(src)
    r = cli("fix", src, tmp_path / "src-fixed", "--force")
    assert r.returncode in (0, 1), r.stderr
    assert (tmp_path / "src-fixed" / "model.safetensors").is_file() and _tree(src) == before
