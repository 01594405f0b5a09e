"""Online against offline: per-position acceptance from serving next to the draft's offline figures.

One Axes, x = drafted position (0 = the first drafted token), y = the chance a draft reaches that
position (unconditional acceptance, what vLLM reports): serving's figure, evaluate's per-step top-1
turned into the same quantity (their running product, as the chain model assumes), and the
per-position acceptance `speculate` measured with the real target. The computed diagnosis
(`helpers.acceptance.sources.compare_online_offline`) goes in the title area when given.
"""
from __future__ import annotations

import textwrap

import numpy as np

from helpers.core.errors import BadInputError
from helpers.plots.style import BAD, GOOD, REF, _new_ax, style


def plot_online_offline(online, offline_step_accuracy=None, measured=None, ax=None, *,
                        diagnosis: str | None = None, online_label: str = "serving"):
    """Draw serving's unconditional per-position acceptance against the offline figures.

    `online`: unconditional per-position acceptance from serving (a list of floats);
    `offline_step_accuracy`: evaluate's per-step top-1 (drawn as its running product);
    `measured`: `speculate`'s unconditional per-position acceptance (a plain list of floats).
    """
    if not online:
        raise BadInputError(None, "no per-position acceptance from serving to draw")
    with style():
        ax = _new_ax(ax, (7.0, 4.0))
        x = np.arange(len(online))
        ax.plot(x, online, marker="o", color=BAD, lw=1.8, label=f"{online_label} (unconditional)")
        if offline_step_accuracy:
            off = np.cumprod(np.asarray(offline_step_accuracy, dtype=float))
            ax.plot(np.arange(len(off)), off, marker="s", color=GOOD, ls="--",
                    label="offline: product of evaluate's per-step top-1")
        if measured:
            ax.plot(np.arange(len(measured)), measured, marker="^", color=REF, ls=":",
                    label="offline, measured with the target (speculate)")
        ax.set_xlabel("drafted position (0 = first drafted token)")
        ax.set_ylabel("P(draft reaches position)")
        ax.set_ylim(0, 1.02)
        ax.set_xticks(np.arange(max(len(online), len(offline_step_accuracy or []), len(measured or []))))
        title = "per-position acceptance: serving against offline"
        if diagnosis:
            title += "\n" + "\n".join(textwrap.wrap(diagnosis, 95))
        ax.set_title(title, fontsize=9, loc="left")
        ax.legend(loc="upper right", fontsize=8)
    return ax
