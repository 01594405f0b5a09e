"""The engine package's words are each written once (issue 50): the default engine, the MLA model types.

AST scans of helpers/: `DEFAULT_ENGINE` has one assignment, in `helpers.engines.registry`, and no engine
parameter, field, `--engine` option, `or` fallback or `.get` fallback spells the default engine's name
instead of naming `DEFAULT_ENGINE`. Each scan is also run on a snippet of the pattern it forbids, so it can fail.
"""
from __future__ import annotations

import ast
from pathlib import Path

from helpers.engines.registry import DEFAULT_ENGINE, aux_convention, engine_at
from helpers.engines.table import ENGINE_TABLE

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


def _sources() -> dict[str, ast.Module]:
    return {p.relative_to(HELPERS).as_posix(): ast.parse(p.read_text()) for p in sorted(HELPERS.rglob("*.py"))}


def _assignments(tree: ast.Module, name: str) -> list[int]:
    """Lines where `name` is bound by an assignment anywhere in `tree`."""
    out = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        out += [node.lineno for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and n.id == name]
    return out


def _is_engine(name: str | None) -> bool:
    return bool(name) and "engine" in name.lower()


def default_engine_literals(tree: ast.Module, literal: str = DEFAULT_ENGINE) -> list[tuple[int, str]]:
    """(line, what) for each place the default engine is written as its name: a default of a parameter or
    field named *engine*, `default=` of an `--engine` option, `x or "<name>"`, `d.get(k, "<name>")`."""
    def lit(n) -> bool:
        return isinstance(n, ast.Constant) and n.value == literal

    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            positional = [*a.posonlyargs, *a.args]
            pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
            pairs += [(k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            out += [(d.lineno, f"parameter {p.arg}") for p, d in pairs if _is_engine(p.arg) and lit(d)]
        elif isinstance(node, ast.ClassDef):
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                    if _is_engine(st.target.id) and lit(st.value):
                        out.append((st.lineno, f"field {st.target.id}"))
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and any(lit(v) for v in node.values):
            out.append((node.lineno, "or fallback"))
        elif isinstance(node, ast.Call):
            named = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if any(_is_engine(n) for n in named) and any(k.arg == "default" and lit(k.value) for k in node.keywords):
                out.append((node.lineno, "option default"))
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ("get", "pop", "setdefault") and len(node.args) > 1 \
                    and lit(node.args[1]):
                out.append((node.lineno, f".{f.attr} fallback"))
    return out


def test_the_default_engine_is_assigned_once():
    found = {f: lines for f, tree in _sources().items() if (lines := _assignments(tree, "DEFAULT_ENGINE"))}
    assert found == {"engines/registry.py": found.get("engines/registry.py")} and len(found["engines/registry.py"]) == 1, found
    assert DEFAULT_ENGINE in ENGINE_TABLE and aux_convention(engine_at(DEFAULT_ENGINE)) is not None


def test_no_default_engine_written_as_its_name():
    found = {f: hits for f, tree in _sources().items() if (hits := default_engine_literals(tree))}
    assert not found, f"the default engine written as {DEFAULT_ENGINE!r} instead of DEFAULT_ENGINE: {found}"


def test_the_default_engine_scan_sees_the_old_patterns():
    old = f'''
from dataclasses import dataclass

@dataclass
class CaptureSettings:
    engine: str = "{DEFAULT_ENGINE}"

def check_aux_layers(layers, *, engine: str = "{DEFAULT_ENGINE}", ck=None):
    return engine or "{DEFAULT_ENGINE}"

def run(p, args, d):
    p.add_argument("--engine", default="{DEFAULT_ENGINE}")
    return d.get("engine", "{DEFAULT_ENGINE}")

def drift(a, engine="{DEFAULT_ENGINE}", lone: str = "{DEFAULT_ENGINE}"):
    DEFAULT_ENGINE = "{DEFAULT_ENGINE}"
'''
    tree = ast.parse(old)
    assert [w for _, w in default_engine_literals(tree)] == [
        "field engine", "parameter engine", "parameter engine", "or fallback", "option default", ".get fallback"]
    assert _assignments(tree, "DEFAULT_ENGINE") == [16]
    assert not default_engine_literals(ast.parse('def f(engine: str = DEFAULT_ENGINE, lone="x"):\n    pass\n'))


# -- the MLA model types ----------------------------------------------------------------------------------------------
FAMILY = {"deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25"}


def family_literals(tree: ast.Module) -> list[int]:
    """Lines of a tuple, list or set literal naming two or more DeepSeek-family model types (a second list of them)."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.Tuple, ast.List, ast.Set))
            and len({e.value for e in n.elts if isinstance(e, ast.Constant)} & FAMILY) >= 2]


def test_the_mla_model_types_are_written_once():
    from helpers.engines.registry import DEEPSEEK_FAMILY, MLA_DRAFT_TYPES

    sources = _sources()
    found = {f: lines for f, tree in sources.items() if (lines := family_literals(tree))}
    assert list(found) == ["engines/registry.py"] and len(found["engines/registry.py"]) == 1, found
    for name in ("DEEPSEEK_FAMILY", "MLA_DRAFT_TYPES", "MLA_MODEL_TYPES"):
        where = {f: lines for f, tree in sources.items() if (lines := _assignments(tree, name))}
        assert where == ({} if name == "MLA_MODEL_TYPES" else {"engines/registry.py": where.get("engines/registry.py")})
        assert all(len(v) == 1 for v in where.values()), (name, where)
    assert set(DEEPSEEK_FAMILY) == FAMILY and set(MLA_DRAFT_TYPES) == FAMILY - {"kimi_k25"}


def test_the_family_scan_sees_a_second_list():
    old = ('MLA_MODEL_TYPES = ("kimi_k2", "deepseek_v3", "deepseek_v2", "kimi_k25")\n'
           'if t in {"deepseek_v3", "kimi_k2"}:\n    pass\nOTHER = ("llama", "deepseek_v3")\n')
    assert family_literals(ast.parse(old)) == [1, 2]


def test_the_two_sets_keep_their_uses():
    """kimi_k25 is a DeepSeek-family target and a name an MLA draft config may carry, not an MLA draft by name."""
    import pytest

    from helpers.core.errors import BadInputError
    from helpers.engines.registry import aux_max_index, draft_family
    from helpers.model.config import DraftConfig

    assert draft_family({"model_type": "kimi_k2"})["attention"] == "mla"
    assert draft_family({"model_type": "kimi_k25"})["attention"] == "mha"
    assert draft_family({"model_type": "kimi_k25", "kv_lora_rank": 512})["attention"] == "mla"
    assert aux_max_index("vllm", 4, "kimi_k25") == aux_max_index("vllm", 4, "deepseek_v2") == 4
    assert aux_max_index("vllm", 4, "llama") == 3
    with pytest.raises(BadInputError, match="expected one of kimi_k2, deepseek_v3, deepseek_v2, kimi_k25"):
        DraftConfig.from_dict({"model_type": "llama", "kv_lora_rank": 512, "hidden_size": 64,
                               "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100})


# -- each engine's counting, one module (issue 47) ------------------------------------------------------------------
# one run's counts: 10 verify steps with a draft of 3, 17 tokens accepted, 8 / 6 / 3 of them at positions 0 / 1 / 2
DRAFTS, DRAFT_TOKENS, PER_POS = 10, 30, [8, 6, 3]
HISTOGRAM = [2, 2, 3, 3]  # steps that accepted exactly 0, 1, 2, 3: the same counts as an answer's histogram


def _counters(prefix: str) -> str:
    labels = 'engine="0",model_name="m"'
    out = [f"{prefix}spec_decode_num_drafts_total{{{labels}}} {DRAFTS}.0",
           f"{prefix}spec_decode_num_draft_tokens_total{{{labels}}} {DRAFT_TOKENS}.0",
           f"{prefix}spec_decode_num_accepted_tokens_total{{{labels}}} {sum(PER_POS)}.0"]
    out += [f'{prefix}spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{j}"}} {n}.0'
            for j, n in enumerate(PER_POS)]
    return "\n".join(out) + "\n"


def test_the_readers_and_engine_counts_give_one_accept_length(tmp_path):
    """The same counts read from a vLLM per-request stats row, vLLM's and llama.cpp's /metrics, a vLLM answer's
    histogram and a vLLM log line give the accept length EngineCounts gives for the same sums."""
    import json

    import numpy as np

    from helpers.acceptance.sources import normalise
    from helpers.engines import counting
    from helpers.serving.metrics import MetricsTable, from_log, parse_prometheus, parse_records
    from helpers.serving.records import openai_reply, request_row

    counts = counting.EngineCounts("vllm", 3, drafts=DRAFTS, draft_tokens=DRAFT_TOKENS,
                                   accepted_per_position=np.array(PER_POS))
    want = counts.accept_length
    assert want == counting.accept_length(sum(PER_POS), DRAFTS) and abs(want - 2.7) < 1e-12
    assert counting.histogram_accepted(HISTOGRAM) == sum(PER_POS) and counting.histogram_per_position(HISTOGRAM) == PER_POS

    stats = {"request_id": "r1", "num_drafts": DRAFTS, "num_draft_tokens": DRAFT_TOKENS,
             "num_accepted_tokens": sum(PER_POS), "num_accepted_tokens_per_pos": PER_POS}
    answer = {"choices": [{"text": "x"}], "usage": {"completion_tokens": 28},
              "metrics": {"speculative_decoding": {"acceptance_histogram": HISTOGRAM, "num_spec_steps": DRAFTS,
                                                   "num_accepted_draft_tokens": sum(PER_POS),
                                                   "num_draft_tokens": DRAFT_TOKENS, "num_spec_tokens": 3}}}
    log = tmp_path / "vllm.log"
    log.write_text("INFO 01-05 11:00:10 [loggers.py:123] SpecDecoding metrics: Mean acceptance length: 2.70, "
                   "Accepted throughput: 1.70 tokens/s, Drafted throughput: 3.00 tokens/s, Accepted: 17 tokens, "
                   "Drafted: 30 tokens, Per-position acceptance rate: 0.800, 0.600, 0.300, "
                   "Avg Draft acceptance rate: 56.7%\n")
    tables = {
        "vllm per-request stats": parse_records([json.dumps(stats)]),
        "vllm /metrics": parse_prometheus(_counters(counting.VLLM_PREFIX)),
        "llama.cpp /metrics": parse_prometheus(_counters(counting.LLAMACPP_PREFIX)),
        "vllm answer": MetricsTable("<probe>", "vllm-requests", [request_row(openai_reply(answer, "http://x"), 0)]),
        "vllm log": from_log(log),
    }
    got = {name: normalise(t) for name, t in tables.items()}
    assert {name: a.accept_length for name, a in got.items()} == dict.fromkeys(tables, want)
    for name in ("vllm per-request stats", "vllm /metrics", "llama.cpp /metrics", "vllm answer", "vllm log"):
        assert got[name].per_position_unconditional == [n / DRAFTS for n in PER_POS], name
    # llama.cpp counts through EngineCounts by its own rule, the same formula
    assert counting.EngineCounts("llamacpp", 3, drafts=DRAFTS, draft_tokens=DRAFT_TOKENS,
                                 accepted_per_position=np.array(PER_POS)).accept_length == want
    # SGLang's meta_info: tokens per verify step, its own formula from the same module
    meta = {"meta_info": {"completion_tokens": 27, "spec_verify_ct": DRAFTS}}
    assert normalise(parse_records([json.dumps(meta)])).accept_length == counting.sglang_accept_length(27, DRAFTS) == 2.7


def test_the_readers_take_the_names_from_the_counting_module():
    """No serving reader spells an engine's count names itself: they are `helpers.engines.counting`'s."""
    from helpers.engines import counting

    names = {*counting.SPEC_DECODE_COUNTERS, counting.SPEC_DECODE_PER_POS, *counting.VLLM_REQUEST_STATS,
             counting.VLLM_ANSWER_HISTOGRAM, counting.VLLM_ANSWER_STEPS, counting.VLLM_ANSWER_ACCEPTED,
             counting.VLLM_ANSWER_SPEC_TOKENS, counting.SGLANG_VERIFY, *counting.SGLANG_ACCEPTED,
             *counting.SGLANG_PROPOSED, *counting.SGLANG_HISTOGRAM, counting.LLAMACPP_DRAFTED,
             counting.LLAMACPP_ACCEPTED}
    prefixed = {p + n for p in (counting.VLLM_PREFIX, counting.LLAMACPP_PREFIX) for n in
                (*counting.SPEC_DECODE_COUNTERS, counting.SPEC_DECODE_PER_POS)}
    found = {}
    for f in ("records", "metrics", "probe_client", "log_lines", "bounds"):
        tree = ast.parse((HELPERS / "serving" / f"{f}.py").read_text())
        hits = [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names | prefixed]
        if hits:
            found[f] = hits
    assert not found, found
