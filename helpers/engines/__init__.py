"""What the kit knows about each serving engine (SGLang, vLLM, TensorRT-LLM, llama.cpp, TokenSpeed), in one
package: the rules by release, what serving a checkpoint does, how each engine accepts and counts,
its own defects. The rest of the library asks `registry` (`engine_at`, `engines_at`, `ENGINES`);
the other modules are the data and the rules it reads from.

Where a new fact goes:
- a new release of an engine: its version in that `Engine`'s `releases` in `table.py`; a release that
  changes a behaviour is one more `Span` of the rule it changes (and its test);
- a new engine: one more `Engine` in `table.py` (added to `ENGINE_TABLE`), its outcome rows in
  `outcomes.py`, its acceptance rule in `acceptance_rules.py` and how it counts in `counting.py`;
- a new outcome (what serving a checkpoint does): a row in the engine's `*_OUTCOMES` in `outcomes.py`;
- a new acceptance rule (how a drafted token is accepted under sampling): an `AcceptanceRule` in
  `RULES` in `acceptance_rules.py`, with the source lines read (its arithmetic, if it needs new
  arithmetic, in `helpers.acceptance.sampling`);
- how a new engine (or release) counts a speculative run: its names for the counts, and the accept length they
  make, in `counting.py` (the serving readers take them from there); a count that changes by release, a rule of
  the table (`count.draft_cap`);
- an engine's own bug: an `EngineDefect` in `defects.py`;
- the default engine, `DEFAULT_ENGINE`, and the DeepSeek family's model types: `registry.py`.

Modules (import them by name; this file imports nothing):
- `outcomes`: what serving a checkpoint does per engine and release; `Span` and `Serve`
- `table`: the engines as data, one `Engine` each, rules by release; `QUOTED`
- `key_names`: how a stored draft tensor name reads (prefix, layer layout, parameter)
- `registry`: the one entry point: an engine's rules at a release (`engine_at`, `EngineAt`), `--engine` values
- `docs`: the rule x release table in words, for docs/doctor-findings.md
- `acceptance_rules`: how each engine accepts a drafted token under sampling, by release, with source lines
- `counting`: how each engine counts a speculative run (drafts, draft tokens, accepted), `EngineCounts`
- `defects`: engines' own defects as data and their signature
"""

__all__ = ["outcomes", "table", "key_names", "registry", "docs", "acceptance_rules", "counting", "defects"]
