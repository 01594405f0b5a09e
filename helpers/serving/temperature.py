"""The sampling temperature a serving source states, and where it came from.

Accept length depends on the temperature, so every serving figure carries the one it was measured
at, or None (unknown) with a sentence saying so. Where engines record it:

- vLLM logs: one `Received request ...: params: SamplingParams(..., temperature=T, ...)` line per
  request, only when the server runs with `--enable-log-requests` (vllm/entrypoints/serve/utils/
  request_logger.py, the vLLM CPU build read). vLLM's `/metrics` and its per-request answers
  (`metrics.speculative_decoding`) do not carry it;
- SGLang logs with `--log-requests`: `sampling_params={... 'temperature': T ...}` in the request line;
- llama.cpp: each `/completion` answer's `generation_settings.temperature` (what the slot applied);
  its log and `/metrics` do not carry it;
- a probe's own requests: the temperature it sent.

`Stated(temperature, source, values)`: one value when every request used the same, else the list
(`temperature` None: mixed or unknown).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_VLLM = re.compile(r"SamplingParams\(.*?\btemperature=([0-9.eE+-]+)")
_SGLANG = re.compile(r"sampling_params=\{[^}]*'temperature':\s*([0-9.eE+-]+)")
UNKNOWN = "not stated by the source"


@dataclass
class Stated:
    """The temperature a source states: one value, or None (unknown or mixed), and where it was read."""

    temperature: float | None
    source: str = UNKNOWN
    values: list = field(default_factory=list)  # distinct values seen, sorted
    requests: int = 0  # requests whose temperature was read

    @property
    def known(self) -> bool:
        return self.temperature is not None

    def text(self) -> str:
        if self.temperature is not None:
            return f"T = {self.temperature:g} ({self.source})"
        if self.values:
            return f"mixed temperatures {', '.join(f'{v:g}' for v in self.values)} ({self.source})"
        return f"temperature unknown ({self.source})"

    def to_dict(self) -> dict:
        return {"temperature": self.temperature, "source": self.source, "values": list(self.values),
                "requests": self.requests}


def _stated(values: list[float], where: str) -> Stated:
    distinct = sorted(set(values))
    if not distinct:
        return Stated(None)
    one = distinct[0] if len(distinct) == 1 else None
    return Stated(one, where, distinct, len(values))


def from_log_lines(lines, path: str | None = None) -> Stated:
    """The temperature the requests in a log were sampled at (vLLM `--enable-log-requests`, SGLang
    `--log-requests`), or unknown."""
    values, first, kinds = [], None, set()
    for n, line in enumerate(lines, start=1):
        if isinstance(line, tuple):  # (line number, line)
            n, line = line
        m = _VLLM.search(line)
        kind = "vLLM SamplingParams"
        if m is None:
            m, kind = _SGLANG.search(line), "SGLang sampling_params"
        if m:
            kinds.add(kind)
            try:
                values.append(float(m.group(1)))
            except ValueError:
                continue
            first = first or n
    what = ", ".join(sorted(kinds))
    where = f"{path or 'the log'}: {len(values)} request line(s) ({what}), first at line {first}" if values else UNKNOWN
    return _stated(values, where)


def from_answers(answers: list[dict], where: str) -> Stated:
    """llama.cpp's `/completion` answers: `generation_settings.temperature` each."""
    values = []
    for a in answers:
        g = a.get("generation_settings") if isinstance(a, dict) else None
        t = g.get("temperature") if isinstance(g, dict) else None
        if isinstance(t, (int, float)):
            values.append(round(float(t), 6))
    return _stated(values, f"{where} (generation_settings.temperature of {len(values)} answer(s))")


def given(temperature: float | None, how: str) -> Stated:
    """A temperature the user states (a flag) or a probe sent."""
    return Stated(None if temperature is None else float(temperature), how if temperature is not None else UNKNOWN,
                  [] if temperature is None else [float(temperature)], 0)


def rule_name(temperature: float | None, engine: str | None) -> str | None:
    """What a figure at `temperature` served by `engine` was accepted under: 'greedy' at 0, else the
    engine's default rule (`helpers.engines.acceptance_rules.rule_for_engine`: an engine whose rule is
    not read gets 'textbook'); None when neither the temperature nor the engine says (with the
    temperature unknown, the rule the engine applies if the requests were sampled)."""
    if temperature is not None and temperature <= 0:
        return "greedy"
    if not engine:
        return None
    from helpers.engines.acceptance_rules import rule_for_engine

    return rule_for_engine(str(engine)).name
