"""Engine-free speculative decoding (helpers.speculate.loop) on the bundled tiny target and draft.

Lossless: greedy output equals target.generate(do_sample=False) token for token, for every
reading, chain and tree; sampled output follows the target's own distribution (chi-square), and a
deliberately wrong rejection rule fails that test. Measurement: the offset chain agrees with the
replay on captured states of the same prompts; misread tables measure 1.0; a top-1 tree is the chain.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import helpers.speculate.loop as S
from helpers.acceptance.sampling import residual
from helpers.acceptance.drafting import Drafting
from helpers.model.draft import load_draft
from helpers.io.prompts import read_prompts
from helpers.speculate.compare import predicted_per_position, replay_walk
from helpers.model.target import load_target
from conftest import SAMPLES


TARGET = SAMPLES / "tiny_target"
DRAFT = SAMPLES / "tiny_draft_sglang"
PROMPTS = SAMPLES / "prompts.jsonl"
CHAIN = {"drafting": Drafting(5)}
TREE = {"drafting": Drafting(3, 4, 8)}
CHI2_19_AT_0_001 = 43.82  # chi-square critical value, 19 degrees of freedom, p = 0.001


@pytest.fixture(scope="module")
def models():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models on a shared CPU: one thread is fastest
    yield load_target(TARGET, "cpu", "float32"), load_draft(DRAFT, "cpu", torch.float32)
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def records():
    return list(read_prompts(PROMPTS))


def _generate(target, prompt_ids, max_new: int) -> list[list[int]]:
    """target.generate(do_sample=False) on each prompt (token ids), cut after the first EOS."""
    eos = S._eos_ids(target)
    out = []
    with torch.inference_mode():
        for ids in prompt_ids:
            x = torch.tensor([ids])
            g = target.model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                                      max_new_tokens=max_new, temperature=None, top_p=None, top_k=None,
                                      pad_token_id=0)[0, x.shape[1]:].tolist()
            cut = next((i + 1 for i, t in enumerate(g) if t in eos), len(g))
            out.append(g[:cut])
    return out


def _reference(target, run, max_new: int) -> list[list[int]]:
    return _generate(target, [pr.prompt_ids for pr in run.prompts], max_new)


@pytest.fixture(scope="module")
def chain5_runs(models, records):
    """Every reading's chain-of-5 run on every prompt, 24 new tokens (read by several tests)."""
    target, draft = models
    return S.speculate_readings(target, draft, records, S.SpecSettings(max_new_tokens=24, **CHAIN),
                                ["offset", "absolute", "none"])


@pytest.fixture(scope="module")
def generated24(models, chain5_runs):
    """target.generate's greedy 24 tokens for every prompt, by prompt index."""
    prompts = chain5_runs["offset"].prompts
    return dict(zip([p.index for p in prompts], _generate(models[0], [p.prompt_ids for p in prompts], 24)))


def test_greedy_lossless_quick(models, records):
    target, draft = models
    run = S.speculate(target, draft, records[:4], S.SpecSettings(max_new_tokens=16, **TREE))
    assert [p.output_ids for p in run.prompts] == _reference(target, run, 16)
    assert all(len(p.output_ids) == 16 for p in run.prompts)


@pytest.mark.slow
@pytest.mark.parametrize("reading", ["offset", "absolute", "none"])
@pytest.mark.parametrize("shape", [CHAIN, TREE], ids=["chain5", "tree3x4x8"])
def test_greedy_output_equals_target_generate(models, records, reading, shape, chain5_runs, generated24):
    target, draft = models
    if shape is CHAIN:
        run = chain5_runs[reading]
    else:  # a reading that accepts nothing emits the target's own token at every step: fewer prompts show it
        mine = records if reading == "offset" else records[:8]
        run = S.speculate(target, draft, mine, S.SpecSettings(reading=reading, max_new_tokens=24, **shape))
    bad = [p.index for p in run.prompts if p.output_ids != generated24[p.index]]
    assert not bad, f"prompts {bad} differ from target.generate"
    assert len(run.prompts) == (len(records) if reading == "offset" or shape is CHAIN else 8) and len(records) >= 24
    for p in run.prompts:  # every generated token is accounted for by its origin
        assert len(p.kinds) == len(p.output_ids) and p.kinds[0] == "target"
        # a step cut by max_new_tokens / EOS counts what it emitted, its last token in place of the bonus
        assert sum(k == "draft" for k in p.kinds) <= sum(a - 1 for a in p.accept_lengths) + 1
        assert sum(p.accept_lengths) == len(p.output_ids) - 1


