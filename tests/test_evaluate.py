"""Accuracy under each reading of d2t (helpers.measure.evaluate) and the `evaluate` CLI.

Most tests run on drafts whose weights are set by hand and saved as real safetensors, with
SpecForge-layout samples written by torch.save, so the right answer is known exactly:

* "embed" draft: the prediction is g(token t+1) - it reads only the embedding of the token fed;
* "aux" draft: the prediction is f(token t) - it reads only the aux hidden state of position t
  (chunk 0 holds a one-hot of token t, as a target's hidden state "knows" its own token);
* samples where, at each loss_mask position p, token p = f(token p-2) = g(token p-1), and the
  other tokens are random.

Only the EAGLE-3 alignment (aux of t, embedding of t+1, label t+2) scores 100 % on both drafts;
every shifted alignment fails on at least one of them. A third "chain" draft ignores its hidden
state and predicts g(fed token) at every step, to check k-step labels and the fed-back mapping.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from helpers.model.draft import load_draft
from helpers.core.errors import BadInputError
from helpers.measure.evaluate import evaluate
from helpers.measure.predict import draft_predictions
from helpers.model.target_head import load_target_head
from conftest import SAMPLES


V, N = 48, 16  # target vocab, draft vocab
D = 2 * V  # draft hidden = target hidden: dims [0, V) hold aux codes, [V, 2V) embeddings
HEADS, HEAD_DIM = 2, 48


def _perm(gen, ids):
    ids = torch.as_tensor(ids)
    return ids[torch.randperm(ids.numel(), generator=gen)]


class World:
    """The hand-set functions: kept ids (draft vocab), f (aux rule) and g (embedding rule)."""

    def __init__(self, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.gen = gen
        self.kept = torch.sort(_perm(gen, torch.arange(V))[:N]).values  # [N] target ids in the draft vocab
        self.f = _perm(gen, torch.arange(V))  # f[x]: target id drafted from aux code x
        self.g = _perm(gen, torch.arange(V))  # g[x]: target id drafted from the embedding of x
        self.f_inv = torch.argsort(self.f)
        self.g_inv = torch.argsort(self.g)
        # for the chain draft, g must map kept ids to kept ids: a random cycle over the kept ids
        order = _perm(gen, self.kept)
        self.chain_g = torch.arange(V)
        self.chain_g[order] = torch.roll(order, -1)
        self.chain_g_inv = torch.argsort(self.chain_g)


def _config(norm_before_residual=False):
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": D, "target_hidden_size": D, "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM, "intermediate_size": 16, "vocab_size": V, "draft_vocab_size": N,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "norm_before_residual": norm_before_residual,
        "max_position_embeddings": 512,
    }


def build_draft(folder: Path, world: World, mode: str, d2t_kind: str = "offset") -> Path:
    """Write a hand-set EAGLE-3 draft (config.json + model.safetensors) and return its folder.

    Attention: q = k = a constant vector on the four fastest RoPE pairs, scaled so that every
    query attends (to float precision) to its own position only; v passes the normed inputs.
    """
    folder.mkdir(parents=True, exist_ok=True)
    eye = torch.eye(D)
    u = torch.zeros(HEADS * HEAD_DIM)
    for h in range(HEADS):
        u[h * HEAD_DIM : h * HEAD_DIM + 4] = 30.0
    chain = mode == "chain"
    qk = torch.zeros(HEADS * HEAD_DIM, 2 * D)
    qk[:, :D] = u[:, None] / math.sqrt(D)  # embedding half (cat order: embed, hidden)
    if not chain:
        qk[:, D:] = u[:, None] / math.sqrt(D)
    v = torch.cat([eye, torch.zeros(D, D) if chain else eye], dim=1)  # [D, 2D]
    fc = torch.zeros(D, 3 * D)
    fc[:, :D] = eye  # h = chunk 0 of the aux hidden states
    embed = torch.zeros(V, D)
    embed[torch.arange(V), V + torch.arange(V)] = 1.0  # token x -> e_{V+x}
    lm = torch.zeros(N, D)
    for j, k in enumerate(world.kept.tolist()):
        if mode == "embed":
            lm[j, V + world.g_inv[k]] = 1.0
        elif mode == "aux":
            lm[j, world.f_inv[k]] = 1.0
        elif mode == "chain":
            lm[j, V + world.chain_g_inv[k]] = 1.0
        else:
            raise ValueError(mode)
    m = "midlayer."
    t = {
        "fc.weight": fc, "embed_tokens.weight": embed, "norm.weight": torch.ones(D), "lm_head.weight": lm,
        m + "hidden_norm.weight": torch.zeros(D) if chain else torch.ones(D),
        m + "input_layernorm.weight": torch.ones(D), m + "post_attention_layernorm.weight": torch.ones(D),
        m + "self_attn.q_proj.weight": qk, m + "self_attn.k_proj.weight": qk.clone(),
        m + "self_attn.v_proj.weight": v, m + "self_attn.o_proj.weight": eye.clone(),
        m + "mlp.gate_proj.weight": torch.zeros(16, D), m + "mlp.up_proj.weight": torch.zeros(16, D),
        m + "mlp.down_proj.weight": torch.zeros(D, 16),
    }
    if d2t_kind == "offset":
        t["d2t"] = world.kept - torch.arange(N)
    elif d2t_kind == "absolute":
        t["d2t"] = world.kept.clone()
    if d2t_kind != "none":
        t2d = torch.zeros(V, dtype=torch.bool)
        t2d[world.kept] = True
        t["t2d"] = t2d
    save_file({k: x.contiguous() for k, x in t.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(_config(norm_before_residual=chain)))
    return folder


def _save_sample(folder: Path, i: int, ids, mask, aux=None, hidden=None):
    T = len(ids)
    ids = torch.as_tensor(ids, dtype=torch.int64)
    if aux is None:
        aux = torch.zeros(T, 3 * D)
        aux[torch.arange(T), ids.clamp(max=D - 1)] = 1.0  # chunk 0: one-hot of token t
    if hidden is None:
        hidden = torch.randn(T, D)
    rows = folder / "rows_0-100"
    rows.mkdir(parents=True, exist_ok=True)
    torch.save(
        {"input_ids": ids, "loss_mask": torch.as_tensor(mask, dtype=torch.int64), "hidden_state": hidden[None],
         "aux_hidden_state": aux[None]},
        rows / f"data_{i}.ckpt",
    )


def triple_sequence(world: World, gen, n_triples=12, scramble=False):
    """Random fillers and (a, b, c) triples with c = f(a) = g(b) a kept id; loss_mask on the c's."""
    ids, mask = [], []
    for _ in range(n_triples):
        for _ in range(int(torch.randint(0, 3, (1,), generator=gen))):
            ids.append(int(torch.randint(0, V, (1,), generator=gen)))
            mask.append(0)
        c = int(world.kept[torch.randint(0, N, (1,), generator=gen)])
        a, b = int(world.f_inv[c]), int(world.g_inv[c])
        if scramble:  # what a draft that does not generalise meets: c is not f(a) nor g(b)
            c = int(world.kept[(world.kept != c).nonzero()[int(torch.randint(0, N - 1, (1,), generator=gen))]])
        ids += [a, b, c]
        mask += [0, 0, 1]
    return ids, mask


