"""The numbers behind notebooks/00_offset_encoding_primer.ipynb: toy vocabularies and failure modes.

Two dozen-token vocabularies with made-up assistant-token counts: `TOY` (target vocab 12, draft
vocab 6), on which the notebook works every example, and `PRACTICE` (10 and 5), on which the first
exercises (`helpers.teach.primer_exercises`) are asked, so that nothing the notebook prints gives an
answer away. Everything random here takes a seed.

- `variants` / `variant_table`: the mapping as it should be and the four ways it goes wrong
  (absolute ids, all zeros, missing, `arange`), each decoded as the engines decode it;
- `bounds`: the numbers behind `0 <= d2t[i] <= V - N` and the leading zero run;
- `sampled_drafts`: seeded draft logits decoded under both readings, with why a row can agree;
- `step0_breakdown`: a real draft's step-0 predictions split by why the absolute reading was right;
- `accuracy_numbers`: what `evaluate`'s columns mean, each recomputed from the others;
- `accept_length_example`: from per-step accuracy to the accept length of a drafted chain;
- `t2d_for_training`: what `t2d` is for (building the training target on the draft vocab);
- `offset_runs`: why a valid `d2t` has far fewer distinct values than entries;
- `engine_propose`: how SGLang, vLLM and TensorRT-LLM turn draft logits into target ids;
- `ENGINE_LINES` / `engine_lines`: the engines' own lines behind those claims, quoted by release (each
  release the engine table's `QUOTED`; the release ranges themselves are `helpers.teach.lessons.version_story`,
  generated from the engine table).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.engines.table import ENGINE_TABLE, QUOTED
from helpers.engines.registry import ENGINE_KEYS, engine_at, engine_key
from helpers.io.mapping import VocabMapping, build_from_frequencies


@dataclass(frozen=True)
class ToyVocab:
    """A target vocab of a few tokens with counts of how often each appeared in assistant turns."""

    tokens: tuple[str, ...] = ("<s>", "</s>", "<pad>", "the", "cat", "sat", "on", "mat", "a", "dog", "ran", ".")
    counts: tuple[int, ...] = (9, 8, 0, 40, 12, 3, 7, 2, 25, 11, 1, 30)
    draft_vocab_size: int = 6

    @property
    def target_vocab_size(self) -> int:
        return len(self.tokens)

    def names(self, ids) -> list[str]:
        """Token strings of target ids (`?` for an id outside the vocab)."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return [self.tokens[i] if 0 <= i < len(self.tokens) else f"?{i}" for i in ids]

    def mapping(self) -> VocabMapping:
        """The reference d2t/t2d, built as SpecForge and speculators build it."""
        return build_from_frequencies(torch.tensor(self.counts), self.draft_vocab_size, self.target_vocab_size)

    def frame(self):
        """The vocabulary as a one-row-per-token table (pandas)."""
        import pandas as pd

        return pd.DataFrame({"token": self.tokens, "count in assistant turns": self.counts}).rename_axis("target id").T


TOY = ToyVocab()
PRACTICE = ToyVocab(
    tokens=("<s>", "</s>", "I", "you", "like", "tea", "and", "milk", "too", "!"),
    counts=(14, 10, 3, 20, 5, 4, 17, 2, 1, 9),
    draft_vocab_size=5,
)


# -- the failure modes --------------------------------------------------------------------------
VARIANTS = ("offsets (correct)", "absolute ids", "all zeros", "missing", "arange")


def variants(toy: ToyVocab = TOY) -> dict:
    """The toy's `d2t` as each variant stores it (`None`: the checkpoint has no d2t)."""
    m = toy.mapping()
    n = toy.draft_vocab_size
    return {
        "offsets (correct)": m.d2t,
        "absolute ids": m.targets("offset"),  # the kept ids themselves
        "all zeros": torch.zeros(n, dtype=torch.int64),
        "missing": None,
        "arange": torch.arange(n, dtype=torch.int64),
    }


def served_targets(d2t: torch.Tensor | None, draft_vocab_size: int) -> torch.Tensor:
    """The target id the engines propose for each draft id: `i + d2t[i]`.

    A checkpoint without `d2t` is served with a zero tensor in its place (vLLM creates the
    parameter as zeros and leaves it so when no weight arrives), i.e. draft id i becomes target id i.
    """
    i = torch.arange(draft_vocab_size, dtype=torch.int64)
    return i if d2t is None else i + d2t


