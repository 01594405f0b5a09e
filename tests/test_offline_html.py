"""`helpers.ui.html_export`: the HTML export of an executed notebook works with no network.

A small notebook (two inline matplotlib figures, an IntSlider, a tqdm.auto loop and a tqdm bar
with `leave=False`) is executed once in a fresh kernel with nbclient. Its offline export must
name no remote URL in any src/href, CSS import or script, while nbconvert's stock export of the
same notebook does (so the checks would catch a regression to the stock page). The browser test
opens the file in headless Chromium with the network off (an offline context, and a route that
aborts and counts every request that is not for a file) and checks that every figure renders,
no request was attempted and the offline note is visible.

The browser test needs the Debian `chromium` package and the Python `playwright` package (found
as tests/test_browser.py finds them); without either it is skipped with the reason.
"""
from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

# nbformat and the exporter are imported by the tests that use them: importing nbformat costs
# seconds (jsonschema's format checkers), which `make test-fast` does not run this module to pay

CELLS = [
    "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('first')\nplt.show()",
    "fig, ax = plt.subplots(figsize=(3, 2))\nax.bar(['a', 'b'], [3, 4])\nplt.show()",
    "import ipywidgets as W\nfrom IPython.display import display\ndisplay(W.IntSlider(value=3, description='k'))",
    "from tqdm.auto import tqdm\nfor _ in tqdm(range(16), desc='steps'):\n    pass",
    "for _ in tqdm(range(4), desc='hidden', leave=False):\n    pass",
]
pytestmark = pytest.mark.slow  # every test reads a notebook executed in a real kernel
REMOTE = re.compile(r"^\s*(https?:)?//", re.I)  # http(s) or protocol-relative


@pytest.fixture(scope="module")
def executed():
    """The test notebook, executed top to bottom in a fresh kernel (widget state saved)."""
    from nbclient import NotebookClient

    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb = new_notebook(cells=[new_markdown_cell("# Offline export")] + [new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, kernel_name="python3", timeout=120, store_widget_state=True).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors[0].get("traceback")
    assert "application/vnd.jupyter.widget-state+json" in nb.metadata.get("widgets", {})
    return nb


def _png_outputs(nb) -> int:
    return sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


class _Refs(HTMLParser):
    """Every src/href attribute value, and the text of every <script> and <style>."""

    def __init__(self):
        super().__init__()
        self.attrs, self.img_srcs, self.scripts, self.styles, self._in = [], [], [], [], None

    def handle_starttag(self, tag, attrs):
        self.attrs += [v or "" for k, v in attrs if k in ("src", "href", "srcset", "data")]
        self.img_srcs += [v or "" for k, v in attrs if tag == "img" and k == "src"]
        self._in = tag if tag in ("script", "style") else None

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "script":
            self.scripts.append(data)
        elif self._in == "style":
            self.styles.append(data)


def remote_references(page: str) -> list[str]:
    """What in the page would make a browser fetch from the network."""
    p = _Refs()
    p.feed(page)
    found = [v for v in p.attrs if REMOTE.match(v)]
    for css in p.styles:
        css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)  # comments cite URLs; they load nothing
        found += re.findall(r"@import[^;]*|url\(\s*['\"]?(?:https?:)?//[^)]*\)", css, re.I)
    for js in p.scripts:  # a script that builds a remote src or import() at run time
        found += re.findall(r"['\"`](?:https?:)?//[^'\"`]*['\"`]", js, re.I)
    return found


def test_offline_export_names_no_remote_url(executed):
    from helpers.ui.html_export import OFFLINE_WIDGET_NOTE, notebook_html

    page = notebook_html(executed)
    assert remote_references(page) == []
    refs = _Refs()
    refs.feed(page)
    assert _png_outputs(executed) == 2
    assert [s[:22] for s in refs.img_srcs] == ["data:image/png;base64,"] * 2, "figures not embedded"
    # widgets: no widget view or state left; the slider as its text, the tqdm bar as its final
    # text, the hidden (leave=False) bar dropped; one note on the page
    assert "application/vnd.jupyter.widget" not in page
    assert "IntSlider(value=3, description=&#x27;k&#x27;)" in page or "IntSlider(value=3, description='k')" in page
    assert re.search(r"steps: 100%\|█{10}\| 16/16 \[", page), "tqdm bar not shown as its final text"
    assert "hidden:" not in page
    assert page.count('class="d2t-offline-note"') == 1 and OFFLINE_WIDGET_NOTE in page
    assert "widgets" in executed.metadata, "notebook_html changed its argument"


def test_stock_export_names_remote_urls(executed):
    """The same checks find the CDN loads in nbconvert's stock page: they test something."""
    from nbconvert import HTMLExporter

    page, _ = HTMLExporter().from_notebook_node(executed)
    found = remote_references(page)
    assert any("require" in u for u in found), found
    assert any("unpkg.com" in u for u in found), found  # the widget renderer


def test_without_widgets_there_is_no_note_and_without_state_a_bar_is_dropped(executed):
    import nbformat

    from helpers.ui.html_export import notebook_html

    plain = nbformat.from_dict({**executed, "cells": executed.cells[:3]})
    assert "d2t-offline-note" not in notebook_html(plain)
    stateless = nbformat.from_dict(executed)
    stateless.metadata = {k: v for k, v in executed.metadata.items() if k != "widgets"}
    page = notebook_html(stateless)
    assert "IntSlider(value=3" in page
    assert "steps:" not in page  # its recorded text is the bar at 0 %, so it is left out
    assert remote_references(page) == []


@pytest.mark.browser
def test_offline_export_renders_in_chromium_without_network(executed, tmp_path, offline_browser):
    from helpers.ui.html_export import OFFLINE_WIDGET_NOTE, write_notebook_html

    path = write_notebook_html(executed, tmp_path / "offline.html")
    seen = offline_browser(path)
    assert seen["blocked"] == [], f"the page tried the network: {seen['blocked']}"
    assert len(seen["widths"]) == _png_outputs(executed) == 2, seen["widths"]
    assert all(w > 0 for w in seen["widths"]), seen["widths"]
    assert OFFLINE_WIDGET_NOTE in seen["text"]
    assert re.search(r"steps: 100%.*16/16", seen["text"])
    assert seen["errors"] == []