def write_triples(folder: Path, world: World, n=5, seed=1, scramble=False) -> Path:
    gen = torch.Generator().manual_seed(seed)
    for i in range(n):
        ids, mask = triple_sequence(world, gen, n_triples=8 + i, scramble=scramble)  # varied lengths
        _save_sample(folder, i, ids, mask)
    return folder


def write_chains(folder: Path, world: World, steps: int, n=4, seed=2) -> Path:
    """Chains s, g(s), g(g(s)), ... over kept ids; loss_mask from the (steps)-th element on."""
    gen = torch.Generator().manual_seed(seed)
    L = steps + 3
    for i in range(n):
        ids, mask = [], []
        for _ in range(5):
            for _ in range(int(torch.randint(0, 3, (1,), generator=gen))):
                ids.append(int(torch.randint(0, V, (1,), generator=gen)))
                mask.append(0)
            s = int(world.kept[torch.randint(0, N, (1,), generator=gen)])
            for k in range(L):
                ids.append(s)
                mask.append(1 if k >= steps else 0)
                s = int(world.chain_g[s])
        T = len(ids)
        _save_sample(folder, i, ids, mask, aux=torch.randn(T, 3 * D))  # aux must not matter here
    return folder


@pytest.fixture(scope="module")
def world():
    return World(0)


