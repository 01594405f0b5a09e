"""The token view: generated text with every token marked by how speculative decoding produced it.

Kinds (`helpers.speculate.loop.PromptRun.kinds`): "draft" - a drafted token the target accepted,
shaded by its drafted position (darker = deeper); "correction" - the target's token where it
rejected a draft; "bonus" - the target's extra token after a fully accepted chain or tree path;
"target" - the first token, from the prompt's forward. Two readings side by side show a misread
d2t as a text made only of corrections. `token_style` is the one colour scheme, used by this
figure and by the notebooks' HTML view (`helpers.ui.token_view`).
"""
from __future__ import annotations

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt

from helpers.plots.style import BAD, style

KIND_COLORS = {"correction": BAD, "bonus": "#8172B3", "target": "#BBBBBB"}
DRAFT_SHADES = ("#C6E5C9", "#A1D6A7", "#7CC387", "#55A868", "#3D8A50", "#2A6A3A")  # position 0, 1, ... (deeper darker)
LEGEND = {"draft": "accepted draft token (darker = later drafted position)", "correction": "target correction",
          "bonus": "bonus token", "target": "first token (prompt forward)"}


def token_style(kind: str, pos: int = -1) -> tuple[str, str]:
    """(background, text colour) of a token of `kind` (drafted position `pos` for drafts)."""
    if kind == "draft":
        bg = DRAFT_SHADES[min(max(pos, 0), len(DRAFT_SHADES) - 1)]
    else:
        bg = KIND_COLORS.get(kind, "#FFFFFF")
    r, g, b = mcolors.to_rgb(bg)
    return bg, "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "#FFFFFF"


def visible(piece: str) -> str:
    """A token's text with whitespace made visible (newline as a return sign, tab as an arrow)."""
    return piece.replace("\n", "\u21b5").replace("\t", "\u2192") or "\u2205"


def _layout(pieces, width: int) -> list[tuple[int, int]]:
    """(line, column) of each piece, in monospace character cells, wrapping at `width`."""
    out, line, col = [], 0, 0
    for p in pieces:
        n = max(len(visible(p)), 1)
        if col and col + n > width:
            line, col = line + 1, 0
        out.append((line, col))
        col += n
    return out


def plot_token_view(runs: dict, *, width: int = 48, max_tokens: int = 160, title: str | None = None):
    """One panel per reading: {reading: PromptRun (or its to_dict())} -> Figure."""
    items = [(r, p if isinstance(p, dict) else p.to_dict()) for r, p in runs.items()]
    if not items:
        raise ValueError("no prompt runs to draw")
    layouts = [_layout(p["pieces"][:max_tokens], width) for _, p in items]
    lines = max((lay[-1][0] + 1) if lay else 1 for lay in layouts)
    panel_in = 4.6
    font = min(8.5, panel_in * 72 / width / 0.62)  # a monospace character (~0.6 em wide) fills one cell
    with style():
        fig, axes = plt.subplots(1, len(items), figsize=(panel_in * len(items) + 0.4, 1.0 + 0.24 * lines), squeeze=False)
        for ax, (reading, p), lay in zip(axes[0], items, layouts):
            ax.set_xlim(0, width)
            ax.set_ylim(lines, -0.6)
            ax.axis("off")
            for piece, kind, pos, (ln, col) in zip(p["pieces"], p["kinds"], p["draft_pos"], lay):
                bg, fg = token_style(kind, pos)
                n = max(len(visible(piece)), 1)
                ax.add_patch(plt.Rectangle((col + 0.05, ln - 0.42), n - 0.1, 0.84, color=bg, lw=0))
                ax.text(col + n / 2, ln, visible(piece), ha="center", va="center", family="monospace",
                        fontsize=font, color=fg)
            mal = p.get("mean_accept_length")
            ax.set_title(f"{reading} reading: accept length {mal:.2f}" if mal else f"{reading} reading", fontsize=9)
        handles = [plt.Rectangle((0, 0), 1, 1, color=token_style(k, 2)[0]) for k in LEGEND]
        fig.legend(handles, LEGEND.values(), loc="lower center", ncol=2, fontsize=7, frameon=False,
                   bbox_to_anchor=(0.5, -0.02))
        if title:
            fig.suptitle(title, fontsize=10, y=1.0 + 0.3 / max(lines, 1))
        fig.subplots_adjust(bottom=0.1 + 0.25 / max(lines, 1), wspace=0.05)
    return fig
