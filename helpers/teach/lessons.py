"""The teaching notebooks' lessons that are generated, each in one place: notebook 00 shows them, notebook 08
links to 00 instead of repeating them.

- `version_story`: what each engine does, release range by release range, for the mapping and the
  EAGLE-3.1 / MLA switches, generated from `helpers.engines.table` (so it cannot drift from the
  doctor's rules): every range the table holds, each line naming its engine;
- `MLA_RULE`, `MLA_LINES`, `mla_lesson`: the family rule "every MLA draft: the same d2t encoding", with
  both engines' MLA d2t lines quoted from their released files;
- `on_set` / `said`: the words that follow every printed number: the sample set and its size;
- `tree_lesson`: SGLang's tree (steps / topk / num-draft-tokens) worked from a measured rank table with
  the kit's own expectation (`helpers.acceptance.prediction.predict`, `helpers.acceptance.tree.build_tree`),
  and a serving log's figure set beside it;
- `shared_passages`: the passages two texts have in common (the test that no lesson is told twice).
"""
from __future__ import annotations

import re
from pathlib import Path

from helpers.engines.outcomes import RESULT_WORDS, Serve, Span
from helpers.engines.table import ENGINE_TABLE, QUOTED, Engine

# -- the version story -----------------------------------------------------------------------------------
# (kind, key, what it is about): the outcomes and rules the notebooks teach, in the table's own keys
STORY = (
    ("outcome", "d2t-missing.error", "a checkpoint without d2t, reduced draft vocab"),
    ("outcome", "d2t.wrong-ids", "a d2t whose ids i + d2t[i] are all below V but wrong (all zeros; absolute ids or "
                                 "arange only while every i + d2t[i] stays below V)"),
    ("outcome", "d2t.past-vocab", "a d2t sending some i + d2t[i] to V or past (absolute ids or arange of most real "
                                  "drafts: `past_vocab_counts` counts them)"),
    ("outcome", "t2d-mismatch.error", "a t2d that disagrees with d2t"),
    ("rule", "d2t.param", "the mapping parameter of a full-vocab draft (draft_vocab_size == vocab_size)"),
    ("rule", "fc_norm", "EAGLE-3.1 fc_norm (the draft's own config)"),
    ("rule", "norm_output", "EAGLE-3.1 norm_output (the draft's own config)"),
    ("rule", "fc_norm.speculators", "fc_norm in a speculators-format config"),
    ("rule", "norm_output.speculators", "norm_output in a speculators-format config"),
    ("rule", "mla", "an MLA draft (DeepSeek-V3 / Kimi targets)"),
    ("rule", "mla.detect", "recognising a kimi_k2 draft as MLA"),
)
RULE_WORDS = {
    "reads": "reads it (builds the module, honours the switch)",
    "absent": "has no module for it (its weights are dropped or refused, the switch ignored)",
    "loads-unused": "loads the weights but never applies them",
    "misses": "does not recognise it (served as a Llama-attention draft)",
    # d2t.param
    "always": "builds it for every draft, a full-vocab one included (created as zeros, d2t loaded into it)",
    "reduced-only": "builds it only when draft_vocab_size differs from the target's vocab: a full-vocab draft gets "
                    "none (no mapping: draft id = target id)",
}
ACCEPT_WORDS = {"about-1": "accept length about 1", "at-most": "accept length at most the trained one",
                "unknown": "accept length the files cannot tell", "as-trained": "accept length as trained"}


def release_range(engine: Engine, span: Span) -> str:
    """The span's releases in words, its open ends closed with the oldest / newest release read."""
    if engine.snapshot and not engine.releases:
        return f"at repository commit {engine.snapshot} (no release read)"
    tag = engine.tag
    first, last = engine.releases[0], engine.releases[-1]
    since, until = span.since or first, span.until or last
    if span.since is None and span.until is None:
        return f"every release read, {tag}{first} to {tag}{last}"
    return f"{tag}{since} to {tag}{until}" + (" (newest read)" if span.until is None else "")