@pytest.fixture(scope="module")
def hand(tmp_path_factory, world):
    root = tmp_path_factory.mktemp("hand")
    return {
        "embed": build_draft(root / "embed", world, "embed"),
        "aux": build_draft(root / "aux", world, "aux"),
        "absolute": build_draft(root / "absolute", world, "embed", d2t_kind="absolute"),
        "no_d2t": build_draft(root / "no_d2t", world, "embed", d2t_kind="none"),
        "chain": build_draft(root / "chain", world, "chain"),
        "samples": write_triples(root / "samples", world),
        "root": root,
    }


# -- alignment ------------------------------------------------------------------------------------
def _predictions_fed(model, folder, de):
    """Per sample (ids, loss_mask, offset-read target ids) when the draft is fed the embedding
    of token t+de (aux always of position t), computed directly with the model."""
    from helpers.io.samples import iter_samples

    out = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: one thread is faster on a busy machine
    try:
        for s in iter_samples(folder):
            ids, T = s.input_ids, s.input_ids.numel()
            fed = torch.zeros(T, dtype=torch.int64)
            fed[: T - de] = ids[de:]
            with torch.inference_mode():
                top = model(s.aux_hidden_state[None].float(), fed[None])[0].argmax(-1)  # [T]
            out.append((ids, s.loss_mask, top + model.d2t[top]))
    finally:
        torch.set_num_threads(threads)
    return out


def _accuracy_with_alignment(fed, de, dl):
    """Top-1 of predictions fed token t+de, scored against token t+dl where its loss_mask is 1."""
    hit = n = 0
    for ids, loss_mask, pred in fed:
        m = ids.numel() - max(de, dl)  # positions t with both inputs and label inside the sequence
        scored = loss_mask[dl : dl + m] != 0
        n += int(scored.sum())
        hit += int(((pred[:m] == ids[dl : dl + m]) & scored).sum())
    return hit / n


def test_only_the_eagle3_alignment_scores_100(hand):
    res = {m: evaluate(hand[m], hand["samples"], device="cpu", progress=False) for m in ("embed", "aux")}
    for m, r in res.items():
        assert r.overall.readings["offset"].top1 == 1.0, m
        assert r.overall.tokens > 40
        assert r.overall.readings["absolute"].top1 < 0.2, m
        assert r.overall.readings["none"].top1 < 0.2, m
    # every shifted alignment (embedding of t+de, label t+dl) fails on at least one of the drafts
    models = {m: load_draft(hand[m], device="cpu") for m in ("embed", "aux")}
    fed = {(m, de): _predictions_fed(models[m], hand["samples"], de) for m in models for de in (0, 1, 2)}
    assert _accuracy_with_alignment(fed["embed", 1], 1, 2) == 1.0  # the harness agrees with evaluate
    assert _accuracy_with_alignment(fed["aux", 1], 1, 2) == 1.0
    for de, dl in [(0, 1), (1, 1), (0, 2), (2, 2), (1, 3), (2, 3), (0, 0)]:
        worst = min(_accuracy_with_alignment(fed[m, de], de, dl) for m in models)
        assert worst < 0.3, (de, dl, worst)


