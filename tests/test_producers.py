"""The kit's draft against each producer's own logits (data_samples/producers, docs/producer-variants.md).

Every fixture folder was written by SpecForge 0.2.0, speculators 0.9.0 or NeMo Automodel 0.7.0
(Llama and DeepSeek-V3 MLA drafts) themselves (scripts/make_producer_fixtures.py,
scripts/producer_fixtures/gen_nemo.py) with the producer's teacher-forced logits at drafting steps
0-2 in fp32 and bf16. The kit loads each folder with `load_draft` and must reproduce them; its
`evaluate` on a sample file made from the same inputs must count what the producer's own logits
count. Loader refusals (unknown keys, Qwen3 switches) are checked at the end.
"""
from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers.model.draft import load_draft
from helpers.model.config import DraftConfig
from helpers.core.errors import BadInputError
from helpers.measure.evaluate import evaluate
from helpers.measure.predict import MASK_AT, draft_predictions
from conftest import SAMPLES


PRODUCERS = SAMPLES / "producers"
TARGET = PRODUCERS / "target"
# Model-Optimizer's and TorchSpec's fixtures are tested in tests/test_producer_exports.py (their exports
# need more than the fixture folder: ModelOpt's config carries a rope override it did not train with).
ELSEWHERE = ("nvidia-modelopt",)
FIXTURES = sorted(p.name for p in PRODUCERS.iterdir() if (p / "reference.pt").exists()
                  and json.loads((p / "reference.json").read_text())["producer"] not in ELSEWHERE)
CONTROLS = ("specforge_control", "speculators_control")
# step-0 output at position t counts where loss_mask[t + OFFSET] is 1 (raw, unshifted indices):
# SpecForge masks the output at t with loss_mask[t] (TargetHead.preprocess shifts input_ids
# only); speculators' shift_batch drops l0 with x0, so its position t (= raw t) reads l_{t+1}
# (speculators/models/eagle3/data.py: shift_batch; metrics.py: align_for_step).
MASK_OFFSET = {"specforge": 0, "speculators": 1}
KIT_MASK_AT = {0: "position", 1: "speculators", 2: "label"}  # the kit's rules, as offsets


def _ref(name):
    return torch.load(PRODUCERS / name / "reference.pt", weights_only=True)


def _meta(name):
    return json.loads((PRODUCERS / name / "reference.json").read_text())


def _embed_from(name):
    """The target folder where the producer left embed_tokens out of its export (reference.json notes)."""
    return TARGET if any("../target" in n for n in _meta(name).get("notes", [])) else None


def _load(name, dtype=torch.float32):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fixture is expected to need a warning
        return load_draft(PRODUCERS / name, device="cpu", dtype=dtype, embed_from=_embed_from(name))


def _kit_logits(name, dtype):
    ref = _ref(name)
    m = _load(name, dtype)
    with torch.no_grad():
        out = m.draft_steps(ref["aux_hidden"], ref["next_ids"], steps=3, teacher_forcing=True)
    return ref, [o.float()[0] for o in out]


def test_every_fixture_is_covered():
    assert len(FIXTURES) == 19 and set(CONTROLS) <= set(FIXTURES)


@pytest.mark.parametrize("name", FIXTURES)
def test_fp32_logits_match_the_producer(name):
    ref, out = _kit_logits(name, torch.float32)
    for k in range(3):
        assert torch.equal(ref[f"ids_step{k}"][0, : ref["next_ids"].shape[1] - k], ref["next_ids"][0, k:])
        want = ref[f"logits_fp32_step{k}"][0]
        diff = (out[k] - want).abs().max().item()
        assert diff < 1e-4, f"{name} step {k}: max abs diff {diff:.2e}"
        assert torch.equal(out[k].argmax(-1), want.argmax(-1)), f"{name} step {k}: top-1 differs"


def _tie_aware_agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    """Share of rows whose argmax agrees; a row where either side's top value is tied counts as agreeing
    when the other's argmax is among those tied (bf16 has few values: exact ties are common)."""
    ia, ib = a.argmax(-1), b.argmax(-1)
    rows = torch.arange(a.shape[0])
    ok = (ia == ib) | (a[rows, ib] == a.max(-1).values) | (b[rows, ia] == b.max(-1).values)
    return ok.float().mean().item()


