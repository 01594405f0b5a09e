"""An --engine without a release: the newest release read stands in, and where the releases read feed the draft
different target layers, `speculate` says so on stderr (the Kimi engine pair's draft names its aux ids only in
eagle_config: vLLM 0.22.0 to 0.33.0 read them there, 0.34.0 reads only the top level and falls back to the
default capture). Found when `speculate --engine vllm` counted one verify step more than vLLM 0.32.0 on one
prompt: the kit had applied 0.34.0's capture."""
from __future__ import annotations

import json

from conftest import SAMPLES

from helpers.engines.registry import draft_capture, engine_at, release_capture_note

KIMI, LLAMA = SAMPLES / "engine_kimi", SAMPLES / "engine_llama"


def _cfg(pair):
    return json.loads((pair / "draft" / "config.json").read_text())


def _layers(pair) -> int:
    t = json.loads((pair / "target" / "config.json").read_text())
    return (t.get("text_config") or t)["num_hidden_layers"]


def test_the_note_names_the_release_standing_in_and_what_the_others_feed():
    cfg, n = _cfg(KIMI), _layers(KIMI)
    note = release_capture_note("vllm", cfg, n)
    newest = engine_at("vllm").version
    ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    fed_by_newest = draft_capture(f"vllm=={newest}", cfg, n)[1]
    assert fed_by_newest != draft_capture("vllm==0.32.0", cfg, n)[1]  # the case the note is for
    assert note is not None and f"vLLM {newest} (the newest read)" in note
    assert f"target layers {fed_by_newest}" in note
    assert str(draft_capture("vllm==0.32.0", cfg, n)[1]) in note and str(ids) in note


def test_no_note_with_a_release_or_where_every_release_feeds_the_same():
    assert release_capture_note("vllm==0.32.0", _cfg(KIMI), _layers(KIMI)) is None
    assert release_capture_note("vllm", _cfg(LLAMA), _layers(LLAMA)) is None  # ids = the default capture: all agree


def test_speculate_prints_it_on_stderr_only_without_a_release(cli):
    args = [KIMI / "draft", "--target", KIMI / "target", "--max-prompts", "1", "--max-new-tokens", "2",
            "--embed-from", KIMI / "target", "--readings", "offset", "--json"]
    bare = cli("speculate", *args, "--engine", "vllm")
    pinned = cli("speculate", *args, "--engine", "vllm==0.32.0")
    assert bare.returncode == 0 and pinned.returncode == 0, (bare.stderr, pinned.stderr)
    assert "--engine vllm names no release" in bare.stderr and "names no release" not in pinned.stderr
    json.loads(bare.stdout)  # stdout stays the JSON alone
