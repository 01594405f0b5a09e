"""Reading a teaching notebook (00, 08) as a student would: the text its cells print, the numbers its
prose states, the exercise checkers' outputs, and whether the prose gives an answer away.

Shared by tests/test_primer.py and tests/test_checkpoint_debug.py; each passes its own whitelist
of (pattern, why) for numbers in the prose that are not claims to compute.
"""
from __future__ import annotations

import re

NUMBER = re.compile(r"(?<![\w.\-])\d+(?:,\d{3})*(?:\.\d+)?")


def cell_text(cell) -> str:
    """What a code cell printed or displayed (streams, text/plain and text/html)."""
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append("".join(o.get("text", "")))
        elif o.get("output_type") in ("execute_result", "display_data"):
            data = o.get("data", {})
            out.append("".join(data.get("text/plain", "")) + "".join(data.get("text/html", "")))
    return "".join(out)


def printed_text(nb) -> str:
    return "\n".join(cell_text(c) for c in nb.cells if c.cell_type == "code")


def check_cells(nb, module: str) -> list[str]:
    """The outputs of the cells that call `module.check(...)`."""
    return [cell_text(c) for c in nb.cells if c.cell_type == "code" and f"{module}.check(" in c.source]


def _unlisted(text: str, whitelist) -> str:
    for pattern, _why in whitelist:
        text = re.sub(pattern, " ", text, flags=re.MULTILINE)
    return text


def prose_numbers(nb, whitelist) -> set[str]:
    """Every number the markdown states, the whitelisted ones left out."""
    return {n for c in nb.cells if c.cell_type == "markdown" for n in NUMBER.findall(_unlisted(c.source, whitelist))}


def printed(number: str, text: str) -> bool:
    """`number` appears in `text` as a whole number (not inside 1,234 or 0.5; `0..123` counts)."""
    return re.search(rf"(?<![\d,])(?<!\d\.){re.escape(number)}(?![\d]|[.,]\d)", text) is not None


def answers_in_prose_above(nb, module: str, solutions: dict, whitelist) -> list:
    """(exercise, answer) pairs whose answer is written in the markdown since the previous check cell."""
    found, prose = [], []
    for c in nb.cells:
        if c.cell_type == "markdown":
            prose.append(_unlisted(c.source, whitelist))
        elif f"{module}.check(" in c.source:
            n = int(re.search(rf"{module}\.check\((\d+)", c.source).group(1))
            answer, above = solutions[n], "\n".join(prose)
            if isinstance(answer, list):
                hit = str(answer) in above or ", ".join(map(str, answer)) in above
            elif isinstance(answer, str):
                hit = f"'{answer}'" in above or f" {answer} " in above or f"`{answer}`" in above
            else:
                numbers = set(NUMBER.findall(above))  # whole numbers of the prose (not the 2 of `d2t`)
                hit = str(answer) in numbers or f"{answer:,}" in numbers
            if hit:
                found.append((n, answer))
            prose = []
    return found