def variant_table(toy: ToyVocab = TOY):
    """One row per variant: d2t as stored, what the engines propose, and how many draft ids come out right.

    "right" means the engines propose the target id the draft id stands for (the i-th kept id,
    read from t2d), i.e. the token the draft model was trained to mean by it.
    """
    import pandas as pd

    m = toy.mapping()
    kept = m.t2d_ids
    n, v = toy.draft_vocab_size, toy.target_vocab_size
    rows = []
    for name, d2t in variants(toy).items():
        served = served_targets(d2t, n)
        right = served == kept
        verdict = "(no d2t)" if d2t is None else (
            VocabMapping(d2t, m.t2d).verdict().encoding if int(d2t.max()) < v else "out of range")
        rows.append({
            "variant": name,
            "d2t as stored": "-" if d2t is None else str(d2t.tolist()),
            "engines propose i + d2t[i]": str(served.tolist()),
            "tokens": " ".join(toy.names(served)),
            "draft ids right": f"{int(right.sum())} of {n}",
            "which": str(torch.nonzero(right).flatten().tolist()),
            "verdict (with t2d)": verdict,
        })
    return pd.DataFrame(rows).set_index("variant")


def all_zero_cases(toy: ToyVocab = TOY):
    """All-zero d2t in three checkpoints that differ only in vocab sizes and t2d: when is it right?

    All zeros maps draft id i to target id i, so it is right exactly when the kept ids are
    0..N-1: with the full vocab (N = V) always, with a reduced vocab only if the N most frequent
    tokens happen to be the N lowest ids. `t2d` (or the counts) tells which.
    """
    import pandas as pd

    n, v = toy.draft_vocab_size, toy.target_vocab_size
    full = torch.ones(v, dtype=torch.bool)
    low = torch.zeros(v, dtype=torch.bool)
    low[:n] = True
    cases = {
        "full vocab (N = V)": (v, full),
        "reduced vocab, t2d from the counts": (n, toy.mapping().t2d),
        "reduced vocab, t2d keeps 0..N-1": (n, low),
    }
    rows = []
    for name, (size, t2d) in cases.items():
        m = VocabMapping(torch.zeros(size, dtype=torch.int64), t2d)
        kept = m.t2d_ids
        rows.append({
            "case": name, "N": size, "V": v, "t2d keeps": str(kept.tolist()),
            "t2d keeps exactly 0..N-1": bool(torch.equal(kept, torch.arange(size))),
            "offset reading (i + 0) equals t2d": bool(m.reading("offset").matches_t2d),
        })
    return pd.DataFrame(rows).set_index("case")


def bounds(m: VocabMapping) -> dict:
    """The numbers behind `0 <= d2t[i] <= V - N` and the leading zero run of a mapping with t2d."""
    kept = m.t2d_ids
    n, v = m.draft_vocab_size, m.target_vocab_size
    k = m.leading_zero_run
    missing = torch.nonzero(~m.t2d).flatten()
    return {
        "V": v, "N": n, "V - N": v - n,
        "min d2t": int(m.d2t.min()), "max d2t": int(m.d2t.max()),
        "d2t[i] == V - N from draft id": int(torch.nonzero(m.d2t == v - n).flatten()[0]) if bool((m.d2t == v - n).any()) else None,
        "non-decreasing": m.non_decreasing,
        "leading zero run K": k,
        "lowest target id not kept": int(missing[0]) if missing.numel() else None,
        "kept[0..K-1] == 0..K-1": bool(torch.equal(kept[:k], torch.arange(k))),
    }


def sampled_drafts(m: VocabMapping, toy: ToyVocab = TOY, positions: int = 10, seed: int = 0):
    """Seeded draft logits at `positions` positions, decoded under both readings (pandas).

    The draft's choice is right by construction here (the logits stand for a perfect draft),
    so a row is right under the absolute reading exactly when `d2t[i] == i + d2t[i]`, i.e. i = 0.
    """
    import pandas as pd

    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(positions, m.draft_vocab_size, generator=g)
    draft = logits.argmax(-1)
    off, ab = m.targets("offset")[draft], m.targets("absolute")[draft]
    return pd.DataFrame({
        "draft id (argmax)": draft.tolist(),
        "offset token": toy.names(off),
        "absolute token": toy.names(ab),
        "absolute right": (off == ab).tolist(),
    }).rename_axis("position")


