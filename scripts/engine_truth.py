"""The engine-truth table: what real vLLM 0.32.0 does with the bundled engine pair's draft and each
broken copy the kit can make of it.

    python scripts/engine_truth.py make OUT            # only write the broken copies (no engine needed)
    python scripts/engine_truth.py run [--out F.json]  # run every copy in real vLLM, write the table
    python scripts/engine_truth.py docs                # the table of docs/engine-truth.md (no engine)

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_broken_drafts as mb  # noqa: E402  (copy-and-change helpers of the second-wave drafts)
import vllm_cpu  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "data_samples" / "engine_llama"
TARGET = PAIR / "target"
# the Kimi-shaped engine pair (scripts/make_kimi_engine_pair.py): MLA target and draft, model_type deepseek_v2
PAIRS = {"llama": PAIR, "kimi": ROOT / "data_samples" / "engine_kimi"}
TABLE = ROOT / "data_samples" / "engine_truth" / f"vllm-{vllm_cpu.RELEASE}.json"
PROMPTS = ROOT / "data_samples" / "prompts.jsonl"
N_PROMPTS, MAX_TOKENS, K = 16, 32, 3


# -- the file-level changes -------------------------------------------------------------------------
def _absolute(t):
    t["d2t"] = t["d2t"] + torch.arange(t["d2t"].numel())


def _drop(*names):
    def f(t):
        for n in names:
            del t[n]
    return f


def _zeros(t):
    t["d2t"] = torch.zeros_like(t["d2t"])


def _arange(t):
    t["d2t"] = torch.arange(t["d2t"].numel(), dtype=t["d2t"].dtype)


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


def _side_file(folder: Path):
    """Move d2t/t2d out of the weights into speculators-style d2t.npy / t2d.npy beside them."""
    from safetensors.torch import load_file, save_file

    t = load_file(str(folder / "model.safetensors"))
    np.save(folder / "d2t.npy", t.pop("d2t").numpy())
    np.save(folder / "t2d.npy", t.pop("t2d").numpy())
    save_file(t, str(folder / "model.safetensors"), metadata={"format": "pt"})


# name -> (what was changed, tensors change, config change, folder change)
CASES: dict[str, tuple] = {
    "healthy": ("nothing: the bundled draft as made", None, None, None),
    "d2t-absolute": ("d2t stores absolute target ids instead of offsets", _absolute, None, None),
    "d2t-missing": ("d2t and t2d left out of the weights", _drop("d2t", "t2d"), None, None),
    "d2t-zeros": ("d2t all zeros with the reduced draft vocab", _zeros, None, None),
    "d2t-arange": ("d2t = arange(N) (targets 2i)", _arange, None, None),
    "d2t-side-file": ("d2t/t2d only in d2t.npy / t2d.npy beside the weights", None, None, _side_file),
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
    # the Kimi-shaped pair's MLA draft (case names start with "kimi-": their pair is engine_kimi)
    "kimi-healthy": ("the Kimi-shaped pair's MLA draft as made (model_type deepseek_v2)", None, None, None),
    "kimi-model-type-kimi_k2": ("its model_type set to kimi_k2 (Kimi's own)", None, mb._set(model_type="kimi_k2"), None),
    "kimi-model-type-deepseek_v3": ("its model_type set to deepseek_v3", None, mb._set(model_type="deepseek_v3"), None),
    "kimi-d2t-missing": ("its d2t and t2d left out of the weights", _drop("d2t", "t2d"), None, None),
}


# cases that change the launch, not the files: the speculative config's method (the doctor's --algorithm)
LAUNCH = {"method-eagle": "eagle"}
# cases the doctor can only see against the checkpoint they came from (its --previous: the pair's draft)
PREVIOUS = ("d2t-stale",)


def pair_of(case: str) -> Path:
    """The bundled engine pair a case's draft comes from."""
    return PAIRS["kimi" if case.startswith("kimi-") else "llama"]


def healthy_accept(rows: list[dict], case: str) -> float:
    """The accept length of the healthy draft of the same pair as `case` (what `as-trained` is measured against)."""
    name = "kimi-healthy" if case.startswith("kimi-") else "healthy"
    return next(r["accept_length"] for r in rows if r["case"] == name)


def make(out: Path, names=None) -> dict[str, Path]:
    """Write the broken copies under OUT/<case>/ (the healthy one too); returns name -> folder."""
    out.mkdir(parents=True, exist_ok=True)
    made = {}
    for name, (_, tensors, config, folder) in CASES.items():
        if names and name not in names:
            continue
        dst = out / name
        if dst.exists():
            import shutil

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
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(table(rows), indent=1) + "\n")
    return rows


