"""No function in the package takes more than 12 parameters (issue 38): wide ones take parameter
objects (`helpers.measure.predict.Scoring` / `Loading`, the door's and the capture's settings,
`RunSettings` for the dashboard). An AST walk over helpers/; `self` / `cls` are not counted,
`*args` and `**kwargs` are (one each)."""
from __future__ import annotations

import ast
from pathlib import Path

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
MOST = 12


def counts(tree: ast.AST) -> list[tuple[str, int, int]]:
    """(name, line, parameters) of every function and method in a parsed module."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            n = len(names) + (a.vararg is not None) + (a.kwarg is not None)
            if names and names[0] in ("self", "cls"):
                n -= 1
            out.append((node.name, node.lineno, n))
    return out


def test_no_function_takes_more_than_twelve_parameters():
    wide = [f"{p.relative_to(HELPERS)}:{line} {name} ({n})"
            for p in sorted(HELPERS.rglob("*.py")) for name, line, n in counts(ast.parse(p.read_text()))
            if n > MOST]
    assert not wide, f"functions over {MOST} parameters (group them into a parameter object):\n" + "\n".join(wide)


def test_the_count_sees_a_wide_function():
    src = "def f(a, b, c, d, e, f, g, h, i, j, k, l, *m, n=1, **o): pass\nclass C:\n    def g(self, a): pass\n"
    got = {name: n for name, _, n in counts(ast.parse(src))}
    assert got == {"f": 15, "g": 1}
