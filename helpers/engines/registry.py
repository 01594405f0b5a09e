"""The engines' rules at a version: which engine and release a check is about, and what its loader does.

The facts are data in `helpers.engines.table` (one `Engine` per engine, each rule a tuple
of release ranges). This module answers the questions the doctor, capture and speculate ask:
`engines_at("sglang==X.Y.Z")` turns an `--engine` value into `EngineAt`s (an engine and the
release whose rules apply, with a one-line note when that release was assumed or is unknown);
`EngineAt.span(rule)` is the behaviour at that release and `EngineAt.change(rule)` names the
release where it starts or stops; `key_fate` says what the loader does with one stored tensor
name; `aux_layer_ids` / `captured_layers` give the aux-layer convention; `draft_family` tells an
MLA draft from an MHA one. How a key splits into prefix, layout and name is
`helpers.engines.key_names.parse_key`.
Plain data: no tensors are read here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from helpers.engines.outcomes import ACCEPT_CLASSES, SERVE_RESULTS, Serve, Span
from helpers.engines.table import ENGINE_TABLE, QUOTED, RULES, Engine, Quoted
from helpers.engines.key_names import is_known_param, is_mapping_key, parse_key

ENGINES = tuple(k for k, e in ENGINE_TABLE.items() if e.in_all)  # the engines `--engine all` checks
ENGINE_KEYS = tuple(ENGINE_TABLE)  # every engine `--engine` can name
ENGINE_NAMES = {k: e.name for k, e in ENGINE_TABLE.items()}
# the engine a run is about when none is named (or `all` is, where one engine must be picked): whose aux-layer
# convention feeds the draft in speculate, capture and drift, and whose the preflight checks; written here only
DEFAULT_ENGINE = "sglang"

# how SGLang and vLLM are told to run an EAGLE-3 draft (not EAGLE 1/2): the fix of the doctor's eagle3-as-eagle,
# whether the doctor finds it in a checkpoint or a server's log, launch command or answers state it
EAGLE3_FLAGS = 'SGLang --speculative-algorithm EAGLE3; vLLM speculative_config method "eagle3"'
# The DeepSeek family's model types (DeepSeek-V2 / V3, Kimi-K2, Kimi-K2.5) as a config's `model_type` names them:
# the targets whose rule `aux.max_id.mla` applies (vLLM's models/deepseek_v2.py appends the last layer's output), and
# the names the kit's own draft loader accepts on an MLA draft config (`helpers.model.config`: a config with
# kv_lora_rank under any other type is refused). Written here only.
DEEPSEEK_FAMILY = ("kimi_k2", "deepseek_v3", "deepseek_v2", "kimi_k25")
# A draft config's model_type that makes the draft MLA by its name alone (`draft_family`; a config with kv_lora_rank
# is MLA whatever its type): the family less `kimi_k25`, Kimi-K2.5's vision-language wrapper (vLLM's
# KimiK25ForConditionalGeneration), whose language model's own type is one of these: the engines tell MLA from the
# text config's type (vLLM's is_deepseek_mla lists kimi_k2, deepseek_v2/v3 and no kimi_k25).
MLA_DRAFT_TYPES = tuple(t for t in DEEPSEEK_FAMILY if t != "kimi_k25")


# -- the table, checked once -------------------------------------------------------------------------
def check_table(table=ENGINE_TABLE) -> None:
    """ValueError unless every rule key is declared in RULES and each rule's (and outcome's) ranges
    run oldest first without overlap: each `until` before the next `since`, open ends only at the ends."""
    for e in table.values():
        for rule in e.rules:
            if rule not in RULES:
                raise ValueError(f"{e.key}: rule {rule!r} is not declared in helpers.engines.table.RULES")
        split = [(f"{what} in setting {st.name!r}", st.spans) for what, sts in e.settings.items() for st in sts
                 if st.spans is not None]
        for what, spans in (*e.rules.items(), *e.outcomes.items(), *split):
            for a, b in zip(spans, spans[1:]):
                if a.until is None or b.since is None or not _v(a.until) < _v(b.since):
                    raise ValueError(f"{e.key} {what}: range to {a.until} then from {b.since}: not whole and in order")
        for what, sts in e.settings.items():
            # a split row: an outcome the table holds, the setting its row holds for named once, the others' values
            # outcomes (Serve), and no setting named twice
            own = [st for st in sts if st.spans is None]
            if what not in e.outcomes or len(own) != 1 or len({st.name for st in sts}) != len(sts) or len(sts) < 2:
                raise ValueError(f"{e.key} settings of {what!r}: an outcome row of the table, split into two or more "
                                 "settings named once each, one of them (spans None) the row's own")
            if any(not isinstance(sp.value, Serve) for st in sts if st.spans for sp in st.spans):
                raise ValueError(f"{e.key} settings of {what!r}: every value an outcome (Serve)")


# -- which engine, at which release -----------------------------------------------------------------
def engine_key(name: str) -> str:
    """The table key for an engine name or alias ('tensorrt-llm' -> 'trtllm'); ValueError if unknown."""
    low = name.strip().lower()
    for k, e in ENGINE_TABLE.items():
        if low == k or low in e.aliases:
            return k
    raise ValueError(f"unknown engine {name!r}; expected one of {', '.join(ENGINE_KEYS)}")


def _v(text: str) -> Version:
    return Version(text)


def check_quoted(quoted: dict[str, Quoted] = QUOTED, table=ENGINE_TABLE) -> None:
    """ValueError unless every quoted release is a release the table read for that engine."""
    for what, q in quoted.items():
        if q.engine not in table or q.release not in table[q.engine].releases:
            raise ValueError(f"QUOTED[{what!r}]: {q.engine} {q.release} is not a release the engine table read")


check_table()
check_quoted()


@dataclass(frozen=True)
class EngineAt:
    """An engine and the release whose rules apply (`version`), with how it was chosen."""

    engine: Engine
    version: str | None  # None: an engine read at a commit (no release)
    asked: str | None = None  # the version specifier given (e.g. "==X.Y.Z", ">=X.Y"), None: none given
    note: str | None = None  # one line when the version was assumed or is not a release read

    @property
    def key(self) -> str:
        return self.engine.key

    @property
    def name(self) -> str:
        return self.engine.name

    @property
    def label(self) -> str:
        """'SGLang X.Y.Z' / 'TensorRT-LLM @ <commit>': the release the findings are about."""
        return f"{self.name} {self.engine.tag}{self.version}" if self.version else f"{self.name} @ {self.engine.snapshot}"

    @property
    def assumed(self) -> bool:
        return self.asked is None

    def has(self, rule: str) -> bool:
        """Whether this engine's table holds `rule` (False too for a key no engine declares, so a
        composed key such as `mla.fc.bias` can be asked)."""
        return rule in self.engine.rules

    def span(self, rule: str) -> Span | None:
        """The behaviour of `rule` at this release (the range holding it); None when the engine's
        table has no such rule. KeyError for a key the table does not declare (a typo)."""
        if rule not in RULES:
            raise KeyError(f"{rule!r} is not a rule key of helpers.engines.table.RULES")
        spans = self.engine.rules.get(rule)
        return self._pick(spans) if spans else None

    def where(self, rule: str, value) -> Span | None:
        """The first range of `rule` (any release read) where the engine does `value`: its `since` and
        `until` name the releases to quote in a message ('serve with vLLM <until>'); None if it never does."""
        if rule not in RULES:
            raise KeyError(f"{rule!r} is not a rule key of helpers.engines.table.RULES")
        return next((sp for sp in self.engine.rules.get(rule, ()) if sp.value == value), None)

    def value(self, rule: str, default=None):
        sp = self.span(rule)
        return default if sp is None else sp.value

    def outcome(self, effect: str) -> dict | None:
        """What serving a checkpoint with this effect does at this release, in the engine-truth terms
        (`result`, `accept`, `says`), with whether that release was run (`checked`) and what the outcome
        rests on (`source`: the run, or for an engine never run here the code read); None: not known."""
        spans = self.engine.outcomes.get(effect)
        if not spans:
            return None
        sp = self._pick(spans)
        serve: Serve | None = sp.value
        if serve is None:  # a range of releases whose outcome was not read
            return None
        release = f"{self.engine.tag}{self.version}" if self.version else None  # as the engine names it: b<build>
        # checked: this release was run, and this row is one of the runs (not a row read in the code)
        checked = self.version in self.engine.run and (sp.pr or "").startswith("run in")
        return {"result": serve.result, "accept": serve.accept, "says": serve.says,
                **({"stage": serve.stage} if serve.stage else {}), "release": release, "checked": checked,
                "run_in": list(self.engine.run), "source": sp.pr, **self._settings(effect)}

    def _settings(self, effect: str) -> dict:
        """For an outcome row the table splits by setting (`Engine.settings`): `setting`, the one the row holds
        for, and `other_settings`, what serving does in each other one at this release (result, accept, says,
        source, how); {} for a row the table does not split."""
        sts = self.engine.settings.get(effect)
        if not sts:
            return {}
        own = next(st for st in sts if st.spans is None)
        others = []
        for st in sts:
            if st.spans is None:
                continue
            sp = self._pick(st.spans)
            if sp.value is None:
                continue
            others.append({"setting": st.name, "result": sp.value.result, "accept": sp.value.accept,
                           "says": sp.value.says, "source": sp.pr, "how": st.how})
        return {"setting": own.name, "setting_how": own.how, "other_settings": others}

    def _pick(self, spans) -> Span:
        """The range holding this release: since <= release <= until (the table's ranges are whole:
        `check_table`), the newest for an engine read at a commit."""
        if self.version is None:
            return spans[-1]
        v = _v(self.version)
        for sp in spans:
            if (sp.since is None or _v(sp.since) <= v) and (sp.until is None or v <= _v(sp.until)):
                return sp
        # between two ranges (a release the table does not name): the last range that started before it
        return [sp for sp in spans if sp.since is None or _v(sp.since) <= v][-1]

    def change(self, rule: str) -> str:
        """Where the behaviour at this release starts and stops, in words ('' when it never changed)."""
        spans = self.engine.rules.get(rule) or ()
        sp = self.span(rule)
        if sp is None or len(spans) < 2:
            return ""
        i = spans.index(sp)
        parts, t = [], self.engine.tag
        if i > 0:
            parts.append(f"since {self.name} {t}{sp.since}" + (f" ({sp.pr})" if sp.pr else ""))
        if i + 1 < len(spans):
            nxt = spans[i + 1]
            parts.append(f"up to {t + sp.until if sp.until else 'before ' + t + nxt.since}; from {t}{nxt.since}"
                         + (f" ({nxt.pr})" if nxt.pr else "") + f" it {_WORDS.get(nxt.value, nxt.value)}")
        return "; ".join(parts)

    @property
    def spec(self) -> str:
        """The `--engine` value naming this engine as it was asked ('sglang==X.Y.Z', 'vllm')."""
        return self.key + (self.asked or "")

    def as_dict(self) -> dict:
        return {"engine": self.key, "version": self.version, "assumed": self.assumed, "asked": self.asked,
                "note": self.note}


_WORDS = {"reads": "models it", "absent": "has no module for it", "loads": "loads them", "skips": "skips them silently",
          "fails": "fails at start-up", "warns": "warns and skips them", "misses": "misses it",
          "loads-unused": "loads but never applies it"}
_SPEC = re.compile(r"^\s*([A-Za-z][A-Za-z_.-]*)\s*((?:==|>=|<=|~=|!=|>|<).*)?$")


def engines_at(spec: str) -> tuple[EngineAt, ...]:
    """The engines an `--engine` value names, each at the release whose rules apply.

    'all' (every engine with `in_all`), 'sglang', 'vllm==X.Y.Z', 'sglang>=X.Y', 'trtllm'.
    No version: the newest release read. A range: the oldest release read inside a lower bound
    (>=, >, ~=), else the newest inside it. A version newer than every release read: the newest
    release's rules with a note; older than all: the oldest's. ValueError for an unknown engine
    or an unreadable version.
    """
    m = _SPEC.match(spec or "")
    if not m:
        raise ValueError(f"--engine must be an engine name with an optional version ({spec_example()}), got {spec!r}")
    name, ver = m.group(1), (m.group(2) or "").replace(" ", "") or None
    if name.lower() == "all":
        if ver:
            raise ValueError("--engine all takes no version; name the engine: sglang==X or vllm==X")
        return tuple(_at(ENGINE_TABLE[k], None) for k in ENGINES)
    return (_at(ENGINE_TABLE[engine_key(name)], ver),)


def spec_example(key: str | None = None, op: str = "==") -> str:
    """An `--engine` value for --help and messages, made from the table: `key` (default: the first engine
    `all` checks) at its newest release read; with a range operator (>=) its major.minor ('vllm>=X.Y')."""
    e = ENGINE_TABLE[key or ENGINES[0]]
    if not e.releases:
        return e.key
    release = e.newest if op == "==" else ".".join(e.newest.split(".")[:2])
    return f"{e.key}{op}{e.tag}{release}"


def engine_at(engine) -> EngineAt:
    """`engine` as one `EngineAt` (an `EngineAt` is returned as is; a string must name one engine)."""
    if isinstance(engine, EngineAt):
        return engine
    got = engines_at(engine)
    if len(got) != 1:
        raise ValueError(f"name one engine, not {engine!r}")
    return got[0]


def engines_for(engine: str) -> tuple[str, ...]:
    """The engine keys an `--engine` value names ('all' -> every engine `all` checks)."""
    return tuple(a.key for a in engines_at(engine))


def _at(e: Engine, asked: str | None) -> EngineAt:
    if not e.releases:
        note = f"{e.name}'s rules were read at commit {e.snapshot}, not per release"
        return EngineAt(e, None, asked, note + (f": {asked} is not checked against them" if asked else ""))
    t = e.tag  # shown before a release (llama.cpp's b<build>)
    newest, oldest = e.releases[-1], e.releases[0]
    if asked is None:
        return EngineAt(e, newest, None, f"no {e.name} version given: the rules of {t}{newest}, the newest release read")
    try:  # a tagged version (==b<build>) is its number
        spec = SpecifierSet(re.sub(rf"(==|>=|<=|~=|!=|>|<)\s*{re.escape(t)}(?=\d)", r"\1", asked) if t else asked)
    except InvalidSpecifier:
        raise ValueError(f"{e.key}{asked}: not a version specifier (use {e.key}==X.Y.Z or {e.key}>=X.Y)") from None
    ops = {sp.operator for sp in spec}
    if ops == {"=="} and len(spec) == 1:
        text = next(iter(spec)).version
        try:
            v = _v(text)
        except InvalidVersion:
            raise ValueError(f"{e.key}{asked}: {text!r} is not a version") from None
        if v > _v(newest):
            return EngineAt(e, newest, asked, f"{e.name} {t}{text} is newer than every release read: the rules of "
                            f"{t}{newest}, the newest read, are assumed")
        if v < _v(oldest):
            return EngineAt(e, oldest, asked, f"{e.name} {t}{text} is older than every release read: the rules of "
                            f"{t}{oldest} are assumed")
        return EngineAt(e, text, asked, None if text in e.releases else
                        f"{e.name} {t}{text} was not read itself: the rules of the releases around it apply")
    inside = [r for r in e.releases if spec.contains(r, prereleases=True)]
    if not inside:
        return EngineAt(e, newest, asked, f"no {e.name} release read matches {asked}: the rules of {t}{newest}, the "
                        "newest read, are assumed")
    pick = inside[0] if ops & {">=", ">", "~="} else inside[-1]
    return EngineAt(e, pick, asked, f"{e.name}{asked}: the rules of {t}{pick} apply")


# -- stored names ----------------------------------------------------------------------------------
def key_fate(at: EngineAt, key: str, mla: bool = False) -> str:
    """What `at`'s EAGLE-3 loader does with one stored tensor name: 'loads', 'skips' (silently),
    'warns' (logs and skips), 'fails' (no start) or 'unknown' (the table has no rule for it)."""
    if is_mapping_key(key) or ".rotary_emb." in key:  # every engine skips rotary buffers by design
        return "loads"
    if "t2d" in key and at.value("t2d.names") == "dropped":  # dropped by design, whatever the rest of the name
        return "loads"

    def rule(name):
        return at.value(f"mla.{name}") if mla and at.has(f"mla.{name}") else at.value(name)

    unknown = rule("unknown") or "unknown"
    if "lm_head" in key:
        return "loads" if key == "lm_head.weight" else unknown
    info = parse_key(key)
    # a layout can have its own prefix rule (llama.cpp maps model.layers.0.* but not model.midlayer.*)
    prefix = f"prefix.model.{info.layout}" if info.layout and at.has(f"prefix.model.{info.layout}") else "prefix.model"
    if info.prefixed and rule(prefix) not in (None, "loads"):
        return rule(prefix)
    if info.layout and rule(f"layout.{info.layout}") not in (None, "loads"):
        return rule(f"layout.{info.layout}")
    if info.name == "fc.bias" and not info.layout:
        return "loads" if rule("fc.bias") == "reads" else unknown
    if info.name.startswith("mask_hidden") and at.has("mask_hidden"):  # P-EAGLE's: loaded or skipped by its rule
        return "warns" if rule("mask_hidden") == "warns" else "loads"
    return "loads" if is_known_param(info, mla) else unknown


def support_starts(engine, rule: str) -> tuple[str | None, str | None, str | None]:
    """For a rule that changed once or more: (the last release of the range before the newest one, the
    newest range's first release, its PR)."""
    spans = ENGINE_TABLE[engine_key(engine) if isinstance(engine, str) else engine.key].rules[rule]
    if len(spans) < 2:
        return None, None, None
    return spans[-2].until, spans[-1].since, spans[-1].pr


def worst_outcome(outcomes) -> dict | None:
    """The outcome that decides a checkpoint's fate: refuses (at conversion before at start-up, for an
    engine that converts), then crashes, then serves with the lowest accept class (about-1, at-most,
    unknown, as-trained). None when none is known."""
    known = [o for o in outcomes if o]
    if not known:
        return None

    def rank(o):
        return (SERVE_RESULTS.index(o["result"]), ACCEPT_CLASSES.index(o["accept"]) if o["accept"] else 0,
                o.get("stage") != "convert")

    return min(known, key=rank)


# -- aux layers ----------------------------------------------------------------------------------------
def aux_layer_ids(cfg: dict | None, engines=None) -> dict[str, list[int] | None]:
    """The aux layer ids each engine reads from a draft config (None: none read, engine default).

    Where each engine looks is its `aux.from` rule, per release: "nested" is
    `eagle_config.eagle_aux_hidden_state_layer_ids`, "top" the top-level one (speculators configs),
    "top-alone" the top-level one only in a config without `eagle_config`.
    `engines`: `EngineAt`s (default: every engine at its newest release).
    """
    cfg = cfg or {}
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    found = {"nested": eagle.get("eagle_aux_hidden_state_layer_ids"), "top": cfg.get("eagle_aux_hidden_state_layer_ids")}
    found["top-alone"] = found["top"] if cfg.get("eagle_config") is None else None
    found = {k: [int(i) for i in v] if isinstance(v, list) and v else None for k, v in found.items()}
    out = {}
    for at in engines or [engine_at(k) for k in ENGINE_KEYS]:
        places = at.value("aux.from", ())  # an engine whose convention was not read: none
        out[at.key] = next((found[p] for p in places if found[p] is not None), None)
    return out


def aux_ids(engine, cfg: dict | None) -> list[int] | None:
    """The aux ids one engine (a name, ==VERSION, or an `EngineAt`) reads from a draft config (None: none)."""
    at = engine_at(engine)
    return aux_layer_ids(cfg, [at])[at.key]


DEEPSEEK_TARGETS = (*DEEPSEEK_FAMILY, "glm4_moe_lite")  # aux.shift.deepseek: SGLang adds GLM-4.7-Flash


def aux_convention(engine, target_type: str | None = None):
    """The shift the engine adds to configured aux ids (capture index = id + shift), None when unread;
    for a DeepSeek-family target (`target_type`, its text config's model_type) the engine's rule for
    those targets, which may be '1-if-first-is-1'."""
    at = engine_at(engine)
    if target_type in DEEPSEEK_TARGETS and at.has("aux.shift.deepseek"):
        return at.value("aux.shift.deepseek")
    return at.value("aux.shift")


def aux_engines() -> tuple[str, ...]:
    """The engines whose aux-layer convention the kit has read (those a capture or a speculate run can
    reproduce), in the table's order."""
    return tuple(k for k in ENGINE_KEYS if aux_convention(k) is not None)


def captured_layers(engine, ids: list[int] | None, num_layers: int, target_type: str | None = None) -> list[int]:
    """Target layers whose INPUT (= output of the layer before) the engine captures."""
    if ids is None:
        return [2, num_layers // 2, num_layers - 3]
    shift = aux_convention(engine, target_type)
    if shift is None:
        raise ValueError(f"the kit has not read {engine_at(engine).name}'s aux-layer convention")
    if shift == "1-if-first-is-1":
        shift = 1 if ids and ids[0] == 1 else 0
    return [i + shift for i in ids]


def gguf_engines() -> tuple[str, ...]:
    """The engines that load a GGUF draft: those whose proposer reads d2t as absolute ids (rule `d2t.apply`:
    llama.cpp's converter stores arange + d2t in the GGUF)."""
    return tuple(k for k, e in ENGINE_TABLE.items()
                 if any(sp.value == "absolute-ids" for sp in e.rules.get("d2t.apply", ())))


def aux_max_index(engine, num_layers: int, target_type: str | None = None) -> int:
    """The largest capture index `engine` serves for a target of `num_layers` layers (rule `aux.max_id`):
    L - 1 where the capture tests the layers 0..L-1 for membership (SGLang, vLLM, TokenSpeed), L where an
    index L is the last layer's output (llama.cpp, where the rule says so: common/speculative.cpp takes the
    target's pre-norm last hidden state for it; vLLM for a DeepSeek-family target, rule `aux.max_id.mla`:
    deepseek_v2.py appends the pre-norm output when end_layer is in the list); L - 1 where the rule was not read."""
    at = engine_at(engine)
    rule = at.value("aux.max_id", "L-1")
    if target_type in DEEPSEEK_FAMILY and at.has("aux.max_id.mla"):
        rule = at.value("aux.max_id.mla")
    return num_layers if rule == "L" else num_layers - 1


def arriving_layers(engine, ids: list[int] | None, num_layers: int, target_type: str | None = None) -> list[int]:
    """The target layers whose input actually reaches the draft's fc, in the order it arrives: the
    engines read here (SGLang, vLLM, TokenSpeed, llama.cpp) capture in their forward loop, testing each
    layer index for membership in the capture list, so a layer named twice is captured once, one
    outside 0..`aux_max_index` never, and the states arrive in layer order (index L, where the engine
    serves it, is the last layer's output: the input of a layer L). With the default capture (2, L//2,
    L-3) a target of 1, 2, 4, 5 or 6 layers therefore delivers fewer than three states."""
    got = captured_layers(engine, ids, num_layers, target_type)
    top = aux_max_index(engine, num_layers, target_type)
    return sorted({i for i in got if 0 <= i <= top})


def layers_in(engine, ids: list[int] | None, num_layers: int, target_type: str | None = None) -> list[int]:
    """`captured_layers` for a target of `num_layers` layers; a ValueError when one is not there (index L
    is there for an engine that serves the last layer's output, `aux_max_index`)."""
    layers = captured_layers(engine, ids, num_layers, target_type)
    top = aux_max_index(engine, num_layers, target_type)
    if any(not 0 <= i <= top for i in layers):
        n = layers[0] - ids[0] if ids else 0
        shift = f" ({engine_at(engine).name} adds {n} to configured ids)" if n and ids else ""
        served = f"0..{top}" + (f": {top} is the last layer's output" if top == num_layers else "")
        raise ValueError(f"aux layer ids {ids} capture the input of layers {layers}{shift}, but the target has "
                         f"{num_layers} layers ({served})")
    return layers


def draft_capture(engine, cfg: dict | None, num_layers: int, target_type: str | None = None):
    """What `engine` feeds a draft whose config is `cfg` (None: no config, the engine's default):
    (the aux ids it reads there, None when none; the target layers whose input it captures, checked
    against the target's `num_layers` by `layers_in`)."""
    ids = aux_ids(engine, cfg)
    return ids, layers_in(engine, ids, num_layers, target_type)


def release_capture_note(engine, cfg: dict | None, num_layers: int, target_type: str | None = None) -> str | None:
    """One line when `engine` names no release and the releases read feed this draft different target
    layers (`draft_capture` per release): the newest release's rule then stands in for the release the
    user serves, and the line says so, with what the other releases feed. None otherwise."""
    at = engine_at(engine)
    if not at.assumed or len(at.engine.releases) < 2:
        return None
    by_capture: dict[str, list[str]] = {}
    for release in at.engine.releases:
        try:
            got = str(draft_capture(f"{at.key}=={at.engine.tag}{release}", cfg, num_layers, target_type)[1])
        except ValueError:
            got = "no start (ids outside the target)"
        by_capture.setdefault(got, []).append(release)
    if len(by_capture) < 2:
        return None
    t = at.engine.tag
    mine = next(c for c, rs in by_capture.items() if at.version in rs)
    others = "; ".join(f"{t}{rs[0]}" + (f" to {t}{rs[-1]}" if len(rs) > 1 else "") + f": {c}"
                       for c, rs in by_capture.items() if c != mine)
    return (f"--engine {at.key} names no release, so the rules of {at.label} (the newest read) stand in: they feed "
            f"this draft the input of target layers {mine}; other releases read feed other layers ({others}); "
            f"name the release you serve (--engine {at.key}=={t}X.Y.Z)")


# -- the draft's family --------------------------------------------------------------------------------
def draft_family(cfg: dict | None) -> dict:
    """{'attention': 'mla' | 'mha', 'model_type': ..., 'architectures': [...]} from a draft config.

    An MLA draft names a DeepSeek-family model type (`deepseek_v3`, `kimi_k2`, ...) or carries
    `kv_lora_rank`; SGLang serves it with kimi_k25_eagle3.py, vLLM with deepseek_eagle3.py.
    """
    cfg = cfg or {}
    layer = cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else cfg
    mt = layer.get("model_type") if isinstance(layer.get("model_type"), str) else None
    mla = mt in MLA_DRAFT_TYPES or bool(layer.get("kv_lora_rank"))
    arch = [a for a in (cfg.get("architectures") or []) if isinstance(a, str)]
    return {"attention": "mla" if mla else "mha", "model_type": mt, "architectures": arch}
