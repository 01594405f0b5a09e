"""The drafting shape as the engines spell it, one meaning per flag, in every command that takes one.

vLLM's `--num-speculative-tokens K` (a chain of K) and SGLang's `--speculative-num-steps`,
`--speculative-eagle-topk`, `--speculative-num-draft-tokens` (the root counted) are read once by
`Drafting.read_flags` (through `_options.shape_flags`); `--steps`, `--topk`, `--draft-tokens` are
their aliases. Flags that disagree, and `--draft-tokens` alone where it used to mean a chain of
N - 1 (metrics, report), are one line, exit 2. Every JSON that states a shape states it in both
engines' terms.
"""
from __future__ import annotations

import json

import pytest

from helpers.acceptance.drafting import Drafting
from conftest import SAMPLES


VLLM_METRICS = SAMPLES / "metrics" / "vllm_metrics.txt"
SGLANG_META = SAMPLES / "metrics" / "sglang_meta_info.jsonl"
DRAFT = SAMPLES / "tiny_draft_sglang"

CHAIN3 = [("--num-speculative-tokens", 3), ("--speculative-num-steps", 3),
          ("--speculative-num-steps", 3, "--speculative-eagle-topk", 1, "--speculative-num-draft-tokens", 4),
          ("--num-speculative-tokens", 3, "--speculative-num-steps", 3)]
CHAIN3_OLD = [("--steps", 3), ("--steps", 3, "--topk", 1, "--draft-tokens", 4)]
TREE = ("--speculative-num-steps", 5, "--speculative-eagle-topk", 4, "--speculative-num-draft-tokens", 16)
TREE_OLD = ("--steps", 5, "--topk", 4, "--draft-tokens", 16)

# each command's required arguments besides the shape, and what `--draft-tokens N` alone means there
COMMANDS = {
    "metrics": ([VLLM_METRICS], "refuse"),
    "report": ([DRAFT, "-o", "OUT"], "refuse"),
    "rate-for": (["--accept-length", 1.9], "drafted"),
    "simulate": (["--accept-rate", 0.6, "--trials", 1000], "drafted"),
    "speculate": ([DRAFT], "drafted"),
    "reproduce": ([DRAFT, "--target", SAMPLES / "tiny_target", "--prompts", SAMPLES / "prompts.jsonl",
                   "--accept-length", 1.5], "drafted"),
    "probe": (["http://127.0.0.1:9"], "refuse"),
}


def _parse(command: str, *flags):
    from helpers.__main__ import build_parser

    base, _ = COMMANDS[command]
    return build_parser().parse_args([command, *map(str, base), *map(str, flags)])


def _shape(command: str, *flags) -> Drafting | None:
    from helpers.commands import _options

    return _options.drafting_from(_parse(command, *flags), COMMANDS[command][1])


def _one_line_error(r, *words) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in lines[0], lines[0]


# -- one meaning, every command -----------------------------------------------------------------
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_reads_the_engines_flags_with_one_meaning(command):
    engine_chains = CHAIN3 if command != "probe" else CHAIN3[:3]
    for flags in engine_chains:
        assert _shape(command, *flags) == Drafting.chain(3), flags
    assert _shape(command, *TREE) == Drafting(5, 4, 16)
    if command != "probe":  # probe never had the older aliases
        for flags in CHAIN3_OLD:
            assert _shape(command, *flags) == Drafting.chain(3), flags
        assert _shape(command, *TREE_OLD) == _shape(command, *TREE)
        # beside --topk, --draft-tokens counts the root in every command (simulate once read it as K drafted)
        assert _shape(command, "--topk", 1, "--draft-tokens", 4) == Drafting.chain(3)
    assert _shape(command) is None  # nothing given: the command's own default applies


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "probe"])
def test_draft_tokens_alone_keeps_its_meaning_or_is_refused(command):
    from helpers.core.errors import BadInputError

    if COMMANDS[command][1] == "drafted":  # simulate, rate-for, speculate, reproduce: a chain of N, as before
        assert _shape(command, "--draft-tokens", 4) == Drafting.chain(4) == _shape(command, "--num-speculative-tokens", 4)
    else:  # metrics, report: it meant a chain of N - 1 there; now refused, naming the flag to use
        with pytest.raises(BadInputError, match="--draft-tokens 4 alone .*--num-speculative-tokens K"):
            _shape(command, "--draft-tokens", 4)


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("flags,words", [
    (("--num-speculative-tokens", 3, "--speculative-num-steps", 5), ("--num-speculative-tokens 3",
                                                                       "--speculative-num-steps 5", "disagree")),
    (("--num-speculative-tokens", 3, "--speculative-eagle-topk", 4), ("--speculative-eagle-topk 4", "disagree")),
    (("--speculative-num-draft-tokens", 4), ("--speculative-num-draft-tokens 4 alone",)),
])
def test_flags_that_disagree_are_one_line_exit_2_before_any_work(cli, tmp_path, command, flags, words):
    base, _ = COMMANDS[command]
    base = [tmp_path / "out" if a == "OUT" else a for a in base]
    r = cli(command, *base, *flags)
    _one_line_error(r, *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "probe"])
