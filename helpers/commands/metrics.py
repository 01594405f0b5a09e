"""`metrics SOURCE [--interval S] [--json] [-o OUT]`: serving / training acceptance on one scale;
`metrics URL --watch`: accept length per interval over time (`helpers.serving.over_time`)."""
from __future__ import annotations

from helpers.commands import _options
from helpers.core import jsontext

HELP = "read acceptance from a /metrics URL or file, /get_server_info, meta_info JSONL, a log or a SpecForge log"
DESCRIPTION = """\
Read speculative-decoding acceptance from wherever it was recorded and put it on one scale:
accept length with the bonus token, the per-token rate that length implies under the drafting
settings, and per-position acceptance both unconditional (the chance a draft reaches position j,
what vLLM reports) and conditional (given position j-1 was accepted). Each source's own definition
is printed with it.

SOURCE is a URL or a file:
  http://HOST:PORT[/metrics]     vLLM counters vllm:spec_decode_*, llama.cpp's llamacpp:spec_decode_*
                                 (1 + accepted / drafts, drafts = verify steps) or SGLang gauges sglang:spec_accept_*
  http://HOST:PORT/get_server_info   SGLang: internal_states[i].avg_spec_accept_length per DP rank
  FILE  a saved /metrics text, a /get_server_info JSON, a JSONL of SGLang responses (meta_info) or of
        vLLM answers (0.32+ --per-request-spec-decode-metrics: metrics.speculative_decoding), of
        vLLM per-request counts (num_drafts, num_accepted_tokens, ...), an SGLang/vLLM/llama.cpp
        server log, or a SpecForge training log (acc_i, simulated_acc_len).
--interval S (a URL): scrape twice S seconds apart and use the counters' difference (vLLM's
counters count from server start; the difference is what the traffic in between did; so do
llama.cpp's). A llama.cpp log's requests are pooled with the verify steps each line's mean len and
acc per pos give (notes say where they are not exact).
""" + _options.SHAPE_TEXT + """
--draft-tokens alone (it meant a chain of N - 1 here, and a chain of N elsewhere) is refused in one
line naming --num-speculative-tokens. Drafting settings: the flags, else what the source states (SGLang's server_args line in either form or
server info, vLLM's num_speculative_tokens), else a chain as long as the positions reported; read
and checked by the same code as `rate-for` (a shape SGLang does not run: one line, exit 2), with
a warning when a chain's length differs from the positions the source reports.
--year Y: the year of a vLLM log's times (its lines carry none; default this year). Lines or samples that are recognised but do not read are counted and listed
as garbled, never guessed; counters the source lacks are listed as missing. A row that reads but
is out of bounds (accept length below 1 or above what the drafting emits per verify step, stated by
the source or else by the flags; a meta_info with fewer completion tokens than verify steps; a rate
outside [0, 1]; a negative count; a counter that went down between two scrapes, a restart) is
named with its line or field and not counted (--json: reading.invalid_rows [{line, field, value,
why}]); when none is left, one line, exit 2.
-o OUT writes the --json object to OUT. Exit 2 with one line when nothing in SOURCE reads.

Temperature: /metrics and per-request records never state it; a vLLM log does with
--enable-log-requests (its SamplingParams lines); --temperature T states it. --json: temperature
(null: unknown), temperature_source, acceptance_rule (the engine's rule at it, 'greedy' at 0),
engine_release, engine_defect: where the numbers show an engine's own sampled-decoding defect
(vLLM's CPU build's sampler: acceptance only at position 0; its releases in helpers/engines/defects.py),
{key, culprit, strength, evidence, caveats, conclusion, defect}, else null; the text names it.

Forced acceptance: when the source (a log's start-up lines, vLLM's /server_info JSON) or
--launch-command TEXT (the command line the server was started with, environment assignments
included: SGLang's and TensorRT-LLM's settings are environment variables no page or log of the
server reports) shows a benchmark setting that presets acceptance (SGLANG_SIMULATE_ACC_LEN > 0,
rejection_sample_method "synthetic", TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS > 0,
--spec-decode-acceptance-length / -rate), one line names it and where it was seen and no figure
is given (--json: forced_acceptance {setting, engine, means, where, line}, every figure null,
reading.rows empty); exit 0.

Accept length over time (--watch, a URL): scrape /metrics every --interval S seconds (default 10)
and print each interval's accept length as it comes (counters of consecutive scrapes differenced,
through the same bounds as --interval; SGLang's gauges read as they are), with a standard error from
the interval's drafts (per-position counters; docs/serving-metrics.md). BOUNDED: at most --count N
scrapes (default 10, so N - 1 intervals; at most 100000) and at most --max-seconds T in all
(default N x S + 60); whichever comes first stops it, and Ctrl-C stops it cleanly with what was
measured so far. An interval with no drafts says so; a counter that goes down is a restart: named,
and a new baseline starts. The first --baseline K intervals with drafts (default 3; again after a
restart) are the fresh-server baseline; a later interval at least 0.05 AND 3 standard errors below
it is flagged DECAYED (vllm#41838: accept length decays under prefix caching, a restart recovers it).
--json: {source, kind, scrapes, seconds, stopped, intervals[{index, start_s, end_s, status,
accept_length, stderr, stderr_method, drafts, accepted, draft_tokens, accepted_per_pos, why, label,
segment, flag, z}], baselines, decayed, restarts, rule}. -o OUT.png (.svg, .pdf): a plot of accept
length per interval against time; -o OUT.json: the JSON object."""