def _value_words(value) -> str:
    if isinstance(value, Serve):
        words = RESULT_WORDS[value.result]
        if value.accept:
            words += f", {ACCEPT_WORDS[value.accept]}"
        return words + (f' ("{value.says}")' if value.says else "")
    return RULE_WORDS.get(value, str(value))


# -- settings: the engine table's `Engine.settings` -------------------------------------------------------------
# Where the released code splits an outcome row by setting, the table says so (`helpers.engines.table.Setting`):
# which setting its row holds for, and what serving does in each other one. Rows the table does not split hold for
# every setting as far as the code read says; the story labels them so.
ANY_SETTING = "any setting (no split in the code read)"

# The released lines each setting of a split row rests on, quoted (file, line, the line as released) from the
# engine's QUOTED release, keyed by (engine key, outcome key, the table's setting name); tests/test_teaching_one_story
# compares them with the unpacked wheel when it is at hand, and each key with the table's settings.
SETTING_LINES = {
    ("sglang", "d2t.past-vocab", "one GPU (tp = 1), or CPU"): (
        ("sglang/srt/speculative/eagle_worker_v2.py", 758, "topk_index = self.hot_token_id[topk_index]"),
        ("sglang/srt/layers/vocab_parallel_embedding.py", 517,
         "# located async assert instead of a silent OOB embedding gather (tp=1 does not mask)."),
        ("sglang/srt/layers/quantization/unquant.py", 540, "return F.embedding(input_, layer.weight)")),
    ("sglang", "d2t.past-vocab", "tensor parallel (tp > 1)"): (
        ("sglang/srt/layers/vocab_parallel_embedding.py", 499,
         "# Map out-of-shard ids to index 0, gather, then zero those rows."),
        ("sglang/srt/layers/vocab_parallel_embedding.py", 512,
         "output_parallel.masked_fill_(input_mask.unsqueeze(-1), 0)")),
}


def _setting_of(engine: Engine, key: str) -> tuple[str, str]:
    """(the setting the engine table's `outcomes[key]` row holds for, how the code behaves in it)."""
    own = next((st for st in engine.settings.get(key, ()) if st.spans is None), None)
    return (own.name, own.how) if own else (ANY_SETTING, "")


def version_story(engines=None) -> list[dict]:
    """One row per (engine, topic, release range, setting) for the topics in `STORY`: engine, releases, setting,
    topic, what it does, the source (the PR, release note or run the table cites). Every row is the engine table's:
    an outcome row the table splits by setting (`Engine.settings`) is labelled with the setting it holds for and
    followed by the other settings' rows (`split` True: a `Setting`'s spans, not the `outcomes` row)."""
    rows = []
    for key in engines or ENGINE_TABLE:
        e = ENGINE_TABLE[key]
        for kind, name, topic in STORY:
            table = e.outcomes if kind == "outcome" else e.rules
            settings = [(*_setting_of(e, name), table.get(name) or (), False)]
            if kind == "outcome":
                settings += [(st.name, st.how, st.spans, True) for st in e.settings.get(name, ())
                             if st.spans is not None]
            for setting, how, spans, split in settings:
                for sp in spans:
                    if sp.value is None:
                        continue
                    rows.append({"engine": e.name, "releases": release_range(e, sp), "topic": topic,
                                 "setting": setting,
                                 "what it does": _value_words(sp.value) + (f": {how}" if how else ""),
                                 "source": sp.pr or "", "key": name, "split": split})
    return rows


def past_vocab_story():
    """The one story of an id past the target vocab (d2t.past-vocab), engine by engine, release by release,
    setting by setting: the version story's rows for that key (pandas)."""
    import pandas as pd

    rows = [r for r in version_story() if r["key"] == "d2t.past-vocab"]
    return pd.DataFrame(rows).drop(columns=["key", "topic", "split"]).set_index(["engine", "setting"])


