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
from helpers.engines.registry import DEFAULT_ENGINE, aux_convention, aux_engines, engines_at
from helpers.core.errors import BadInputError
from helpers.speculate.result import SpecSettings


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
    reading, temperature, max_new_tokens, seed, chat_template, acceptance_rule, batch_size (prompts the
    loop verifies together, chains and trees; `SpecSettings`' defaults otherwise).
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
    if not hasattr(target, "model"):  # a folder: its context checked from config.json, before anything loads
        check_positions(target, settings)
    pair = load_pair(target, checkpoint, device=device, dtype=dtype, embed_from=embed_from)
    return pair, settings


# -- the target's context --------------------------------------------------------------------------------
def target_positions(target) -> int | None:
    """The target's max_position_embeddings (a loaded `Target` or a folder's config.json); None when
    it states none."""
    if hasattr(target, "model"):
        n = getattr(target.text_config, "max_position_embeddings", None)
    else:
        import json
        from pathlib import Path

        from helpers.model.fit import text_config

        p = Path(target) / "config.json"
        try:
            n = text_config(json.loads(p.read_text())).get("max_position_embeddings")
        except (OSError, ValueError, AttributeError):
            return None  # the loader names an unreadable config
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def positions_needed(prompt_tokens: int, settings: SpecSettings) -> int:
    """Positions one prompt takes in the target: the prompt, every generated token, and the draft's
    depth (a chain's drafted tokens, a tree's steps: their position ids) the last verify step may
    hold beyond them."""
    return int(prompt_tokens) + int(settings.max_new_tokens) + int(settings.drafting.steps)


def check_positions(target, settings: SpecSettings, prompt_tokens: int = 1, *, prompt: str | None = None,
                    flag: str = "--max-new-tokens") -> None:
    """Refuse a run whose positions do not fit the target's max_position_embeddings, as an engine
    refuses such a request at once (one `BadInputError` line saying the limit and what to pass),
    instead of generating for minutes first. `prompt_tokens`: the longest prompt (1: none read yet)."""
    limit = target_positions(target)
    if limit is None:
        return
    need = positions_needed(prompt_tokens, settings)
    if need <= limit:
        return
    room = limit - int(prompt_tokens) - int(settings.drafting.steps)
    where = getattr(target, "path", target)
    what = (f"{prompt} is {prompt_tokens} tokens: with " if prompt else "") + \
        f"{flag} {settings.max_new_tokens} and a draft depth of {settings.drafting.steps}" \
        + (f" it needs {need:,} positions" if prompt else f", even a one-token prompt needs {need:,} positions")
    fix = f"pass {flag} {room} or less" if room >= 1 else "use a shorter prompt (it leaves no room to generate)"
    raise BadInputError(where, f"max_position_embeddings is {limit:,}: {what}, more than the target has; {fix}")


def check_prompt_positions(target, records, settings: SpecSettings, *, flag: str = "--max-new-tokens") -> None:
    """`check_positions` for the longest of `records` (prompt records, or lists of token ids), each
    tokenized as the loop tokenizes it; one line naming that record."""
    from helpers.io.chat import prompt_ids, uses_template

    if target_positions(target) is None:
        return
    template = uses_template(target.tokenizer, settings.chat_template) if target.tokenizer is not None else False
    longest, which = 0, None
    for k, rec in enumerate(records):
        if isinstance(rec, (list, tuple)):
            n, index = len(rec), k
        elif target.tokenizer is None:
            continue
        else:
            n, index = len(prompt_ids(target.tokenizer, rec.prompt_messages(), template)), rec.index
        if n > longest:
            longest, which = n, index
    if which is not None:
        check_positions(target, settings, longest, prompt=f"prompt record {which}", flag=flag)
