"""Checking a checkpoint the way an engine loads it: findings, the checks, the doctor, the mapping diff
between two drafts, the fixer and its plan, and `inspect`.

Modules (import them by name; this file imports nothing):
- `registry`
- `findings`
- `checks_config`
- `checks_mapping`
- `checks_weights`
- `checks_engine_config`
- `checks_aux`
- `checks_variants`
- `checks_target`
- `checks_capture`
- `checks_method`
- `checks_dflash`
- `checks_gguf`
- `checks_drift`
- `diagnose`
- `diff`
- `fix_plan`
- `fix`
- `inspection`
- `served_algorithm`
"""

__all__ = ["registry", "findings", "checks_config", "checks_mapping", "checks_weights", "checks_engine_config", "checks_aux", "checks_variants", "checks_target", "checks_capture", "checks_method",
           "checks_dflash", "checks_gguf", "checks_drift", "diagnose", "diff", "fix_plan", "fix", "inspection",
           "served_algorithm"]