def test_an_alias_and_its_engine_flag_with_two_values_are_refused(cli, tmp_path, command):
    base, _ = COMMANDS[command]
    base = [tmp_path / "out" if a == "OUT" else a for a in base]
    _one_line_error(cli(command, *base, "--steps", 3, "--speculative-num-steps", 4),
                    "--steps 3", "--speculative-num-steps 4")


# -- metrics: a vLLM launch's num_speculative_tokens works as given --------------------------------
def test_metrics_takes_vllms_num_speculative_tokens_as_given(cli):
    new = cli("metrics", VLLM_METRICS, "--num-speculative-tokens", 3, "--json")
    assert new.returncode == 0, new.stderr
    got = json.loads(new.stdout)
    assert got["drafting"] == "chain, 3 tokens"
    assert got["drafting_flags"] == {"vllm": {"num_speculative_tokens": 3},
                                     "sglang": {"speculative_num_steps": 3, "speculative_eagle_topk": 1,
                                                "speculative_num_draft_tokens": 4}}
    old = json.loads(cli("metrics", VLLM_METRICS, "--steps", 3, "--topk", 1, "--json").stdout)
    assert got["per_token_rate"] == old["per_token_rate"]
    assert Drafting.chain(3).expected(got["per_token_rate"]) == pytest.approx(got["accept_length"])
    shorter = json.loads(cli("metrics", VLLM_METRICS, "--num-speculative-tokens", 2, "--json").stdout)
    assert shorter["per_token_rate"] != got["per_token_rate"]  # the flag is read, not ignored


def test_metrics_refuses_num_speculative_tokens_passed_as_draft_tokens_naming_the_flag(cli):
    # a vLLM user's num_speculative_tokens 3 typed as SGLang's root-counted --draft-tokens
    r = cli("metrics", VLLM_METRICS, "--steps", 3, "--topk", 1, "--draft-tokens", 3)
    _one_line_error(r, "--draft-tokens 3", "--num-speculative-tokens 3")


def test_metrics_reads_an_sglang_tree_in_either_spelling(cli):
    new = json.loads(cli("metrics", SGLANG_META, *TREE, "--json").stdout)
    old = json.loads(cli("metrics", SGLANG_META, *TREE_OLD, "--json").stdout)
    assert new["drafting"] == old["drafting"] == Drafting(5, 4, 16).label
    assert new["per_token_rate"] == old["per_token_rate"]
    assert new["drafting_flags"]["vllm"] is None  # vLLM drafts chains


# -- simulate, rate-for: the same numbers, and both engines' terms in the JSON ----------------------
def test_simulate_and_rate_for_give_the_same_numbers_in_either_spelling(cli):
    sim = [json.loads(cli("simulate", "--accept-rate", 0.6, "--trials", 1000, *f, "--json").stdout)
           for f in (("--num-speculative-tokens", 3), ("--draft-tokens", 3))]
    assert sim[0]["expected_accept_length"] == sim[1]["expected_accept_length"] == pytest.approx(
        Drafting.chain(3).expected(0.6))
    assert sim[0]["vllm"] == {"num_speculative_tokens": 3} and sim[0]["sglang"]["speculative_num_draft_tokens"] == 4
    tree = [json.loads(cli("simulate", "--accept-rate", 0.21, "--trials", 1000, *f, "--json").stdout)
            for f in (TREE, TREE_OLD)]
    assert tree[0]["expected_accept_length"] == tree[1]["expected_accept_length"]
    assert tree[0]["mode"] == "tree" and tree[0]["vllm"] is None
    rates = [json.loads(cli("rate-for", "--accept-length", 1.91, *f, "--json").stdout) for f in (TREE, TREE_OLD)]
    assert rates[0]["per_token_rate"] == rates[1]["per_token_rate"]
    assert Drafting(5, 4, 16).expected(rates[0]["per_token_rate"]) == pytest.approx(1.91, abs=1e-6)
    assert rates[0]["sglang"] == Drafting(5, 4, 16).sglang()
    lone = json.loads(cli("rate-for", "--accept-length", 1.91, "--draft-tokens", 4, "--json").stdout)
    assert lone["draft_tokens"] == 4 and lone["vllm"] == {"num_speculative_tokens": 4}  # echoed as typed


