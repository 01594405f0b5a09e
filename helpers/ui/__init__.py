"""Front ends other than the command line: notebook setup and outputs, run settings, the dashboard and
its panels, the token view, notebook 08's checkpoint walk-through, the report and its summary, HTML export.
The teaching content (primer, lessons, exercises) is its own package, `helpers.teach`.

Modules (import them by name; this file imports nothing):
- `settings`
- `notebook`
- `widgets`
- `spec_panel`
- `token_view`
- `checkpoint_debug`
- `summary`
- `report`
- `html_export`
- `parameters`: the notebooks' parameters checked in one place
"""

__all__ = ["settings", "notebook", "widgets", "spec_panel", "token_view", "checkpoint_debug", "summary", "report", "html_export", "parameters"]
