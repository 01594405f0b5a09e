"""`capture`: the bundled samples reproduced from the bundled target, loss masks, resuming, bad input."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import SAMPLES, same_up_to_rounding

ROOT = Path(__file__).resolve().parents[1]
TARGET = SAMPLES / "tiny_target"
PROMPTS = SAMPLES / "prompts.jsonl"


def _tree_hash(folder: Path) -> dict[str, str]:
    return {os.fspath(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TARGET)


# -- the bundled samples are what `capture` makes from the bundled target ---------------------------
@pytest.mark.slow
@pytest.mark.parametrize("split,first", [("train", 64), ("val", None)], ids=["train-first-64", "val"])
def test_capture_reproduces_the_bundled_samples(cli, tmp_path, split, first):
    """The whole val split, and the first 64 of train's 320 records (each record is captured on its
    own, so a prefix of the prompts gives a prefix of the files)."""
    import itertools

    from helpers.io.samples import iter_samples
    from helpers.measure.evaluate import evaluate

    bundled = SAMPLES / "tiny_hidden_states" / split
    made = json.loads((bundled / "capture.json").read_text())
    out = tmp_path / split
    args = ["capture", str(TARGET), "--prompts", str(SAMPLES / "prompts" / f"{split}.jsonl"), "--regenerate",
            "--max-new-tokens", str(made["max_new_tokens"]), "--aux-layers",
            ",".join(map(str, made["aux_layer_ids"])), "--engine", made["engine"], "--device", "cpu",
            "--dtype", "float32", "-o", str(out), "--json", *(["--max-prompts", str(first)] if first else [])]
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    n = first or made["records"]
    assert json.loads(r.stdout)["written"] == n
    pairs = list(zip(itertools.islice(iter_samples(bundled), n), iter_samples(out), strict=True))
    assert len(pairs) == n
    for a, b in pairs:
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask), a.path
        assert a.aux_hidden_state.dtype == b.aux_hidden_state.dtype == torch.bfloat16
        same_up_to_rounding(a.aux_hidden_state, b.aux_hidden_state, a.path)
        same_up_to_rounding(a.hidden_state, b.hidden_state, a.path)
    if first:
        return  # the scores below are over the whole split
    kw = dict(device="cpu", steps=2, readings=["offset"])
    ra, rb = evaluate(SAMPLES / "tiny_draft_sglang", bundled, **kw), evaluate(SAMPLES / "tiny_draft_sglang", out, **kw)
    a, b = ra.overall.readings["offset"], rb.overall.readings["offset"]
    assert a.tokens == b.tokens > 0 and a.top1 > 0.5
    # equal where the states are equal; a value that moved by one bf16 step may flip a near-tie argmax
    assert a.step_top1 == pytest.approx(b.step_top1, abs=2 / a.tokens)


# -- loss_mask: 1 exactly on assistant tokens -----------------------------------------------------------
def test_loss_mask_is_the_assistant_text(tokenizer):
    from helpers.io.chat import encode_conversation

    msgs = [{"role": "user", "content": "Return the number of items."},
            {"role": "assistant", "content": " The list is empty."}]
    for template in (True, False):
        ids, mask = encode_conversation(tokenizer, msgs, template)
        assert len(ids) == len(mask) and 0 < sum(mask) < len(mask)
        assert tokenizer.decode([i for i, m in zip(ids, mask) if m]) == msgs[1]["content"]
        assert tokenizer.decode([i for i, m in zip(ids, mask) if not m]).startswith(msgs[0]["content"])


def test_loss_mask_without_generation_markers(tokenizer):
    """A template without {% generation %}: the assistant tokens are found by text offsets."""
    from helpers.io.chat import encode_conversation

    tok = tokenizer
    old = tok.chat_template
    tok.chat_template = ("{%- for m in messages -%}{%- if m['role'] == 'assistant' -%}A:{{ m['content'] }}\n"
                         "{%- else -%}U:{{ m['content'] }}\n{%- endif -%}{%- endfor -%}")
    try:
        msgs = [{"role": "system", "content": " Be brief."}, {"role": "user", "content": " Sort it."},
                {"role": "assistant", "content": " Use sorted."}, {"role": "user", "content": " And reverse?"},
                {"role": "assistant", "content": " Pass reverse."}]
        ids, mask = encode_conversation(tok, msgs, True)
        got = tok.decode([i for i, m in zip(ids, mask) if m])
        assert got == " Use sorted. Pass reverse."
    finally:
        tok.chat_template = old


def test_prompt_formats_give_the_same_conversation(tmp_path):
    from helpers.io.prompts import read_prompts

    f = tmp_path / "p.jsonl"
    rows = [{"prompt": "Hi", "response": "Hello"},
            {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]},
            {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]}]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    convs = list(read_prompts(f))
    assert [c.index for c in convs] == [0, 1, 2]
    assert convs[0].messages == convs[1].messages == convs[2].messages
    assert convs[0].prompt_messages() == [{"role": "user", "content": "Hi"}]


@pytest.mark.slow
def test_teacher_forced_capture_masks_the_answer(cli, tmp_path, tokenizer):
    from helpers.io.samples import iter_samples

    f = tmp_path / "chat.jsonl"
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "Return a new list."},
                                          {"role": "assistant", "content": " The default is None."}]}) + "\n")
    r = cli("capture", str(TARGET), "--prompts", str(f), "--device", "cpu", "-o", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    (s,) = list(iter_samples(tmp_path / "o"))
    assert tokenizer.decode(s.input_ids[s.loss_mask == 1].tolist()) == " The default is None."


# -- bad input: one line, exit 2, nothing written --------------------------------------------------------
@pytest.mark.parametrize("content,words", [
    ('{"prompt": "a"}\nnot json\n', "line 2 is not JSON"),
    ('{"text": "a"}\n', "needs 'prompt', 'messages'"),
    ('{"messages": [{"role": "robot", "content": "x"}]}\n', "role"),
])
def test_bad_prompt_files(cli, tmp_path, content, words):
    f = tmp_path / "p.jsonl"
    f.write_text(content)
    r = cli("capture", str(TARGET), "--prompts", str(f), "--regenerate", "--device", "cpu", "-o", str(tmp_path / "o"))
    assert r.returncode == 2 and words in r.stderr and "p.jsonl" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "o").rglob("data_*")) if (tmp_path / "o").exists() else True


def test_teacher_forcing_needs_an_answer(cli, tmp_path):
    r = cli("capture", str(TARGET), "--prompts", str(PROMPTS), "--device", "cpu", "-o", str(tmp_path / "o"))
    assert r.returncode == 2 and "--regenerate" in r.stderr and "line 1:" in r.stderr  # errors name the line


def test_other_settings_in_the_same_folder_are_refused(cli, tmp_path):
    base = ["capture", str(TARGET), "--prompts", str(PROMPTS), "--regenerate", "--max-new-tokens", "3",
            "--max-samples", "2", "--device", "cpu", "-o", str(tmp_path / "o")]
    assert cli(*base).returncode == 0
    again = cli(*base, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["skipped"] == 2 and json.loads(again.stdout)["written"] == 0
    r = cli(*base, "--engine", "vllm", "--aux-layers", "1,3,4")
    assert r.returncode == 2 and "captured_layers" in r.stderr and "other settings" in r.stderr


# -- interrupted and resumed ------------------------------------------------------------------------------
@pytest.mark.slow
def test_killed_capture_resumes_without_recomputing(tmp_path, cli):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(PROMPTS.read_bytes())
    inputs_before = _tree_hash(TARGET) | {"prompts": hashlib.sha256(prompts.read_bytes()).hexdigest()}
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "helpers", "capture", str(TARGET), "--prompts", str(prompts), "--regenerate",
           "--max-new-tokens", "16", "--batch-size", "1", "--device", "cpu", "-o", str(out), "--json"]
    env = os.environ | {"PYTHONPATH": os.fspath(ROOT)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(out.rglob("data_*.ckpt"))) < 5:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = sorted(out.rglob("data_*.ckpt"))
    assert 5 <= len(done) < 32, "the run was not interrupted mid-way"
    from helpers.io.samples import load_sample

    stamps = {p: p.stat().st_mtime_ns for p in done}
    for p in done:
        load_sample(p)  # every finished file is complete
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["skipped"] == len(done) and res["written"] == 32 - len(done)
    assert {p: p.stat().st_mtime_ns for p in done} == stamps  # not recomputed
    assert len(list(out.rglob("data_*.ckpt"))) == 32 and not list(out.rglob("*.tmp"))
    assert inputs_before == _tree_hash(TARGET) | {"prompts": hashlib.sha256(prompts.read_bytes()).hexdigest()}
    # the resumed capture holds what an uninterrupted one holds
    whole = tmp_path / "whole"
    argv = cmd[cmd.index("capture"):]
    assert cli(*argv[:argv.index("-o")], "-o", whole).returncode == 0  # in this process: no second interpreter
    from helpers.io.samples import iter_samples

    for a, b in zip(iter_samples(out), iter_samples(whole), strict=True):
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.aux_hidden_state, b.aux_hidden_state)


def test_speculators_generated_data_is_read(tmp_path):
    """speculators' data_generation_offline.py writes data_<i>.pt with a list `hidden_states`."""
    from helpers.io.samples import iter_samples, load_sample

    src = next(iter_samples(SAMPLES / "tiny_hidden_states" / "train"))
    H = src.hidden_state.shape[-1]
    layers = list(src.aux_hidden_state.split(H, dim=-1)) + [src.hidden_state]
    torch.save({"input_ids": src.input_ids, "hidden_states": [t.clone() for t in layers],
                "loss_mask": src.loss_mask}, tmp_path / "data_0.pt")
    got = load_sample(tmp_path / "data_0.pt", expect_aux_width=3 * H)
    assert torch.equal(got.aux_hidden_state, src.aux_hidden_state) and torch.equal(got.hidden_state, src.hidden_state)
    assert [s.path.name for s in iter_samples(tmp_path)] == ["data_0.pt"]
    torch.save({"input_ids": src.input_ids, "hidden_states": [src.hidden_state], "loss_mask": None},
               tmp_path / "data_1.pt")
    from helpers.core.errors import BadInputError

    with pytest.raises(BadInputError, match="at least 2 tensors"):
        load_sample(tmp_path / "data_1.pt")


def test_capture_never_writes_among_other_files(cli, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    before = sorted(p.name for p in folder.iterdir())
    r = cli("capture", str(TARGET), "--prompts", str(PROMPTS), "--regenerate", "--device", "cpu", "-o", str(folder))
    assert r.returncode == 2 and "no capture.json" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in folder.iterdir()) == before
    r = cli("capture", str(TARGET), "--prompts", str(PROMPTS), "--regenerate", "-o", str(folder / "config.json"))
    assert r.returncode == 2 and "is a file" in r.stderr