def test_tree_with_topk_1_is_the_chain(models, records):
    target, draft = models
    chain = S.speculate(target, draft, records[:8], S.SpecSettings(max_new_tokens=32, drafting=Drafting.chain(4)))
    tree = S.speculate(target, draft, records[:8], S.SpecSettings(max_new_tokens=32,
                                                                  drafting=Drafting.from_flags(4, 1, 5)))
    assert chain.histogram == tree.histogram and chain.mean == tree.mean
    assert chain.per_position_conditional == tree.per_position_conditional
    assert [p.kinds for p in chain.prompts] == [p.kinds for p in tree.prompts]


def test_cache_reused_and_counts_add_up_over_shards(models, records):
    target, draft = models
    st = S.SpecSettings(max_new_tokens=20, **TREE)
    whole = S.speculate(target, draft, records[:6], st)
    # one target forward per verify step, plus one prefill per prompt
    assert whole.target_forwards == whole.verify_steps + 6
    assert whole.forwards_per_token == pytest.approx(whole.target_forwards / whole.generated_tokens)
    assert whole.target_tokens_fed == sum(len(p.prompt_ids) for p in whole.prompts) + whole.verify_steps * 8
    assert whole.accepted_tokens == sum(sum(p.accept_lengths) for p in whole.prompts)
    # per-position counts: unconditional is monotone, conditional = ratio of neighbours
    u, c = whole.per_position_unconditional, whole.per_position_conditional
    assert all(a >= b for a, b in zip(u, u[1:]))
    assert c[1] == pytest.approx(whole.accepted_per_position[1] / whole.accepted_per_position[0])
    # two shards (as torchrun ranks would run them) sum to the whole
    merged = S.SpecRun.merge([S.speculate(target, draft, records[3:6], st), S.speculate(target, draft, records[:3], st)])
    assert merged.histogram == whole.histogram and merged.verify_steps == whole.verify_steps
    assert merged.accepted_per_position.tolist() == whole.accepted_per_position.tolist()
    assert [p.index for p in merged.prompts] == [p.index for p in whole.prompts]
    assert merged.to_dict()["mean_accept_length"] == whole.to_dict()["mean_accept_length"]


def _check_counts_are_emitted(run):
    """accepted tokens = emitted tokens - 1 per prompt (the prefill's first token is no verify step's);
    accept length, histogram, per-position acceptance and target forwards per token agree with them."""
    for p in run.prompts:
        assert sum(p.accept_lengths) == len(p.output_ids) - 1, (p.index, p.accept_lengths, len(p.output_ids))
    assert run.accepted_tokens == run.generated_tokens - len(run.prompts)
    assert run.mean == pytest.approx(run.accepted_tokens / run.verify_steps)
    assert sum(run.histogram.values()) == run.verify_steps
    assert 1 + sum(run.per_position_unconditional) == pytest.approx(run.mean)
    assert run.forwards_per_token == pytest.approx((run.verify_steps + len(run.prompts)) / run.generated_tokens)
    d = run.to_dict(prompts=False)
    assert d["accepted_tokens"] == run.accepted_tokens and "emitted" in d["accept_length_definition"]


def test_a_run_cut_by_max_new_tokens_counts_only_emitted_tokens(models, records):
    target, draft = models
    st = S.SpecSettings(max_new_tokens=16, drafting=Drafting(5))
    short = S.speculate(target, draft, records[:2], st)
    _check_counts_are_emitted(short)
    assert [len(p.output_ids) for p in short.prompts] == [16, 16]
    # greedy: the long run's steps start with the short run's; a step crossing 15 tokens was cut
    long = S.speculate(target, draft, records[:2], dataclasses.replace(st, max_new_tokens=40))
    crossed = [np.cumsum(p.accept_lengths) for p in long.prompts]
    assert any(15 not in c.tolist() for c in crossed), "no step was cut: the test would not see the bug"
    for s_, l_ in zip(short.prompts, long.prompts):
        assert s_.accept_lengths[:-1] == l_.accept_lengths[: len(s_.accept_lengths) - 1]
        assert s_.accept_lengths[-1] <= l_.accept_lengths[len(s_.accept_lengths) - 1]
        assert s_.cut_from in (None, l_.accept_lengths[len(s_.accept_lengths) - 1])
    assert any(p.cut_from is not None for p in short.prompts)


