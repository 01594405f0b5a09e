"""Sharded checkpoints the kit reads with a warning: a tensor stored in two shards, and a single-file
checkpoint left beside the sharded index (real safetensors files, the doctor run as the CLI)."""
from __future__ import annotations

import json
import stat

import torch
from safetensors.torch import load_file, save_file

from conftest import SAMPLES
from helpers.io.checkpoint import open_checkpoint
from helpers.ui.checkpoint_debug import INDEX, shard_of, write_shards

DRAFT = SAMPLES / "tiny_draft_sglang"


def _doctor(cli, path):
    r = cli("doctor", str(path), "--no-weights", "--json")
    assert r.returncode in (0, 1), r.stderr
    return {f["code"]: f for f in json.loads(r.stdout)["findings"]}


def test_a_tensor_in_two_shards_is_read_from_the_index_s_shard_and_named(tmp_path, cli):
    ck = write_shards(DRAFT, tmp_path / "sharded")
    named = shard_of(ck, "fc.weight")
    other = next(f for f in sorted({*json.loads((ck / INDEX).read_text())["weight_map"].values()}) if f != named)
    part = load_file(str(ck / other))
    right = load_file(str(ck / named))["fc.weight"]
    part["fc.weight"] = torch.zeros_like(right)  # a stale copy in the shard the index does not name
    save_file(part, str(ck / other))
    opened = open_checkpoint(ck)
    assert set(opened.tensors.duplicates) == {"fc.weight"}
    assert torch.equal(opened.tensors.get("fc.weight"), right)  # the index decides, whatever the shard order
    found = _doctor(cli, ck)
    assert found["shards-overlap"]["severity"] == "warning"
    assert "fc.weight" in found["shards-overlap"]["message"] and named in found["shards-overlap"]["message"]


def test_a_single_file_checkpoint_beside_an_index_is_named(tmp_path, cli):
    ck = write_shards(DRAFT, tmp_path / "sharded")
    (ck / "model.safetensors").write_bytes((DRAFT / "model.safetensors").read_bytes())
    opened = open_checkpoint(ck)
    assert (ck / "model.safetensors") in opened.tensors.unread
    assert all(f.name != "model.safetensors" for f in opened.tensors.files)
    found = _doctor(cli, ck)
    assert "model.safetensors" in found["weights-beside-index"]["message"]


def test_a_clean_sharded_checkpoint_gets_neither_warning(tmp_path, cli):
    ck = write_shards(DRAFT, tmp_path / "sharded")
    found = _doctor(cli, ck)
    assert "shards-overlap" not in found and "weights-beside-index" not in found


def test_notebook_08_s_copies_get_the_usual_modes(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        ck = write_shards(DRAFT, tmp_path / "sharded")
    finally:
        os.umask(old)
    for f in ck.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, f