def test_predictions_labels_and_mask(hand):
    model = load_draft(hand["embed"], device="cpu")
    preds = list(draft_predictions(model, hand["samples"], steps=3, topk=2))
    from helpers.io.samples import iter_samples

    samples = list(iter_samples(hand["samples"]))
    assert len(preds) == len(samples)
    for p, s in zip(preds, samples):
        T = s.input_ids.numel()
        assert p.pred.shape == (T, 3, 2) and p.labels.shape == (T, 3) and p.mask.shape == (T, 3)
        for j in range(3):
            for t in range(T):
                lab = int(s.input_ids[t + 2 + j]) if t + 2 + j < T else -1
                assert int(p.labels[t, j]) == lab
                assert bool(p.mask[t, j]) == (lab >= 0 and bool(s.loss_mask[t + 2 + j]))
        # step-0 predictions at masked positions are exactly the labels (the draft is exact there)
        m = p.mask[:, 0]
        assert torch.equal(p.pred[m, 0, 0], p.labels[m, 0])
    # SpecForge's literal masking: the loss_mask of position t+j (where the label exists)
    for p, s in zip(draft_predictions(model, hand["samples"], steps=2, mask_at="position"), samples):
        T = s.input_ids.numel()
        for j in range(2):
            want = [t + 2 + j < T and bool(s.loss_mask[t + j]) for t in range(T)]
            assert p.mask[:, j].tolist() == want


def test_k_steps_feed_back_the_mapped_draft(hand, world, tmp_path):
    steps = 3
    folder = write_chains(tmp_path / "chains", world, steps)
    r = evaluate(hand["chain"], folder, steps=steps, device="cpu", progress=False)
    off = r.overall.readings["offset"]
    assert off.step_top1 == [1.0] * steps  # each step drafts g(previous draft), mapped as offsets
    assert all(x < 0.2 for x in r.overall.readings["absolute"].step_top1)
    # step 0 does not depend on how many steps are run
    one = evaluate(hand["chain"], folder, steps=1, device="cpu", progress=False)
    assert one.overall.readings["offset"].top1 == off.top1 and one.overall.tokens == r.overall.tokens


# -- readings, coverage, conclusions ---------------------------------------------------------------
def test_absolute_checkpoint_is_the_mirror_image(hand, world):
    # two steps: under the offset reading, absolute ids fed back can point past the target vocab
    assert int((world.kept + torch.arange(N)).max()) >= V
    r = evaluate(hand["absolute"], hand["samples"], steps=2, device="cpu", progress=False)
    rd = r.overall.readings
    assert rd["absolute"].top1 == 1.0 and rd["offset"].top1 < 0.2 and rd["none"].top1 < 0.2
    assert r.diagnosis() == "mapping"
    assert "absolute" in r.conclusion() and "offsets" in r.conclusion()
    good = evaluate(hand["embed"], hand["samples"], device="cpu", progress=False)
    assert good.diagnosis() == "healthy", good.conclusion()


def test_no_d2t_scored_under_none_only_with_a_warning(hand):
    with pytest.warns(UserWarning, match="says nothing about the mapping"):
        r = evaluate(hand["no_d2t"], hand["samples"], device="cpu", progress=False)
    assert list(r.overall.readings) == ["none"]
    assert r.warnings and "says nothing about the mapping" in r.warnings[0]
    assert r.to_dict()["warnings"] == r.warnings
    assert r.diagnosis() == "no_mapping"


def write_half_outside(folder: Path, world: World, n=3, seed=5) -> Path:
    """Triples where every other label is replaced by an id outside the draft vocab."""
    gen = torch.Generator().manual_seed(seed)
    outside = [x for x in range(V) if x not in set(world.kept.tolist())]
    for i in range(n):
        ids, mask = triple_sequence(world, gen, n_triples=10)
        for k in [k for k, m in enumerate(mask) if m][::2]:
            ids[k] = outside[k % len(outside)]
        _save_sample(folder, i, ids, mask)
    return folder