def past_vocab_lines():
    """The released lines each setting of the engine table's split rows rests on (pandas): engine, release, setting,
    file:line, line."""
    import pandas as pd

    rows = []
    for (key, _name, setting), lines in SETTING_LINES.items():
        q = QUOTED[key]
        rows.extend({"engine": ENGINE_TABLE[key].name, "release": q.label, "setting": setting,
                     "file:line": f"{f}:{n}", "line": text} for f, n, text in lines)
    return pd.DataFrame(rows)


def past_vocab_counts(path) -> dict:
    """How far a stored d2t, served as it is (i + d2t[i]), reaches: N, V, the largest id and how many draft ids
    land at V or past (the `d2t.past-vocab` rows apply when that count is above zero, `d2t.wrong-ids` otherwise)."""
    from helpers.io.checkpoint import load_mapping

    m = load_mapping(path)
    served = m.targets("offset")
    v = m.target_vocab_size
    return {"N": m.draft_vocab_size, "V": v, "largest i + d2t[i]": int(served.max()),
            "draft ids at V or past": int((served >= v).sum()),
            "outcome key": "d2t.past-vocab" if int(served.max()) >= v else "d2t.wrong-ids"}


def version_story_lines(engines=None) -> list[str]:
    """The story as sentences, each naming its engine and its releases."""
    return [f"{r['engine']} {r['releases']}" + (f" ({r['setting']})" if r["setting"] != ANY_SETTING else "")
            + f": {r['topic']}: {r['what it does']}" for r in version_story(engines)]


def version_story_table(engines=None):
    """The story as a table (pandas), grouped by topic."""
    import pandas as pd

    t = pd.DataFrame(version_story(engines)).drop(columns=["key", "split"])
    return t.set_index(["topic", "engine", "setting"])


def releases_read() -> dict[str, str]:
    """Per engine, the releases whose code was read (a release not listed was not read)."""
    return {e.name: (", ".join(f"{e.tag}{r}" for r in e.releases) if e.releases else f"commit {e.snapshot}")
            for e in ENGINE_TABLE.values()}


# -- the MLA family rule -----------------------------------------------------------------------------------
MLA_RULE = ("Every MLA draft, in every engine that serves one, uses the same d2t encoding as a Llama-attention "
            "draft: d2t is loaded by its exact name, read as offsets (target = i + d2t[i]), and t2d is skipped. "
            "An MLA draft changes the attention weights and the class an engine builds, never the mapping.")
# (engine, package and release, file in that release, line number, the line as released, what it shows):
# each read in the released package's file (the engine table's QUOTED: SGLang's wheel, vLLM's CPU build in the
# engine environment); tests/test_teaching.py compares each with the file when it is at hand.
MLA_LINES = tuple(
    (ENGINE_TABLE[QUOTED[source].engine].name, QUOTED[source].label, file, line, text, what)
    for source, file, line, text, what in (
        ("sglang", "sglang/srt/models/kimi_k25_eagle3.py", 437,
         'if name == "d2t" or name.endswith(".d2t"):', "SGLang's MLA draft (Kimi-K2.5) picks d2t out by its name"),
        ("vllm.cpu", "vllm/model_executor/models/deepseek_eagle3.py", 379,
         'name = name.replace("d2t", "draft_id_to_target_id")', "vLLM's MLA draft loads d2t into the mapping parameter"),
        ("vllm.cpu", "vllm/model_executor/models/deepseek_eagle3.py", 346,
         "targets = base + self.draft_id_to_target_id", "and reads it as offsets: targets = arange(N) + d2t"),
    ))


def mla_lesson():
    """The MLA lines as a table (pandas): engine, release, file:line, the line, what it shows."""
    import pandas as pd

    return pd.DataFrame([{"engine": e, "release": r, "file:line": f"{f}:{n}", "line": text, "what it shows": what}
                         for e, r, f, n, text, what in MLA_LINES])


