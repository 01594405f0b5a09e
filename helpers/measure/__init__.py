"""What a draft scores on samples: predictions under each reading, accuracy counts, the evaluate run
and its conclusion, and the replay measured as accept lengths.

Modules (import them by name; this file imports nothing):
- `predict`
- `scores`
- `evaluate`
- `conclusion`
- `replay`
- `drift`
"""

__all__ = ["predict", "scores", "evaluate", "conclusion", "replay", "drift"]