def test_topk_and_coverage(hand, world, tmp_path):
    # half the labels are outside the draft vocab: coverage 0.5, covered accuracy 1.0
    folder = write_half_outside(tmp_path / "cov", world)
    r = evaluate(hand["embed"], folder, topk=3, device="cpu", progress=False)
    off = r.overall.readings["offset"]
    n_out = sum(len(range(0, 10, 2)) for _ in range(3))
    assert off.tokens == 30 and r.overall.tokens == 30
    assert r.overall.coverage == pytest.approx((30 - n_out) / 30)
    assert off.coverage == pytest.approx(r.overall.coverage)
    assert off.top1 == pytest.approx((30 - n_out) / 30)
    assert off.covered_top1 == 1.0
    assert off.topk >= off.top1
    # topk counts a label when any of the k best maps to it: with k = N every covered label counts
    rk = evaluate(hand["embed"], hand["samples"], topk=N, device="cpu", progress=False)
    assert rk.overall.readings["offset"].topk == 1.0
    assert rk.overall.readings["absolute"].topk == pytest.approx(rk.overall.readings["absolute"].coverage)


def test_train_val_side_by_side_and_generalisation_gap(hand, world, tmp_path):
    root = tmp_path / "split"
    write_triples(root / "train", world, n=3, seed=7)
    write_triples(root / "val", world, n=3, seed=8, scramble=True)
    r = evaluate(hand["embed"], root, device="cpu", progress=False, max_samples=2)
    assert set(r.splits) == {"train", "val"}
    assert r.splits["train"].samples == 2 and r.splits["val"].samples == 2
    assert r.splits["train"].readings["offset"].top1 == 1.0
    assert r.splits["val"].readings["offset"].top1 < 0.2
    assert r.overall.tokens == r.splits["train"].tokens + r.splits["val"].tokens
    assert r.diagnosis() == "generalisation" and "validation" in r.conclusion()
    tab = r.table()
    assert ("train", "offset") in tab.index and ("val", "absolute") in tab.index
    assert tab.loc[("train", "offset"), "top-1 %"] == 100.0


def test_a_coverage_gap_is_not_called_generalisation(hand, world, tmp_path):
    root = tmp_path / "covsplit"
    write_triples(root / "train", world, n=3, seed=7)
    write_half_outside(root / "val", world)
    r = evaluate(hand["embed"], root, device="cpu", progress=False)
    va = r.splits["val"].readings["offset"]
    assert va.top1 == 0.5 and va.coverage == 0.5 and va.covered_top1 == 1.0
    assert r.diagnosis() == "coverage", r.conclusion()
    assert "coverage" in r.conclusion() and "50.0 %" in r.conclusion()


def test_target_head_scores_against_the_targets_argmax(hand, world, tmp_path):
    # a target whose greedy choice after position p is token p+1 on the masked labels ...
    head_dir = tmp_path / "target"
    head_dir.mkdir()
    lm = torch.zeros(V, D)
    lm[torch.arange(V), torch.arange(V)] = 1.0
    save_file({"lm_head.weight": lm, "model.norm.weight": torch.ones(D)}, str(head_dir / "model.safetensors"))
    (head_dir / "config.json").write_text(json.dumps({"hidden_size": D, "vocab_size": V, "rms_norm_eps": 1e-6}))
    folder = tmp_path / "with_head"
    gen = torch.Generator().manual_seed(3)
    for i, shift in enumerate((0, 0, 1)):  # ... except in the last sample, where it picks token+1
        ids, mask = triple_sequence(world, gen, n_triples=10)
        T = len(ids)
        hid = torch.zeros(T, D)
        nxt = torch.tensor(ids[1:] + [0])
        hid[torch.arange(T), (nxt + shift) % V] = 1.0
        _save_sample(folder, i, ids, mask, hidden=hid)
    head = load_target_head(head_dir)
    assert head.norm_weight is not None and head.vocab_size == V
    r = evaluate(hand["embed"], folder, target_head=head_dir, device="cpu", progress=False)
    off = r.overall.readings["offset"]
    assert off.top1 == 1.0
    assert off.target_top1 == pytest.approx(2 / 3)  # the draft agrees with the target on 2 of 3 samples
    assert r.to_dict()["readings"]["offset"]["target_step_top1"] == [off.target_top1]


