"""The steps of notebooks/08_debug_a_checkpoint.ipynb: from a draft folder on disk to a verified fix.

Each function answers one question a person asks of a checkpoint, as a table (pandas) or a dict,
and reads only what that question needs:

- `files_table`: which files the folder holds and what each is for;
- `tensors_table`: every tensor's name, shape and dtype (safetensors headers; no data read);
- `config_table`: the `config.json` fields that hold N, V and the sizes the mapping must fit;
- `shape_checks`: len(d2t) = N = rows of `lm_head`, len(t2d) = V (the target vocab, possibly
  padded), d2t int64 and t2d bool, t2d keeping N ids;
- `write_variant`: a copy of a draft with its d2t/t2d replaced or left out (what each verdict
  looks like is shown on such copies; the source folder is only read);
- `verdict_gallery`: `inspect` on each variant, one row per verdict;
- `rebuild_offsets`: the two hand fixes (`d2t_abs - arange(N)`, `nonzero(t2d) - arange(N)`);
- `speculate_once`: one engine-free speculative decoding run, its accept length;
- `accept_fingerprints`: the accept length each reading of d2t predicts from offline step accuracies,
  the fingerprint a running engine's accept length is matched against;
- `engine_runs_table`: recorded real engine runs (made by the checkout's record_engine_runs script), one row each: did
  it start, the accept length its log, its `/metrics` page and its answers give, its own error line.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from helpers.engines.table import ENGINE_TABLE
from helpers.core.outputs import normal_modes
from helpers.core.paths import checkout_root
from helpers.io.checkpoint import load_mapping, open_checkpoint, read_mapping_tensors
from helpers.io.configs import flat_config

ROLES = {  # file name (or suffix) -> what it is for
    "config.json": "the draft's config: sizes (N, V, H), architecture, aux layer ids",
    ".safetensors": "weights (and d2t/t2d, where the engines read them)",
    ".bin": "weights in torch pickle format (read with weights_only=True)",
    "model.safetensors.index.json": "the shard index: which file holds each tensor",
    "d2t.npy": "a side file: the engines do not read it (a checkpoint with only this has no d2t)",
    "t2d.npy": "a side file: the engines do not read it",
    ".pt": "a torch file: a mapping dict, a training state or optimizer state (by content)",
}
TENSOR_ROLES = {
    "d2t": "draft -> target offsets, [N] int64",
    "t2d": "kept target ids, [V] bool",
    "lm_head.weight": "the draft's head, [N, H]: one row per draft id",
    "embed_tokens.weight": "the target's embedding, [V, H] (engines borrow the target's)",
    "fc.weight": "aux hidden states -> H, [H, 3 H_target]",
}
CONFIG_FIELDS = {  # field -> what it holds for the mapping
    "draft_vocab_size": "N: draft ids, len(d2t), rows of lm_head",
    "vocab_size": "V: target ids, len(t2d), rows of embed_tokens",
    "target_vocab_size": "V when stated apart from vocab_size",
    "hidden_size": "H: width of the draft layer and lm_head's columns",
    "target_hidden_size": "the target's width: fc takes 3 x this",
    "architectures": "the class an engine builds (EAGLE-3 vs EAGLE)",
    "eagle_aux_hidden_state_layer_ids": "target layers whose states feed fc",
}


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def files_table(path):
    """One row per file in the checkpoint folder: name, size and what it is for (pandas)."""
    import pandas as pd

    ck = open_checkpoint(path)
    folder = ck.path if ck.path.is_dir() else ck.path.parent
    rows = []
    for f in sorted(p for p in folder.iterdir() if p.is_file()):
        role = ROLES.get(f.name) or next((r for s, r in ROLES.items() if s.startswith(".") and f.name.endswith(s)), "")
        if f.name in ck.ignored:
            role = f"ignored: {ck.ignored[f.name]}"
        rows.append({"file": f.name, "size": _size(f.stat().st_size), "what it is": role or "other"})
    return pd.DataFrame(rows).set_index("file")


def tensors_table(path):
    """Every tensor the checkpoint holds: shape and dtype from the headers, and its role (pandas)."""
    import pandas as pd

    ck = open_checkpoint(path)
    rows = []
    for k in ck.tensors.keys():
        short = k.removeprefix("model.")
        rows.append({"tensor": k, "shape": list(ck.tensors.shape(k)),
                     "dtype": str(ck.tensors.dtype(k)).removeprefix("torch."),
                     "file": ck.tensors.file_of(k).name, "role": TENSOR_ROLES.get(short, "")})
    return pd.DataFrame(rows).set_index("tensor")


def config_table(path):
    """The config.json fields the mapping depends on, with their values (pandas)."""
    import pandas as pd

    ck = open_checkpoint(path)
    cfg = flat_config(ck.config or {})
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    rows = []
    for key, what in CONFIG_FIELDS.items():
        value = eagle.get(key, cfg.get(key)) if key == "eagle_aux_hidden_state_layer_ids" else cfg.get(key)
        rows.append({"field": key, "value": "(absent)" if value is None else str(value), "holds": what})
    return pd.DataFrame(rows).set_index("field")


def shape_checks(path) -> list[dict]:
    """The shape and dtype rules a loadable mapping obeys, each with what was found and whether it holds.

    N is `draft_vocab_size` (config), V the target vocab (`vocab_size`); `t2d` may be longer than
    the tokenizer's vocab when the target pads its embedding, but it must equal V.
    """
    ck = open_checkpoint(path)
    cfg = flat_config(ck.config or {})
    n, v = cfg.get("draft_vocab_size"), cfg.get("target_vocab_size", cfg.get("vocab_size"))
    t = ck.tensors
    d2t_key, t2d_key, head_key = t.find("d2t"), t.find("t2d"), t.find("lm_head.weight")

    def shape(key):
        return None if key is None else list(t.shape(key))

    def dtype(key):
        return None if key is None else str(t.dtype(key)).removeprefix("torch.")

    rows = [
        ("d2t is in the weight files", d2t_key is not None, "a d2t tensor", d2t_key or "none"),
        ("len(d2t) = draft_vocab_size N", d2t_key is not None and shape(d2t_key) == [n], f"[{n}]", shape(d2t_key)),
        ("lm_head rows = N", head_key is not None and shape(head_key)[:1] == [n], f"[{n}, H]", shape(head_key)),
        ("d2t dtype is int64", dtype(d2t_key) == "int64", "int64", dtype(d2t_key)),
        ("len(t2d) = vocab_size V", t2d_key is not None and shape(t2d_key) == [v], f"[{v}]", shape(t2d_key)),
        ("t2d dtype is bool", dtype(t2d_key) == "bool", "bool", dtype(t2d_key)),
    ]
    if t2d_key is not None:
        kept = int(t.get(t2d_key).sum())
        rows.append(("t2d keeps N ids", kept == n, f"{n} True", f"{kept} True"))
    return [{"check": c, "holds": bool(ok), "expected": str(e), "found": str(f)} for c, ok, e, f in rows]


def _new_copy_of(src: Path, dst: Path) -> dict:
    """Make the folder `dst` (which must not exist) with `src`'s config.json; `src`'s weights, read."""
    from safetensors.torch import load_file

    if dst.exists():
        raise FileExistsError(dst)
    dst.mkdir(parents=True)
    shutil.copy(src / "config.json", dst / "config.json")
    return load_file(str(src / "model.safetensors"))


def write_variant(src, dst, *, d2t: torch.Tensor | None = None, t2d: torch.Tensor | None = None,
                  drop: tuple[str, ...] = ()) -> Path:
    """A copy of the draft folder `src` at `dst` (which must not exist) with d2t / t2d replaced or dropped.

    Only `config.json` and the weights are copied; `src` is only read. Returns `dst`.
    """
    from safetensors.torch import save_file

    src, dst = Path(src), Path(dst)
    tensors = _new_copy_of(src, dst)
    if d2t is not None:
        tensors["d2t"] = d2t.to(torch.int64).contiguous()
    if t2d is not None:
        tensors["t2d"] = t2d.to(torch.bool).contiguous()
    for k in drop:
        tensors.pop(k, None)
    save_file(tensors, str(dst / "model.safetensors"))
    normal_modes(dst)
    return dst


def verdict_variants(src, work) -> dict[str, Path]:
    """The draft at `src` stored six ways, written under `work`: one folder per verdict `inspect` gives.

    `offset` (as trained), `absolute` (kept ids stored in d2t), `ambiguous` (no t2d, and a strictly
    increasing d2t both of whose readings give distinct in-range ids: here the absolute ids of a
    vocab that kept every other target id, 0, 2, 4, ...), `inconsistent` (all zeros with the reduced
    vocab), `identity` (all zeros with a t2d keeping exactly ids 0..N-1: the one reduced-vocab case
    where all zeros is right) and `no d2t` (mapping left out).
    """
    m = load_mapping(src)
    n, v = m.draft_vocab_size, m.target_vocab_size
    kept = m.targets("offset") if m.verdict().encoding != "absolute" else m.d2t
    low = torch.zeros(v, dtype=torch.bool)
    low[:n] = True
    zeros = torch.zeros(n, dtype=torch.int64)
    work = Path(work)
    return {
        "offset": write_variant(src, work / "offset", d2t=kept - torch.arange(n)),
        "absolute": write_variant(src, work / "absolute", d2t=kept),
        "ambiguous": write_variant(src, work / "ambiguous", d2t=2 * torch.arange(n), drop=("t2d",)),
        "inconsistent": write_variant(src, work / "inconsistent", d2t=zeros),
        "identity": write_variant(src, work / "identity", d2t=zeros, t2d=low),
        "no d2t": write_variant(src, work / "no_d2t", drop=("d2t", "t2d")),
    }


def verdict_gallery(variants: dict):
    """`inspect` on each variant folder: the verdict and the lines that decided it (pandas)."""
    import pandas as pd

    from helpers.core.errors import BadInputError
    from helpers.doctor.inspection import inspect

    rows = []
    for name, folder in variants.items():
        try:
            r = inspect(folder)
        except BadInputError as e:  # no d2t with a reduced vocab: inspect stops with one line
            rows.append({"stored as": name, "verdict": "(inspect exits 2)", "t2d": "absent",
                         "offset reading": "-", "why": str(e).split(": ", 1)[-1]})
            continue
        rows.append({"stored as": name, "verdict": r["verdict"],
                     "t2d": "absent" if not r["has_t2d"] else f"{r['t2d_true']:,} True",
                     "offset reading": r["evidence"][0].removeprefix("offset reading: "),
                     "why": (r["reasons"] or r["evidence"])[0 if r["reasons"] else -1]})
    return pd.DataFrame(rows).set_index("stored as")


def rebuild_offsets(path) -> dict:
    """The two hand fixes of a d2t that holds absolute ids, and whether they agree.

    `from d2t`: `d2t_abs - arange(N)`; `from t2d`: `nonzero(t2d) - arange(N)` (needs t2d). Both give
    offsets whose reading is the kept ids; they agree when d2t and t2d describe the same vocab.
    """
    ck = open_checkpoint(path)
    d2t, t2d, _ = read_mapping_tensors(ck)
    d2t = torch.as_tensor(d2t).to(torch.int64)
    n = d2t.numel()
    out = {"from d2t": d2t - torch.arange(n)}
    if t2d is not None:
        out["from t2d"] = torch.nonzero(torch.as_tensor(t2d)).flatten() - torch.arange(n)
        out["agree"] = bool(torch.equal(out["from d2t"], out["from t2d"]))
    return out


def speculate_once(checkpoint, target, prompts, *, reading: str = "offset", max_prompts: int = 2,
                   max_new_tokens: int = 16, draft_tokens: int | None = None, engine: str | None = None):
    """Engine-free speculative decoding of the first `max_prompts` prompts: the `SpecRun` (accept length, ...).
    Built as every front end builds it (`helpers.speculate.builder.build_run`): a chain of `draft_tokens`
    (None: the builder's default, a chain of 5), the aux layers as `engine` reads them (None: its default)."""
    from helpers.io.prompts import read_prompts
    from helpers.model.target import load_target
    from helpers.speculate.builder import build_run
    from helpers.speculate.loop import speculate

    t = target if hasattr(target, "model") else load_target(target, device="cpu", dtype=torch.float32)
    (t, draft), settings = build_run(checkpoint, t, draft_tokens, engine=engine, reading=reading,
                                     max_new_tokens=max_new_tokens)
    with torch.inference_mode():
        return speculate(t, draft, list(read_prompts(prompts, max_prompts)), settings)


def accept_fingerprints(result, draft_tokens: int) -> dict[str, float]:
    """Accept length a chain of `draft_tokens` would reach under each reading of d2t, from an
    `evaluate` result's per-step top-1 (the fingerprint a served accept length is matched against)."""
    from helpers.speculate.compare import predicted_chain

    return {r: round(predicted_chain(s.step_top1, draft_tokens), 2) for r, s in result.overall.readings.items()}


def work_folder(path=None) -> Path:
    """`path` (created), or a new temporary folder when None: where the notebook writes its copies."""
    import tempfile

    if path is None:
        return Path(tempfile.mkdtemp(prefix="d2t-lab-08-"))
    p = Path(os.fspath(path))
    p.mkdir(parents=True, exist_ok=True)
    return p


def as_json(rows) -> str:
    """Rows as indented JSON (for a printout)."""
    return json.dumps(rows, indent=2)


def engine_runs_table(folder) -> "pd.DataFrame":
    """One row per recorded engine run under `folder` (each a `run.json` with `server.log` and, when it
    served, `metrics.txt` and `responses.jsonl`): the engine and release, what was changed in the draft,
    whether it started, the accept length three ways (the log's lines pooled, the `/metrics` counters,
    the per-request answers) and the engine's own error line."""
    import pandas as pd

    from helpers.acceptance.sources import normalise
    from helpers.serving.logs import read_log
    from helpers.serving.metrics import read_metrics

    rows = []
    for run in sorted(Path(folder).glob("*/run.json")):
        info, d = json.loads(run.read_text()), run.parent
        row = {"run": info["run"], "engine": f"{info['engine']} {info['release']}", "draft changed": info["change"],
               "started": info["started"], "log (pooled)": None, "/metrics": None, "answers": None,
               "engine's error": info.get("error")}
        if (d / "metrics.txt").exists():
            row["log (pooled)"] = read_log(d / "server.log").summary()["pooled_accept_length"]
            row["/metrics"] = normalise(read_metrics(str(d / "metrics.txt"))).accept_length
            spec = [json.loads(x)["metrics"]["speculative_decoding"] for x in (d / "responses.jsonl").read_text().splitlines()]
            row["answers"] = 1 + sum(s["num_accepted_draft_tokens"] for s in spec) / sum(s["num_spec_steps"] for s in spec)
        rows.append(row)
    return pd.DataFrame(rows)


# -- a sharded checkpoint, fixed by hand ------------------------------------------------------------------
INDEX = "model.safetensors.index.json"


def write_shards(src, dst, shards: int = 2) -> Path:
    """A copy of the one-file draft `src` at `dst` (which must not exist) split into `shards` safetensors
    files with their `model.safetensors.index.json`, as large checkpoints are stored. `src` is only read;
    the mapping tensors go in the last shard (where trainers append them)."""
    from safetensors.torch import save_file

    src, dst = Path(src), Path(dst)
    tensors = _new_copy_of(src, dst)
    names = sorted(tensors, key=lambda k: (k in ("d2t", "t2d"), k))
    per = -(-len(names) // shards)
    weight_map, total = {}, 0
    for s in range(shards):
        part = {k: tensors[k].contiguous() for k in names[s * per:(s + 1) * per]}
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file(part, str(dst / fname))
        weight_map.update({k: fname for k in part})
        total += sum(t.numel() * t.element_size() for t in part.values())
    (dst / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    normal_modes(dst)
    return dst


def shard_of(path, name: str = "d2t") -> str:
    """The shard file that holds tensor `name`, read from the folder's index (the weight_map)."""
    index = json.loads((Path(path) / INDEX).read_text())
    return index["weight_map"][name]


def fix_shard_by_hand(path) -> dict:
    """The hand fix of a sharded draft whose d2t holds absolute ids, in place (run it on a copy): load the one
    shard that holds d2t, write d2t - arange(N) into it, write the shard back, and rewrite the index (its
    weight_map unchanged, `total_size` recounted from the shards). Returns what was done."""
    from safetensors.torch import load_file, save_file

    path = Path(path)
    index = json.loads((path / INDEX).read_text())
    shard = index["weight_map"]["d2t"]
    tensors = load_file(str(path / shard))
    before = tensors["d2t"].clone()
    tensors["d2t"] = (before - torch.arange(before.numel())).contiguous()
    save_file(tensors, str(path / shard))
    normal_modes(path / shard)
    total = 0
    for f in sorted(set(index["weight_map"].values())):
        total += sum(t.numel() * t.element_size() for t in load_file(str(path / f)).values())
    index["metadata"] = {**index.get("metadata", {}), "total_size": total}
    (path / INDEX).write_text(json.dumps(index, indent=2))
    untouched = sorted(set(index["weight_map"].values()) - {shard})
    return {"shard holding d2t": shard, "shards left untouched": untouched,
            "d2t before, first five": before[:5].tolist(), "d2t after, first five": tensors["d2t"][:5].tolist(),
            "index total_size": total}


# -- the real engine -------------------------------------------------------------------------------------------
def engine_run_labels(folder) -> list[str]:
    """One line per recorded run under `folder`: the run, the engine's package and release, when and by what
    it was recorded, and the exact command the engine was started with."""
    out = []
    for run in sorted(Path(folder).glob("*/run.json")):
        info = json.loads(run.read_text())
        out.append(f"{info['run']}: {info.get('package', info['engine'])} (release {info['release']}), recorded "
                   f"{info.get('recorded', '?')} by {info.get('made_by', '?')}, {'real' if info.get('real') else 'synthetic'}"
                   f" run; prompts: {info.get('prompts', '?')}\n    command: {info['command']}")
    return out


def engine_log_lines(folder, run: str) -> list[str]:
    """A recorded run's own log lines: its start-up line, its last `SpecDecoding metrics` line (the accept length
    over the last interval, as vLLM counts it) and the first line of the error it stopped on, those it has."""
    import re

    from helpers.serving.log_lines import ANSI_COLOUR

    lines = ANSI_COLOUR.sub("", (Path(folder) / run / "server.log").read_text(errors="replace")).splitlines()
    start = [ln for ln in lines if "Starting vLLM server" in ln][:1]
    metrics = [ln for ln in lines if "SpecDecoding metrics:" in ln][-1:]
    error = [ln for ln in lines if (" ERROR " in ln or re.match(r"\w+(Error|Exception): ", ln))
             and re.search(r"\w+(Error|Exception): ", ln) and "EngineDeadError" not in ln][:1]
    return start + metrics + error


def engine_checkout() -> Path | None:
    """The checkout whose vLLM engine environment is built (D2T_ENGINE_VENV, else its .venv-engine: `make
    engine-env`), where notebook 08 records live runs of the engine pair's drafts with the engine tests' harness
    (`python -m scripts.record_engine_runs`, run from that checkout); None when there is none (no checkout: an
    installed wheel; or no engine environment): the recorded runs are shown instead. The library itself runs no
    script."""
    root = checkout_root()  # the engine harness lives in the checkout, not in the wheel
    if root is None:
        return None
    venv = Path(os.environ.get("D2T_ENGINE_VENV", root / ".venv-engine"))
    return root if (venv / ".d2t-engine-installed").exists() else None


# -- the whole method on one draft: the engine pair -----------------------------------------------------------
ENGINE_PAIR = "engine_llama"  # in the bundled samples: draft/ and target/, the pair the real engines ran
# the recorded runs, one folder per engine and the release it ran (`Engine.run` in the engine table)
RECORDED = {k: f"engine_runs/{k}-{e.tag}{e.run[0]}" for k, e in ENGINE_TABLE.items() if e.run}


def engine_pair() -> dict[str, Path]:
    """The bundled engine pair's draft and target folders, and the recorded real runs made on it."""
    from helpers.core.paths import bundled_samples

    root = bundled_samples("notebook 08's engine pair")
    return {"draft": root / ENGINE_PAIR / "draft", "target": root / ENGINE_PAIR / "target",
            **{k: root / v for k, v in RECORDED.items()}}


def engine_pair_samples(out, prompts, *, max_prompts: int = 16, max_new_tokens: int = 32) -> tuple[Path, dict]:
    """Samples of the engine pair for `evaluate`: the kit's `capture` on the pair's target, over the first
    `max_prompts` prompts, each answer the target's own greedy continuation of `max_new_tokens` (what a greedy
    server verifies drafts against), the aux layers as vLLM reads the draft's config. Resumes a capture already
    in `out`. Returns (folder, {samples, tokens, ...})."""
    from helpers.model.capture import CaptureSettings, capture
    from helpers.model.target import load_target

    pair = engine_pair()
    target = load_target(pair["target"], device="cpu", dtype=torch.float32)
    settings = CaptureSettings(engine="vllm", draft=pair["draft"], regenerate=True, max_new_tokens=max_new_tokens,
                               max_samples=max_prompts)
    r = capture(target, prompts, out, settings)
    return Path(out), {"samples written": r.written, "already there": r.skipped, "prompts": max_prompts,
                       "new tokens per prompt (at most)": max_new_tokens}


def engine_pair_copies(work) -> dict[str, Path]:
    """The engine pair's draft as made, and the broken copies the real engines were run on: d2t (and t2d) left
    out, and d2t stored as absolute ids (the kept ids). The bundled draft is only read."""
    pair = engine_pair()
    m = load_mapping(pair["draft"])
    work = Path(work)
    return {"healthy": pair["draft"],
            "d2t-missing": write_variant(pair["draft"], work / "pair_d2t_missing", drop=("d2t", "t2d")),
            "d2t-absolute": write_variant(pair["draft"], work / "pair_d2t_absolute", d2t=m.targets("offset"))}


def predicted_per_copy(copies: dict, samples, draft_tokens: int) -> tuple["pd.DataFrame", dict]:
    """Each copy scored with `evaluate` on `samples` under the offset reading (what every engine but llama.cpp
    does with the weights' d2t; no d2t: draft id = target id), and the accept length a chain of `draft_tokens`
    would reach (the chain formula on its per-step top-1). Returns (table, {copy: evaluate result})."""
    import warnings

    import pandas as pd

    from helpers.measure.evaluate import evaluate
    from helpers.speculate.compare import predicted_chain

    results, rows = {}, []
    for name, path in copies.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a copy without d2t is scored as draft id = target id, with a warning
            r = evaluate(path, samples, readings=("offset", "absolute", "none"), steps=draft_tokens, accuracy_topk=1,
                         progress=False)
        results[name] = r
        served = "none" if name == "d2t-missing" else "offset"
        s = r.overall.readings[served]
        rows.append({"copy": name, "reading the engine applies": served,
                     **{f"step {k} top-1 %": round(100 * a, 1) for k, a in enumerate(s.step_top1)},
                     f"predicted accept length (chain of {draft_tokens})": round(predicted_chain(s.step_top1, draft_tokens), 3)})
    return pd.DataFrame(rows).set_index("copy"), results


def _vllm_answers(path: Path) -> dict | None:
    if not path.exists():
        return None
    spec = [json.loads(x)["metrics"]["speculative_decoding"] for x in path.read_text().splitlines() if x.strip()]
    drafts = sum(s["num_spec_steps"] for s in spec)
    acc = sum(s["num_accepted_draft_tokens"] for s in spec)
    return {"requests": len(spec), "drafts": drafts, "accepted": acc}


def served_per_run(vllm_dir=None, llamacpp_dir=None) -> "pd.DataFrame":
    """Every recorded real run of the engine pair, read with the kit's serving readers (`helpers.serving.logs`
    for the log, `helpers.serving.metrics` for the /metrics page; the per-request answers summed): whether it
    started, drafts, draft tokens and accepted tokens (/metrics counters), the pooled accept length three ways,
    the log's last interval mean beside it, and the engine's own error line. One row per run."""
    import pandas as pd

    from helpers.acceptance.sources import normalise
    from helpers.serving.logs import read_log
    from helpers.serving.metrics import read_metrics

    pair = engine_pair()
    vllm_dir, llamacpp_dir = Path(vllm_dir or pair["vllm"]), Path(llamacpp_dir or pair["llamacpp"])
    rows = []
    for run in sorted(vllm_dir.glob("*/run.json")):
        info, d = json.loads(run.read_text()), run.parent
        if info.get("run") == "sampled-t07" or not (d / "server.log").exists():
            continue
        row = {"engine": f"{info.get('package', info['engine'])}", "run": info["run"], "draft changed": info["change"],
               "started": info["started"], "drafts": None, "draft tokens": None, "accepted": None,
               "pooled: /metrics": None, "pooled: answers": None, "pooled: log lines": None,
               "log's last interval mean": None, "engine's error": info.get("error")}
        if (d / "metrics.txt").exists():
            t = read_metrics(str(d / "metrics.txt"))
            a = normalise(t)
            c = t.rows[-1] if t.rows else {}
            row["pooled: /metrics"] = round(a.accept_length, 4)
            for col, key in (("drafts", "drafts"), ("draft tokens", "draft_tokens"), ("accepted", "accepted")):
                if c.get(key) is not None:
                    row[col] = int(c[key])
            ans = _vllm_answers(d / "responses.jsonl")
            if ans and ans["drafts"]:
                row["pooled: answers"] = round(1 + ans["accepted"] / ans["drafts"], 4)
            s = read_log(d / "server.log").summary()
            row["pooled: log lines"] = s["pooled_accept_length"] and round(s["pooled_accept_length"], 4)
            row["log's last interval mean"] = s["last_accept_length"]
        rows.append(row)
    replay = llamacpp_dir / "replay.json"
    if replay.exists():
        info = json.loads(replay.read_text())
        c = info["counters"]
        log = Path(engine_pair()["draft"]).parents[1] / "logs" / "llamacpp.log"
        s = read_log(log).summary() if log.exists() else None
        rows.append({"engine": info.get("package", "llama.cpp"), "run": "healthy (converted to GGUF)",
                     "draft changed": "nothing: the bundled draft through llama.cpp's converter", "started": True,
                     "drafts": c["num_drafts"], "draft tokens": c["num_draft_tokens"], "accepted": c["num_accepted_tokens"],
                     "pooled: /metrics": round(1 + c["num_accepted_tokens"] / c["num_drafts"], 4),
                     "pooled: answers": None,  # llama.cpp's answers carry draft tokens, not drafts
                     "pooled: log lines": s and s["pooled_accept_length"] and round(s["pooled_accept_length"], 4),
                     "log's last interval mean": s and s["last_accept_length"], "engine's error": None})
    return pd.DataFrame(rows).set_index(["engine", "run"])


def engine_free_per_copy(copies: dict, prompts, *, max_prompts: int = 16, max_new_tokens: int = 32,
                         draft_tokens: int = 3) -> tuple["pd.DataFrame", dict]:
    """The engine-free loop (`speculate`, greedy) on the engine pair's target with each copy that an engine serves
    (a copy that crashes or refuses is left out: no loop reproduces a crash), on the prompts the recorded runs
    used, counted the loop's way (every verify step a draft of `draft_tokens`: vLLM's count) and, for the
    healthy copy, as llama.cpp counts (`EngineCounts`: a draft of at most min(K, tokens left - 1), a step without
    one not a draft). Returns (table, {copy: SpecRun})."""
    import pandas as pd

    from helpers.model.target import load_target

    target = load_target(engine_pair()["target"], device="cpu", dtype=torch.float32)
    rows, runs = [], {}
    for name in ("healthy", "d2t-missing"):
        if name not in copies:
            continue
        run = speculate_once(copies[name], target, prompts, max_prompts=max_prompts, max_new_tokens=max_new_tokens,
                             draft_tokens=draft_tokens, engine="llamacpp" if name == "healthy" else "vllm")
        runs[name] = run
        # accepted: drafted tokens the target accepted (the counters' meaning), not SpecRun.accepted_tokens (the tokens
        # verify steps emitted, the target's own one each included)
        rows.append({"copy": name, "counted as": "vLLM (every verify step a draft)", "drafts": run.verify_steps,
                     "draft tokens": run.verify_steps * draft_tokens, "accepted": int(run.accepted_per_position.sum()),
                     "accept length": round(run.mean, 4)})
        ec = run.engine_counts
        if ec is not None and name == "healthy":
            rows.append({"copy": name, "counted as": "llama.cpp (min(K, tokens left - 1) per draft)",
                         "drafts": ec.drafts, "draft tokens": ec.draft_tokens, "accepted": ec.accepted,
                         "accept length": round(ec.accept_length, 4)})
    return pd.DataFrame(rows).set_index(["copy", "counted as"]), runs


def method_per_copy(predicted, pair_runs: dict, served, outcomes) -> "pd.DataFrame":
    """The whole method side by side, one row per copy: the predicted accept length (`predicted_per_copy`), the
    engine-free loop's (vLLM's count; "not run" for a copy the loop leaves out), what vLLM's recorded or live run
    did (its pooled /metrics accept length, or its own error line), and what the engine table says vLLM does with
    the copy (`helpers.teach.lessons.outcomes_for`'s vLLM column)."""
    import pandas as pd

    vllm = served.xs(served.index.get_level_values("engine")[0], level="engine")  # the vLLM runs (listed first)
    rows = []
    for copy in predicted.index:
        run = vllm.loc[copy] if copy in vllm.index else None
        if run is None:
            got = "(no recorded run)"
        elif isinstance(run["engine's error"], str) and run["engine's error"]:
            got = "error: " + run["engine's error"].split(" (at ")[0]
        elif not run["started"]:
            got = "did not start"
        else:
            got = f"{run['pooled: /metrics']:.4f}"
        rows.append({"copy": copy, "predicted": f"{predicted.loc[copy].iloc[-1]:.3f}",
                     "engine-free (vLLM's count)": f"{pair_runs[copy].mean:.4f}" if copy in pair_runs else
                     "not run engine-free",
                     "served by vLLM (pooled, /metrics)": got, "the engine table, vLLM": outcomes.loc[copy, "vLLM"]})
    return pd.DataFrame(rows).set_index("copy")


def fingerprint_table(results: dict, draft_tokens: int) -> "pd.DataFrame":
    """What each wiring bug would show for this draft: per reading of d2t (offset: the mapping loaded; absolute:
    stored absolute ids read as ids, or an HF d2t handed to a reader of absolute ids; none: d2t never loaded),
    the accept length a chain of `draft_tokens` predicts from the healthy copy's per-step top-1."""
    import pandas as pd

    from helpers.speculate.compare import predicted_chain

    r = results["healthy"]
    words = {"offset": "the mapping loaded and read as offsets (healthy)",
             "absolute": "d2t read as target ids (a hand-written test; a GGUF holding offsets in llama.cpp)",
             "none": "d2t never loaded: draft id i proposed as target id i (vLLM's zeros, SGLang without d2t)"}
    rows = [{"reading": k, "what it stands for": words.get(k, k),
             f"predicted accept length (chain of {draft_tokens})": round(predicted_chain(s.step_top1, draft_tokens), 3)}
            for k, s in r.overall.readings.items()]
    return pd.DataFrame(rows).set_index("reading")
