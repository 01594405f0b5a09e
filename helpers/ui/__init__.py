"""Front ends other than the command line: notebook setup and outputs, run settings, the dashboard and
its panels, the token view, the primer and the lessons it shows once, notebook 08's checkpoint walk-through, the report and its summary, HTML export.

Modules (import them by name; this file imports nothing):
- `settings`
- `notebook`
- `widgets`
- `spec_panel`
- `token_view`
- `primer`
- `lessons`
- `exercises`
- `primer_exercises`
- `checkpoint_debug`
- `checkpoint_exercises`
- `summary`
- `report`
- `html_export`
"""

__all__ = ["settings", "notebook", "widgets", "spec_panel", "token_view", "primer", "lessons", "exercises", "primer_exercises", "checkpoint_debug", "checkpoint_exercises", "summary", "report", "html_export"]
