"""How `make test` spreads the suite over workers (tests/conftest.py): a file that defines a
module-scoped fixture is one unit of work, so its fixture (a report bundle, loaded models) is
built once; every other test is scheduled alone."""
from __future__ import annotations

from pathlib import Path

from conftest import shared_fixture_files, work_unit

ROOT = Path(__file__).resolve().parents[1]


def test_files_with_module_fixtures_are_one_unit():
    shared = shared_fixture_files()
    assert {"test_report_truth.py", "test_speculate.py", "test_hostile_inputs.py"} <= shared
    assert "test_torchrun.py" not in shared and "test_suite_scheduling.py" not in shared
    bundle = [work_unit(f"tests/test_report_truth.py::{name}", shared)
              for name in ("test_summary_and_notebooks_agree", "test_the_bundle_html_renders_offline")]
    assert bundle == ["tests/test_report_truth.py"] * 2
    assert work_unit("tests/test_speculate.py::test_tree[chain5-offset]", shared) == "tests/test_speculate.py"


def test_other_tests_are_scheduled_alone():
    shared = shared_fixture_files()
    one, two = (f"tests/test_torchrun.py::test_speculate_two_ranks_equals_one_process[extra{i}]" for i in (0, 1))
    assert work_unit(one, shared) == one and work_unit(two, shared) == two
    # an `@` inside parameters is not a group; an explicit xdist_group suffix is one
    assert work_unit("tests/test_x.py::test[a@b]", shared) == "tests/test_x.py::test[a@b]"
    assert work_unit("tests/test_x.py::test[a]@kernels", shared) == "kernels"


def test_make_uses_the_grouping_scheduler():
    makefile = (ROOT / "Makefile").read_text()
    # every parallel run groups; the engine tests (make test-engine) run one vLLM at a time, without xdist
    runs = [line for line in makefile.splitlines() if "-m pytest" in line and "-p no:xdist" not in line]
    assert len(runs) >= 2 and all("--dist loadgroup" in line for line in runs), runs
    serial = [line for line in makefile.splitlines() if "-m pytest" in line and "-p no:xdist" in line]
    assert all("-m engine" in line for line in serial), serial
