"""Offline HTML export of executed notebooks, for bug-report bundles read without a network.

nbconvert's stock `HTMLExporter` (the `lab` template) makes the page fetch require.js,
MathJax, the Mermaid modules and, when the notebook saved widget state, the Jupyter widget
renderer (`@jupyter-widgets/html-manager`) from cdnjs / unpkg. Offline those loads fail and
every widget shows as an empty box. `notebook_html(nb)` exports the same `lab` page with none
of that: it loads nothing over the network, and images stay embedded as data URIs.

How, with nbconvert's own mechanisms (no edits of the HTML text afterwards):

* the `lab` template is extended by a small in-memory template (`raw_template`) that empties
  the blocks `html_head_js_requirejs`, `jupyter_widgets`, `html_head_js_mathjax` and
  `html_head_js_mermaidjs`; the lab CSS is inlined as usual and imports no remote fonts.
  Consequences: LaTeX in Markdown stays as its TeX source, and a Mermaid diagram as its text
  (the notebooks have neither); `application/javascript` outputs still run but find no
  require.js.
* `embed_images=True`, so images a Markdown cell takes from local files are inlined too (plots
  are inline PNG outputs already). A Markdown image pointing at a remote URL would still be
  fetched; the notebooks have none.
* the `StaticWidgets` preprocessor turns each widget output
  (`application/vnd.jupyter.widget-view+json`) into a static one and drops the notebook's
  widget state, so the template emits neither the renderer loader nor the state script:

  - a widget hidden when the notebook finished (layout `visibility: hidden` or `display: none`
    in the saved state; tqdm bars with `leave=False` end so) is dropped;
  - a tqdm.notebook bar (an HBox of HTML, progress bar, HTML) becomes its final text, e.g.
    ``steps: 100%|██████████| 16/16 [00:01<00:00, 12.3it/s]``, rebuilt from the saved state;
    without saved state its recorded text shows the bar as it began (0 %), so it is dropped;
  - any other widget keeps its static fallback: `text/html` if the output has one, else
    `text/plain` (e.g. ``IntSlider(value=3, description='k')``).

  When at least one widget is shown as static text, the page carries one visible note at its
  top (`OFFLINE_WIDGET_NOTE`, in a `div.d2t-offline-note`).

`write_notebook_html(nb, path)` writes the page (UTF-8) and returns the path.
"""
from __future__ import annotations

import copy
import html
import re
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter
from nbconvert.preprocessors import Preprocessor

