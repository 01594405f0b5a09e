"""Commands only parse arguments and print (docs/architecture.md, "Where a new thing goes"): no module
of helpers/commands/ imports another command's module. What several commands share lives in the
library, or, for option declarations and their checks, in a private helper of the commands package
(a module whose name starts with `_`: today only `_options.py`, the options several commands share).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ROOT / "helpers" / "commands"
SHARED = {"_options"}  # the commands' private shared helpers (docs/architecture.md lists each)


def _command_imports(path: Path) -> list[str]:
    """The helpers.commands modules `path` imports, anywhere in the file (lazy imports count)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "helpers.commands":
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helpers.commands."):
            out.append(node.module.split(".")[2])
        elif isinstance(node, ast.ImportFrom) and node.level:  # `from . import x`, `from .x import y`
            out += [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            out += [a.name.split(".")[2] for a in node.names if a.name.startswith("helpers.commands.")]
    return out


def test_no_command_imports_another_command():
    bad = {p.name: sorted(set(mods) - SHARED) for p in sorted(COMMANDS.glob("*.py"))
           if (mods := _command_imports(p)) and set(mods) - SHARED}
    assert not bad, f"commands importing other commands (move what they share into the library): {bad}"


def test_the_shared_helpers_are_private_and_import_no_command():
    present = {p.stem for p in COMMANDS.glob("_*.py")} - {"__init__"}
    assert present == SHARED, f"private helpers of helpers/commands/ not named in SHARED: {present ^ SHARED}"
    for name in SHARED:
        assert _command_imports(COMMANDS / f"{name}.py") == [], f"{name}.py imports a command"


def test_the_check_sees_a_command_import(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("from helpers.commands import _options\nfrom helpers.commands.logs import plot_path\n"
                 "def run(args):\n    from helpers.commands import simulate\n    import helpers.commands.report\n")
    assert sorted(set(_command_imports(f)) - SHARED) == ["logs", "report", "simulate"]
