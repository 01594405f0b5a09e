"""The module map in docs/architecture.md holds: imports flow one way, and no cycles.

Every import a module makes counts, also one inside a function (a lazy import is still a
dependency), except a module `__getattr__` that forwards names which moved to another module
(kept so that old import paths still work). A module may import its own layer or a lower one,
never a higher one.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
LAYERS = [  # lowest first; a module not listed fails the test (add it to the doc and here)
    ("types", {"terms", "errors", "mapping", "outputs"}),
    ("files", {"tensor_files", "pt_files", "checkpoint", "samples", "logs", "prompts", "metrics", "metric_records",
               "remote", "target_match"}),
    ("model", {"devices", "draft_config", "draft_keys", "draft_layer", "draft", "target_head", "chat", "distributed"}),
    ("numbers", {"predict", "scores", "eval_conclusion", "evaluate", "replay", "engine_rules", "findings", "checks_mapping",
                 "checks_weights", "checks_variants", "doctor", "fix_plan", "fix", "inspection", "montecarlo", "draft_tree",
                 "simulate", "throughput", "settings", "primer", "primer_exercises", "target", "capture", "acceptance",
                 "references", "checks_target", "draft_diff", "spec_draft", "spec_result", "speculate",
                 "spec_compare"}),
    ("figures", {"plots"}),
    ("front ends", {"notebook", "html_export", "token_view", "spec_panel", "summary", "report", "widgets", "commands", "__main__", "__init__"}),
]
LAYER = {m: i for i, (_, mods) in enumerate(LAYERS) for m in mods}


def _top(module_path: Path) -> str:
    rel = module_path.relative_to(HELPERS)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> set[str]:
    """helpers modules (top-level names) that `path` imports, anywhere in the file."""
    tree = ast.parse(path.read_text())
    for f in [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"]:
        tree.body.remove(f)  # forwards of moved names
    pkg = path.parent.relative_to(HELPERS.parent).parts  # ('helpers',) or ('helpers', 'plots')
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg[: len(pkg) - node.level + 1])
                parts = base + (node.module.split(".") if node.module else [])
                if len(parts) == 1:  # `from . import x, y`
                    found |= {a.name for a in node.names}
                else:
                    found.add(parts[1])
            elif node.module and node.module.split(".")[0] == "helpers":
                parts = node.module.split(".")
                found |= {parts[1]} if len(parts) > 1 else {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("helpers.")}
    return found


def _graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for p in HELPERS.rglob("*.py"):
        g.setdefault(_top(p), set()).update(m for m in _imports(p) if m != _top(p))
    return g


def test_every_module_has_a_layer():
    assert set(_graph()) - {"_notebooks"} <= set(LAYER), set(_graph()) - set(LAYER)


def test_imports_flow_one_way():
    bad = [(m, d) for m, deps in _graph().items() for d in deps if d in LAYER and LAYER[d] > LAYER[m]]
    assert not bad, f"upward imports (module -> higher module): {bad}"


def test_no_front_end_imports_the_command_line():
    g = _graph()
    assert [m for m, deps in g.items() if "commands" in deps and m not in ("commands", "__main__")] == []


def test_no_cycles_between_modules():
    g = _graph()
    seen, stack = set(), []

    def visit(m):
        if m in stack:
            raise AssertionError(f"import cycle: {' -> '.join(stack[stack.index(m):] + [m])}")
        if m in seen:
            return
        stack.append(m)
        for d in g.get(m, ()):
            visit(d)
        stack.pop()
        seen.add(m)

    for m in g:
        visit(m)


def test_the_module_map_in_the_docs_names_every_module():
    text = DOC.read_text()
    named = set(re.findall(r"`helpers/([\w/]+?)(?:\.py|/)`", text))
    assert {m for m in LAYER if m not in ("__init__", "__main__")} <= named, \
        {m for m in LAYER if m not in ("__init__", "__main__")} - named
