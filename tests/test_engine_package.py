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
