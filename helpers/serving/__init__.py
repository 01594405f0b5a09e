"""What a served draft did: serving logs, metrics (Prometheus, server info, per-request records,
training logs) in one table shape.

Modules (import them by name; this file imports nothing):
- `logs`
- `metrics`
- `records`
- `measured`: the serving accept length as one figure (mean, stderr, drafting) for the evidence ladder
"""

__all__ = ["logs", "metrics", "records", "measured"]
