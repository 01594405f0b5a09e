"""The package map in docs/architecture.md holds: packages by job, imports one way, no cycles.

Every import a module makes counts, also one inside a function (a lazy import is still a
dependency). A module may import its own package or a package listed before it, never one after.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELPERS = ROOT / "helpers"
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ["core", "engines", "io", "model", "acceptance", "measure", "speculate", "serving", "doctor", "plots", "ui", "teach",
            "commands"]  # lowest first
RANK = {p: i for i, p in enumerate(PACKAGES)}
ROOT_MODULES = {"__init__", "__main__"}


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in HELPERS.rglob("*.py")}


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in RANK) else None


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every helpers import in `path`, relative ones resolved, anywhere in the file."""
    me = _name(path).split(".")
    here = me if path.name == "__init__.py" else me[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(here[: len(here) - node.level + 1] + ([mod] if mod else []))
            if mod == "helpers" or mod.startswith("helpers."):
                out.append((mod, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("helpers.")]
    return out


def _targets(mod: str, names: list[str]) -> set[str]:
    """The helpers modules an import statement loads."""
    subs = {f"{mod}.{n}" for n in names if f"{mod}.{n}" in MODULES}
    return subs | ({mod} if mod in MODULES and (len(subs) < len(names) or not names) else set())


def _graph() -> dict[str, set[str]]:
    return {m: {t for mod, names in _imports(p) for t in _targets(mod, names)} - {m} for m, p in MODULES.items()}


def _defined(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try)):
            names |= {n.name for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return names


def test_root_holds_only_the_entry_points():
    loose = {p.stem for p in HELPERS.glob("*.py")} - ROOT_MODULES
    assert len(loose) <= 2, f"modules at helpers/ root (put them in a package by job): {sorted(loose)}"
    dirs = {p.name for p in HELPERS.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert dirs == set(PACKAGES), dirs ^ set(PACKAGES)


def test_imports_flow_one_way():
    bad = [(m, d) for m, deps in _graph().items() for d in deps
           if _package(m) and _package(d) and RANK[_package(d)] > RANK[_package(m)]]
    assert not bad, f"imports of a later package (module -> module): {bad}"


def test_no_import_cycles():
    g = _graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        for d in sorted(g.get(m, ())):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    assert not cycles, f"import cycles: {cycles}"


def test_no_forwarders_and_no_reexports():
    """No module `__getattr__`, and every imported name comes from the module that defines it."""
    forwarders = [m for m, p in MODULES.items()
                  if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in ast.parse(p.read_text()).body)]
    assert not forwarders, f"module __getattr__ forwarders: {forwarders}"
    defined = {m: _defined(p) for m, p in MODULES.items()}
    files = list(HELPERS.rglob("*.py")) + list((ROOT / "tests").rglob("*.py")) + list((ROOT / "scripts").rglob("*.py")) \
        + list((ROOT / "benchmarks").rglob("*.py"))
    bad = []
    for f in files:
        for mod, names in _imports(f):
            if mod not in MODULES or MODULES[mod].name == "__init__.py":
                continue
            bad += [f"{f.relative_to(ROOT)}: {n} from {mod}" for n in names
                    if f"{mod}.{n}" not in MODULES and n not in defined[mod]]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):  # the notebooks' code cells too
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            try:
                tree = ast.parse("".join(cell["source"]))
            except SyntaxError:  # a cell with IPython magics
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module in MODULES and MODULES[node.module].name != "__init__.py":
                    bad += [f"{nb.name}: {a.name} from {node.module}" for a in node.names
                            if f"{node.module}.{a.name}" not in MODULES and a.name not in defined[node.module]]
    assert not bad, "names imported from a module that does not define them (import from their home):\n" + "\n".join(bad)


def test_package_inits_name_their_modules_and_import_nothing():
    for pkg in PACKAGES:
        tree = ast.parse((HELPERS / pkg / "__init__.py").read_text())
        assert not [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], pkg
        alls = [n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "__all__"]
        if pkg == "commands":
            continue
        assert alls, f"helpers/{pkg}/__init__.py has no __all__"
        listed = set(ast.literal_eval(alls[0].value))
        present = {p.stem for p in (HELPERS / pkg).glob("*.py")} - {"__init__"}
        assert listed == {p for p in present if not p.startswith("_")}, (pkg, listed ^ present)


def test_no_private_names_across_packages():
    bad = []
    for m, p in MODULES.items():
        for mod, names in _imports(p):
            if _package(mod) == _package(m):
                continue
            bad += [f"{m}: {mod}.{n}" for n in names if n.startswith("_") and n != "__version__"]
            bad += [f"{m}: {mod}" for part in mod.split(".")[1:] if part.startswith("_")]
    assert not bad, f"private names imported from another package: {bad}"


def test_no_front_end_imports_the_command_line():
    g = _graph()
    assert [m for m, deps in g.items() if any(d.startswith("helpers.commands") for d in deps)
            and not m.startswith(("helpers.commands", "helpers.__main__"))] == []


def test_the_map_in_the_docs_lists_every_module():
    doc = DOC.read_text()
    listed = set(re.findall(r"`helpers/([\w/]+)\.py`", doc))
    present = {str(p.relative_to(HELPERS).with_suffix("")) for p in HELPERS.rglob("*.py") if p.name != "__init__.py"}
    assert present - listed == set(), f"modules missing from docs/architecture.md: {sorted(present - listed)}"
    assert listed - present == set(), f"docs/architecture.md lists modules that do not exist: {sorted(listed - present)}"


def _package_edges() -> dict[str, set[str]]:
    """Each package and the other packages its modules import (lazy imports included)."""
    edges: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for m, deps in _graph().items():
        if _package(m):
            edges[_package(m)] |= {_package(d) for d in deps if _package(d) and _package(d) != _package(m)}
    return edges


def test_the_import_graph_in_the_docs_is_the_real_one():
    """The fenced `import-graph` block in docs/architecture.md is the package graph computed here."""
    edges = _package_edges()
    want = "\n".join(f"{p:<10} -> {', '.join(sorted(edges[p], key=RANK.get)) or '(nothing)'}" for p in PACKAGES)
    found = re.search(r"```import-graph\n(.*?)\n```", DOC.read_text(), re.S)
    assert found, "docs/architecture.md has no ```import-graph block"
    assert found.group(1).strip() == want, f"the import graph in docs/architecture.md drifted; the real one:\n{want}"
