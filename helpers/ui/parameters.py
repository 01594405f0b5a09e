"""Every notebook's `parameters` cell, checked in one place.

`check_values(values)` takes a notebook's namespace (or any dict) and checks each parameter it knows
by name, the same names in every notebook (`RunSettings`'s): its type and range, a choice among
the values it takes, a list where a list is expected (a string there would be read character by
character), and the drafting shape the three shape parameters describe together. The first bad one
is a `BadInputError` of one line, `parameter NAME must ... (got VALUE)`, which
`helpers.ui.notebook.setup()` (the call every notebook's second cell makes) shows as one line, not
a traceback; papermill's error names the same line. Names it does not know are left alone.

A notebook whose parameter means something else under a shared name names itself, `setup(notebook="NN")`
(`NOTEBOOKS`: in 05 `max_samples` 0 is every sample, in 08 `draft_tokens` is a chain's length, 07
reads its shape from steps/topk/draft_tokens alone).
This module imports neither torch nor the notebooks.
"""
from __future__ import annotations

import numbers
import os
import re

from helpers.core.errors import BadInputError


def _bad(name: str, problem: str, value) -> BadInputError:
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return BadInputError(None, f"parameter {name} {problem} (got {shown})")


# -- one kind of value each ------------------------------------------------------------------------------
def whole(least: int, *, none: bool = True):
    def check(name, v):
        if v is None and none:
            return
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise _bad(name, f"must be a whole number{'' if least is None else f' of at least {least}'}"
                             + (" or None" if none else ""), v)
        if least is not None and v < least:
            raise _bad(name, f"must be at least {least}" + (" (or None)" if none else ""), v)
    return check


def number(*, above: float | None = None, least: float | None = None, most: float | None = None, none: bool = True):
    def check(name, v):
        if v is None and none:
            return
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or v != v:
            raise _bad(name, "must be a number" + (" or None" if none else ""), v)
        if above is not None and not v > above:
            raise _bad(name, f"must be more than {above}", v)
        if least is not None and v < least:
            raise _bad(name, f"must be at least {least}", v)
        if most is not None and v > most:
            raise _bad(name, f"must be at most {most}", v)
    return check


def flag(name, v):
    if not isinstance(v, bool):
        raise _bad(name, "must be True or False", v)


def path(name, v):
    if v is None:
        return
    if not isinstance(v, (str, os.PathLike)):
        raise _bad(name, "must be a path (a string) or None", v)


def text(name, v):
    if v is not None and not isinstance(v, str):
        raise _bad(name, "must be a string or None", v)


def one_of(*choices, none: bool = False):
    def check(name, v):
        if v is None and none:
            return
        if v not in choices:
            raise _bad(name, "must be one of " + ", ".join(repr(c) for c in choices) + (" or None" if none else ""), v)
    return check


def paths(name, v):
    """A list of paths: a lone string here would be iterated character by character."""
    if isinstance(v, (str, os.PathLike)):
        raise _bad(name, f"must be a list of paths, not one string: write {name} = [{str(v)!r}]", v)
    if v is None:
        return
    if not isinstance(v, (list, tuple)):
        raise _bad(name, "must be a list of paths", v)
    for i, p in enumerate(v):
        if not isinstance(p, (str, os.PathLike)):
            raise _bad(f"{name}[{i}]", "must be a path (a string)", p)


def rates(name, v):
    """None or a list of per-position rates in 0..1."""
    if v is None:
        return
    if isinstance(v, str) or not isinstance(v, (list, tuple)):
        raise _bad(name, "must be a list of numbers in 0..1 or None", v)
    for i, x in enumerate(v):
        number(least=0.0, most=1.0, none=False)(f"{name}[{i}]", x)


def mapping(name, v):
    if v is not None and not isinstance(v, dict):
        raise _bad(name, "must be a dict or None", v)


def engine(name, v):
    if v is None or v == "all":
        return
    if not isinstance(v, str):
        raise _bad(name, "must be an engine name (sglang, vllm, ...), optionally ==VERSION, or 'all'", v)
    from helpers.engines.registry import engines_at

    try:
        engines_at(v)
    except (ValueError, KeyError) as e:
        raise _bad(name, "must name an engine the kit knows, optionally ==VERSION, or 'all': " + str(e).rstrip("."),
                   v) from None


def dtype(name, v):
    if v is None or v == "auto":
        return
    if not isinstance(v, str):
        raise _bad(name, "must be a dtype name (float32, bfloat16, float16) or None", v)
    from helpers.core.devices import parse_dtype

    try:
        parse_dtype(v)
    except ValueError as e:
        raise _bad(name, f"must be a dtype the kit reads: {e}", v) from None


def device(name, v):
    if v is not None and not isinstance(v, str):
        raise _bad(name, "must be a device name (cpu, cuda, cuda:N, mps) or None", v)


def mask_at(name, v):
    one_of("label", "position", "specforge", "speculators")(name, v)