# -- every number with its set -------------------------------------------------------------------------------
def on_set(result) -> str:
    """'on the validation split (64 samples, 1,536 tokens)': the set an `evaluate` result was scored on."""
    name = Path(str(result.samples)).name
    where = "the validation split" if name in ("val", "validation") else f"the samples in {name}"
    part = result.overall
    return f"on {where} ({part.samples:,} samples, {part.tokens:,} tokens)"


def said(quantity: str, value, where: str) -> str:
    """One printed number in the form every teaching cell uses: 'QUANTITY: VALUE, WHERE'."""
    return f"{quantity}: {value}, {where}"


SAID = re.compile(r"^(?P<quantity>[^:\n]+): (?P<value>[\d.,]+ ?%?), (?P<where>on [^\n]+)$", re.MULTILINE)


# -- the worked tree -------------------------------------------------------------------------------------------
def tree_lesson(result, drafting, reading: str | None = None) -> dict:
    """SGLang's tree for `drafting` from `result`'s measured rank table, with the kit's own expectation.

    Returns the rank table (pandas, depth x rank), the kept nodes (pandas: depth, the ranks along the path,
    path probability), the expectation `1 + sum of the kept nodes' path probabilities` and the
    `Prediction` it equals, and the chain of the same depth for comparison.
    """
    import pandas as pd

    from helpers.acceptance.drafting import Drafting
    from helpers.acceptance.tree import build_tree

    p = result.prediction(drafting, reading)
    tree = build_tree([list(r) for r in p.q], drafting.steps, drafting.topk, drafting.num_draft_tokens)
    paths = {0: ()}
    for i in range(1, tree.nodes + 1):
        paths[i] = paths[int(tree.parent[i])] + (int(tree.rank[i]),)
    nodes = pd.DataFrame([{"node": i, "depth": int(tree.depth[i]), "ranks on the path": str(list(paths[i])),
                           "path probability": round(float(tree.prob[i]), 4)} for i in range(1, tree.nodes + 1)])
    # one numbering in both tables: depths 1-based (1 = the first drafted token, as in the nodes' depth), ranks
    # 0-based (rank 0 = the draft's top choice, as in the ranks on a path)
    ranks = pd.DataFrame(p.q, columns=[f"rank {r}" for r in range(drafting.topk)]).round(4)
    ranks.index = pd.RangeIndex(1, len(ranks) + 1, name="depth d (1 = first drafted token = position 0; ranks 0-based, 0 = top choice)")
    chain = result.prediction(Drafting.chain(drafting.steps), reading)
    return {"prediction": p, "tree": tree, "rank_table": ranks, "nodes": nodes.set_index("node"),
            "expected": tree.expected(), "chain": chain}


# -- one lesson, one place -------------------------------------------------------------------------------------
def normalise(text: str) -> str:
    """Lower case, markdown marks and runs of white space folded, for comparing two texts."""
    text = re.sub(r"[`*_#|>]", " ", text.lower())
    return re.sub(r"\s+", " ", text).strip()


def shared_passages(a: str, b: str, at_least: int = 120) -> list[str]:
    """The passages of `b` (normalised) of `at_least` characters or more that also appear in `a`."""
    a, b = normalise(a), normalise(b)
    if len(b) < at_least:
        return []
    seen = {a[i:i + at_least] for i in range(0, max(len(a) - at_least + 1, 0))}
    found, i = [], 0
    while i <= len(b) - at_least:
        if b[i:i + at_least] in seen:
            j = i + at_least
            while j < len(b) and b[i:j + 1] in a:
                j += 1
            found.append(b[i:j])
            i = j
        else:
            i += 1
    return found


