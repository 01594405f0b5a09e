"""The evidence ladder under sampling: figures measured at different temperatures are never compared;
with the serving temperature unknown the ladder says what it assumed and calls a deployment bug only
below every plausible temperature's engine-free figure (the lowest of them)."""
from __future__ import annotations

from helpers.speculate.ladder import Figure, engine_free_for, evidence_ladder, figure_from_run

SHAPE = (3, 1, 4)


def ef(value, t, se=0.03):
    return Figure(value, se, f"engine-free at T = {t:g}", SHAPE, temperature=t,
                  rule="greedy" if t == 0 else "vllm-greedy-draft")


CURVE = [ef(2.6, 0.0), ef(2.2, 0.5), ef(1.95, 0.7), ef(1.6, 1.0)]


def test_a_stated_serving_temperature_is_compared_only_at_that_temperature():
    serving = Figure(1.9, 0.03, "serving log", SHAPE, temperature=0.7, rule="vllm-greedy-draft")
    chosen, notes = engine_free_for(serving, CURVE[0], CURVE[1:])
    assert chosen.temperature == 0.7 and notes == []
    lad = evidence_ladder(serving=serving, engine_free=CURVE[0], engine_free_curve=CURVE[1:])
    assert lad.verdict == "no deployment bug"  # 1.9 against greedy 2.6 would have been "a deployment bug"
    assert "at T = 0.7" in lad.rungs[0].text and " greedy " not in lad.rungs[0].text and "2.60" not in lad.rungs[0].text


def test_figures_at_different_temperatures_are_not_compared():
    serving = Figure(1.2, 0.03, "serving log", SHAPE, temperature=0.7)
    lad = evidence_ladder(serving=serving, engine_free=CURVE[0])  # only the greedy loop
    assert lad.verdict != "a deployment bug"
    assert any("never compared" in n for n in lad.rungs[0].notes)


def test_an_unknown_serving_temperature_is_said_and_the_lowest_figure_decides():
    low = Figure(1.7, 0.03, "serving metrics", SHAPE)  # below greedy 2.6, above T = 1's 1.6
    lad = evidence_ladder(serving=low, engine_free=CURVE[0], engine_free_curve=CURVE[1:])
    assert lad.verdict == "no deployment bug", lad.conclusion
    note = " ".join(lad.rungs[0].notes)
    assert "temperature is not stated" in note and "greedy 2.60" in note and "T in {0, 0.5, 0.7, 1}" in note
    assert "at an unstated temperature" in lad.rungs[0].text
    very_low = Figure(1.05, 0.01, "serving metrics", SHAPE)
    assert evidence_ladder(serving=very_low, engine_free=CURVE[0], engine_free_curve=CURVE[1:]).verdict \
        == "a deployment bug"


def test_with_only_the_greedy_loop_the_assumption_is_named():
    serving = Figure(1.2, 0.02, "serving log", SHAPE)
    lad = evidence_ladder(serving=serving, engine_free=CURVE[0])
    assert lad.verdict == "a deployment bug"  # as before, but it says what it assumed
    assert any("assumed greedy" in n and "--temperature" in n for n in lad.rungs[0].notes)


def test_figures_that_state_no_temperature_compare_as_before():
    serving, engine_free = Figure(1.2, 0.02, "a", SHAPE), Figure(2.5, 0.02, "b", SHAPE)
    lad = evidence_ladder(serving=serving, engine_free=engine_free)
    assert lad.verdict == "a deployment bug" and not lad.rungs[0].notes[:-1]


def test_an_engine_defect_decides_over_any_wiring():
    serving = Figure(1.02, 0.004, "serving log", SHAPE, temperature=0.7)
    defect = {"key": "vllm-cpu-sampled-eagle3", "conclusion": "the engine's sampler: ... Not the draft or its wiring."}
    lad = evidence_ladder(serving=serving, engine_free=CURVE[0], engine_free_curve=CURVE[1:], engine_defect=defect,
                          reproduced={"key": "window", "label": "a wrong attention window", "mean": 1.34,
                                      "stderr": 0.02, "z": 1.0, "reproduces": True})
    assert lad.verdict == "the engine's sampler" and lad.reproduced is None
    assert lad.conclusion.startswith("Not the draft, not its wiring: the engine's sampler")
    assert "1.95" in lad.conclusion  # the loop at the serving temperature, beside it


def test_figure_from_run_states_its_temperature_and_rule():
    run = {"mean_accept_length": 1.9, "stderr": 0.05,
           "settings": {"steps": 3, "topk": 1, "temperature": 0.7, "acceptance_rule": "vllm-greedy-draft"}}
    f = figure_from_run(run, "x")
    assert (f.temperature, f.rule, f.shape) == (0.7, "vllm-greedy-draft", SHAPE)
    assert f.to_dict()["temperature"] == 0.7


def test_evaluate_predict_states_that_its_prediction_is_greedy(cli):
    import json

    from conftest import SAMPLES

    res = cli("evaluate", str(SAMPLES / "tiny_draft_sglang"), "--samples", str(SAMPLES / "tiny_hidden_states"),
              "--steps", "3", "--max-samples", "2", "--predict", "3", "--temperature", "0.7", "--engine", "vllm",
              "--json")
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    assert (d["temperature"], d["acceptance_rule"], d["temperature_asked"]) == (0.0, "greedy", 0.7)
    assert all(p["temperature"] == 0.0 and p["acceptance_rule"] == "greedy" for p in d["predicted_accept_length"])
    assert "vllm-greedy-draft" in d["temperature_note"] and "speculate" in d["temperature_note"]


def test_the_temperature_figure_draws_each_source_once():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.plots.speculation import plot_accept_length_vs_temperature

    curve = [{"temperature": t, "mean_accept_length": m, "stderr": 0.05} for t, m in ((0, 1.85), (0.5, 1.91), (1.0, 1.76))]
    ax = plot_accept_length_vs_temperature(curve, predicted=2.2, served=(0.7, 1.02, 0.004), rule="vllm-greedy-draft")
    labels = ax.get_legend_handles_labels()[1]
    assert any(x.startswith("engine-free (vllm-greedy-draft)") for x in labels)
    assert "served 1.02 at T = 0.7" in labels and any(x.startswith("predicted") for x in labels)
    plt.close(ax.figure)
    ax = plot_accept_length_vs_temperature(curve, served=(None, 1.5, 0.05))
    assert "served 1.50 (temperature not stated)" in ax.get_legend_handles_labels()[1]
    plt.close(ax.figure)


def test_the_serving_side_rule_names_agree_with_the_rules_module():
    from helpers.engines.acceptance_rules import rule_for_engine
    from helpers.serving.temperature import rule_name

    for engine in ("vllm", "vllm==0.32.0", "llamacpp", "llama.cpp", "sglang>=0.5", "tokenspeed", "trtllm"):
        assert rule_name(0.7, engine) == rule_for_engine(engine).name, engine
    assert rule_name(0.0, "vllm") == "greedy" and rule_name(None, None) is None


def test_logs_and_metrics_stay_free_of_torch():
    import subprocess
    import sys

    from conftest import SAMPLES

    code = ("import sys; from helpers.serving.logs import read_log; "
            f"t = read_log({str(SAMPLES / 'logs' / 'vllm_sampled_t07.log')!r}); s = t.summary(); "
            "assert s['engine_defect'] and s['acceptance_rule'] == 'vllm-greedy-draft'; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