def test_a_run_cut_by_eos_counts_only_emitted_tokens(models, records):
    target, draft = models
    st = S.SpecSettings(max_new_tokens=40, drafting=Drafting(5))
    free = S.speculate(target, draft, records[:1], st).prompts[0]
    # an accepted drafted token followed by more accepted ones in its step: EOS there cuts the step
    at = next(i for i in range(1, len(free.kinds) - 1) if free.kinds[i] == "draft" and free.kinds[i + 1] == "draft"
              and free.output_ids[i] not in free.output_ids[:i])
    gc = target.model.generation_config
    before = gc.eos_token_id
    gc.eos_token_id = [free.output_ids[at]] + ([] if before is None else list(np.atleast_1d(before)))
    try:
        run = S.speculate(target, draft, records[:1], st)
    finally:
        gc.eos_token_id = before
    assert run.prompts[0].output_ids == free.output_ids[: at + 1]
    _check_counts_are_emitted(run)


# -- sampling ---------------------------------------------------------------------------------------
def _pit_values(target, run, temperature: float, seed: int = 0) -> list[float]:
    """Randomized PIT values of every verified token under the target's own law.

    For each generated token after the first, its conditional distribution under the target (at
    `temperature`) is computed with one forward of the whole output; with the vocabulary sorted by
    probability, u = P(earlier tokens) + V * P(token), V uniform, is uniform on [0, 1) exactly when
    the tokens follow the target's sampling - at every position, whatever came before.
    """
    rng = np.random.default_rng(seed)
    us = []
    with torch.inference_mode():
        for pr in run.prompts:
            seq = pr.prompt_ids + pr.output_ids
            logits = target.model(input_ids=torch.tensor([seq])).logits[0].float()
            P = len(pr.prompt_ids)
            for i in range(1, len(pr.output_ids)):
                p = torch.softmax(logits[P + i - 1] / temperature, -1)
                order = torch.argsort(p, descending=True)
                rank = int((order == pr.output_ids[i]).nonzero())
                ps = p[order]
                us.append(float(ps[:rank].sum()) + rng.random() * float(ps[rank]))
    return us


def _chi2(us: list[float], bins: int = 20) -> float:
    counts = np.histogram(us, bins=bins, range=(0, 1))[0]
    expected = len(us) / bins
    return float(((counts - expected) ** 2 / expected).sum())


def _pit_chi2(target, run, temperature: float, seed: int = 0, bins: int = 20) -> tuple[float, int]:
    """Chi-square of the PIT values (`_pit_values`) over `bins` equal bins, and their count."""
    us = _pit_values(target, run, temperature, seed)
    return _chi2(us, bins), len(us)


def _sampled(models, records, shape, seed=0):
    target, draft = models
    import dataclasses

    # each prompt 4 times, as separate records: sampling is seeded per record index, so copies must differ in it
    copies = [dataclasses.replace(r, index=r.index + 1000 * k) for k in range(4) for r in records]
    run = S.speculate(target, draft, copies, S.SpecSettings(temperature=1.5, max_new_tokens=8, seed=seed, **shape))
    return _pit_chi2(target, run, 1.5), run


@pytest.mark.slow
@pytest.mark.parametrize("shape", [{"drafting": Drafting(3)}, {"drafting": Drafting(3, 3, 6)}],
                         ids=["chain", "tree"])
def test_sampling_follows_the_target_distribution(models, records, shape):
    (chi2, n), run = _sampled(models, records, shape)
    assert n >= 800
    assert run.mean > 1.2  # drafts were accepted: the rejection rule, not only the target, made these tokens
    assert chi2 < CHI2_19_AT_0_001, f"chi-square {chi2:.1f} over {n} tokens"


@pytest.mark.slow
@pytest.mark.parametrize("shape", [{"drafting": Drafting(3)}, {"drafting": Drafting(3, 3, 6)}],
                         ids=["chain", "tree"])
def test_a_wrong_rejection_rule_fails_the_chi_square(models, records, shape, monkeypatch):
    import helpers.speculate.verify as V

    right = V.accept_rule

    def resample_from_target(p, q, token, gen, *rule):  # the classic bug: after a rejection, sample p, not max(p-q, 0)
        ok, _ = right(p, q, token, gen, *rule)
        return ok, p

    monkeypatch.setattr(V, "accept_rule", resample_from_target)
    (chi2, n), _ = _sampled(models, records, shape)
    assert chi2 > CHI2_19_AT_0_001, f"chi-square {chi2:.1f} over {n} tokens did not catch the wrong rule"


