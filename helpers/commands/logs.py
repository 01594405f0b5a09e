"""`logs FILE [--json] [--plot OUT.png]`: SGLang / vLLM / llama.cpp speculative-decoding log lines -> table."""
from __future__ import annotations

from helpers.commands import _options
from helpers.core import jsontext
from helpers.core.errors import BadInputError

HELP = "read SGLang 'Decode batch' / vLLM 'SpecDecoding metrics' / llama.cpp 'draft acceptance' lines: accept length over time"
DESCRIPTION = """\
Read a server log of SGLang (current 'Decode batch, ... accept len: X, accept rate: Y, ...' and
older 'Decode batch. ... accept len: X, ...'), vLLM ('SpecDecoding metrics: Mean acceptance
length: X, ...', with the generation tok/s of the engine stats line before it) or llama.cpp's
llama-server (one 'draft acceptance = R (A accepted / G generated)[, mean acceptance length = L,
acceptance rate per position = (...)]' line per request). Prints counts, mean accept length,
acceptance rate and throughput; lines it does not recognise are counted and skipped, a recognised
line whose numbers do not read is counted as garbled and skipped, and fields an engine fork adds
to a line are skipped while the known ones still read.
A line that reads but is out of bounds (an accept length below 1, or above what the drafting the
log states emits per verify step: a chain of K at most K + 1; with no drafting stated, above 257;
a rate outside [0, 1]; a negative count) is named with its line number and never averaged in
(--json: invalid, invalid_rows [{line, field, value, why}]); a log with no line within bounds is
one line, exit 2.
The drafting settings on the log's start-up line (SGLang's server_args=..., vLLM's
num_speculative_tokens) are read and used: the per-token rate the mean accept length implies
under them, and which definition SGLang's accept rate follows in this build (--json: conversion
{drafting, per_token_rate, accept_rate_definition, drafting_flags{sglang{...}, vllm{...} or null}}).

Forced acceptance: a log whose server was started with a benchmark setting that presets
acceptance (SGLang SGLANG_SIMULATE_ACC_LEN > 0, vLLM rejection_sample_method "synthetic",
TensorRT-LLM TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS > 0, ATOM --spec-decode-acceptance-length
/ -rate, wherever the log shows it: an env dump, the launch command, vLLM's non-default args) is
never evidence about the draft: one line names the setting and the line it was seen on, no
figure is concluded (--json: forced_acceptance {setting, engine, means, where, line}; the
accept-length and rate fields null, rows empty), no plot is written; exit 0.

Algorithm: an EAGLE-3 draft run with the EAGLE (1/2) algorithm (SGLang speculative_algorithm
'EAGLE', vLLM method 'eagle') is the doctor's eagle3-as-eagle finding. The draft is EAGLE-3 by
--checkpoint DRAFT (the doctor's own check, `doctor --algorithm eagle`), else by what the log
names (a draft class such as LlamaForCausalLMEagle3, or a draft path naming eagle3).
Sampling: the requests' temperature from the log's request lines (vLLM `Received request ...:
params: SamplingParams(... temperature=T ...)`, written with --enable-log-requests; SGLang
--log-requests), else unknown; the acceptance rule the engine applies at it; and, where the rows show
its signature, the engine's own sampled-decoding defect (vLLM's CPU build's sampler: acceptance
only at position 0; the release range in helpers/engines/defects.py) named with its root cause and fix instead of
the draft or its wiring (--json: temperature, temperature_source, temperatures, acceptance_rule,
engine_release, engine_defect).
Accept length over time (vllm#41838: it decays under prefix caching, a restart recovers it): each
row is one interval (vLLM's logging interval, SGLang's decode-log interval, llama.cpp's request),
printed with its accept length and a standard error from its drafts (vLLM's and llama.cpp's counts
and per-position rates; SGLang's lines state no drafts: the baseline rows' spread). The first
--baseline K rows with a figure (default 3; again after each server start in the log) are the
baseline; a later row at least 0.05 AND 3 standard errors below it is flagged DECAYED. Per prompt
class where the request lines (vLLM --enable-log-requests, SGLang --log-requests) carry a class,
category, model or lora_name: each row labelled by the requests logged since the row before, each
label its own baseline; otherwise the text says none is present. --json: over_time {intervals,
baselines, decayed, restarts, rule, labels}.
--json: the summary plus every parsed row. --plot OUT.png: accept length per interval over time (the suffix
picks the format: .png, .svg, .pdf, ...; an existing file is replaced), with a caption line and
metadata naming the log file (path, size, SHA-256; read a PNG's back with
helpers.plots.provenance.read_figure_metadata).
Exit 2 with one line when the file has no line this reader understands, or when the plot cannot
be written there (no such folder, a folder in its place, an unknown suffix)."""


