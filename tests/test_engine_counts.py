"""How an engine counts a run's steps (helpers.engines.counting), checked step by step.

llama.cpp drafts at most min(K, tokens left - 1) tokens (tools/server/server-context.cpp
get_n_draft_max) and counts no step without a draft; the live comparison with llama-server is
tests/test_engine_llamacpp_loop.py (make test-engine)."""
from __future__ import annotations

import numpy as np

from helpers.engines.counting import EngineCounts


def test_llamacpp_drafts_shrink_at_the_end_of_a_request():
    c = EngineCounts("llamacpp", 3)
    assert [c.drafted(r) for r in (31, 4, 3, 2, 1)] == [3, 3, 2, 1, 0]


def test_a_step_without_a_draft_is_not_a_llamacpp_draft():
    c = EngineCounts("llamacpp==b11434", 3)
    # 8 tokens to generate after the prefill's first: steps with 7, 3, 1 tokens left
    c.record(7, 4)  # full draft, all 3 accepted + bonus
    c.record(3, 2)  # draft of 2, one accepted
    c.record(1, 1)  # no draft: a plain decode
    assert (c.drafts, c.draft_tokens, c.accepted) == (2, 5, 4)
    assert c.accepted_per_position.tolist() == [2, 1, 1]
    assert c.accept_length == 1 + 4 / 2


def test_other_engines_count_every_verify_step_as_a_draft_of_the_whole_shape():
    c = EngineCounts("vllm", 3)
    for remaining, emitted in ((7, 4), (3, 2), (1, 1)):
        c.record(remaining, emitted)
    assert (c.drafts, c.draft_tokens, c.accepted) == (3, 9, 4)
    assert c.to_dict()["engine"] == "vllm"


def test_counts_over_shards_add_up():
    a, b = EngineCounts("llamacpp", 2), EngineCounts("llamacpp", 2)
    a.record(5, 3), b.record(2, 2)
    a.add(b)
    assert (a.drafts, a.draft_tokens) == (2, 3)
    assert np.array_equal(a.accepted_per_position, [2, 1])