def step0_breakdown(checkpoint, samples, *, max_samples: int | None = None) -> dict:
    """A real draft's step-0 top-1 predictions, with why the absolute reading was ever right.

    Step 0 does not depend on the reading (no drafted token is fed back yet), so one pass gives
    the draft id at every labelled position: correct under the absolute reading means
    `d2t[j] == label`. Either j = 0 (where both readings give the same id) and the draft was
    right, or j > 0 and `d2t[j]` happens to be the label although the draft meant another token.
    """
    from helpers.measure.predict import draft_d2t, draft_predictions
    from helpers.model.draft import load_draft

    model = load_draft(checkpoint, device="cpu")
    d2t = draft_d2t(model).cpu()
    kept = d2t + torch.arange(d2t.numel())
    n_lab = off = ab = ab0 = abj = chose0 = none = 0
    for p in draft_predictions(model, samples, steps=1, reading="offset", max_samples=max_samples):
        mask = p.mask[:, 0]
        target = p.pred[:, 0, 0][mask]
        label = p.labels[:, 0][mask]
        j = torch.searchsorted(kept, target)  # the offset reading is one-to-one: back to the draft id
        n_lab += int(mask.sum())
        off += int((target == label).sum())
        hit = d2t[j] == label
        ab += int(hit.sum())
        ab0 += int((hit & (j == 0)).sum())
        abj += int((hit & (j > 0)).sum())
        chose0 += int((j == 0).sum())
        none += int((j == label).sum())  # the none reading proposes target id j itself
    return {
        "labelled positions": n_lab,
        "offset right": off, "offset top-1 %": round(100 * off / max(n_lab, 1), 1),
        "absolute right": ab, "absolute top-1 %": round(100 * ab / max(n_lab, 1), 1),
        "absolute right at draft id 0": ab0,
        "absolute right by coincidence (j > 0)": abj,
        "positions where the draft chose draft id 0": chose0,
        "d2t[0] (draft id 0's target under both readings)": int(d2t[0]),
        "draft ids whose d2t[j] is itself a kept id": int(torch.isin(d2t, kept).sum()),
        "none right (draft id j equal to the real token)": none,
        "none top-1 %": round(100 * none / max(n_lab, 1), 1),
        "draft vocab N": int(d2t.numel()),
        "target vocab V": int(model.config.vocab_size) if getattr(model.config, "vocab_size", None) else None,
    }


def accuracy_numbers(result):
    """The numbers `evaluate` prints, per reading, with the identity that ties them (pandas).

    top-1 % = correct / labelled positions; coverage % = share of the labels this reading can
    produce at all (its ceiling: a label outside the ids it maps to can never be matched);
    covered top-1 % = top-1 among those labels only; so top-1 = coverage x covered top-1. The
    figure's "coverage ceiling" is the share of labels that are kept tokens (t2d True).
    """
    import pandas as pd

    rows = []
    for r, sc in result.overall.readings.items():
        rows.append({"reading": r, "labelled positions": sc.tokens, "top-1 %": round(100 * sc.top1, 1),
                     "coverage %": round(100 * sc.coverage, 1), "covered top-1 %": round(100 * sc.covered_top1, 1),
                     "coverage x covered top-1 %": round(100 * sc.coverage * sc.covered_top1, 1)})
    return pd.DataFrame(rows).set_index("reading")


def accept_length_example(checkpoint, samples, *, draft_tokens: int = 3, max_samples: int | None = None):
    """Per-step top-1 of a real draft turned into the accept length of a chain of `draft_tokens` (pandas).

    Drafted position k is accepted only if positions 0..k-1 were, so with per-step rates a_k the
    expected accept length is 1 + a_0 + a_0 a_1 + ... (the 1 is the target's own token). The
    rates are `evaluate`'s step top-1 (step k fed the draft's own earlier guesses).
    """
    import pandas as pd

    from helpers.measure.evaluate import evaluate
    from helpers.speculate.compare import predicted_chain

    r = evaluate(checkpoint, samples, readings=("offset", "absolute"), steps=draft_tokens, accuracy_topk=1,
                 max_samples=max_samples, progress=False)
    rows = []
    for name, sc in r.overall.readings.items():
        a = [float(x) for x in sc.step_top1]
        terms, prod = ["1"], 1.0
        for x in a:
            prod *= x
            terms.append(f"{prod:.3f}")
        rows.append({"reading": name, **{f"a_{k}": round(x, 3) for k, x in enumerate(a)},
                     "1 + a_0 + a_0 a_1 + ...": " + ".join(terms),
                     "accept length": round(predicted_chain(a, draft_tokens), 2)})
    return pd.DataFrame(rows).set_index("reading")


