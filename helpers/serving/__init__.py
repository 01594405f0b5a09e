"""What a served draft did: serving logs, metrics (Prometheus, server info, per-request records,
training logs) in one table shape.

Modules (import them by name; this file imports nothing):
- `log_lines`: one SGLang / vLLM serving-log line -> one row (the formats read)
- `logs`
- `startup`: the drafting settings and engine release a log states at start-up
- `metrics`
- `records`: per-request records (JSONL, SpecForge logs, a live server's answers) -> rows
- `bounds`: the bounds on every serving number read (a row outside them named, never averaged)
- `measured`: the serving accept length as one figure (mean, stderr, drafting) for the evidence ladder
- `probe_client`: `probe`'s HTTP side: what a server is, one request, its answer handed back raw
- `probe`: a live server measured with the user's prompts (per request, or /metrics differenced)
- `probe_verdict`: what `probe` concludes: the target's tokens, engine-free, reproduce; the result
- `probe_run`: `probe` from start to conclusion: its inputs, the steps in order, what it hands the command
- `temperature`: the sampling temperature a serving source states (log request lines, answers), or unknown
- `over_time`: accept length per interval (scrapes, log rows, probe repetitions), a baseline and a decay flag
"""

__all__ = ["log_lines", "logs", "startup", "metrics", "records", "bounds", "measured", "probe_client", "probe", "probe_verdict",
           "probe_run", "temperature", "over_time"]