def test_residual_rule_is_exact_on_a_small_vocab():
    """Accept-or-resample with q != p gives exactly p (checked by enumeration of the rule's terms)."""
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.1, 0.6, 0.1, 0.2])
    accept = torch.minimum(torch.ones(4), p / q)
    out = q * accept + (1 - (q * accept).sum()) * residual(p, q)
    assert torch.allclose(out, p)


# -- measurement vs the replay ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def captured(models, tmp_path_factory):
    from helpers.model.capture import CaptureSettings, capture

    target, _ = models
    out = tmp_path_factory.mktemp("captured")
    capture(target, PROMPTS, out, CaptureSettings(regenerate=True, max_new_tokens=24, draft=DRAFT))
    return out


@pytest.mark.slow
def test_offset_chain_agrees_with_the_replay_and_misreads_measure_one(models, chain5_runs, captured):
    from helpers.measure.evaluate import evaluate
    from helpers.measure.replay import replay

    _, draft = models
    runs = chain5_runs
    off = runs["offset"]
    # the draft's quality: what the verifier accepted, also in the step --max-new-tokens cut
    verified = np.array([x for p in off.prompts for x in p.accept_lengths[:-1] + [p.cut_from or p.accept_lengths[-1]]])
    assert sum(p.cut_from is not None for p in off.prompts) > 0
    v_mean, v_se = verified.mean(), verified.std(ddof=1) / np.sqrt(verified.size)
    assert off.mean < v_mean  # emitted tokens only (what a server counts)
    rp = replay(draft, captured, steps=5, reading="offset", progress=False)
    se = float(np.hypot(v_se, rp.stderr))
    assert abs(v_mean - rp.mean) <= se, (v_mean, rp.mean, se)
    walked = replay_walk(draft, captured, steps=5, reading="offset")
    assert abs(v_mean - walked.mean) <= float(np.hypot(v_se, walked.stderr))
    assert off.mean > 2
    for r in ("absolute", "none"):
        assert runs[r].mean == pytest.approx(1.0, abs=0.05), (r, runs[r].mean)
    ev = evaluate(draft, captured, readings=["offset"], steps=5, progress=False)
    pred = predicted_per_position(ev.overall.readings["offset"].step_top1, 5)
    meas = off.per_position_unconditional
    assert all(a > b for a, b in zip(meas, meas[1:]))  # decays
    assert np.max(np.abs(np.array(meas) - np.array(pred))) < 0.1, (meas, pred)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="reading"):
        S.SpecSettings(reading="sideways").check()
    with pytest.raises(ValueError, match="temperature"):
        S.SpecSettings(temperature=-1).check()
    with pytest.raises(ValueError, match="at least 2"):
        S.SpecSettings(drafting=Drafting(2, 2, 1)).check()
    with pytest.raises(ValueError, match="--steps 0"):
        S.SpecSettings(drafting=Drafting(0)).check()
    assert dataclasses.asdict(S.SpecSettings())["reading"] == "offset"


# -- the command --------------------------------------------------------------------------------
def test_speculate_command_json_runs_on_the_bundled_samples(cli, models, tmp_path):
    import json

    target, _ = models
    r = cli("speculate", DRAFT, "--max-prompts", 3, "--max-new-tokens", 12, "--steps", 3, "--topk", 2,
            "--draft-tokens", 5, "--json", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out["readings"]) == {"offset", "absolute", "none"}
    off = out["readings"]["offset"]
    assert off["settings"]["drafting"] == "tree" and off["settings"]["topk"] == 2
    for key in ("mean_accept_length", "stderr", "histogram", "per_position_unconditional",
                "per_position_conditional", "target_forwards_per_token", "prompts"):
        assert key in off
    assert len(off["per_position_unconditional"]) == 3
    p0 = off["prompts"][0]
    assert len(p0["output_ids"]) == 12 and p0["text"] == target.tokenizer.decode(p0["output_ids"])
    # the same text under every reading: only the accept length changes
    assert all(out["readings"][r]["prompts"][0]["output_ids"] == p0["output_ids"] for r in out["readings"])
    assert out["readings"]["absolute"]["mean_accept_length"] < off["mean_accept_length"]


