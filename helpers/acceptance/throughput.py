"""Throughput from accept length: a speculative step's cost, tokens/s and the break-even point.

A speculative step that emits L tokens costs c plain decode steps; with a baseline decode rate
B tok/s, the speculative rate is S = B L / c, so one measured (L, S) pair gives c = L B / S,
tokens/s(L) = B L / c, and the break-even accept length (S = B) is L = c. Plain numbers: no
torch, so the `throughput` command starts fast.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class ThroughputModel:
    """Tokens/s as a function of accept length, from a baseline and one measured point.

    step_cost: the cost c of one speculative step (draft + verify) in plain-decode-step units.
    """

    baseline_tps: float
    step_cost: float

    @classmethod
    def from_measurement(cls, baseline_tps: float, accept_length: float, spec_tps: float) -> "ThroughputModel":
        for flag, value in (("--baseline-tps", baseline_tps), ("--spec-tps", spec_tps)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{flag}: {value!r} is not a finite tokens/s above 0")
        if not (math.isfinite(accept_length) and accept_length >= 1):
            raise ValueError(f"--accept-length: {accept_length!r} is not a finite accept length of at least 1 "
                             "(the bonus token counted)")
        cost = accept_length * baseline_tps / spec_tps
        if not (math.isfinite(cost) and cost > 0):
            raise ValueError(f"--baseline-tps {baseline_tps:g}, --accept-length {accept_length:g} and --spec-tps "
                             f"{spec_tps:g} give a step cost of {cost!r}: not a finite number above 0 (a value "
                             "out of scale)")
        return cls(baseline_tps=float(baseline_tps), step_cost=cost)

    def tps(self, accept_length):
        """Speculative tokens/s at an accept length (number or array)."""
        return self.baseline_tps * np.asarray(accept_length, dtype=np.float64) / self.step_cost

    def speedup(self, accept_length):
        return np.asarray(accept_length, dtype=np.float64) / self.step_cost

    @property
    def break_even(self) -> float:
        """Accept length at which speculation is as fast as plain decoding."""
        return self.step_cost

    def to_dict(self, accept_length: float | None = None, spec_tps: float | None = None) -> dict:
        d = {"baseline_tps": self.baseline_tps, "step_cost": self.step_cost, "break_even_accept_length": self.break_even}
        if accept_length is not None:
            d["accept_length"] = float(accept_length)
            d["spec_tps"] = float(spec_tps) if spec_tps is not None else float(self.tps(accept_length))
            d["speedup"] = float(self.speedup(accept_length))
        return d


class ThroughputSummary(dict):
    """The `throughput --json` object; `report()` is the command's text."""

    def report(self) -> str:
        d = self
        verdict = "slower than" if d["speedup"] < 1 else "faster than"
        return "\n".join([
            f"baseline {d['baseline_tps']:g} tok/s; measured accept length {d['accept_length']:g} at "
            f"{d['spec_tps']:g} tok/s ({d['speedup']:.2f}x, {verdict} no speculation)",
            f"  step cost:                {d['step_cost']:.2f} decode steps per speculative step",
            f"  break-even accept length: {d['break_even_accept_length']:.2f}",
            "  tok/s at accept length:   " + ", ".join(f"{k}: {v:.1f}" for k, v in d["tps_at"].items()),
        ])


def throughput_summary(baseline_tps: float, accept_length: float, spec_tps: float) -> ThroughputSummary:
    """Step cost, break-even accept length and tok/s at accept lengths 1..6 from one measured pair."""
    m = throughput_model(baseline_tps, accept_length, spec_tps)
    d = ThroughputSummary(m.to_dict(accept_length, spec_tps))
    d["tps_at"] = {str(L): float(m.tps(L)) for L in (1, 2, 3, 4, 5, 6)}
    return d


def throughput_model(baseline_tps: float, accept_length: float, spec_tps: float) -> ThroughputModel:
    """`ThroughputModel.from_measurement`: with 90, 1.9, 46.7 the step cost is ~3.66."""
    return ThroughputModel.from_measurement(baseline_tps, accept_length, spec_tps)