def reading(name, v):
    from helpers.core.terms import READINGS

    one_of(*READINGS)(name, v)


# -- the parameters every notebook may declare, by name --------------------------------------------------
RULES = {
    # paths
    **{n: path for n in ("checkpoint", "samples", "misencoded", "target_head", "embed_from", "target_config", "target",
                         "prompts", "metrics", "output_dir", "work_dir", "root", "mapping_path", "misencoded_path",
                         "misencoded_checkpoint", "kimi_path", "kimi_absolute_path", "no_d2t_checkpoint",
                         "example_draft", "absolute_checkpoint")},
    "logs": paths, "compare_with": paths,
    # the drafting shape (checked together below as well)
    "steps": whole(1), "topk": whole(1), "draft_tokens": whole(2),
    # counts and rates
    "accuracy_k": whole(1, none=False), "max_samples": whole(1), "max_prompts": whole(1),
    "max_new_tokens": whole(1, none=False), "trials": whole(2, none=False), "window_start": whole(0, none=False),
    "batch_size": whole(1),  # prompts the loop verifies together (None: speculate's default)
    "seed": whole(None, none=False),
    "temperature": number(least=0.0, none=False), "accept_rate": number(above=0.0, most=1.0),
    "baseline_tps": number(above=0.0), "spec_tps": number(above=0.0),
    "speculate_per_position": rates, "sources": mapping,
    # choices
    "mask_at": mask_at, "engine": engine, "dtype": dtype, "device": device, "reading": reading,
    "mode": one_of("accuracy", "speculate"), "prompt": text,
    # switches
    **{n: flag for n in ("svg", "solutions", "write_fixed_copy", "check_weights", "live_engine")},
}

# per-notebook meanings of a shared name (`setup(notebook="NN")`): extra rules, and whether the shape
# comes from steps/topk/draft_tokens alone (07) or a serving log may fill the rest (04)
NOTEBOOKS = {
    "05": {"rules": {"max_samples": whole(0)}},  # max_samples 0 scores every sample
    "07": {"shape_alone": True},
    "08": {"rules": {"draft_tokens": whole(1, none=False)}},  # a chain of that many drafted tokens
}

_FLAG_WORDS = {"--steps": "steps", "--topk": "topk", "--draft-tokens": "draft_tokens",
               "--speculative-num-steps": "steps", "--speculative-eagle-topk": "topk",
               "--speculative-num-draft-tokens": "draft_tokens"}


def _in_parameter_terms(message: str) -> str:
    """A shape check's message (written for the CLI's flags) in the notebook's parameter names."""
    message = re.sub(r"--num-speculative-tokens (\d+)", r"steps=\1 (topk 1, draft_tokens None)", message)
    message = re.sub(r"add --num-speculative-tokens K \(or --steps K\)", "give steps=K", message)
    message = re.sub(r"\s*\(SGLang(?:'s)? --speculative-num-steps\)", "", message)
    for f, word in _FLAG_WORDS.items():
        message = re.sub(rf"(?<![\w-]){f}(?![\w-])( (\d+))?",
                         lambda m, word=word: word + (f"={m.group(2)}" if m.group(2) else ""), message)
    return message


def check_shape(values: dict, *, alone: bool = False) -> None:
    """steps / topk / draft_tokens together, as SGLang counts them (draft_tokens counts the root):
    a shape no engine runs is one line naming the parameters (only where the notebook has topk).
    `alone`: the notebook reads the shape from these three only (07), so a part given without the
    rest it needs is refused too; otherwise (04) a serving log or the default may fill the rest."""
    if "topk" not in values:
        return
    from helpers.acceptance.drafting import Drafting

    s, k, n = values.get("steps"), values.get("topk"), values.get("draft_tokens")
    if s is None and k is None and n is None:
        return
    try:
        Drafting.check_flags(s, k, n, lone="sglang")
        if alone or (s is not None and (k in (None, 1) or n is not None)):  # complete: the whole shape
            Drafting.from_flags(s, k, n, lone="sglang")
        elif s is None and n is not None and k in (None, 1):
            Drafting.from_flags(None, k, n, lone="sglang")
    except ValueError as e:
        raise BadInputError(None, "parameters steps/topk/draft_tokens: " + _in_parameter_terms(str(e))) from None


def check_values(values: dict, rules: dict | None = None, *, shape_alone: bool = False) -> None:
    """Each known parameter in `values` (a notebook's namespace), then the drafting shape: the first
    bad one raises a one-line `BadInputError` naming it."""
    table = {**RULES, **(rules or {})}
    for name, check in table.items():
        if name in values:
            check(name, values[name])
    check_shape(values, alone=shape_alone)


def declared_values(namespace: dict, names=None) -> dict:
    """The parameters among `namespace` (an IPython user namespace): the names `RULES` knows, or `names`."""
    keys = list(RULES) if names is None else names
    return {k: namespace[k] for k in keys if k in namespace}
