"""The teaching notebooks' lessons that are generated, each in one place: notebook 00 shows them, notebook 08
links to 00 instead of repeating them.

- `version_story`: what each engine does, release range by release range, for the mapping and the
  EAGLE-3.1 / MLA switches, generated from `helpers.core.engine_table` (so it cannot drift from the
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

from helpers.core.engine_outcomes import Serve, Span
from helpers.core.engine_table import ENGINE_TABLE, QUOTED, Engine

# -- the version story -----------------------------------------------------------------------------------
# (kind, key, what it is about): the outcomes and rules the notebooks teach, in the table's own keys
STORY = (
    ("outcome", "d2t-missing.error", "a checkpoint without d2t, reduced draft vocab"),
    ("outcome", "d2t.wrong-ids", "a d2t of wrong ids in range (absolute ids, all zeros, arange)"),
    ("outcome", "d2t.past-vocab", "a d2t sending ids past the target vocab"),
    ("outcome", "t2d-mismatch.error", "a t2d that disagrees with d2t"),
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
        words = {"refuses": "does not start", "crashes": "starts, then dies on the first request",
                 "serves": "serves"}[value.result]
        if value.accept:
            words += f", {ACCEPT_WORDS[value.accept]}"
        return words + (f' ("{value.says}")' if value.says else "")
    return RULE_WORDS.get(value, str(value))


def version_story(engines=None) -> list[dict]:
    """One row per (engine, topic, release range) the engine table holds for the topics in `STORY`:
    engine, releases, topic, what it does, the source the table cites (its PR, release note or run)."""
    rows = []
    for key in engines or ENGINE_TABLE:
        e = ENGINE_TABLE[key]
        for kind, name, topic in STORY:
            spans = (e.outcomes if kind == "outcome" else e.rules).get(name) or ()
            for sp in spans:
                if sp.value is None:
                    continue
                rows.append({"engine": e.name, "releases": release_range(e, sp), "topic": topic,
                             "what it does": _value_words(sp.value), "source": sp.pr or "", "key": name})
    return rows


def version_story_lines(engines=None) -> list[str]:
    """The story as sentences, each naming its engine and its releases."""
    return [f"{r['engine']} {r['releases']}: {r['topic']}: {r['what it does']}" for r in version_story(engines)]


def version_story_table(engines=None):
    """The story as a table (pandas), grouped by topic."""
    import pandas as pd

    t = pd.DataFrame(version_story(engines)).drop(columns="key")
    return t.set_index(["topic", "engine"])


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
    ranks = pd.DataFrame(p.q, columns=[f"rank {r}" for r in range(drafting.topk)]).round(4).rename_axis("depth")
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
