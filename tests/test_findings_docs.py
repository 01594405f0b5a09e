"""docs/doctor-findings.md's third-wave table names, for each failure of 2026, its finding and the test
that builds the case on a fixture: each named test must exist and each code must be one the doctor emits
(one with an entry in helpers/doctor/registry.py)."""
from __future__ import annotations

import re
from pathlib import Path

from helpers.doctor.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]


def _table() -> list[list[str]]:
    doc = (ROOT / "docs" / "doctor-findings.md").read_text()
    part = doc.split("## Third wave: the failure modes of 2026", 1)[1].split("\n\n", 2)[2]
    rows = [ln for ln in part.split("\n\n", 1)[0].splitlines() if ln.startswith("| ") and not ln.startswith("| ---")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in rows[1:]]


def test_every_failure_names_an_existing_test():
    rows = _table()
    assert len(rows) >= 15
    for failure, _, _, tests, source in rows:
        named = re.findall(r"`(test_\w+\.py)::(test_\w+)`", tests)
        assert named, f"no test named for {failure!r}"
        assert source and source != "-" or "forced" in failure, failure
        for file, name in named:
            text = (ROOT / "tests" / file).read_text()
            assert re.search(rf"^def {name}\(", text, re.M), f"{file}::{name} (for {failure!r}) does not exist"


def test_every_code_in_the_table_is_emitted_by_a_check():
    """Each code the table names has a registry entry (tests/test_findings_registry.py: every entry is
    emitted by a check and named by a test)."""
    codes = {c for row in _table() for c in re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`", row[1])}
    assert {"aux-layers", "aux-ids-unread", "peagle-draft", "embed-untrained", "mapping-drift"} <= codes
    missing = sorted(codes - set(REGISTRY))
    assert not missing, missing