# -- the words behind every accept-length number ----------------------------------------------------------------
# Each defined once; a notebook prints the ones a number needs where that number first appears (`define`).
DEFINITIONS = {
    "verify step": "one target forward after the prefill, checking one draft; the prefill emits the first new "
                   "token itself, so a prompt generating T new tokens takes at most T - 1 verify steps (T - 1 when "
                   "each accepts nothing, fewer as drafts are accepted)",
    "draft": "a verify step that carried drafted tokens (vLLM's counter spec_decode_num_drafts, llama.cpp's "
             "drafts); NOT a drafted token. A chain of K drafts K tokens per draft, except in llama.cpp, whose draft "
             "near the end of a request holds at most min(K, tokens left - 1) tokens and whose last step drafts none "
             "(a plain decode, not a draft: helpers.engines.counting)",
    "draft tokens": "the tokens drafted, summed over drafts (vLLM's spec_decode_num_draft_tokens, llama.cpp's "
                    "draft_n): K x drafts for a chain of K, fewer in llama.cpp near the end of a request",
    "accept length": "1 + accepted draft tokens / drafts: tokens emitted per verify step that carried a draft, the "
                     "target's own token (correction or bonus) counted, so never below 1",
    "position j": "a drafted token's place in its draft, counted from 0: position 0 is the first drafted token (evaluate's "
                  "step 0, a_0 in the chain formula, the first value of vLLM's per-position list, depth 1 of a tree: a "
                  "tree's depth d is position d - 1); ranks count from 0 too (rank 0 = the draft's top choice)",
    "unconditional rate at position j": "drafts whose position j was accepted / all drafts (vLLM's log 'Per-position "
                                        "acceptance rate', speculate's per_position_unconditional); it can only fall "
                                        "with j, and accept length = 1 + the sum over j",
    "conditional rate at position j": "drafts whose position j was accepted / drafts whose position j - 1 was "
                                      "(all drafts for j = 0; speculate's per_position_conditional): the chance a "
                                      "step accepts given every earlier one did; unconditional_j = the product of "
                                      "conditional_0..conditional_j",
    "per-step top-1 (evaluate)": "evaluate's step-k accuracy: positions where the draft's step-k guess, fed its "
                                 "own earlier guesses, is the real token, over ALL labelled positions (not only "
                                 "where step k - 1 was right); the chain formula 1 + a_0 + a_0 a_1 + ... uses it "
                                 "as the conditional rate, which assumes a step's hits do not depend on the earlier "
                                 "ones",
    "interval mean": "what one engine log line prints: 1 + accepted / drafts over the interval since the previous "
                     "such line (vLLM's 'SpecDecoding metrics' line, 'Mean acceptance length', every "
                     "VLLM_LOG_STATS_INTERVAL seconds; SGLang's 'Decode batch' line, 'accept len', whose counts reset "
                     "at each line); the last line covers only the last interval, and the plain mean of a log's "
                     "interval means weighs each interval the same however many drafts it held",
    "pooled mean": "1 + accepted / drafts over a whole run (all its log lines' counts summed, the /metrics "
                   "counters, or every answer's counts summed): each draft weighs the same, so it is not the mean "
                   "of the interval means",
}


# where notebook 00 prints each definition (`define`), so notebook 08 names them without repeating them
DEFINED_IN = "notebook 00, section 4"


def recall(*names: str) -> str:
    """One line naming where `names` are defined (`DEFINED_IN`), for a notebook read after that one: each
    definition is printed once, where its number first appears, never twice in other words."""
    unknown = [n for n in names if n not in DEFINITIONS]
    if unknown:
        raise KeyError(f"no definition of {unknown}; defined: {sorted(DEFINITIONS)}")
    return f"(the numbers below as defined in {DEFINED_IN}: {', '.join(names)})"