# -- report: its settings from the flags, before any notebook ------------------------------------
def test_report_settings_read_the_engines_flags(tmp_path):
    from helpers.commands.report import settings_from_args

    new = settings_from_args(_parse("report", *TREE))
    old = settings_from_args(_parse("report", *TREE_OLD))
    assert new.drafting == old.drafting == Drafting(5, 4, 16)
    chain = settings_from_args(_parse("report", "--num-speculative-tokens", 2))
    assert chain.drafting == Drafting.chain(2) and chain.is_chain and chain.num_draft_tokens == 3
    d = chain.to_dict()
    assert d["vllm"] == {"num_speculative_tokens": 2} and d["sglang"]["speculative_num_steps"] == 2


def test_report_a_vllm_flag_beside_an_sglang_log_chain_conflict_is_named(tmp_path):
    from helpers.commands.report import settings_from_args

    log = SAMPLES / "logs" / "sglang.log"
    s = settings_from_args(_parse("report", "--log", log, "--num-speculative-tokens", 2, "--drafting-from", "flags"))
    assert s.drafting == Drafting.chain(2)
    assert "--num-speculative-tokens 2" in s.sources.get("drafting_conflict", "")


# -- speculate: a real run, either spelling -----------------------------------------------------
def test_speculate_runs_with_vllms_flag_as_with_the_older_one(cli):
    runs = []
    for flags in (("--num-speculative-tokens", 2), ("--draft-tokens", 2)):
        r = cli("speculate", DRAFT, "--max-prompts", 1, "--max-new-tokens", 6, "--readings", "offset",
                "--device", "cpu", *flags, "--json")
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout)["readings"]["offset"])
    assert runs[0]["settings"] == runs[1]["settings"]
    assert runs[0]["settings"]["vllm"] == {"num_speculative_tokens": 2}
    assert runs[0]["settings"]["draft_tokens"] == 2 and runs[0]["settings"]["num_draft_tokens"] == 3  # unchanged
    assert runs[0]["mean_accept_length"] == runs[1]["mean_accept_length"]
    assert len(runs[0]["per_position_unconditional"]) == 2


# -- evaluate: top-k accuracy is not tree branching ------------------------------------------------
def test_evaluate_accuracy_topk_and_its_older_alias():
    from helpers.__main__ import build_parser

    p = build_parser()
    base = ["evaluate", str(DRAFT), "--samples", str(SAMPLES / "tiny_hidden_states")]
    assert p.parse_args(base + ["--accuracy-topk", "3"]).topk == 3
    assert p.parse_args(base + ["--topk", "3"]).topk == 3
    assert p.parse_args(base).topk == 5
    assert "--accuracy-topk" in p._subparsers._group_actions[0].choices["evaluate"].format_help()


# -- Drafting is the one carrier ---------------------------------------------------------------
def test_settings_delegate_the_shape_to_drafting():
    from helpers.speculate.result import SpecSettings
    from helpers.ui.settings import RunSettings

    s = RunSettings(steps=5, topk=4, draft_tokens=16)
    assert (s.is_chain, s.num_draft_tokens) == (s.drafting.is_chain, s.drafting.num_draft_tokens) == (False, 16)
    c = RunSettings(steps=4)
    assert (c.is_chain, c.num_draft_tokens) == (True, 5)
    assert SpecSettings(drafting=Drafting(5, 4, 16)).is_chain is False
    assert SpecSettings(drafting=Drafting(5, 4, 16)).to_dict()["sglang"] == Drafting(5, 4, 16).sglang()
    assert Drafting(5, 4, 16).engine_flags()["vllm"] is None
    assert Drafting.chain(3).engine_flags() == {"sglang": Drafting.chain(3).sglang(), "vllm": {"num_speculative_tokens": 3}}


def test_a_refusal_names_the_flags_as_typed(cli):
    r = cli("probe", "http://127.0.0.1:9", "--speculative-num-steps", 3, "--speculative-eagle-topk", 1,
            "--speculative-num-draft-tokens", 3)
    _one_line_error(r, "--speculative-num-draft-tokens 3:", "give --speculative-num-draft-tokens 4",
                    "--num-speculative-tokens 3")
    assert " --draft-tokens" not in r.stderr and " --topk" not in r.stderr  # probe has no such aliases
    old = cli("simulate", "--accept-rate", 0.5, "--steps", 3, "--topk", 1, "--draft-tokens", 3)
    _one_line_error(old, "--draft-tokens 3:", "give --draft-tokens 4", "--num-speculative-tokens 3")


def test_logs_state_the_logged_shape_in_both_engines_terms(cli):
    vllm = json.loads(cli("logs", SAMPLES / "logs" / "vllm.log", "--json").stdout)["conversion"]
    sglang = json.loads(cli("logs", SAMPLES / "logs" / "sglang.log", "--json").stdout)["conversion"]
    assert vllm["drafting_flags"]["vllm"] == {"num_speculative_tokens": 3}
    assert sglang["drafting_flags"] == {"sglang": Drafting(5, 4, 16).sglang(), "vllm": None}