def t2d_for_training(toy: ToyVocab = TOY, positions: int = 6, seed: int = 0):
    """How a trainer uses t2d: the target's logits, cut down to the draft vocab (pandas).

    At each position the target model's logits over all V ids become the training target over
    the N draft ids by keeping the columns where t2d is True; positions whose target argmax is
    not kept cannot be learnt and are masked out of the loss.
    """
    import pandas as pd

    m = toy.mapping()
    g = torch.Generator().manual_seed(seed)
    target_logits = torch.randn(positions, toy.target_vocab_size, generator=g)  # [T, V]
    top = target_logits.argmax(-1)
    on_draft = target_logits[:, m.t2d]  # [T, N]: the columns of the kept ids, in ascending order
    draft_top = on_draft.argmax(-1)
    return pd.DataFrame({
        "target argmax": toy.names(top),
        "kept (t2d[argmax])": m.t2d[top].tolist(),
        "argmax over the draft vocab: draft id": draft_top.tolist(),
        "= token": toy.names(m.t2d_ids[draft_top]),
        "counts in the loss": m.t2d[top].tolist(),
    }).rename_axis("position")


# -- the red herring ---------------------------------------------------------------------------
def offset_runs(m: VocabMapping) -> dict:
    """Why a valid d2t has far fewer distinct values than entries.

    `d2t[i+1] == d2t[i]` exactly when kept ids i and i+1 are consecutive target ids, so
    distinct values = N - (number of consecutive kept pairs). Returns the numbers and the check.
    """
    n = m.draft_vocab_size
    same = (m.d2t[1:] == m.d2t[:-1])  # [N-1]
    kept = m.targets("offset")
    consecutive = (kept[1:] - kept[:-1]) == 1
    longest, cur, longest_value = 1, 1, int(m.d2t[0])
    for i, s in enumerate(same.tolist()):
        cur = cur + 1 if s else 1
        if cur > longest:
            longest, longest_value = cur, int(m.d2t[i + 1])
    return {
        "draft_vocab": n,
        "distinct_values": m.distinct_values,
        "repeated_neighbours": int(same.sum()),
        "consecutive_kept_pairs": int(consecutive.sum()),
        "identity_holds": bool(torch.equal(same, consecutive)) and m.distinct_values == n - int(consecutive.sum())
        if m.non_decreasing else False,
        "longest_run": longest,
        "longest_run_value": longest_value,
        "leading_zero_run": m.leading_zero_run,
        "offset_distinct_targets": m.reading("offset").distinct_targets,
        "absolute_distinct_targets": m.reading("absolute").distinct_targets,
    }


# -- what the engines do ------------------------------------------------------------------------
def engine_propose(draft_logits: torch.Tensor, d2t: torch.Tensor, engine: str, target_vocab_size: int) -> torch.Tensor:
    """The target id each engine proposes from draft logits [B, N] (greedy), in our own words.

    - sglang: builds `hot_token_id = d2t + arange(N)` once at load (t2d is skipped) and maps the
      chosen draft id through it;
    - vllm: scatters the draft logits into a target-vocab row of -inf at columns `arange(N) + d2t`,
      then picks in target space (t2d is skipped);
    - tensorrt-llm: picks the draft id, then adds `d2t[draft_id]` to it;
    - tokenspeed: SGLang's way (`hot_token_id = d2t + arange(N)` at load);
    - llama.cpp: its converter stores `arange(N) + d2t` (absolute ids) in the GGUF, and the draft's
      logits are set into a target-vocab row of -inf at those ids.
    """
    n = d2t.numel()
    way = engine_at(engine_key(engine)).value("d2t.apply")  # 'tensorrt-llm' -> 'trtllm'; the table's rule
    if way == "hot-token-id":
        hot_token_id = d2t + torch.arange(n)  # [N]
        return hot_token_id[draft_logits.argmax(-1)]
    if way == "scatter":
        full = draft_logits.new_full((*draft_logits.shape[:-1], target_vocab_size), float("-inf"))  # [B, V]
        full[..., torch.arange(n) + d2t] = draft_logits
        return full.argmax(-1)
    if way == "absolute-ids":
        full = draft_logits.new_full((*draft_logits.shape[:-1], target_vocab_size), float("-inf"))  # [B, V]
        full[..., d2t + torch.arange(n)] = draft_logits  # the GGUF's d2t: absolute ids, written at conversion
        return full.argmax(-1)
    if way == "add-after-pick":
        draft = draft_logits.argmax(-1)
        return d2t[draft] + draft
    raise ValueError(f"the engine table has no d2t.apply rule for {engine!r} ({way!r}); engines: {ENGINE_KEYS}")


