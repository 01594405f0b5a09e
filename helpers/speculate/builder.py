"""One speculate run from what a front end was given: `build_run(checkpoint, target, drafting, engine=...)`.

Every front end that runs the engine-free loop (`helpers.speculate.loop`) builds its run here: the
CLI's `speculate` and `reproduce`, the dashboard's speculate panel, `checkpoint_debug.speculate_once`
and notebook 07. So they share

- one default shape: no shape given is `DEFAULT_DRAFTING`, a chain of 5 (vLLM's
  num_speculative_tokens 5; SGLang steps 5, topk 1, 6 draft tokens), the default `speculate --help`
  and `reproduce --help` have always documented;
- one engine rule: the engine names whose aux-layer convention feeds the draft, optionally with its
  release (`vllm==X.Y.Z`); None or 'all' is `DEFAULT_ENGINE`; an engine whose convention the kit has
  not read is refused in one line;
- one check: a shape no engine runs, a negative temperature, ... is one `BadInputError` line,
  before any model loads.

`spec_settings(...)` gives the checked `SpecSettings` alone (a front end that keeps its loaded pair
between runs, as the dashboard does); `build_run(...)` also loads the pair (`load_pair`).
"""
from __future__ import annotations

from helpers.acceptance.drafting import DEFAULT_DRAFTING, Drafting
from helpers.core.engines import aux_convention, aux_engines, engines_at
from helpers.core.errors import BadInputError
from helpers.speculate.result import DEFAULT_ENGINE, SpecSettings


def spec_engine(engine: str | None) -> str:
    """The engine a run reads its aux layers as: `engine` as given, or `DEFAULT_ENGINE` for None / 'all'."""
    if engine is None or str(engine).strip().lower() in ("", "all"):
        return DEFAULT_ENGINE
    try:
        found = engines_at(engine)
    except ValueError as e:
        raise BadInputError(None, f"engine: {e}") from None
    if len(found) != 1 or aux_convention(found[0]) is None:
        raise BadInputError(None, f"engine: must name an engine whose aux-layer convention the kit has read "
                                  f"({', '.join(aux_engines())}, optionally ==VERSION), got {engine!r}")
    return engine


def spec_drafting(drafting: Drafting | int | None) -> Drafting:
    """The shape: a `Drafting` as given, an int K as a chain of K, None as `DEFAULT_DRAFTING`."""
    if drafting is None:
        return DEFAULT_DRAFTING
    try:
        if isinstance(drafting, Drafting):
            return drafting.check()
        if isinstance(drafting, int) and not isinstance(drafting, bool):
            return Drafting.chain(drafting)
    except ValueError as e:
        raise BadInputError(None, str(e)) from None
    raise BadInputError(None, f"drafting must be a Drafting, a chain length or None, got {drafting!r}")


def spec_settings(drafting: Drafting | int | None = None, *, engine: str | None = None, **knobs) -> SpecSettings:
    """Checked `SpecSettings`: the shape (`spec_drafting`), the engine (`spec_engine`) and any of
    reading, temperature, max_new_tokens, seed, chat_template (`SpecSettings`' defaults otherwise).
    Bad values are one `BadInputError` line."""
    try:
        return SpecSettings(drafting=spec_drafting(drafting), engine=spec_engine(engine), **knobs)  # checked when made
    except ValueError as e:
        raise BadInputError(None, str(e)) from None


def build_run(checkpoint, target, drafting: Drafting | int | None = None, *, engine: str | None = None,
              device=None, dtype=None, embed_from=None, **knobs):
    """((target, draft), settings): the settings checked first (`spec_settings`, nothing loaded on bad
    input), then the pair (`load_pair`: `target` a folder or a loaded `Target`, `checkpoint` a path,
    URL or open `Checkpoint`; a draft that does not fit the target is one line)."""
    from helpers.model.pair import load_pair

    settings = spec_settings(drafting, engine=engine, **knobs)
    pair = load_pair(target, checkpoint, device=device, dtype=dtype, embed_from=embed_from)
    return pair, settings