def add_arguments(p) -> None:
    p.add_argument("source", metavar="SOURCE", help="a URL (/metrics or /get_server_info) or a file")
    p.add_argument("--interval", type=float, default=None, metavar="S",
                   help="URL only: scrape twice, S seconds apart, and difference the counters (--watch: the period, "
                        "default 10)")
    p.add_argument("--watch", action="store_true",
                   help="URL only: scrape every S seconds and print the accept length per interval, flagging decay "
                        "against the first intervals; bounded by --count and --max-seconds, Ctrl-C stops it")
    p.add_argument("--count", type=int, default=10, metavar="N",
                   help="--watch: at most N scrapes (N - 1 intervals; default 10, at most 100000)")
    p.add_argument("--max-seconds", type=float, default=None, metavar="T",
                   help="--watch: at most T seconds in all (default N x S + 60)")
    p.add_argument("--baseline", type=int, default=None, metavar="K",
                   help="--watch: the first K intervals with drafts are the fresh-server baseline (default 3)")
    _options.drafting(p, "refuse")
    p.add_argument("--year", type=int, default=None, metavar="Y", help="year of a vLLM log's times (default: this year)")
    p.add_argument("--launch-command", metavar="TEXT", default=None,
                   help="the command the server was started with (env assignments included), read for forced acceptance")
    p.add_argument("--temperature", type=float, default=None, metavar="T",
                   help="the temperature the requests were sampled at (/metrics never states it; a vLLM log does with "
                        "--enable-log-requests): stated beside the accept length, and the engine's sampled-decoding "
                        "defect is looked for (default: the log's request lines, else unknown)")
    _options.json_flag(p, "print one JSON object: the common scale and the rows read")
    _options.out(p, "also write the JSON object to this file")


