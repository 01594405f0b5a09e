"""The bundled speculators-layout sample served by real vLLM 0.32.0 (make test-engine), and the doctor's words for it.

data_samples/tiny_draft_speculators is written as speculators 0.9.0 writes a draft (speculators_config, d2t/t2d
in the weights). vLLM's CPU build has no attention kernel for the tiny pair's head size 16, so both the target
and the draft are run as head-32 copies (the same weights read as half as many heads of twice the size: the
draft no longer matches its target, so little is accepted; what is checked is that vLLM loads and serves the
format, and that the doctor's prediction holds). The older shape of the sample (no speculators_config, the
mapping in side files: conftest.side_file_draft) is refused, as the doctor says.
"""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import SAMPLES, run_main, side_file_draft

pytestmark = pytest.mark.engine


def _head32(src, dst, target: bool, verifier=None):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    layer = cfg if target else cfg["transformer_layer_config"]
    layer.update(num_attention_heads=2, num_key_value_heads=2 if target else 1, head_dim=32)
    if verifier and "speculators_config" in cfg:
        cfg["speculators_config"]["verifier"]["name_or_path"] = str(verifier)
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst


@pytest.fixture(scope="module")
def served(vllm_cpu, tmp_path_factory):
    work = tmp_path_factory.mktemp("speculators")
    target = _head32(SAMPLES / "tiny_target", work / "target", True)
    new = _head32(SAMPLES / "tiny_draft_speculators", work / "draft", False, target)
    old = _head32(side_file_draft(work / "old-src"), work / "old", False)
    ids = vllm_cpu.prompt_token_ids(target, SAMPLES / "prompts.jsonl", 16)
    jobs = [{"case": "target", "target": str(target), "draft": None},
            {"case": "new", "target": str(target), "draft": str(new)},
            {"case": "old", "target": str(target), "draft": str(old)}]
    rows = vllm_cpu.run_in_process(jobs, ids, 32, 3, work / "run")
    return {"target": target, "new": new, "old": old, "rows": rows}


def _doctor(draft, target):
    r = run_main("doctor", str(draft), "--engine", "vllm==0.32.0", "--target-config", str(target / "config.json"),
                 "--json")
    return json.loads(r.stdout)["predicted_outcome"]["vllm"]


def _kit(draft, target, engine):
    r = run_main("speculate", str(draft), "--target", str(target), "--max-prompts", "16", "--max-new-tokens", "32",
                 "--readings", "offset", "--engine", engine, "--draft-tokens", "3", "--embed-from", str(target),
                 "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["readings"]["offset"]


def test_vllm_serves_the_speculators_0_9_sample_as_the_doctor_says(served):
    row = served["rows"]["new"]
    assert row["outcome"] == "serves", row.get("error")
    assert row["output_ids"] == served["rows"]["target"]["output_ids"]  # lossless: the target's own tokens
    served_al = 1 + row["accepted"] / row["drafts"]
    pred = _doctor(served["new"], served["target"])
    assert pred["result"] == "serves" and pred["accept"] == "at-most", pred  # aux ids in SGLang's convention
    # "at or below what it was trained for": the draft's own convention (SGLang's) is what it was trained on
    trained = _kit(served["new"], served["target"], "sglang")["engine_counts"]["accept_length"]
    as_vllm = _kit(served["new"], served["target"], "vllm")["engine_counts"]["accept_length"]
    assert served_al <= trained + 0.05, (served_al, trained)
    assert abs(served_al - as_vllm) <= 0.05, (served_al, as_vllm)


def test_vllm_refuses_the_older_shape_and_the_doctor_says_so(served):
    row = served["rows"]["old"]
    assert row["outcome"] == "refuses" and "model_type" in row["error"], row
    pred = _doctor(served["old"], served["target"])
    assert pred["result"] == "refuses" and pred["says"] == "model_type" and pred["says"] in row["error"], pred
