"""The whole sample pipeline runs on a read-only `data_samples/` and changes nothing in it.

The fixture makes the real `data_samples/` read-only (`chmod -R a-w`, folders included) and puts
every original mode back in a `finally` block. The test then runs everything the kit does with
the bundled files - inspect every checkpoint and mapping, load every draft, read every
hidden-state sample, evaluate and replay a few samples, run the doctor and `fix` (into a temporary
folder), parse the logs, and the CLI - and compares SHA-256 hashes of every file before and after,
and the set of paths (no file created or removed).

Note: the tests run as root in CI, and root ignores file permissions, so `chmod` alone would not
stop a write there; the hash and path comparison is the real check. As an ordinary user both
apply: a write would fail with a permission error as well.

Steps whose module or bundled sample does not exist yet are skipped (and named in the test's
output); the mapping step always runs.
"""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
import torch

from helpers.io.checkpoint import find_checkpoints, load_mapping, open_checkpoint
from helpers.core.errors import BadInputError
from conftest import SAMPLES


def snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """{relative path: (kind, SHA-256 or link target)} for everything under root."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            out[rel] = ("dir", "")
        else:
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            out[rel] = ("file", h.hexdigest())
    return out


@pytest.fixture
def readonly_samples():
    """data_samples/ made read-only for the test; original modes restored whatever happens."""
    paths = [SAMPLES, *sorted(SAMPLES.rglob("*"))]
    modes = {p: stat.S_IMODE(p.lstat().st_mode) for p in paths if not p.is_symlink()}
    before = snapshot(SAMPLES)
    try:
        for p, mode in modes.items():
            os.chmod(p, mode & ~0o222)
        yield before
    finally:
        for p, mode in modes.items():
            try:
                os.chmod(p, mode)
            except FileNotFoundError:  # removed during the test: the hash check reports it
                pass
    restored = {p: stat.S_IMODE(p.lstat().st_mode) for p in modes if p.exists()}
    assert restored == {p: m for p, m in modes.items() if p.exists()}, "modes not restored"


def _draft_dirs() -> list[Path]:
    return sorted(p for p in SAMPLES.glob("tiny_draft_*") if (p / "config.json").exists())


def _samples_dir() -> Path | None:
    p = SAMPLES / "tiny_hidden_states"
    return p if p.exists() else None


def _embed_from() -> Path | None:
    p = SAMPLES / "tiny_target"
    return p if p.exists() else None


def test_pipeline_on_readonly_samples(readonly_samples, tmp_path, cli):
    before = readonly_samples
    assert before, "data_samples/ is empty"
    if os.geteuid() != 0:  # permissions are enforced for ordinary users: prove the folder is read-only
        with pytest.raises(PermissionError):
            (SAMPLES / "write-probe").write_text("x")
    ran, skipped = [], []

    # 1. inspect every checkpoint and mapping the kit finds (API and, for two of them, the CLI)
    from helpers.doctor.inspection import inspect_path

    found = find_checkpoints(SAMPLES)
    assert found, "find_checkpoints found nothing under data_samples/"
    for ck in found:
        try:
            r = inspect_path(ck)
        except BadInputError as e:  # the bundled draft without d2t is meant to have none
            assert "has no d2t" in str(e), str(e)
            continue
        assert r["verdict"] in ("offset", "absolute", "identity", "ambiguous", "inconsistent")
    kimi = SAMPLES / "kimi_k25_mapping"
    assert load_mapping(kimi).verdict().encoding == "offset"
    for path in (kimi, SAMPLES / "kimi_k25_mapping_absolute"):
        r = cli("inspect", "--json", str(path))
        assert r.returncode == 0, r.stderr
    ran.append(f"inspect ({len(found)} checkpoints)")

    # 2. load every bundled draft
    drafts = _draft_dirs()
    if drafts:
        from helpers.model.draft import load_draft

        for d in drafts:
            ck = open_checkpoint(d)
            embed = None if ck.tensors.find("embed_tokens.weight") else _embed_from()
            model = load_draft(d, device="cpu", dtype=torch.float32, embed_from=embed)
            assert model.config.draft_vocab_size > 0
        ran.append(f"load_draft ({len(drafts)} drafts)")
    else:
        skipped.append("load_draft: no bundled drafts yet (issue 3)")

    # 3. read every hidden-state sample, evaluate and replay a few
    samples = _samples_dir()
    good = SAMPLES / "tiny_draft_sglang"
    if samples is not None:
        from helpers.io.samples import iter_samples

        splits = sorted(p for p in samples.iterdir() if p.is_dir()) or [samples]  # train/, val/
        n = sum(1 for split in splits for _ in iter_samples(split))
        assert n > 0
        ran.append(f"iter_samples ({n} samples in {len(splits)} splits)")
        if good.exists():
            from helpers.measure.evaluate import evaluate

            res = evaluate(good, samples, steps=2, device="cpu", max_samples=2, progress=False)
            assert res.to_dict()
            ran.append("evaluate")
            try:
                from helpers.measure.replay import replay
            except ImportError:
                skipped.append("replay: helpers.measure.replay.replay does not exist yet")
            else:
                rep = replay(good, samples, steps=2, device="cpu", max_samples=2, progress=False)
                assert rep is not None
                ran.append("replay")
            r = cli("evaluate", str(good), "--samples", str(samples), "--device", "cpu", "--steps", "1", "--max-samples", "2", "--json")
            assert r.returncode == 0, r.stderr
            ran.append("evaluate CLI")
    else:
        skipped.append("samples/evaluate/replay: no bundled hidden states yet (issue 3)")

    # 4. the doctor on every checkpoint, and fix into a temporary folder
    try:
        from helpers.doctor.diagnose import diagnose
        from helpers.doctor.fix import fix_checkpoint
    except ImportError:
        skipped.append("doctor: helpers.doctor.diagnose does not exist yet")
    else:
        for ck in [*drafts, kimi]:
            findings = diagnose(ck, engine="all", check_weights=True)
            assert isinstance(findings, list)
        ran.append(f"doctor ({len(drafts) + 1} checkpoints)")
        src = SAMPLES / "tiny_draft_absolute"
        if src.exists():
            fix_checkpoint(src, tmp_path / "fixed")
            assert (tmp_path / "fixed").exists()
            ran.append("fix")
        r = cli("doctor", str(kimi), "--json")
        assert r.returncode in (0, 1), r.stderr
        ran.append("doctor CLI")

    # 5. serving logs
    logs = sorted((SAMPLES / "logs").glob("*.log")) if (SAMPLES / "logs").exists() else []
    if logs:
        from helpers.serving.logs import read_log

        for log in logs:
            read_log(log)
        ran.append(f"read_log ({len(logs)} logs)")

    after = snapshot(SAMPLES)
    created = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    assert not created, f"files created under data_samples/: {created}"
    assert not removed, f"files removed from data_samples/: {removed}"
    assert not changed, f"files changed under data_samples/: {changed}"
    print("ran:", "; ".join(ran))
    if skipped:
        print("skipped:", "; ".join(skipped))


def test_fixture_restores_modes():
    """After the read-only run every mode is writable by the owner again (the fixture's finally)."""
    for p in [SAMPLES, *SAMPLES.rglob("*")]:
        if not p.is_symlink():
            assert p.lstat().st_mode & stat.S_IWUSR, f"{p} left read-only"


def test_snapshot_sees_a_change(tmp_path):
    """The hash comparison detects a changed byte, a new file and a removed file."""
    (tmp_path / "a").write_bytes(b"abc")
    (tmp_path / "b").write_bytes(b"xyz")
    s0 = snapshot(tmp_path)
    (tmp_path / "a").write_bytes(b"abd")
    (tmp_path / "b").unlink()
    (tmp_path / "c").write_bytes(b"")
    s1 = snapshot(tmp_path)
    assert s0["a"] != s1["a"] and "b" not in s1 and "c" not in s0