def table(rows: list[dict]) -> dict:
    return {"engine": "vllm", "release": vllm_cpu.RELEASE, "package": f"vllm-cpu=={vllm_cpu.RELEASE}",
            "pairs": "data_samples/engine_llama (cases without a prefix), data_samples/engine_kimi (cases kimi-*)",
            "prompts": f"data_samples/prompts.jsonl (first {N_PROMPTS}), {MAX_TOKENS} tokens, greedy, chain of {K}, bf16",
            "made_by": "python scripts/engine_truth.py run", "rows": rows}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make", help="write the broken copies into OUT")
    m.add_argument("out", type=Path)
    r = sub.add_parser("run", help="run every copy in real vLLM and write the table")
    r.add_argument("--out", type=Path, default=TABLE)
    r.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    r.add_argument("--work", type=Path, default=None)
    d = sub.add_parser("docs", help="print the markdown table of docs/engine-truth.md from the recorded table")
    d.add_argument("--table", type=Path, default=TABLE)
    args = ap.parse_args(argv)
    if args.cmd == "docs":
        import tempfile

        data = json.loads(args.table.read_text())
        with tempfile.TemporaryDirectory() as tmp:
            print(render(data, doctor_predictions(make(Path(tmp), [r["case"] for r in data["rows"]]))))
        return
    if args.cmd == "make":
        for name, folder in make(args.out).items():
            print(f"{name}: {folder}")
    else:
        run(args.out, args.cases.split(",") if args.cases else None, args.work)



# -- the doctor against the table -------------------------------------------------------------------
TOLERANCE = 0.05  # accept-length units: "as trained" means within this of the healthy copy's run


def measured_class(row: dict, healthy: float) -> str | None:
    """A served row's accept length as an accept class (None for rows that did not serve)."""
    if row["outcome"] != "serves":
        return None
    al = row["accept_length"]
    if al <= 1.1:
        return "about-1"
    return "as-trained" if abs(al - healthy) <= TOLERANCE else "at-most" if al < healthy else "above"


def agrees(pred: dict | None, row: dict, healthy: float) -> tuple[bool, str]:
    """(does the doctor's predicted outcome hold for this row, why not)."""
    if pred is None:
        return False, "the doctor predicts nothing"
    if pred["result"] != row["outcome"]:
        return False, f"predicted {pred['result']}, vLLM {row['outcome']}"
    if row["outcome"] != "serves":
        says = pred.get("says")
        ok = says is None or says in (row.get("error") or "")
        return ok, "" if ok else f"the engine's error does not name {says!r}"
    got, want = measured_class(row, healthy), pred["accept"]
    # `unknown` claims only that it serves (which was checked above): the files cannot tell the accept length
    ok = (want in (got, "unknown") or (want == "at-most" and got in ("as-trained", "at-most", "about-1")))
    return ok, "" if ok else f"predicted accept {want}, measured {row['accept_length']:.3f} ({got})"


def doctor_predictions(folders: dict[str, Path]) -> dict[str, dict]:
    """The doctor's predicted vLLM 0.32.0 outcome for each copy, with the bundled target's config."""
    from helpers.doctor.diagnose import diagnose

    return {name: diagnose(folder, f"vllm=={vllm_cpu.RELEASE}", pair_of(name) / "target" / "config.json",
                           algorithm=LAUNCH.get(name), previous=pair_of(name) / "draft" if name in PREVIOUS else None)
            .predicted_outcome().get("vllm") for name, folder in folders.items()}


def render(table_json: dict, predictions: dict[str, dict]) -> str:
    """The markdown table of docs/engine-truth.md: each case, what vLLM did, what the doctor predicted."""
    from helpers.doctor.findings import outcome_words

    rows = table_json["rows"]
    out = ["| case | what was changed | real vLLM 0.32.0 | the doctor predicted | agree |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        healthy = healthy_accept(rows, r["case"])
        if r["outcome"] == "serves":
            real = f"serves, accept length {r['accept_length']:.3f} ({measured_class(r, healthy)})"
        else:
            real = f"{r['outcome']}: `{(r.get('error') or '')[:160]}`"
        pred = predictions.get(r["case"])
        ok, _ = agrees(pred, r, healthy)
        out.append(f"| `{r['case']}` | {r['change']} | {real} | {outcome_words(pred) if pred else '-'} | "
                   f"{'yes' if ok else '**no**'} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