def run(args) -> int:
    from helpers.acceptance.sources import normalise
    from helpers.core.errors import BadInputError
    from helpers.core.outputs import output_file
    from helpers.serving.metrics import read_metrics

    from helpers.acceptance.drafting import Drafting

    shape = _options.shape_flags(args, "refuse")  # the engines' flags and the aliases, read once
    try:
        Drafting.check_flags(shape["steps"], shape["topk"], shape["draft_tokens"], lone="sglang")
        if shape["steps"] is not None and (shape["topk"] in (None, 1) or shape["draft_tokens"] is not None):
            Drafting.from_flags(shape["steps"], shape["topk"], shape["draft_tokens"], lone="sglang")  # whole: checked
    except ValueError as e:
        raise BadInputError(None, _options.as_typed(args, str(e))) from None
    if args.interval is not None and not args.interval > 0:
        raise BadInputError(None, f"--interval must be a positive number of seconds, got {args.interval}")
    if args.watch:
        return _watch(args, shape)
    out = output_file(args.out, "metrics JSON") if args.out else None
    if args.interval is not None and not args.interval > 0:
        raise BadInputError(None, f"--interval must be a positive number of seconds, got {args.interval}")
    table = read_metrics(args.source, interval=args.interval, year=args.year)
    if not table.settings and table.forced is None:  # the source states no drafting: the flags' bounds the rows
        _restrict_to_flags(table, shape)
    forced = table.forced
    if forced is None and args.launch_command:
        from helpers.serving.startup import setup_from_text

        forced = setup_from_text(args.launch_command, "--launch-command").forced
    if forced is not None:  # no figure, one line
        from helpers.acceptance.sources import DEFINITIONS, Acceptance
        from helpers.serving.startup import forced_line

        table.forced = forced
        obj = {**Acceptance(str(table.source), table.kind, DEFINITIONS.get(table.kind, table.kind)).to_dict(),
               "forced_acceptance": dict(forced), "reading": table.to_json()}
        _write(out, obj)
        print(jsontext.dumps(obj, indent=2) if args.json else f"{table.source}: {forced_line(forced)}")
        return 0
    acc = normalise(table, steps=shape["steps"], topk=shape["topk"], draft_tokens=shape["draft_tokens"])
    sampling = sampling_of(args.source, table, acc, args.temperature)
    obj = {**acc.to_dict(), **sampling, "forced_acceptance": None, "reading": table.to_json()}
    _write(out, obj)
    print(jsontext.dumps(obj, indent=2) if args.json else acc.report() + _sampling_lines(sampling) + _invalid_lines(table))
    return 0


MAX_COUNT = 100_000


def _watch(args, shape: dict) -> int:
    """`--watch`: the intervals as they come, then the baseline and the decay verdict (text or JSON),
    the plot or the JSON object to -o."""
    from helpers.core.errors import BadInputError
    from helpers.core.outputs import output_file
    from helpers.serving import over_time
    from helpers.serving.metrics import is_url

    if not is_url(args.source):
        raise BadInputError(args.source, "--watch needs a URL to scrape (a file is one scrape)")
    interval = 10.0 if args.interval is None else args.interval
    if not 2 <= args.count <= MAX_COUNT:
        raise BadInputError(None, f"--count must be 2 to {MAX_COUNT} scrapes, got {args.count}")
    max_seconds = args.count * interval + 60 if args.max_seconds is None else args.max_seconds
    if not max_seconds > 0:
        raise BadInputError(None, f"--max-seconds must be a positive number of seconds, got {args.max_seconds}")
    k = over_time.BASELINE if args.baseline is None else args.baseline
    if k < 1:
        raise BadInputError(None, f"--baseline must be at least 1 interval, got {k}")
    plot = json_out = None
    if args.out:
        if str(args.out).lower().endswith(".json"):
            json_out = output_file(args.out, "metrics JSON")
        else:
            plot = _options.plot_path(args.out)
    maximum = _flags_maximum(shape)
    if not args.json:
        print(f"{args.source}: watching, a scrape every {interval:g} s, at most {args.count} scrapes and "
              f"{max_seconds:g} s (Ctrl-C stops)", flush=True)
    def show(iv):  # judged as it comes: the baseline is fixed once its K intervals are in
        over_time.flag(w_intervals + [iv], k)
        w_intervals.append(iv)
        print(over_time.line(iv), flush=True)

    w_intervals: list = []
    w = over_time.watch(args.source, interval=interval, count=args.count, max_seconds=max_seconds, maximum=maximum,
                        on_interval=None if args.json else show)
    baselines = over_time.flag(w.intervals, k)
    obj = {"source": w.source, "kind": w.kind, "scrapes": w.scrapes, "seconds": w.seconds, "stopped": w.stopped,
           "interval_s": interval, "count": args.count, "max_seconds": max_seconds, "baseline_intervals": k,
           **over_time.to_json(w.intervals, baselines), "notes": list(w.notes)}
    _write(json_out, obj)
    if plot is not None and any(iv.status == "ok" for iv in w.intervals):
        import matplotlib

        matplotlib.use("Agg")
        from helpers.plots.serving import save_accept_length_intervals

        save_accept_length_intervals(w.intervals, plot, baselines=baselines,
                                     title=f"accept length per interval: {w.source} ({w.kind})")
    if args.json:
        print(jsontext.dumps(obj, indent=2))
        return 0
    why = {"count": f"{w.scrapes} scrapes (--count)", "time": f"--max-seconds {max_seconds:g} reached",
           "interrupted": "stopped by Ctrl-C"}[w.stopped]
    print(f"  {len(w.intervals)} intervals in {w.seconds:.1f} s, {why}")
    for text in over_time.summary_lines(w.intervals, baselines, k):
        print(text)
    for n in w.notes:
        print(f"  note: {n}")
    if plot is not None:
        print(f"  plot: {plot}" if any(iv.status == "ok" for iv in w.intervals) else
              f"  no interval with a figure: no plot written to {plot}")
    return 0


