"""The kit's GGUF reading and writing against llama.cpp's own converter (b11434; make test-engine).

The engine pair's draft, converted by llama.cpp's `convert_hf_to_gguf.py` (`llamacpp_pair`), is the
file a llama.cpp user has. Checked on it: the kit's writer (`write_draft_gguf`, used by `fix` and by the
tests that run without llama.cpp) makes the same file byte for byte (given the converted target's
tokenizer keys); `inspect` calls its absolute ids healthy for llama.cpp; the same file with offsets in
d2t is named as the bug, and `fix` turns it back into the converter's file.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.torch import load_file

pytestmark = pytest.mark.engine


def test_the_kits_writer_makes_the_converters_file(llamacpp_pair, tmp_path):
    from helpers.io.gguf_files import write_draft_gguf

    hf = llamacpp_pair["hf"]
    tensors = load_file(str(hf / "draft" / "model.safetensors"))
    cfg = json.loads((hf / "draft" / "config.json").read_text())
    tcfg = json.loads((hf / "target" / "config.json").read_text())
    ours = write_draft_gguf(tmp_path / "draft.gguf", tensors, cfg, tcfg, tokenizer_from=llamacpp_pair["target"],
                            model_dir=hf / "draft")
    assert ours.read_bytes() == llamacpp_pair["draft"].read_bytes()


def test_inspect_calls_the_converters_absolute_ids_healthy_for_llamacpp(llamacpp_pair, cli):
    r = cli("inspect", str(llamacpp_pair["draft"]), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["format"] == "gguf" and out["stored_convention"] == "absolute"
    assert out["engine_reading"]["healthy"] is True


def test_offsets_in_the_converters_file_are_the_bug_and_fix_restores_it(llamacpp_pair, cli, tmp_path):
    from helpers.io.gguf_files import copy_gguf, stored_d2t

    ids = stored_d2t(llamacpp_pair["draft"])
    broken = copy_gguf(llamacpp_pair["draft"], tmp_path / "offsets.gguf", {"d2t": ids - np.arange(ids.size)})
    r = cli("inspect", str(broken), "--json")
    assert json.loads(r.stdout)["engine_reading"]["healthy"] is False
    d = cli("doctor", str(broken), "--engine", "llamacpp==b11434", "--json")
    assert d.returncode == 1 and "gguf-d2t-offsets" in {f["code"] for f in json.loads(d.stdout)["findings"]}
    f = cli("fix", str(broken), str(tmp_path / "fixed.gguf"))
    assert f.returncode == 0, f.stderr
    assert (tmp_path / "fixed.gguf").read_bytes() == llamacpp_pair["draft"].read_bytes()
