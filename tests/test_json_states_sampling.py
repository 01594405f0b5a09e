"""Every JSON that reports an accept length states its temperature and acceptance rule (null where the
figure is a model of a rate or a length the user gave: then a note says whose they are)."""
from __future__ import annotations

import json

from helpers.speculate.reproduce import Reproduction


def _json(cli, *args):
    r = cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_simulate_and_rate_for_say_their_rate_carries_the_temperature(cli):
    for out in (_json(cli, "simulate", "--accept-rate", "0.7", "--num-speculative-tokens", "3"),
                _json(cli, "rate-for", "--accept-length", "2.2", "--num-speculative-tokens", "3")):
        assert "temperature" in out and "acceptance_rule" in out and "own temperature" in out["sampling_note"]


def test_reproduce_states_the_temperature_and_rule_its_rows_ran_at():
    r = Reproduction(accept_length=2.0, stderr=None, settings={"temperature": 0.7, "acceptance_rule": "vllm-greedy-draft"},
                     prompts=4, rows=[])
    d = r.to_dict()
    assert d["temperature"] == 0.7 and d["acceptance_rule"] == "vllm-greedy-draft"