def define(*names: str) -> str:
    """The definitions of `names`, one per line (markdown bullets), in the words of `DEFINITIONS`."""
    unknown = [n for n in names if n not in DEFINITIONS]
    if unknown:
        raise KeyError(f"no definition of {unknown}; defined: {sorted(DEFINITIONS)}")
    return "\n".join(f"- {n}: {DEFINITIONS[n]}" for n in names)


def rate_identity(run):
    """A `SpecRun`'s per-position rates both ways, with the identities between them checked on its counts
    (pandas, one row per drafted position): accepted count, conditional, unconditional, the running product of
    the conditional rates (= unconditional), and 1 + the sum of the unconditional rates (= the accept length)."""
    import pandas as pd

    cond, unc = run.per_position_conditional, run.per_position_unconditional
    prod, rows = 1.0, []
    for j, (c, u) in enumerate(zip(cond, unc)):
        prod *= c
        rows.append({"position j": j, "drafts accepting j": int(run.accepted_per_position[j]),
                     "conditional": round(c, 4), "unconditional": round(u, 4),
                     "product of conditional 0..j": round(prod, 4)})
    t = pd.DataFrame(rows).set_index("position j")
    t.attrs["accept length"] = run.mean
    t.attrs["1 + sum of unconditional"] = 1 + sum(unc)
    return t


def step_count(run, max_new_tokens: int) -> str:
    """Why a `SpecRun` took the verify steps it did: prompts x (T - 1) tokens after the prefill's first, each
    step emitting its accept length (the last step cut at T)."""
    prompts = len(run.prompts)
    after = sum(max(len(p.output_ids) - 1, 0) for p in run.prompts)
    return (f"{prompts} prompts x {max_new_tokens} new tokens: the prefill emits each prompt's first token, the other "
            f"{after} come from {run.verify_steps} verify steps (at most {prompts} x {max_new_tokens - 1} = "
            f"{prompts * (max_new_tokens - 1)}, one per token when nothing is accepted)")


# -- accept length under sampling -------------------------------------------------------------------------------
SAMPLING_LESSON = (
    "At temperature 0 every engine accepts a drafted token exactly when it is the target's argmax. Under sampling "
    "(temperature T > 0) each engine follows its acceptance rule (helpers.engines.acceptance_rules.RULES, docs/sampling.md; "
    "the table below): vLLM's default, llama.cpp's EAGLE-3 drafter and SGLang's default all draft the draft's argmax t "
    "and accept it with probability p_T(t), the target's probability of t at the request's temperature; the textbook "
    "rule (vLLM probabilistic, SGLang rejection sampling) accepts with min(1, p/q) against the draft's own q. So for an "
    "argmax-draft rule the conditional rate at position i is p_T(t_i), and the chain's expected accept length is "
    "1 + p_T(t_0) + p_T(t_0) p_T(t_1) + ... (helpers.acceptance.sampling.exact_chain_acceptance). "
    "What temperature does to the evidence ladder: a healthy draft's served accept length FALLS as T rises (p_T(t) < 1 "
    "even where t is the argmax), so a served number at T > 0 is compared with the engine-free loop at the same T and "
    "rule (speculate --temperature T --engine E), never with a greedy prediction; a misread mapping stays near 1 at "
    "every T, so 'about 1' keeps pointing at the wiring whatever the temperature.")


def sampling_rules():
    """Each engine's acceptance rule under sampling, from `helpers.engines.acceptance_rules.RULES` (pandas)."""
    import pandas as pd

    from helpers.engines.acceptance_rules import RULES

    return pd.DataFrame([{"rule": r.name, "engine": r.engine, "release": r.release, "setting": r.setting,
                          "the draft picks": r.draft, "q": r.q, "test": r.test, "EAGLE-3": r.eagle3}
                         for r in RULES.values()]).set_index("rule")


