"""What a served draft did: serving logs, metrics (Prometheus, server info, per-request records,
training logs) in one table shape.

Modules (import them by name; this file imports nothing):
- `logs`
- `metrics`
- `records`
"""

__all__ = ["logs", "metrics", "records"]