def _flags_maximum(shape: dict):
    from helpers.acceptance.drafting import Drafting
    from helpers.serving import bounds

    flags = Drafting.from_flags(shape["steps"], shape["topk"], shape["draft_tokens"], lone="sglang")
    return None if flags is None else bounds.maximum_for(flags.kit())


def sampling_of(source, table, acc, temperature: float | None) -> dict:
    """The temperature the figure was measured at (--temperature, else a log's request lines, else
    unknown), the acceptance rule the engine applies at it, and the engine's own sampled-decoding
    defect where the numbers show its signature (`helpers.engines.defects`)."""
    from helpers.engines.defects import defect_from_acceptance, engine_of_kind
    from helpers.serving.temperature import Stated, given, rule_name

    if temperature is not None and not (temperature >= 0 and temperature == temperature):
        from helpers.core.errors import BadInputError

        raise BadInputError(None, f"--temperature must be >= 0, got {temperature}")
    st, release = given(temperature, "--temperature"), None
    if str(table.kind).endswith("-log"):
        from helpers.serving.logs import read_log

        log = read_log(source)
        release = log.release
        if temperature is None:
            st = log.temperature or Stated(None)
    elif temperature is None:
        st.source = f"{table.kind}: not stated by the source (pass --temperature T)"
    engine = engine_of_kind(table.kind)
    match = defect_from_acceptance(acc, table, temperature=st.temperature, release=release)
    return {"temperature": st.temperature, "temperature_source": st.text(),
            "acceptance_rule": rule_name(st.temperature, engine), "engine_release": release,
            "engine_defect": None if match is None else match.to_dict()}


def _sampling_lines(s: dict) -> str:
    text = f"\n  sampling: {s['temperature_source']}; acceptance rule {s['acceptance_rule'] or 'unknown'}"
    if s["engine_defect"]:
        text += f"\n  engine defect: {s['engine_defect']['conclusion']}"
    return text


def _restrict_to_flags(table, shape: dict) -> None:
    """Rows above what the drafting flags' shape emits per verify step move to invalid_rows
    (`helpers.serving.bounds`); none left: one line, exit 2."""
    from helpers.acceptance.drafting import Drafting
    from helpers.core.errors import BadInputError
    from helpers.serving import bounds

    flags = Drafting.from_flags(shape["steps"], shape["topk"], shape["draft_tokens"], lone="sglang")
    if flags is None:
        return
    table.restrict(bounds.maximum_for(flags.kit()))
    if not table.rows:
        raise BadInputError(table.source, f"no figure within the bounds of the drafting flags ({flags.label}): "
                            + bounds.summary_line(table.invalid_rows))


def _invalid_lines(table) -> str:
    """The rows out of bounds (`helpers.serving.bounds`), each named by its line: not counted."""
    rows = table.invalid_rows
    text = "".join(f"\n  invalid {'line ' if isinstance(r['line'], int) else ''}{r['line']}: {r['why']} (not counted)"
                   for r in rows[:10])
    return text + (f"\n  and {len(rows) - 10} more out of bounds (--json: reading.invalid_rows)" if len(rows) > 10 else "")


def _write(out, obj) -> None:
    from helpers.core.errors import BadInputError

    if out is not None:
        try:
            out.write_text(jsontext.dumps(obj, indent=2) + "\n")
        except OSError as e:
            raise BadInputError(out, f"cannot write: {e.strerror or e}") from None