# -- precision, CLI, bad input ---------------------------------------------------------------------
BUNDLED = SAMPLES / "tiny_draft_sglang"
BUNDLED_SAMPLES = SAMPLES / "tiny_hidden_states"


@pytest.mark.skipif(not BUNDLED.exists(), reason="bundled samples not generated")
def test_fp32_and_bf16_agree_within_two_points():
    kw = dict(readings=("offset",), steps=2, device="cpu", max_samples=6, progress=False)
    a = evaluate(BUNDLED, BUNDLED_SAMPLES / "val", dtype="float32", **kw)
    b = evaluate(BUNDLED, BUNDLED_SAMPLES / "val", dtype="bf16", **kw)
    assert a.dtype == "float32" and b.dtype == "bfloat16"
    assert a.overall.tokens == b.overall.tokens > 100
    for x, y in zip(a.overall.readings["offset"].step_top1, b.overall.readings["offset"].step_top1):
        assert abs(x - y) <= 0.02, (x, y)


@pytest.mark.skipif(not BUNDLED.exists(), reason="bundled samples not generated")
def test_bundled_sample_acceptance():
    r = evaluate(BUNDLED, BUNDLED_SAMPLES, device="cpu", progress=False)
    for split in ("train", "val"):
        rd = r.splits[split].readings
        assert rd["offset"].top1 >= 0.60, (split, rd["offset"].top1)
        assert rd["absolute"].top1 <= 0.05 and rd["none"].top1 <= 0.05
    assert r.splits["train"].readings["offset"].top1 >= r.splits["val"].readings["offset"].top1 - 0.05
    assert r.diagnosis() == "healthy"
    m = evaluate(SAMPLES / "tiny_draft_absolute", BUNDLED_SAMPLES, device="cpu", progress=False)
    rd = m.splits["val"].readings
    assert rd["absolute"].top1 >= 0.60 and rd["offset"].top1 <= 0.05
    assert m.diagnosis() == "mapping" and "absolute" in m.conclusion()


