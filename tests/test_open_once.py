"""`speculate` reads the draft's files once per run (issue 26: open once, pass objects).

A real `d2t-lab speculate` run on the bundled pair, in process, with the kit's readers wrapped
to count, per file of the draft folder: safetensors header reads, safetensors data opens
(`safe_open`), config reads and torch loads. Each draft file must be read at most once for its
header and once for its data; the config once.
"""
from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

import helpers.io.checkpoint as checkpoint_mod
import helpers.io.configs as configs_mod
import helpers.io.tensor_files as tensor_files
from helpers.__main__ import main
from conftest import SAMPLES


DRAFT = SAMPLES / "tiny_draft_sglang"


@pytest.fixture
def counts(monkeypatch):
    import safetensors

    seen = collections.Counter()

    def wrap(kind, fn, arg=0):
        def counted(*a, **kw):
            seen[(kind, Path(a[arg]).resolve())] += 1
            return fn(*a, **kw)
        return counted

    header = wrap("header", tensor_files.read_safetensors_header)
    for mod in (tensor_files, checkpoint_mod):
        if hasattr(mod, "read_safetensors_header"):
            monkeypatch.setattr(mod, "read_safetensors_header", header)
    monkeypatch.setattr(safetensors, "safe_open", wrap("data", safetensors.safe_open))
    config = wrap("config", configs_mod.read_config_file)  # every config read, local or a remote's stand-in
    for mod in (configs_mod, checkpoint_mod):
        if hasattr(mod, "read_config_file"):
            monkeypatch.setattr(mod, "read_config_file", config)
    load = wrap("torch", tensor_files.torch_load)
    for mod in (tensor_files, checkpoint_mod):
        if hasattr(mod, "torch_load"):
            monkeypatch.setattr(mod, "torch_load", load)
    return seen


def test_speculate_reads_the_draft_files_once(counts, capsys):
    rc = main(["speculate", str(DRAFT), "--max-prompts", "1", "--max-new-tokens", "4", "--reading", "offset",
               "--device", "cpu", "--dtype", "float32", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["readings"]["offset"]["verify_steps"] > 0
    mine = {k: n for k, n in counts.items() if DRAFT.resolve() in k[1].parents}
    files = {p for _, p in mine}
    assert DRAFT.resolve() / "model.safetensors" in files  # the counting saw the run
    assert ("config", DRAFT.resolve() / "config.json") in mine  # and the config reads
    too_many = {f"{kind} {p.name}": n for (kind, p), n in mine.items() if n > 1}
    assert not too_many, f"draft files read more than once: {too_many}"