def decode_table(m: VocabMapping, toy: ToyVocab = TOY):
    """One row per draft id: d2t, and the target id and token under each reading (pandas)."""
    import pandas as pd

    off, ab = m.targets("offset"), m.targets("absolute")
    kept = torch.nonzero(m.t2d).flatten() if m.t2d is not None else None
    return pd.DataFrame(
        {
            "draft id": range(m.draft_vocab_size),
            "d2t": m.d2t.tolist(),
            "offset: i + d2t[i]": off.tolist(),
            "offset token": toy.names(off),
            "absolute: d2t[i]": ab.tolist(),
            "absolute token": toy.names(ab),
            "t2d's i-th True id": kept.tolist() if kept is not None and kept.numel() == m.draft_vocab_size else None,
        }
    ).set_index("draft id")


# -- the engines' own lines ---------------------------------------------------------------------
def quoted(source: str, file: str, line: int, text: str, what: str) -> tuple:
    """One quotation: (engine, release, file, line number, the line as released, what it shows), its engine
    and release those of the engine table's `QUOTED[source]` (the release whose file was read)."""
    q = QUOTED[source]
    return ENGINE_TABLE[q.engine].name, q.release, file, line, text, what


# Short quotations, one line each, of the released code read for this kit (each release: the engine table's
# QUOTED); tests/test_primer.py compares each with the unpacked wheel when it is at hand. TensorRT-LLM is not
# quoted: no release of it was read (only a repository snapshot).
ENGINE_LINES = (
    quoted("sglang", "sglang/srt/models/llama_eagle3.py", 352,
           "self.hot_token_id = loaded_weight + torch.arange(loaded_weight.shape[0])",
           "d2t is read as offsets: hot_token_id = d2t + arange(N)"),
    quoted("sglang", "sglang/srt/models/llama_eagle3.py", 355,
           'if "t2d" in name:', "t2d is skipped when loading (the next line is `continue`)"),
    quoted("sglang", "sglang/srt/speculative/eagle_worker_v2.py", 758,
           "topk_index = self.hot_token_id[topk_index]", "a drafted draft id becomes a target id by indexing hot_token_id"),
    quoted("sglang", "sglang/srt/layers/vocab_parallel_embedding.py", 517,
           "# located async assert instead of a silent OOB embedding gather (tp=1 does not mask).",
           "a line behind the engine table's row for an id past the target vocab, setting one GPU (tp = 1): the "
           "whole story is the version story's topic for that id (section 7 shows it with every line it rests on)"),
    quoted("sglang", "sglang/srt/models/kimi_k25_eagle3.py", 437,
           'if name == "d2t" or name.endswith(".d2t"):', "the MLA draft reads d2t the same way (exact name)"),
    quoted("vllm.zeros", "vllm/model_executor/models/llama_eagle3.py", 305,
           "torch.zeros(self.config.draft_vocab_size, dtype=torch.long),",
           "the mapping parameter starts as zeros: a d2t that never arrives stays the identity"),
    quoted("vllm", "vllm/model_executor/models/llama_eagle3.py", 339,
           "if self.config.draft_vocab_size != target_vocab_size:",
           "the condition under which the parameter is built: which releases build it for a full-vocab draft, and "
           "what a d2t stored in one meets, is the version story's topic 'the mapping parameter of a full-vocab "
           "draft' (engine table rule d2t.param)"),
    quoted("vllm", "vllm/model_executor/models/llama_eagle3.py", 429,
           'name = name.replace("d2t", "draft_id_to_target_id")', "the weight d2t is loaded into that parameter"),
    quoted("vllm", "vllm/model_executor/models/llama_eagle3.py", 386,
           "targets = base + self.draft_id_to_target_id", "d2t is read as offsets: targets = arange(N) + d2t"),
    quoted("vllm", "vllm/model_executor/models/llama_eagle3.py", 394,
           "logits_new[:, targets] = logits", "draft logits are scattered into a row of V target columns"),
)


def engine_lines(engine: str | None = None):
    """The quoted engine lines as a table (pandas): engine, release, file:line, the line, what it shows."""
    import pandas as pd

    rows = [{"engine": e, "release": r, "file:line": f"{f}:{n}", "line": text, "what it shows": what}
            for e, r, f, n, text, what in ENGINE_LINES if engine is None or e.lower() == engine.lower()]
    return pd.DataFrame(rows)
