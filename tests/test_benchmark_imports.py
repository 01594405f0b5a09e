"""Every `from helpers.X import a, b` in benchmarks/ (code and the child scripts they run as strings)
names something that exists: `make benchmarks` is not part of `make test`, so a moved name would
otherwise break a benchmark unseen."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
IMPORT = re.compile(r"from (helpers(?:\.\w+)*) import \(?([\w, \n]+?)\)?$", re.M)


def imports() -> list[tuple[str, str, str]]:
    """(benchmark file, module, name) for each helpers name a benchmark imports."""
    out = []
    for path in sorted(BENCH.glob("*.py")):
        for m in IMPORT.finditer(path.read_text()):
            out += [(path.name, m.group(1), n.strip()) for n in m.group(2).replace("\n", " ").split(",") if n.strip()]
    return out


def test_every_name_a_benchmark_imports_exists():
    found = imports()
    assert len(found) > 30  # the scan sees the benchmarks' imports
    missing = [f"{f}: {mod}.{name}" for f, mod, name in found
               if not hasattr(importlib.import_module(mod), name)]
    assert not missing, "benchmarks import names that do not exist:\n" + "\n".join(missing)


def test_the_scan_reads_a_child_script_in_a_string():
    src = 'CHILD = r"""\nimport sys\nfrom helpers.doctor.inspection import inspect_path\n"""\n'
    assert [(m.group(1), m.group(2)) for m in IMPORT.finditer(src)] == [("helpers.doctor.inspection", "inspect_path")]
