"""The token view as HTML for notebooks: two readings' generated text side by side, every token
coloured by how it came (accepted draft by position, correction, bonus), with the colour scheme of
`helpers.plots.tokens`. `token_view_html` returns the markup; `show_token_view` displays it;
`LiveTokenView` updates one displayed view while a prompt is being speculated (the dashboard).
"""
from __future__ import annotations

import html

from helpers.plots.tokens import LEGEND, token_style, visible


def _as_dict(p) -> dict:
    return p if isinstance(p, dict) else p.to_dict()


def _tokens_html(p: dict) -> str:
    spans = []
    for piece, kind, pos in zip(p["pieces"], p["kinds"], p["draft_pos"]):
        bg, fg = token_style(kind, pos)
        tip = f"{kind}" + (f", drafted position {pos}" if kind == "draft" else "")
        spans.append(f'<span class="d2t-tok d2t-{kind}" title="{tip}" style="background:{bg};color:{fg};'
                     f'border-radius:2px;padding:0 1px;margin:0 1px 1px 0;display:inline-block;white-space:pre">'
                     f"{html.escape(visible(piece))}</span>")
    return "".join(spans)


def token_view_html(runs: dict, *, title: str | None = None) -> str:
    """{reading: PromptRun or its dict} -> one HTML block, a column per reading."""
    cols = []
    for reading, p in runs.items():
        p = _as_dict(p)
        mal = p.get("mean_accept_length")
        head = f"{html.escape(reading)} reading" + (f": accept length {mal:.2f}" if mal else "")
        cols.append(f'<div class="d2t-col" data-reading="{html.escape(reading)}" style="flex:1;min-width:18em">'
                    f"<b>{head}</b><div style=\"font-family:monospace;font-size:12px;line-height:1.7\">"
                    f"{_tokens_html(p)}</div></div>")
    legend = " ".join(f'<span style="background:{token_style(k, 2)[0]};color:{token_style(k, 2)[1]};padding:0 4px">'
                      f"{html.escape(v)}</span>" for k, v in LEGEND.items())
    top = f"<div><b>{html.escape(title)}</b></div>" if title else ""
    return (f'<div class="d2t-token-view">{top}<div style="display:flex;gap:1.5em">{"".join(cols)}</div>'
            f'<div style="font-size:11px;margin-top:4px">{legend}</div></div>')


def show_token_view(runs: dict, *, title: str | None = None):
    """Display the token view in a notebook; returns the IPython HTML object."""
    from IPython.display import HTML, display

    obj = HTML(token_view_html(runs, title=title))
    display(obj)
    return obj


class LiveTokenView:
    """A token view that redraws as prompt runs grow: `update(reading, prompt_run)`."""

    def __init__(self, readings, title: str | None = None):
        import ipywidgets as W

        self.runs = {r: {"pieces": [], "kinds": [], "draft_pos": []} for r in readings}
        self.title = title
        self.updates = 0  # redraws so far (one per verify step while streaming)
        self.widget = W.HTML(token_view_html(self.runs, title=title))

    def update(self, reading: str, prompt_run, tokenizer=None) -> None:
        d = {"kinds": list(prompt_run.kinds), "draft_pos": list(prompt_run.draft_pos),
             "mean_accept_length": (sum(prompt_run.accept_lengths) / len(prompt_run.accept_lengths)
                                    if prompt_run.accept_lengths else None)}
        d["pieces"] = list(prompt_run.pieces) if len(prompt_run.pieces) == len(prompt_run.output_ids) else (
            [tokenizer.decode([t]) for t in prompt_run.output_ids] if tokenizer is not None
            else [str(t) for t in prompt_run.output_ids])
        self.runs[reading] = d
        self.updates += 1
        self.widget.value = token_view_html(self.runs, title=self.title)