__all__ = ["OFFLINE_WIDGET_NOTE", "StaticWidgets", "notebook_html", "write_notebook_html"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
OFFLINE_WIDGET_NOTE = (
    "Interactive widgets are shown as static text in this offline export; "
    "open the .ipynb in JupyterLab to use them."
)

# Extends the stock `lab` page; every block emptied here is one that loads a script from a CDN.
_TEMPLATE = """\
{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block body_header -%}
{{ super() }}
{%- if resources.get('offline_static_widgets') %}
<div class="d2t-offline-note" role="note" style="margin: 8px 16px; padding: 6px 10px;
 border: 1px solid var(--jp-warn-color2, #f57c00); border-radius: 2px;
 background: var(--jp-warn-color3, #ffe0b2); color: var(--jp-ui-font-color1, #000);
 font-family: var(--jp-ui-font-family, sans-serif); font-size: var(--jp-ui-font-size1, 13px);">
{{ resources.offline_widget_note | e }}
</div>
{%- endif %}
{%- endblock body_header -%}
"""

# What a tqdm meter looks like in text ("desc:  40%|####      | 4/10 [..."), for bars whose
# widget state was not saved.
_TQDM_TEXT = re.compile(r"\d+%\|.*\|\s*\S+/\S+\s*\[")
_PROGRESS_MODELS = {"FloatProgressModel", "IntProgressModel"}


class StaticWidgets(Preprocessor):
    """Replace widget outputs by static ones (see the module docstring) and drop widget state.

    Sets `resources["offline_static_widgets"]` to the number of widgets kept as static text.
    """

    def preprocess(self, nb, resources):
        widgets = nb.metadata.pop("widgets", None) or {}
        self._state = (widgets.get(WIDGET_STATE) or {}).get("state") or {}
        shown = 0
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            outputs = []
            for out in cell.get("outputs", []):
                if WIDGET_VIEW not in out.get("data", {}):
                    outputs.append(out)
                    continue
                static = self._static(out)
                if static is not None:
                    outputs.append(static)
                    shown += 1
            cell.outputs = outputs
        resources["offline_static_widgets"] = resources.get("offline_static_widgets", 0) + shown
        return nb, resources

    def _model(self, ref) -> dict | None:
        """The saved model for a model id or an `IPY_MODEL_<id>` reference, or None."""
        if not isinstance(ref, str):
            return None
        return self._state.get(ref.removeprefix("IPY_MODEL_"))

    def _hidden(self, model: dict) -> bool:
        layout = self._model(model.get("state", {}).get("layout")) or {}
        layout_state = layout.get("state", {})
        return layout_state.get("visibility") == "hidden" or layout_state.get("display") == "none"

    def _progress_text(self, model: dict) -> str | None:
        """A tqdm.notebook bar's final text from its saved state, or None if not such a bar."""
        if model.get("model_name") != "HBoxModel":
            return None
        children = [self._model(c) for c in model.get("state", {}).get("children", [])]
        if len(children) != 3 or any(c is None for c in children):
            return None
        names = [c.get("model_name") for c in children]
        if names[0] != "HTMLModel" or names[1] not in _PROGRESS_MODELS or names[2] != "HTMLModel":
            return None
        left, bar, right = (c.get("state", {}) for c in children)
        total = bar.get("max") or 0
        fraction = min(max((bar.get("value") or 0) / total, 0.0), 1.0) if total else 0.0
        filled = round(10 * fraction)

        def text(s):  # tqdm escapes its text and pads with figure spaces (U+2007)
            return html.unescape(str(s.get("value", ""))).replace("\u2007", " ")

        return f"{text(left)}|{'█' * filled}{' ' * (10 - filled)}|{text(right)}"

    def _static(self, out):
        """The output to show instead of a widget output, or None to drop it."""
        data = out["data"]
        model = self._model(data[WIDGET_VIEW].get("model_id"))
        static = copy.deepcopy(out)
        del static["data"][WIDGET_VIEW]
        if model is not None:
            if self._hidden(model):
                return None
            bar_text = self._progress_text(model)
            if bar_text is not None:
                static["data"] = {"text/plain": bar_text}
                return static
        elif _TQDM_TEXT.search(data.get("text/plain", "")):
            return None  # a progress bar as it began; its end is unknown
        if "text/html" in data:
            static["data"] = {"text/html": data["text/html"]}
        elif "text/plain" in data:
            static["data"] = {"text/plain": data["text/plain"]}
        else:
            return None
        return static


def _exporter() -> HTMLExporter:
    exporter = HTMLExporter(template_name="lab", embed_images=True)
    exporter.raw_template = _TEMPLATE
    exporter.register_preprocessor(StaticWidgets(), enabled=True)
    return exporter


def notebook_html(nb, *, name: str | None = None) -> str:
    """Export an executed notebook node to a self-contained HTML page that needs no network.

    `nb` is left unchanged; `name` (default "Notebook") is the page title unless the notebook's
    metadata has a `title`.
    """
    if not isinstance(nb, nbformat.NotebookNode):
        nb = nbformat.from_dict(nb)
    resources = {"metadata": {"name": name or "Notebook"}, "offline_widget_note": OFFLINE_WIDGET_NOTE}
    body, _ = _exporter().from_notebook_node(nb, resources=resources)
    return body


def write_notebook_html(nb, path) -> Path:
    """Write `notebook_html(nb)` to `path` (UTF-8, titled by the file's stem); return the path."""
    path = Path(path)
    path.write_text(notebook_html(nb, name=path.stem), encoding="utf-8")
    return path