def _one_ulp_flips(a: torch.Tensor, b: torch.Tensor, fp32: torch.Tensor) -> int:
    """Rows where the argmaxes differ only because the producer's bf16 rounding swapped two values one
    bf16 step apart, and the kit's choice is the producer's own fp32 argmax."""
    ia, ib = a.argmax(-1), b.argmax(-1)
    rows = torch.arange(a.shape[0])
    top = b.max(-1).values
    ulp = torch.finfo(torch.bfloat16).eps * top.abs().clamp_min(1e-30)  # >= one bf16 step near |top|
    near = (top - b[rows, ia]) <= ulp
    return int(((ia != ib) & near & (ia == fp32.argmax(-1))).sum())


@pytest.mark.parametrize("name", FIXTURES)
def test_bf16_top1_matches_the_producer(name):
    ref, out = _kit_logits(name, torch.bfloat16)
    for k in range(3):
        theirs = ref[f"logits_bf16_step{k}"].float()[0]
        agree = _tie_aware_agreement(out[k], theirs)
        flips = _one_ulp_flips(out[k], theirs, ref[f"logits_fp32_step{k}"][0])
        assert flips <= 1, f"{name} step {k}: {flips} one-ulp flips"
        agree += flips / out[k].shape[0]  # nemo_llama step 2 row 14: 2.3125 vs 2.2969 swapped, fp32 sides with the kit
        assert agree >= 0.98, f"{name} step {k}: bf16 top-1 agreement {agree:.1%}"


