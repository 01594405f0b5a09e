"""What a serving log states at start-up: the drafting settings the server ran with and the
engine's release, each read from the first line within a log's head that states it; and, over the
whole log (or a launch command, or what a server reports about itself), a forced-acceptance
benchmark setting, the speculative algorithm and the draft it names (`Setup`, `read_setup`,
`setup_from_text`): a forced source is never evidence about the draft (`forced_line`), and an
EAGLE-3 draft run as EAGLE is the doctor's `eagle3-as-eagle` (`Setup.wrong_algorithm`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from helpers.core.errors import BadInputError

# -- drafting settings from a log's start-up lines ----------------------------------------------
_SGL_ARG = re.compile(r"(?<![\w])['\"]?(speculative_num_steps|speculative_eagle_topk|speculative_num_draft_tokens)"
                      r"['\"]?\s*[:=]\s*(\d+)\b")
_SGL_ALGORITHM = re.compile(r"['\"]?\bspeculative_algorithm['\"]?\s*[:=]\s*['\"]?([A-Za-z][\w-]*)")
BLOCK_ALGORITHMS = ("DFLASH", "DSPARK")  # SGLang algorithms that draft a block of num_draft_tokens - 1 in one step
_VLLM_TOKENS = re.compile(r"['\"]?(?:num_speculative_tokens|num_spec_tokens)['\"]?\s*[:=]\s*(\d+)")


def drafting_from_line(line: str) -> dict:
    """Drafting settings stated on one start-up line, in the kit's names (see `helpers.ui.settings`).

    SGLang's `server_args=ServerArgs(... speculative_num_steps=5, speculative_eagle_topk=4,
    speculative_num_draft_tokens=16 ...)` (0.5.18 and before) or the dict form of later builds,
    `server_args={... 'speculative_num_steps': 5, ...}`, gives steps / topk / draft_tokens as the server ran
    them; vLLM's `non-default args: {... 'num_speculative_tokens': 3 ...}` (or a
    `SpeculativeConfig(... num_spec_tokens=3 ...)`) is a chain: steps 3, topk 1, draft_tokens 4.
    Returns {} for any other line; `source` names the line's kind.
    """
    from helpers.acceptance.drafting import (  # numpy: only when a line is read
        SGLANG_NAMES,
        Drafting,
    )

    if "server_args=" in line:
        found = {SGLANG_NAMES[k]: int(v) for k, v in _SGL_ARG.findall(line)}
        algo = _SGL_ALGORITHM.search(line)
        n = found.get("draft_tokens")
        if algo and algo.group(1).upper() in BLOCK_ALGORITHMS and n and n > 1:
            # block drafting (SGLang's DFlash / DSpark): num_draft_tokens - 1 tokens drafted in ONE step and
            # verified as a chain, so the most one verify emits is num_draft_tokens (not steps + 1 = 2)
            return {"steps": n - 1, "topk": 1, "draft_tokens": n, "block": True, "algorithm": algo.group(1).upper(),
                    "server": dict(found), "source": "server_args"}
        return {**found, "source": "server_args"} if found else {}
    if "speculative" in line.lower() or "num_spec_tokens" in line:
        m = _VLLM_TOKENS.search(line)
        if m:
            try:
                return {**Drafting.from_vllm(int(m.group(1))).kit(), "source": "num_speculative_tokens"}
            except ValueError:
                return {}
    return {}


# -- the engine's release from a log's start-up lines ----------------------------------------------
# vLLM prints its version at start-up ("vLLM API server version X" up to 0.14, "vLLM server version
# X, serving model M" and "Initializing a V1 LLM engine (vX) with config" later). SGLang prints none
# in any release read (0.4.6-0.5.23): its version is read from `python -m sglang.check_env` output
# ("sglang: X") or a `pip freeze` line ("sglang==X") kept at the top of the log.
_VERSION = r"v?(\d+(?:\.\d+)+(?:[.+-]?[A-Za-z0-9]+)*)"
_ENGINE_VERSION = (
    ("vllm", re.compile(r"vLLM (?:API )?server version " + _VERSION)),
    ("vllm", re.compile(r"Initializing an? (?:V1 )?LLM engine \(" + _VERSION + r"\)")),
    ("sglang", re.compile(r"^\s*sglang\s*:\s*" + _VERSION + r"\s*$")),
    ("sglang", re.compile(r"^\s*sglang==" + _VERSION + r"\s*$")),
    ("vllm", re.compile(r"^\s*vllm\s*:\s*" + _VERSION + r"\s*$")),
    ("vllm", re.compile(r"^\s*vllm==" + _VERSION + r"\s*$")),
)


def engine_version_from_line(line: str) -> tuple[str, str] | None:
    """(engine, version) when one start-up line states the serving engine's release, else None."""
    for engine, pattern in _ENGINE_VERSION:
        m = pattern.search(line)
        if m:
            return engine, m.group(1).rstrip(".,")
    return None


def _first_in_head(path, read_line, max_lines: int):
    """`read_line`'s answer for the first line within `max_lines` that gives one (truthy), else None."""
    p = Path(path)
    if not p.is_file():
        raise BadInputError(p, "no such log file" if not p.exists() else "not a file")
    try:
        with open(p, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh):
                if n >= max_lines:
                    break
                found = read_line(line)
                if found:
                    return found
    except OSError as e:
        raise BadInputError(p, f"cannot read: {e.strerror or e}") from None
    return None


def read_engine_version(path, max_lines: int = 5000) -> tuple[str, str] | None:
    """(engine, version) from the first line within `max_lines` that states one, or None."""
    return _first_in_head(path, engine_version_from_line, max_lines)


def read_drafting(path, max_lines: int = 5000) -> dict:
    """The drafting settings a log states at start-up (first such line within `max_lines`), or {}."""
    return _first_in_head(path, drafting_from_line, max_lines) or {}


# -- what a server was set to do with acceptance, and the algorithm it ran ---------------------------
# Benchmark settings that replace the verifier's accept decisions with preset ones: a log or page of
# such a server says nothing about the draft. Where each is read (checked in the released source):
#   SGLang   env SGLANG_SIMULATE_ACC_LEN (> 0; default -1 = off): srt/environ.py, srt/speculative/spec_utils.py
#            (0.5.23). Printed nowhere by SGLang itself: seen in a launch command, env dump or compose file.
#   vLLM     speculative_config rejection_sample_method "synthetic" (+ synthetic_acceptance_length / _rates):
#            vllm/config/speculative.py (0.34.0); in the `non-default args:` line and /server_info (dev mode).
#   TRT-LLM  env TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS (> 0, accepted DRAFT tokens per step, the
#            bonus not counted): tensorrt_llm/_torch/speculative/interface.py (NVIDIA/TensorRT-LLM).
#   ATOM     --spec-decode-acceptance-length / --spec-decode-acceptance-rate (ROCm/ATOM atom/config.py,
#            SpeculativeConfig.synthetic_acceptance_*; ROCm/ATOM#555).
_V = r"['\"]?\s*[:=]\s*['\"]?"
_FORCED = (
    ("sglang", re.compile(r"\b(?P<key>SGLANG_SIMULATE_ACC_LEN)" + _V + r"(?P<value>[+-]?\d+(?:\.\d+)?)"), True),
    ("trtllm", re.compile(r"\b(?P<key>TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS)" + _V + r"(?P<value>[+-]?\d+(?:\.\d+)?)"),
     True),
    ("vllm", re.compile(r"\b(?P<key>rejection[_-]sample[_-]method)" + _V + r"(?P<value>synthetic)\b"), False),
    ("vllm", re.compile(r"\b(?P<key>synthetic[_-]acceptance[_-](?:length|rates?))" + _V + r"(?P<value>\[[\d.,\s]*\]?|\d+(?:\.\d+)?)"),
     False),
    ("atom", re.compile(r"(?P<key>--spec[-_]decode[-_]acceptance[-_](?:length|rate))(?:\s*=\s*|\s+)['\"]?(?P<value>\d+(?:\.\d+)?)"),
     False),
)
_FORCED_HINTS = ("simulate_acc_len", "force_num_accepted", "synthetic", "acceptance-length", "acceptance-rate",
                 "acceptance_length", "acceptance_rate")
# an engine's own error message naming a setting is not the setting (e.g. vLLM's "are only valid with
# rejection_sample_method='synthetic'")
_NOT_A_SETTING = re.compile(r"\b(?:requires|only valid|must be|mutually exclusive|[Ii]nvalid|cannot be combined)\b")
FORCED_MEANS = {
    "sglang": "SGLang overwrites each verify's accepted count with a simulated one",
    "vllm": "vLLM's synthetic rejection sampler accepts drafts at preset rates, whatever the draft proposes",
    "trtllm": "TensorRT-LLM forces the accepted draft tokens per verify step (accept length = value + 1)",
    "atom": "ATOM accepts drafts at a preset rate to reach the given acceptance length",
}

# the speculative algorithm and the draft a start-up line or launch command names
_ALGORITHM = (
    ("sglang", re.compile(r"['\"]?\bspeculative_algorithm['\"]?\s*[:=]\s*['\"]?(?P<v>[A-Za-z][\w-]*)")),
    ("sglang", re.compile(r"--speculative[-_]algorithm(?:\s*=\s*|\s+)['\"]?(?P<v>[A-Za-z][\w-]*)")),
    ("vllm", re.compile(r"SpeculativeConfig\(method=['\"](?P<v>[\w-]+)['\"]")),
    ("vllm", re.compile(r"['\"]spec_method['\"]\s*:\s*['\"](?P<v>[\w-]+)['\"]")),
    ("vllm", re.compile(r"--spec[-_]method(?:\s*=\s*|\s+)['\"]?(?P<v>[\w-]+)")),
)
_DRAFT = (
    re.compile(r"['\"]?\bspeculative_draft_model_path['\"]?\s*[:=]\s*['\"](?P<v>[^'\"]+)['\"]"),
    re.compile(r"--speculative[-_]draft[-_]model(?:[-_]path)?(?:\s*=\s*|\s+)['\"]?(?P<v>[^\s'\"]+)"),
    re.compile(r"SpeculativeConfig\(method=['\"][\w-]*['\"], model=['\"](?P<v>[^'\"]+)['\"]"),
    re.compile(r"['\"]spec_model['\"]\s*:\s*['\"](?P<v>[^'\"]+)['\"]"),
    re.compile(r"--spec[-_]model(?:\s*=\s*|\s+)['\"]?(?P<v>[^\s'\"]+)"),
)
# vLLM's speculative config as a dict (non-default args) or JSON (--speculative-config '{...}')
_SPEC_CONFIG = re.compile(r"speculative[-_]config['\"]?\s*[:=]?\s*['\"]?\{(?P<body>[^{}]*)\}")
_IN_CONFIG = {"method": re.compile(r"['\"]method['\"]\s*:\s*['\"](?P<v>[\w-]+)['\"]"),
              "model": re.compile(r"['\"]model['\"]\s*:\s*['\"](?P<v>[^'\"]+)['\"]")}
_ARCH = (re.compile(r"Resolved architecture: (?P<v>\w+)"),
         re.compile(r"['\"]?architectures['\"]?\s*[:=]\s*\[(?P<v>[^\]]*)\]"))
_EAGLE3_NAME = re.compile(r"eagle[-_]?3", re.IGNORECASE)  # vLLM's own test: "eagle3" in the draft's path


def eagle_family(algorithm: str | None) -> str | None:
    """'eagle' for an EAGLE (1/2) algorithm name (SGLang EAGLE, or NEXTN, which SGLang resolves to
    EAGLE; vLLM eagle), 'eagle3' for EAGLE3 / eagle3, None for anything else or nothing."""
    a = (algorithm or "").strip().upper()
    return "eagle3" if a == "EAGLE3" else "eagle" if a in ("EAGLE", "NEXTN") else None


@dataclass
class Setup:
    """What a server was started with, as a log, a launch command or the server itself states it:
    a forced-acceptance setting, the speculative algorithm, the draft, and why the draft is EAGLE-3.
    Each is a dict {..., "where", "line"} (the line number in `where`, None for a server's JSON),
    the first seen; None when nothing states it."""

    forced: dict | None = None  # {"setting", "engine", "means", "where", "line"}
    algorithm: dict | None = None  # {"value", "engine", "where", "line"}
    draft: dict | None = None  # {"path", "where", "line"}
    eagle3: dict | None = None  # {"evidence", "where", "line"}: the draft is EAGLE-3 by its name or class

    def feed(self, line: str, n: int | None = None, where: str | None = None) -> None:
        """Read one line (of a log or a launch command)."""
        low = line.lower()
        if self.forced is None and any(k in low for k in _FORCED_HINTS) and _NOT_A_SETTING.search(line) is None:
            for engine, pattern, positive in _FORCED:
                m = pattern.search(line)
                if m and (not positive or float(m["value"]) > 0):
                    key, value = m["key"], m["value"].strip()
                    setting = f"{key} {value}" if key.startswith("--") else f"{key}={value}"
                    self.note_forced(engine, setting, where, n)
                    break
        if "spec" not in low and "rchitecture" not in low:
            return
        if self.algorithm is None:
            for engine, pattern in _ALGORITHM:
                m = pattern.search(line)
                if m and m["v"] != "None":
                    self.algorithm = {"value": m["v"], "engine": engine, "where": where, "line": n}
                    break
        config = _SPEC_CONFIG.search(line)
        if config:
            body = config["body"]
            method, model = _IN_CONFIG["method"].search(body), _IN_CONFIG["model"].search(body)
            if self.algorithm is None and method:
                self.algorithm = {"value": method["v"], "engine": "vllm", "where": where, "line": n}
            if self.draft is None and model:
                self.note_draft(model["v"], where, n)
        if self.draft is None:
            for pattern in _DRAFT:
                m = pattern.search(line)
                if m:
                    self.note_draft(m["v"], where, n)
                    break
        if self.eagle3 is None:
            for pattern in _ARCH:
                m = pattern.search(line)
                names = [a.strip(" '\"") for a in m["v"].split(",")] if m else []
                hit = next((a for a in names if "eagle3" in a.lower()), None)
                if hit:
                    self.eagle3 = {"evidence": f"architecture {hit}", "where": where, "line": n}
                    break

    def note_forced(self, engine: str, setting: str, where, line=None) -> None:
        if self.forced is None:
            self.forced = {"setting": setting, "engine": engine, "means": FORCED_MEANS[engine], "where": where,
                           "line": line}

    def note_draft(self, path: str, where, line=None) -> None:
        self.draft = {"path": path, "where": where, "line": line}
        if self.eagle3 is None and _EAGLE3_NAME.search(path):
            self.eagle3 = {"evidence": f"the draft path {path!r} names EAGLE-3", "where": where, "line": line}

    def merge(self, other: "Setup") -> "Setup":
        """The first statement of each kind, this one's before `other`'s."""
        return Setup(*(getattr(self, k) or getattr(other, k) for k in ("forced", "algorithm", "draft", "eagle3")))

    @property
    def family(self) -> str | None:
        return eagle_family(self.algorithm["value"]) if self.algorithm else None

    def wrong_algorithm(self) -> dict | None:
        """The doctor's `eagle3-as-eagle` as the server states it: an EAGLE (1/2) algorithm with a draft
        this setup shows to be EAGLE-3 (its class or path). None otherwise (a checkpoint decides
        better: `helpers.doctor.checks_target.check_algorithm`)."""
        if self.family != "eagle" or self.eagle3 is None:
            return None
        from helpers.engines.registry import EAGLE3_FLAGS  # the engine table: loaded only when there is a finding

        a, e = self.algorithm, self.eagle3
        how = ("SGLang's EAGLE-3 draft then gets no aux hidden states and skips fc (the hidden width equals "
               "the embedding's): accept length ~1 (sglang #21272)" if a["engine"] == "sglang" else
               "vLLM builds the EAGLE (1/2) draft class for method 'eagle' (it prefixes the architecture with "
               "Eagle, vllm/transformers_utils/configs/eagle.py) and captures no aux hidden states")
        return {"code": "eagle3-as-eagle", "severity": "error",
                "message": f"the server ran speculative algorithm {a['value']!r} ({_at(a)}) with an EAGLE-3 draft "
                           f"({e['evidence']}, {_at(e)}): {how}",
                "fix": f"serve with {EAGLE3_FLAGS}",
                "algorithm": dict(a), "eagle3": dict(e)}

    def to_dict(self) -> dict:
        return {"forced_acceptance": self.forced, "algorithm": self.algorithm, "draft": self.draft,
                "eagle3": self.eagle3}


def _at(d: dict) -> str:
    """'WHERE line N' (or WHERE alone) for a statement's place."""
    where = d.get("where") or "the log"
    return f"{where} line {d['line']}" if d.get("line") is not None else where


def forced_line(forced: dict) -> str:
    """The one line a command prints instead of a conclusion about a forced-acceptance source."""
    return (f"forced acceptance: {forced['setting']} ({_at(forced)}): {forced['means']}, so its accept lengths "
            "measure that setting, not the draft; no conclusion is drawn from it")


def setup_from_text(text: str, where: str) -> Setup:
    """A launch command (or any text) read line by line as a start-up log is."""
    s = Setup()
    for n, line in enumerate(str(text).splitlines() or [""], start=1):
        s.feed(line, n if "\n" in str(text) else None, where)
    return s


def stated_setup(server: Setup, log=None, launch_command: str | None = None) -> Setup:
    """What a server states about itself (`server`), then its start-up log, then the command it was
    launched with (`probe --log`, `--launch-command`): the first statement of each kind."""
    setup = server
    if log:
        setup = setup.merge(read_setup(log))
    if launch_command:
        setup = setup.merge(setup_from_text(launch_command, "--launch-command"))
    return setup


def read_setup(path) -> Setup:
    """What a whole log states about forced acceptance, the algorithm and the draft (`Setup`)."""
    s, numbers = Setup(), iter(range(1, 1 << 62))
    _first_in_head(path, lambda line: s.feed(line, next(numbers), str(path)), max_lines=1 << 62)  # feed: None
    return s


def setup_from_server(info: dict | None, where: str) -> Setup:
    """What a server reports about itself: SGLang's `/get_server_info` (`speculative_algorithm`,
    `speculative_draft_model_path`; SGLang reports no forced-acceptance setting: it is an
    environment variable) or vLLM's `/server_info` (`VLLM_SERVER_DEV_MODE=1` only): `vllm_config`
    as JSON (`?config_format=json`: `speculative_config.method`, `.model`,
    `.rejection_sample_method`) or as text (`SpeculativeConfig(method=..., model=...)`)."""
    s = Setup()
    if not isinstance(info, dict):
        return s
    if "vllm_config" in info:
        cfg = info["vllm_config"]
        if isinstance(cfg, str):
            s.feed(cfg, None, where)
            return s
        spec = cfg.get("speculative_config") if isinstance(cfg, dict) else None
        if isinstance(spec, dict):
            if spec.get("rejection_sample_method") == "synthetic":
                s.note_forced("vllm", "rejection_sample_method=synthetic", where)
            if isinstance(spec.get("method"), str):
                s.algorithm = {"value": spec["method"], "engine": "vllm", "where": where, "line": None}
            if isinstance(spec.get("model"), str):
                s.note_draft(spec["model"], where)
        return s
    if isinstance(info.get("speculative_algorithm"), str):
        s.algorithm = {"value": info["speculative_algorithm"], "engine": "sglang", "where": where, "line": None}
    if isinstance(info.get("speculative_draft_model_path"), str):
        s.note_draft(info["speculative_draft_model_path"], where)
    return s