def add_arguments(p) -> None:
    p.add_argument("file", metavar="LOG", help="an SGLang, vLLM or llama.cpp server log file")
    p.add_argument("--checkpoint", metavar="DRAFT", default=None,
                   help="the served draft: whether the log's speculative algorithm fits it (the doctor's eagle3-as-eagle)")
    p.add_argument("--year", type=int, default=None, metavar="Y",
                   help="year of a vLLM log's times (its lines carry none; default: this year)")
    p.add_argument("--baseline", type=int, default=None, metavar="K",
                   help="the first K rows with a figure (after each server start) are the baseline the later rows are "
                        "judged against for decay (default 3)")
    _options.json_flag(p, "print one JSON object (summary and rows)")
    _options.out(p, "write a plot of accept length over time (the suffix picks the format; --plot is the older name)",
                 aliases=("--plot",), dest="plot", metavar="OUT.png")


def run(args) -> int:
    plot = _options.plot_path(args.plot) if args.plot else None
    from helpers.serving.logs import read_log  # numpy: imported when the command runs, not for --help

    log = read_log(args.file, year=args.year)
    if log.forced:  # one line, no figure concluded, no plot drawn
        if args.json:
            print(jsontext.dumps({**log.to_json(), "conversion": None}, indent=2))
        else:
            print(log.report() + ("" if plot is None else f" (no plot written to {plot})"))
        return 0
    findings = None
    if args.checkpoint:  # the doctor, only where a checkpoint is named (logs starts light)
        from helpers.doctor.served_algorithm import algorithm_findings

        findings = algorithm_findings(log.setup, args.checkpoint)
    if args.baseline is not None and args.baseline < 1:
        raise BadInputError(None, f"--baseline must be at least 1 row, got {args.baseline}")
    from helpers.serving import over_time

    k = over_time.BASELINE if args.baseline is None else args.baseline
    intervals, baselines, labels = over_time.of_log(log, k)
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        from helpers.plots.serving import save_accept_length_intervals

        save_accept_length_intervals(intervals, plot, baselines=baselines, source=log.path,
                                     title=f"accept length per interval: {', '.join(log.engines)} log",
                                     xlabel="time since the first row (s)" if any(
                                         iv.end_s is not None for iv in intervals) else "row")
    from helpers.acceptance.sources import log_conversion

    conv = log_conversion(log.summary())
    if args.json:
        d = log.to_json()
        d["over_time"] = {**over_time.to_json(intervals, baselines), "labels": labels, "baseline_intervals": k}
        if findings is not None:
            d["findings"] = findings
        print(jsontext.dumps({**d, "conversion": conv}, indent=2))
        return 0
    text = log.report()
    if findings is not None:  # the doctor's finding replaces what the log alone shows
        from helpers.doctor.served_algorithm import finding_lines

        text = "\n".join([x for x in text.splitlines() if not x.startswith("  finding: ")] + finding_lines(findings))
    print(text)
    s = log.summary()
    if conv["per_token_rate"] is not None:
        print(f"  per-token rate: {conv['per_token_rate']:.3f} implied by mean accept length "
              f"{s['mean_accept_length']:.3f} under {conv['drafting']} (d2t-lab rate-for)")
    if conv.get("note"):
        print(f"  note: {conv['note']}")
    if conv["accept_rate_definition"]:
        what = ("accept length / num_draft_tokens" if conv["accept_rate_definition"] == "length/N"
                else "accepted drafts / (num_draft_tokens - 1)")
        print(f"  accept rate:   this build prints {what}: not a per-token rate, do not give it to simulate")
    print("\n".join(over_time.interval_lines(intervals, baselines, labels, k)))
    return 0