def _write_sample(tmp_path, ref, loss_mask):
    """One SpecForge-layout sample file (helpers.io.samples) from the fixture's raw inputs."""
    ids, aux = ref["input_ids"][0], ref["aux_hidden_states"]
    T = ids.shape[0]
    folder = tmp_path / "samples" / "rows_0-1"
    folder.mkdir(parents=True)
    torch.save({"input_ids": ids, "loss_mask": loss_mask, "hidden_state": torch.zeros(1, T, aux.shape[-1] // 3),
                "aux_hidden_state": aux}, folder / "data_0.ckpt")
    return tmp_path / "samples"


def _producer_step0(name, ref, loss_mask, offset):
    """(correct, counted) of the producer's own step-0 argmax (mapped through d2t) against x_{t+2}."""
    ids = ref["input_ids"][0]
    T = ids.shape[0]
    draft = ref["logits_fp32_step0"][0].argmax(-1)
    pred = draft + ref["d2t"][draft]  # offsets
    t = torch.arange(T - 2)  # positions whose label x_{t+2} exists (both producers' logits cover them)
    counted = loss_mask[t + offset].bool()
    return int((pred[t] == ids[t + 2])[counted].sum()), int(counted.sum()), pred[: T - 2]


MASKS = {"ones": [1] * 16, "spans": [0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1]}


@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("name", FIXTURES)
def test_evaluate_counts_what_the_producer_counts(name, mask, tmp_path):
    ref = _ref(name)
    lm = torch.tensor(MASKS[mask])
    if _meta(name)["producer"] not in MASK_OFFSET:
        pytest.skip(f"{_meta(name)['producer']}'s loss-mask alignment is not recorded in its fixture")
    offset = MASK_OFFSET[_meta(name)["producer"]]
    if mask == "ones":
        mask_at = "label"  # all rules count the same positions
    elif offset in KIT_MASK_AT and KIT_MASK_AT[offset] in MASK_AT:
        mask_at = KIT_MASK_AT[offset]
    else:
        pytest.skip(f"evaluate has no mask_at for loss_mask[t+{offset}] ({_meta(name)['producer']}'s rule); "
                    f"it offers {MASK_AT}")
    samples = _write_sample(tmp_path, ref, lm)
    model = _load(name)
    correct, counted, producer_pred = _producer_step0(name, ref, lm, offset)
    r = evaluate(model, samples, readings=["offset"], steps=1, topk=1, progress=False, mask_at=mask_at)
    s = r.overall.readings["offset"]
    assert s.tokens == counted
    assert s.top1 == pytest.approx(correct / counted)
    (p,) = draft_predictions(model, samples, steps=1, reading="offset", mask_at=mask_at)
    assert torch.equal(p.pred[: len(producer_pred), 0, 0], producer_pred)  # every position, not just the count


@pytest.mark.parametrize("name", FIXTURES)
def test_config_records_the_producer_and_its_norm_output(name):
    cfg = DraftConfig.from_dict(json.loads((PRODUCERS / name / "config.json").read_text()))
    meta = _meta(name)
    assert cfg.producer == meta["producer"]
    no = meta["signals"]["config"].get("norm_output")
    if cfg.producer == "specforge":
        assert cfg.final_norm is (no is not False) and not cfg.feed_normed
    else:
        assert cfg.final_norm and cfg.feed_normed is bool(no)


# -- refusals and warnings --------------------------------------------------------------------------
def _copy_with(tmp_path, name, extra=None, config=None, drop=()):
    dst = tmp_path / name
    shutil.copytree(PRODUCERS / name, dst)
    w = load_file(dst / "model.safetensors")
    for k in drop:
        del w[k]
    w.update(extra or {})
    save_file(w, dst / "model.safetensors")
    if config:
        cfg = json.loads((dst / "config.json").read_text())
        for path, v in config.items():
            node = cfg
            *head, last = path.split(".")
            for h in head:
                node = node[h]
            node[last] = v
        (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("name,extra,config,says", [
    ("specforge_control", {"fc_norm.0.weight": torch.ones(32)}, None, "fc_norm: true"),
    ("speculators_control", {"input_norm.weight": torch.ones(96)}, None, "norm_before_fc: true"),
    ("speculators_control", {"layers.0.self_attn.q_norm.weight": torch.ones(8)}, None, "qwen3"),
    ("speculators_control", {"layers.0.self_attn.q_proj.bias": torch.ones(32)}, None, "attention_bias"),
    ("specforge_control", {"midlayer.self_attn.q_proj.bias": torch.ones(32)}, None, "hard-coded off"),
    ("specforge_control", {"fc.bias": torch.ones(32)}, None, "does not model"),
    ("speculators_qwen3", None, {"transformer_layer_config.model_type": "mistral"}, "model_type"),
    ("speculators_control", None, {"transformer_layer_config.layer_types": ["chunked_attention"]}, "layer_types"),
    ("speculators_control", None, {"fc_norm": True, "norm_before_fc": True}, "both"),
    ("speculators_control", None, {"transformer_layer_config.mlp_bias": True}, "mlp_bias"),
])
def test_unmodelled_keys_and_switches_are_refused_by_name(tmp_path, name, extra, config, says):
    src = _copy_with(tmp_path, name, extra, config)
    with pytest.raises(BadInputError) as e:
        load_draft(src, device="cpu", dtype=torch.float32, embed_from=TARGET)
    msg = str(e.value)
    assert says in msg and "\n" not in msg
    if extra:
        assert next(iter(extra)) in msg and "model.safetensors" in msg


def test_qwen3_keys_without_their_switch_are_refused_not_a_runtime_error(tmp_path):
    src = _copy_with(tmp_path, "speculators_qwen3", config={"transformer_layer_config.model_type": "llama"})
    with pytest.raises(BadInputError, match="[qk]_norm"):
        load_draft(src, device="cpu", dtype=torch.float32)


def test_missing_variant_weights_are_refused_or_filled_as_the_producer_does(tmp_path):
    src = _copy_with(tmp_path, "specforge_fc_norm", drop=["fc_norm.1.weight"])
    with pytest.raises(BadInputError, match="fc_norm.1.weight"):
        load_draft(src, device="cpu", dtype=torch.float32, embed_from=TARGET)
    src = _copy_with(tmp_path / "b", "speculators_norm_before_fc", drop=["input_norm.weight"])
    with pytest.warns(UserWarning, match="input_norm.weight"):
        m = load_draft(src, device="cpu", dtype=torch.float32)
    assert torch.equal(m.input_norm.weight, torch.ones(96))  # speculators leaves it at ones


def test_harmless_keys_and_ignored_switches_warn_by_name(tmp_path):
    src = _copy_with(tmp_path, "specforge_control", {"midlayer.self_attn.rotary_emb.inv_freq": torch.ones(4)},
                     {"attention_bias": True, "tie_word_embeddings": True})
    with pytest.warns(UserWarning) as rec:
        load_draft(src, device="cpu", dtype=torch.float32, embed_from=TARGET)
    text = " ".join(str(w.message) for w in rec)
    assert "rotary_emb.inv_freq" in text and "attention_bias" in text and "tie_word_embeddings" in text


def test_tied_lm_head_without_its_weight_is_refused_in_one_line(tmp_path):
    src = _copy_with(tmp_path, "specforge_control", config={"tie_word_embeddings": True}, drop=["lm_head.weight"])
    with pytest.raises(BadInputError, match="tie_word_embeddings"):
        load_draft(src, device="cpu", dtype=torch.float32, embed_from=TARGET)


def test_cli_evaluates_a_qwen3_draft_and_refuses_an_unmodelled_layer_in_one_line(tmp_path, cli):
    ref = _ref("speculators_qwen3")
    samples = _write_sample(tmp_path, ref, torch.ones(16, dtype=torch.int64))
    ok = cli("evaluate", PRODUCERS / "speculators_qwen3", "--samples", samples, "--device", "cpu", "--json")
    assert ok.returncode == 0, ok.stderr
    bad = _copy_with(tmp_path, "speculators_qwen3", config={"transformer_layer_config.model_type": "llama"})
    r = cli("evaluate", bad, "--samples", samples, "--device", "cpu")
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "_norm.weight" in r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1, r.stderr


# -- the doctor: what each engine does with the producer options ------------------------------------
# At the newest releases read (no --engine version): SpecForge's fc_norm is read by both engines; its
# norm_output: true is read as "feed the normed state", which SpecForge 0.2.0 does not train with.
# Release by release: tests/test_engine_versions.py.
EXPECTED_FINDINGS = {
    "specforge_fc_norm": {"variant-fc-norm", "variant-norm-output"},
    "specforge_fc_norm_no_norm_output": {"variant-fc-norm", "variant-norm-output"},
    "speculators_attention_bias": {"variant-attention-bias"},
    "speculators_defaults": {"variant-norm-before-fc", "variant-norm-before-residual", "variant-norm-output",
                             "variant-sliding-window"},
    "speculators_fc_norm": {"variant-fc-norm"},
    "speculators_norm_before_fc": {"variant-norm-before-fc"},
    "speculators_norm_output": {"variant-norm-output"},
    "speculators_qwen3": {"variant-qk-norm"},
    "speculators_sliding_window": {"variant-sliding-window"},
    "nemo_llama_fc_norm_norm_output": {"variant-fc-norm", "variant-norm-output"},  # both read: info
}


DOCTOR_CASES = list(FIXTURES)


@pytest.mark.parametrize("name", DOCTOR_CASES + ["../tiny_draft_sglang", "../tiny_draft_speculators",
                                                 "../tiny_draft_absolute", "../tiny_draft_no_d2t"])
def test_doctor_reports_each_engine_on_each_producer_option(name):
    from helpers.engines.table import ENGINE_TABLE
    from helpers.doctor.diagnose import diagnose

    fs = [f for f in diagnose(PRODUCERS / name, "all", check_weights=False) if f.code.startswith("variant-")]
    assert {f.code for f in fs} == EXPECTED_FINDINGS.get(name, set())
    newest = {"SGLang": ENGINE_TABLE["sglang"].releases[-1], "vLLM": ENGINE_TABLE["vllm"].releases[-1]}
    for f in fs:
        eng = f.message.split()[0]
        assert f.message.startswith(f"{eng} {newest[eng]} (llama_eagle3.py)"), f.message
    by = {(f.code, f.message.split()[0]): f for f in fs}
    if name in ("specforge_fc_norm", "speculators_norm_before_fc"):  # EAGLE-3.1 drafts load in today's releases
        assert not [f for f in fs if f.severity == "error"]
    if name in ("speculators_fc_norm", "nemo_llama_fc_norm_norm_output"):  # read by both
        assert {f.severity for f in fs} == {"info"}
    if name == "specforge_fc_norm_no_norm_output":  # no final norm: no engine release models it
        assert {by["variant-norm-output", e].severity for e in ("SGLang", "vLLM")} == {"error"}
    if name == "speculators_qwen3":
        assert by["variant-qk-norm", "vLLM"].severity == "info"  # qwen3_eagle3.py, vLLM 0.24.0 on
        assert "would serve with these weights missing" in by["variant-qk-norm", "SGLang"].message
    if name == "speculators_attention_bias":
        assert by["variant-attention-bias", "vLLM"].severity == "info"
        assert by["variant-attention-bias", "SGLang"].severity == "error"
