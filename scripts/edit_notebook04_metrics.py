"""Add the serving-metrics section to notebook 04 (run once; kept for the record of the edit)."""
from pathlib import Path

import nbformat

NB = Path(__file__).resolve().parents[1] / "notebooks" / "04_accept_length_simulation.ipynb"
nb = nbformat.read(NB, as_version=4)
params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
if "metrics = None" not in params.source:
    params.source = params.source.replace(
        'logs = ["../data_samples/logs/sglang.log"]  # SGLang / vLLM serving logs; []: none\n',
        'logs = ["../data_samples/logs/sglang.log"]  # SGLang / vLLM serving logs; []: none\n'
        "metrics = None  # serving metrics: a /metrics or /get_server_info URL, or a saved file; None: not given\n"
        "speculate_per_position = None  # unconditional per-position acceptance measured by `speculate` (floats)\n")
    assert "metrics = None" in params.source
conclusion = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith("## Conclusion"))
if not any("## 5 · Serving metrics" in c.source for c in nb.cells):
    cells = [
        nbformat.v4.new_markdown_cell(
            "## 5 · Serving metrics on one scale\n\n"
            "Engines and trainers count acceptance differently: whether the bonus token is in the accept length, what\n"
            "SGLang's `accept rate` divides by, whether vLLM's per-position rate is conditional (it is not: it is the\n"
            "chance a draft reaches that position). `helpers.serving.metrics` reads the source given as `metrics` (a vLLM\n"
            "`/metrics`, SGLang's `/get_server_info` or gauges, a JSONL of `meta_info`, a SpecForge log) and\n"
            "`helpers.acceptance.sources` puts it on one scale, stating the source's own definition. Serving's per-position\n"
            "acceptance is then drawn against the draft's offline figures (evaluate's per-step top-1 above, and the\n"
            "acceptance `speculate` measured with the target when `speculate_per_position` is given), with a computed\n"
            "diagnosis. Last, the accept length is placed among **published reference values** - the publishers'\n"
            "benchmark figures shipped with the kit, not your data."),
        nbformat.v4.new_code_cell(
            "from helpers.acceptance.sources import compare_online_offline, normalise_for\n"
            "from helpers.serving.metrics import read_metrics\n"
            "from helpers.acceptance.references import place\n\n"
            "serving = None\n"
            "if not metrics:\n"
            "    print(\"not given: no serving metrics (pass --metrics FILE|URL to the report, or set `metrics`)\")\n"
            "else:\n"
            "    serving = normalise_for(read_metrics(metrics), settings)\n"
            "    print(serving.report())"),
        nbformat.v4.new_code_cell(
            "diagnosis = None\n"
            "offline_steps = part.step_top1 if have_samples else None  # evaluate's per-step top-1 (section 1)\n"
            "if serving is not None and serving.per_position_unconditional:\n"
            "    diagnosis = compare_online_offline(serving.per_position_unconditional, offline_steps, measured=speculate_per_position)\n"
            "    ax = plots.plot_online_offline(serving.per_position_unconditional, offline_steps,\n"
            "                                   measured=speculate_per_position, diagnosis=diagnosis, online_label=serving.kind)\n"
            "    outputs.figure(ax, \"online_vs_offline\", source=None if metrics.startswith(\"http\") else metrics)\n"
            "    print(diagnosis)\n"
            "elif serving is not None:\n"
            "    print(f\"{serving.kind} gives no per-position acceptance: no online-against-offline figure\")"),
        nbformat.v4.new_code_cell(
            "placement = None\n"
            "if serving is not None and serving.accept_length is not None:\n"
            "    placement = place(serving.accept_length, None, settings.steps, settings.topk, settings.num_draft_tokens)\n"
            "    print(\"Published reference values (from their publishers, not your data):\")\n"
            "    for r in placement[\"rows\"]:\n"
            "        print(f\"  {r['accept_length']:.2f}  {r['target']} + {r['draft']} ({r['engine']}, {r['benchmark']})  {r['source']}\")\n"
            "    print(placement[\"text\"])\n"
            "outputs.record(serving_metrics=None if serving is None else {\n"
            "    **serving.to_dict(), \"diagnosis\": diagnosis,\n"
            "    \"reference_placement\": None if placement is None else placement[\"text\"]})"),
    ]
    nb.cells[conclusion:conclusion] = cells
for c in nb.cells:
    if c.cell_type == "code":
        c.outputs, c.execution_count = [], None
nbformat.write(nb, NB)
print("edited", NB)