def test_speculate_command_text_and_bad_input(cli, tmp_path):
    r = cli("speculate", DRAFT, "--max-prompts", 1, "--max-new-tokens", 6, "--reading", "offset", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "offset" in r.stdout and "accept length" in r.stdout and "absolute" not in r.stdout
    r = cli("speculate", DRAFT, "--topk", 4, "--device", "cpu")
    assert r.returncode == 2 and "--topk" in r.stderr and "Traceback" not in r.stderr
    r = cli("speculate", DRAFT, "--prompts", tmp_path / "missing.jsonl")
    assert r.returncode == 2 and "missing.jsonl" in r.stderr
    r = cli("speculate", DRAFT, "--temperature", "-1", "--device", "cpu")
    assert r.returncode == 2 and "temperature" in r.stderr
    r = cli("speculate", "--help")
    assert r.returncode == 0 and "unconditional" in r.stdout


# -- the report with a target (the report itself: tests/test_report_truth.py) ------------------------
def test_report_target_needs_prompts(cli, tmp_path):
    r = cli("report", DRAFT, "-o", tmp_path / "out", "--target", TARGET)
    assert r.returncode == 2 and "--prompts" in r.stderr
    r = cli("report", DRAFT, "-o", tmp_path / "out", "--target", tmp_path / "nothing", "--prompts", PROMPTS)
    assert r.returncode == 2 and "nothing" in r.stderr


# -- the token view and the dashboard's speculate mode ----------------------------------------------
def test_token_view_html_marks_every_token(models, records):
    from helpers.ui.token_view import token_view_html

    target, draft = models
    runs = S.speculate_readings(target, draft, records[:1], S.SpecSettings(max_new_tokens=12), ["offset", "absolute"])
    page = token_view_html({r: run.prompts[0] for r, run in runs.items()})
    assert page.count('data-reading="') == 2
    assert page.count("d2t-tok ") == 24
    kinds = runs["offset"].prompts[0].kinds
    assert page.count("d2t-draft") == kinds.count("draft") > 0  # only the offset column has accepted drafts
    assert page.count("d2t-correction") >= 11


def test_dashboard_speculate_mode_streams_the_token_view(models):
    from helpers.ui.settings import RunSettings
    from helpers.ui.widgets import Dashboard

    dash = Dashboard(SAMPLES, RunSettings(steps=3, max_new_tokens=16, device="cpu", dtype="float32"),
                     checkpoint=DRAFT, mode="speculate", target=TARGET)
    assert dash.samples.layout.display == "none" and dash.spec.controls.layout.display is None
    assert dash.checkpoint.layout.display is None and dash.root.layout.display is None  # only samples hidden
    assert str(TARGET) in dash.spec.target.options  # the target picker lists the bundled target
    dash.run_button.click()
    assert dash.error is None, dash.error
    assert set(dash.spec.runs) == {"offset", "absolute"}
    steps = sum(run.verify_steps for run in dash.spec.runs.values())
    assert dash.spec.view.updates == steps + 2  # redrawn after every verify step, then once per reading
    view = dash.spec.live.children[0].value
    assert view.count("d2t-tok ") == 32 and "accept length" in view
    out = "".join(o.get("data", {}).get("text/html", "") for o in dash.output.outputs)
    assert "offset</b> reading: accept length" in out
    assert dash.spec.runs["absolute"].mean == 1.0 < dash.spec.runs["offset"].mean
    # the evidence ladder: no serving number typed in, then one at the absolute reading's accept length
    assert dash.ladder.verdict == "no serving measurement" and "No verdict on the deployment" in out
    dash.serving.value = 1.0
    dash.run_button.click()
    out = "".join(o.get("data", {}).get("text/html", "") for o in dash.output.outputs)
    off = dash.spec.runs["offset"]
    assert dash.ladder.verdict == ("a deployment bug" if (1.0 - off.mean) / off.stderr <= -3 else "no deployment bug")
    assert dash.ladder.conclusion.split(",")[0] in out and "serving vs engine-free" in out
    # no target: one line, no exception
    dash.spec.target.value = ""
    dash.run_button.click()
    assert dash.error and "target" in dash.error
    # back to accuracy mode: the samples picker returns
    dash.mode.value = "accuracy"
    assert dash.samples.layout.display is None and dash.spec.controls.layout.display == "none"