def _main(capsys, *args):
    """Run the CLI in-process (the same `main` as `python -m helpers`): (exit code, stdout, stderr)."""
    from helpers.__main__ import main

    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_json_contract(hand, cli):
    p = cli("evaluate", hand["embed"], "--samples", hand["samples"], "--steps", "2", "--topk", "3",
                "--device", "cpu", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    for r in ("offset", "absolute", "none"):
        x = d["readings"][r]
        assert set(("top1", "topk", "step_top1", "coverage", "tokens")) <= set(x) and len(x["step_top1"]) == 2
    assert d["readings"]["offset"]["top1"] == 1.0 and d["readings"]["absolute"]["top1"] < 0.2
    assert d["tokens"] > 0 and 0 < d["coverage"] <= 1 and d["warnings"] == []
    assert d["diagnosis"] == "healthy" and d["conclusion"]


def test_cli_no_d2t_and_report(hand, capsys):
    code, out, err = _main(capsys, "evaluate", hand["no_d2t"], "--samples", hand["samples"],
                           "--readings", "offset,none", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert list(d["readings"]) == ["none"] and "nothing about the mapping" in d["warnings"][0]
    code, out, err = _main(capsys, "evaluate", hand["absolute"], "--samples", hand["samples"],
                           "--readings", "offset,absolute", "--device", "cpu")
    assert code == 0, err
    assert "Wiring/mapping bug" in out and "absolute" in out


def _one_line_error(code, err, must_name):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(must_name) in lines[0], lines[0]
    return lines[0]


def test_bad_input_one_line_naming_the_file(hand, world, tmp_path, capsys, cli):
    # hidden width that does not match the checkpoint (in a subprocess, as a user runs it)
    wide = tmp_path / "wide"
    _save_sample(wide, 0, [1, 2, 3, 4], [1, 1, 1, 1], aux=torch.zeros(4, 3 * (D + 8)), hidden=torch.zeros(4, D + 8))
    bad = wide / "rows_0-100" / "data_0.ckpt"
    p = cli("evaluate", hand["embed"], "--samples", wide)
    line = _one_line_error(p.returncode, p.stderr, bad)
    assert "width" in line
    with pytest.raises(BadInputError, match="data_0.ckpt"):
        evaluate(hand["embed"], wide, device="cpu", progress=False)
    # an empty folder
    empty = tmp_path / "empty"
    empty.mkdir()
    _one_line_error(*_main(capsys, "evaluate", hand["embed"], "--samples", empty)[::2], empty)
    # labels outside the target vocab
    oov = tmp_path / "oov"
    _save_sample(oov, 0, [1, 2, V + 5, 3], [1, 1, 1, 1])
    line = _one_line_error(*_main(capsys, "evaluate", hand["embed"], "--samples", oov)[::2],
                           oov / "rows_0-100" / "data_0.ckpt")
    assert "target vocab" in line
    # a samples folder that does not exist, a bad reading
    _one_line_error(*_main(capsys, "evaluate", hand["embed"], "--samples", tmp_path / "nope")[::2], tmp_path / "nope")
    code, _, err = _main(capsys, "evaluate", hand["embed"], "--samples", hand["samples"], "--readings", "offset,sideways")
    assert code == 2 and "sideways" in err and len(err.strip().splitlines()) == 1


def test_evaluate_settings_is_evaluate_with_the_run_settings():
    from helpers.measure.evaluate import evaluate_settings
    from helpers.ui.settings import RunSettings

    s = RunSettings(checkpoint=str(SAMPLES / "tiny_draft_sglang"), samples=str(SAMPLES / "tiny_hidden_states"),
                    steps=2, max_samples=2, device="cpu", dtype="float32")
    a = evaluate_settings(s, readings=("offset",), progress=False).to_dict()
    b = evaluate(s.checkpoint, s.samples, readings=("offset",), steps=2, max_samples=2, device="cpu",
                 dtype="float32", progress=False).to_dict()
    assert a == b and a["steps"] == 2 and a["splits"]["val"]["samples_scored"] == 2


def test_settings_by_name_or_as_objects_never_both(hand):
    """`evaluate` takes the scoring and loading settings by name (`topk` the old name of `accuracy_topk`),
    `score` a loaded draft with the `Scoring` object: the same counts either way; a setting neither
    object declares is refused by name, and `evaluate` takes no `Scoring` object."""
    from helpers.measure.evaluate import score
    from helpers.measure.predict import Loading, Scoring, as_model

    by_name = evaluate(hand["embed"], hand["samples"], accuracy_topk=2, steps=2, device="cpu", progress=False)
    old_name = evaluate(hand["embed"], hand["samples"], topk=2, steps=2, device="cpu", progress=False)
    model = as_model(hand["embed"], Loading(device="cpu"))
    objects = score(model, hand["samples"], Scoring(accuracy_topk=2, steps=2, progress=False))
    assert by_name.to_dict() == old_name.to_dict()
    for r in ("offset", "absolute"):
        a, b = by_name.overall.readings[r], objects.overall.readings[r]
        assert (a.tokens, a.top1, a.topk) == (b.tokens, b.top1, b.topk)
    assert by_name.topk == 2
    with pytest.raises(TypeError, match="unexpected keyword argument 'acuracy_topk'"):
        evaluate(hand["embed"], hand["samples"], acuracy_topk=2)
    with pytest.raises(TypeError):
        evaluate(hand["embed"], hand["samples"], Scoring())