def chain_under_rule(rule: str, p_at_draft, vocab: int = 8) -> dict:
    """The expected accept length of a chain whose drafted argmax token has target probability `p_at_draft[i]` at
    position i (0-based), under acceptance rule `rule`: the kit's `exact_chain_acceptance` on rows that put p on
    token 0 and share the rest (the draft's argmax is token 0 at every position)."""
    import torch

    from helpers.acceptance.sampling import exact_chain_acceptance
    from helpers.engines.acceptance_rules import get_rule

    rows = []
    for p in p_at_draft:
        row = torch.full((vocab,), (1.0 - float(p)) / (vocab - 1))
        row[0] = float(p)
        rows.append(row)
    q = [torch.nn.functional.one_hot(torch.tensor(0), vocab).float() for _ in p_at_draft]
    return exact_chain_acceptance(get_rule(rule), rows, q, tokens=[0] * len(rows))


# -- GGUF: the one place absolute ids are right -------------------------------------------------------------------
def gguf_lesson() -> str:
    """How llama.cpp stores and reads d2t, from the engine table (`d2t.apply`) and `helpers.io.gguf_files`."""
    from helpers.engines.registry import engine_at
    from helpers.io.gguf_files import CONVERTER, LLAMACPP_CONVENTION

    way = engine_at("llamacpp").value("d2t.apply")
    return (f"llama.cpp (engine table rule d2t.apply: {way!r}) does not read a Hugging Face checkpoint: its converter "
            f"{CONVERTER} writes a GGUF whose d2t holds arange(N) + d2t, the {LLAMACPP_CONVENTION} target ids, and "
            "refuses a d2t whose ids fall outside the target vocab or repeat; llama-server then reads the GGUF's d2t as "
            "absolute ids. That is the one place 'absolute' is right: the same values in an HF checkpoint are the "
            "d2t-absolute bug, and offsets copied into a GGUF are its bug (the doctor's gguf-d2t-offsets). `d2t-lab "
            "inspect` judges a .gguf as llama.cpp reads it (docs/gguf.md).")


def outcomes_for(copies: dict, engines=("vllm", "sglang", "llamacpp")):
    """What each engine's newest release read does with each copy (copy -> the engine table's outcome key), in the
    version story's words, each setting of a row the table splits (`Engine.settings`) in turn (pandas: copy x
    engine)."""
    import pandas as pd

    out = {}
    for copy, key in copies.items():
        row = {}
        for k in engines:
            e = ENGINE_TABLE[k]
            spans = [sp for sp in e.outcomes.get(key) or () if sp.value is not None]
            if not spans:
                row[e.name] = "(no row in the engine table)"
                continue
            words = f"{_value_words(spans[-1].value)} [{spans[-1].pr or 'no source'}]"
            others = [(st.name, [sp for sp in st.spans if sp.value is not None]) for st in e.settings.get(key, ())
                      if st.spans is not None]
            if others:
                words = f"{_setting_of(e, key)[0]}: {words}; " + "; ".join(
                    f"{name}: {_value_words(sp[-1].value)} [{sp[-1].pr or 'no source'}]" for name, sp in others if sp)
            row[e.name] = words
        out[copy] = row
    return pd.DataFrame(out).T.rename_axis("copy (the engine table's key)")


def setting_notes(findings) -> list[str]:
    """For each engine the doctor predicted an outcome for: when that outcome is a row the engine table splits by
    setting, which setting the doctor's line holds for and what serving does in each other one, from the outcome
    itself (`helpers.engines.registry.EngineAt.outcome`: setting, other_settings). [] when no row is split."""
    names = {a.key: a.label for a in findings.versions}
    lines = []
    for key, o in findings.predicted_outcome().items():
        if not o.get("setting"):
            continue
        lines.append(f"{names[key]}: the doctor's line is the engine table's row for the setting {o['setting']}; "
                     + "; ".join(f"in the setting {x['setting']} the table says: "
                                 f"{_value_words(Serve(x['result'], x['accept'], x['says']))} [{x['source']}]"
                                 for x in o["other_settings"]))
    return lines
