"""The mutation tables, run again in the real engines (make test-engine): one copy of every class per engine.

The full tables (data_samples/engine_truth/*-mutations.json.gz) take 40-60 minutes to make; here the first copy of
each mutation class (both pairs for vLLM, the Llama pair for llama.cpp) runs again and must do what the table
recorded: the same outcome, the same root error, the accept length within 0.05.
"""
from __future__ import annotations

import pytest

from conftest import SAMPLES, script_module

pytestmark = pytest.mark.engine

TABLES = SAMPLES / "engine_truth"


def _one_per_class(table, pairs=("m-", "kimi-m-")) -> list[dict]:
    seen, out = set(), []
    for row in script_module("engine_truth").read_table(table)["rows"]:
        for prefix in pairs:
            key = (prefix, row["class"])
            if row["case"].startswith(prefix) and key not in seen:
                seen.add(key)
                out.append(row)
    return out


def _same(recorded: dict, got: dict) -> str | None:
    if recorded["outcome"] != got["outcome"]:
        return f"recorded {recorded['outcome']}, now {got['outcome']} ({got.get('error')})"
    if recorded["outcome"] != "serves":
        return None if (recorded.get("error") or "")[:40] in (got.get("error") or "") else \
            f"error now {got.get('error')!r}, recorded {recorded.get('error')!r}"
    if abs(recorded["accept_length"] - got["accept_length"]) > 0.05:
        return f"accept length {got['accept_length']} against {recorded['accept_length']}"
    return None


def test_one_mutation_of_each_class_runs_in_vllm_as_recorded(vllm_cpu, tmp_path):
    et = script_module("engine_truth")
    rows = _one_per_class(TABLES / "vllm-0.32.0-mutations.json.gz")
    assert len(rows) >= 40
    folders = et.make_mutations(tmp_path / "drafts", [r["case"] for r in rows])
    wrong = {}
    for pair, folder in et.PAIRS.items():
        mine = [r for r in rows if et.pair_of(r["case"]) == folder]
        ids = vllm_cpu.prompt_token_ids(folder / "target", et.PROMPTS, et.N_PROMPTS)
        jobs = [{"case": r["case"], "target": str(folder / "target"), "draft": str(folders[r["case"]])} for r in mine]
        got = vllm_cpu.run_in_process(jobs, ids, et.MAX_TOKENS, et.K, tmp_path / f"run-{pair}")
        for r in mine:
            now = et._row_of(got[r["case"]], folders[r["case"]], None)
            why = _same(r, now)
            if why:
                wrong[r["case"]] = why
    assert not wrong, wrong


def test_one_mutation_of_each_class_runs_in_llamacpp_as_recorded(llamacpp, tmp_path):
    et = script_module("engine_truth")
    rows = _one_per_class(TABLES / "llamacpp-b11434-mutations.json.gz", pairs=("m-",))
    assert len(rows) >= 20
    cases = et.mutation_cases()
    now = et.run_llamacpp(tmp_path / "table.json", [r["case"] for r in rows], tmp_path / "work",
                          cases={r["case"]: cases[r["case"]] for r in rows})
    got = {r["case"]: r for r in now}
    wrong = {r["case"]: why for r in rows if (why := _same(r, got[r["case"]]))}
    assert not wrong, wrong
