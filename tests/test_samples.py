"""SpecForge offline hidden-state samples: layout, order, checks, bad input."""
from __future__ import annotations

import gzip
import io

import pytest
import torch

from helpers.core.errors import BadInputError
from helpers.io.samples import iter_samples, load_sample, sample_files
from conftest import SAMPLES


HID = 8


def sample(T=6, width=HID, seed=0, **override) -> dict:
    g = torch.Generator().manual_seed(seed)
    d = {
        "input_ids": torch.randint(0, 100, (T,), generator=g),
        "loss_mask": torch.ones(T, dtype=torch.int64),
        "hidden_state": torch.randn(1, T, width, generator=g),
        "aux_hidden_state": torch.randn(1, T, 3 * width, generator=g),
    }
    d.update(override)
    return d


def write(path, obj, gz=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(obj, buf)
    path.write_bytes(gzip.compress(buf.getvalue()) if gz else buf.getvalue())
    return path


def test_layout_order_and_shapes(tmp_path):
    # numeric order inside and across rows_* folders, .ckpt and .ckpt.gz mixed
    for i in (0, 2, 10):
        name = f"data_{i}.ckpt" + (".gz" if i == 2 else "")
        write(tmp_path / "rows_0-64" / name, sample(T=5 + i, seed=i), gz=(i == 2))
    write(tmp_path / "rows_64-128" / "data_64.ckpt", sample(T=4, seed=64))
    write(tmp_path / "rows_0-64" / "notes.txt", {"x": torch.zeros(1)})
    files = sample_files(tmp_path)
    assert [f.name for f in files] == ["data_0.ckpt", "data_2.ckpt.gz", "data_10.ckpt", "data_64.ckpt"]
    got = list(iter_samples(tmp_path))
    assert [s.length for s in got] == [5, 7, 15, 4]
    s = got[1]
    ref = sample(T=7, seed=2)
    assert s.hidden_state.shape == (7, HID) and s.aux_hidden_state.shape == (7, 3 * HID)
    assert torch.equal(s.aux_hidden_state, ref["aux_hidden_state"][0]) and s.input_ids.dtype == torch.int64
    assert len(list(iter_samples(tmp_path, max_samples=2))) == 2


def test_aux_width_against_config(tmp_path):
    write(tmp_path / "rows_0-1" / "data_0.ckpt", sample())
    assert next(iter_samples(tmp_path, expect_aux_width=3 * HID)).aux_hidden_state.shape[1] == 3 * HID
    with pytest.raises(BadInputError) as e:
        next(iter_samples(tmp_path, expect_aux_width=3 * 16))
    msg = str(e.value)
    assert "data_0.ckpt" in msg and "24" in msg and "48" in msg and "\n" not in msg


@pytest.mark.parametrize("problem,obj,match", [
    ("nan", sample(hidden_state=torch.full((1, 6, HID), float("nan"))), "NaN"),
    ("inf_aux", sample(aux_hidden_state=torch.full((1, 6, 3 * HID), float("inf"))), "NaN/Inf"),
    ("width", sample(aux_hidden_state=torch.zeros(1, 6, 2 * HID)), "not 3 x"),
    ("length", sample(hidden_state=torch.zeros(1, 5, HID)), "hidden_state has shape"),
    ("float_ids", sample(input_ids=torch.zeros(6)), "integers"),
    ("mask", sample(loss_mask=torch.ones(4)), "loss_mask"),
    ("missing", {"input_ids": torch.zeros(3, dtype=torch.int64)}, "lacks"),
    ("not_dict", torch.zeros(3), "expected a dict"),
])
def test_bad_samples_are_one_line_errors(tmp_path, problem, obj, match):
    p = write(tmp_path / "rows_0-1" / "data_0.ckpt", obj)
    with pytest.raises(BadInputError, match=match) as e:
        load_sample(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_nan_inside_gz(tmp_path):
    h = torch.zeros(1, 6, HID)
    h[0, 3, 1] = float("nan")
    p = write(tmp_path / "data_0.ckpt.gz", sample(hidden_state=h), gz=True)
    with pytest.raises(BadInputError, match="1 NaN"):
        load_sample(p)


def test_corrupt_gzip(tmp_path):
    good = write(tmp_path / "rows_0-2" / "data_0.ckpt.gz", sample(), gz=True)
    raw = good.read_bytes()
    bad = tmp_path / "rows_0-2" / "data_1.ckpt.gz"
    bad.write_bytes(raw[: len(raw) // 2])  # truncated
    flipped = tmp_path / "data_5.ckpt.gz"
    flipped.write_bytes(raw[:20] + bytes(b ^ 0xFF for b in raw[20:60]) + raw[60:])
    notgz = tmp_path / "data_6.ckpt.gz"
    notgz.write_bytes(b"this is not gzip at all")
    assert load_sample(good).length == 6
    for p in (bad, flipped, notgz):
        with pytest.raises(BadInputError) as e:
            load_sample(p)
        assert str(p) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(BadInputError, match="data_1.ckpt.gz"):
        list(iter_samples(tmp_path / "rows_0-2"))


def test_pickled_objects_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("should not run",))

    p = tmp_path / "data_0.ckpt.gz"
    buf = io.BytesIO()
    torch.save({"input_ids": Evil()}, buf)
    p.write_bytes(gzip.compress(buf.getvalue()))
    with pytest.raises(BadInputError, match="data_0.ckpt.gz"):
        load_sample(p)


def test_empty_or_missing_folder(tmp_path):
    with pytest.raises(BadInputError, match="holds no hidden-state samples"):
        sample_files(tmp_path)
    with pytest.raises(BadInputError, match="no such file"):
        sample_files(tmp_path / "nope")


@pytest.mark.skipif(not (SAMPLES / "tiny_hidden_states").exists(), reason="bundled samples not generated")
def test_bundled_samples():
    import json

    cfg = json.loads((SAMPLES / "tiny_draft_sglang" / "config.json").read_text())
    width = 3 * cfg["target_hidden_size"]
    for split, suffix in (("train", ".ckpt"), ("val", ".ckpt.gz")):
        files = sample_files(SAMPLES / "tiny_hidden_states" / split)
        assert files and all(f.name.endswith(suffix) for f in files)
        s = next(iter_samples(SAMPLES / "tiny_hidden_states" / split, expect_aux_width=width))
        assert s.hidden_state.dtype == torch.bfloat16
        assert int(s.loss_mask.sum()) > 0 and int(s.loss_mask[0]) == 0  # prompt masked, generated kept
        assert int(s.input_ids.max()) < cfg["vocab_size"]


def test_gzip_bomb_is_refused_without_inflating_it(tmp_path):
    """A .ckpt.gz that inflates far beyond any real hidden-state file is refused, not decompressed."""
    import gzip

    import pytest

    from helpers.core.errors import BadInputError
    from helpers.io.samples import GZIP_MAX_RATIO, load_sample

    bomb = tmp_path / "data_0.ckpt.gz"
    bomb.write_bytes(gzip.compress(b"\0" * (256 << 20)))  # 256 MiB of zeros, ~250 KiB on disk
    assert (256 << 20) > GZIP_MAX_RATIO * bomb.stat().st_size
    with pytest.raises(BadInputError, match="gzip bomb") as e:
        load_sample(bomb)
    assert str(bomb) in str(e.value)


def test_fifo_sample_is_refused_without_blocking(tmp_path):
    import os

    import pytest

    from helpers.core.errors import BadInputError
    from helpers.io.samples import load_sample

    fifo = tmp_path / "data_0.ckpt.gz"
    os.mkfifo(fifo)
    with pytest.raises(BadInputError, match="FIFO"):
        load_sample(fifo)


@pytest.mark.parametrize("processes", [False, True])
def test_reading_ahead_gives_the_same_samples_in_order(tmp_path, processes):
    """Reader threads (or DataLoader processes) return what a plain read returns, in order, per shard;
    a bad file is one BadInputError naming it, as without readers."""
    import shutil

    from helpers.core.errors import BadInputError
    from helpers.io.samples import iter_samples, stream_samples

    src = SAMPLES / "tiny_hidden_states" / "val"
    plain = list(iter_samples(src))
    for shard in ((0, 1), (1, 3)):
        got = list(stream_samples(src, shard=shard, workers=2, ahead=5, processes=processes))
        want = plain[shard[0]::shard[1]]
        assert [s.path for s in got] == [s.path for s in want]
        assert all(torch.equal(a.aux_hidden_state, b.aux_hidden_state) for a, b in zip(got, want))
    bad = tmp_path / "v"
    shutil.copytree(src, bad)
    victim = sorted(bad.rglob("data_7.ckpt.gz"))[0]
    victim.write_bytes(b"not gzip")
    with pytest.raises(BadInputError, match="data_7.ckpt.gz"):
        list(stream_samples(bad, workers=2, processes=processes))
