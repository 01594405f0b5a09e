"""The options several commands share, declared once so they read the same everywhere.

Positionals are named by kind (CHECKPOINT, LOG); every command has `--json`; every written
output is `-o/--out`; `--engine`, `--target-config`, `--device`, `--dtype` and `--embed-from`
mean the same in every command. Nothing here imports torch.
"""
from __future__ import annotations

import argparse
import sys

# The engine table is read when a command that takes --engine builds its options, not at import:
# the light commands (simulate, throughput, logs) never load it.


def engine_help() -> str:
    """--engine's --help, its examples made from the engine table (a release read later changes them there)."""
    from helpers.engines.registry import ENGINE_KEYS, ENGINES, spec_example

    return (f"the engine the draft is served with, optionally with its release: {', '.join(ENGINE_KEYS)}, "
            f"{spec_example()}, {spec_example(ENGINES[-1], '>=')} (default: all = {' and '.join(ENGINES)}, "
            "each at the newest release read)")


def aux_names() -> str:
    """'sglang or vllm or ...': the engines whose aux-layer convention the kit has read, for --help."""
    from helpers.engines.registry import aux_engines

    return " or ".join(aux_engines())


def checkpoint(p, help: str = "draft checkpoint folder or mapping file") -> None:
    p.add_argument("checkpoint", metavar="CHECKPOINT", help=help)


def json_flag(p, what: str = "print one JSON object instead of the text report") -> None:
    p.add_argument("--json", action="store_true", help=what)


def out(p, help: str, *, required: bool = False, aliases: tuple[str, ...] = (), dest: str = "out",
        metavar: str = "OUT") -> None:
    p.add_argument("-o", "--out", *aliases, dest=dest, metavar=metavar, required=required, help=help)


def engine_value(text: str) -> str:
    """An `--engine` value: an engine name or 'all', with an optional version; kept as given."""
    from helpers.engines.registry import engines_at

    try:
        engines_at(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def aux_engine_value(text: str) -> str:
    """An `--engine` value naming one engine whose aux-layer convention the kit has read."""
    from helpers.engines.registry import aux_convention, aux_engines, engines_at

    text = engine_value(text)
    (at,) = engines_at(text) if text != "all" else (None,)
    if at is None or aux_convention(at) is None:
        raise argparse.ArgumentTypeError(f"must name an engine whose aux-layer convention the kit has read "
                                         f"({', '.join(aux_engines())}, optionally ==VERSION), got {text!r}")
    return text


def engine(p, help: str | None = None) -> None:
    p.add_argument("--engine", type=engine_value, default="all", metavar="ENGINE[==VERSION]",
                   help=engine_help() if help is None else help)


def aux_engine(p, help: str) -> None:
    """`--engine` naming one engine whose aux-layer convention the kit has read; `help` gets the default added."""
    from helpers.engines.registry import DEFAULT_ENGINE

    p.add_argument("--engine", type=aux_engine_value, default=DEFAULT_ENGINE, metavar="ENGINE[==VERSION]",
                   help=f"{help} (default {DEFAULT_ENGINE})")


def target_config(p, help: str = "the target model's config.json (aux layers, sizes)") -> None:
    p.add_argument("--target-config", metavar="FILE", default=None, help=help)


def embed_from(p) -> None:
    p.add_argument("--embed-from", metavar="DIR", default=None,
                   help="where embed_tokens.weight lives when the draft has none (the target's folder or file)")


def chat_template(p, none: str = "plain text") -> None:
    p.add_argument("--chat-template", choices=("auto", "none"), default="auto",
                   help=f"auto: the tokenizer's chat template when it has one (default); none: {none}")


def device_dtype(p) -> None:
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: the best present)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: bf16 on a GPU, fp32 on CPU)")


def readings(p) -> None:
    """`--readings offset,absolute` or `--reading offset` (the same flag), or `all` (default)."""
    p.add_argument("--readings", "--reading", dest="readings", metavar="R[,R...]", default="all",
                   help="readings of d2t to run: offset, absolute, none, comma-separated, or all (default)")


def parse_readings(text: str) -> list[str]:
    """The readings a `--readings` value names, in the kit's order; one line on a bad name."""
    from helpers.core.errors import BadInputError
    from helpers.core.terms import READINGS

    names = [x.strip().lower() for x in str(text).split(",") if x.strip()]
    if names == ["all"]:
        return list(READINGS)
    bad = [x for x in names if x not in READINGS]
    if bad or not names:
        raise BadInputError(None, f"--readings {text!r}: unknown reading {', '.join(bad) or '(none)'}; choose from "
                            f"{', '.join(READINGS)} (comma-separated) or all")
    return [r for r in READINGS if r in names]


def dist_timeout(p) -> None:
    """`--dist-timeout SECONDS`: how long a rank under torchrun waits for the others."""
    p.add_argument("--dist-timeout", type=float, metavar="SECONDS", default=None,
                   help="under torchrun: seconds a rank waits for the others (rendezvous, each collective) before "
                        "naming the one that did not arrive (default 300; $D2T_LAB_DIST_TIMEOUT)")


PROGRESS_EVERY_S = 10  # off a terminal: the first line after this long, then one line this often


class _ProgressLines:
    """stderr off a terminal (a log file, a pipe, CI): tqdm's in-place redraws (`\\r...`) become
    plain lines, and only for a wait over PROGRESS_EVERY_S: a bar's first line then, one more each
    PROGRESS_EVERY_S, and its last (100 %) line when an earlier one showed. A bar that ends sooner
    prints nothing. Every other text passes unchanged."""

    def __init__(self, stream):
        self.stream = stream
        self.bars: dict[str, list[float]] = {}  # bar name -> [first seen, last shown (0: never)]
        self.after_bar = False  # the last text written was a bar's redraw

    def write(self, text: str) -> int:
        import time

        if not text.startswith("\r"):
            # tqdm ends a bar with a lone newline (the lines here are whole already); any other lone
            # newline is the end of a line, e.g. the one `print` writes after an error message
            if text != "\n" or not self.after_bar:
                self.stream.write(text)
            self.after_bar = False
            return len(text)
        self.after_bar = True
        line = text.replace("\r", "").strip()
        if not line:
            return len(text)
        name, now = line.split(":", 1)[0], time.monotonic()
        first, shown = self.bars.setdefault(name, [now, 0.0])
        done = "100%" in line
        if (now - first >= PROGRESS_EVERY_S and now - shown >= PROGRESS_EVERY_S) or (done and shown):
            self.stream.write(line + "\n")
            self.bars[name][1] = now
        if done:
            self.bars.pop(name, None)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name):
        return getattr(self.stream, name)


def show_progress(args) -> bool:
    """Whether to show progress: never with --json; a bar at a terminal; elsewhere (a log, a pipe)
    plain lines, only for a wait over PROGRESS_EVERY_S and then one line that often."""
    if getattr(args, "json", False):
        return False
    if not sys.stderr.isatty() and not isinstance(sys.stderr, _ProgressLines):
        sys.stderr = _ProgressLines(sys.stderr)
    return True


def token_progress(prompts: int, max_new_tokens: int, readings: int = 1):
    """An `on_round` callback for a long generation off a terminal: the per-prompt bar moves only
    when a prompt ends, so a long prompt would be silent; this prints one plain line every
    PROGRESS_EVERY_S (none for a run shorter than that): tokens generated of the run's most, prompts
    done. At a terminal the bar is enough (None)."""
    import time

    if sys.stderr.isatty() and not isinstance(sys.stderr, _ProgressLines):
        return None
    start = time.monotonic()
    state = {"shown": start, "made": {}}  # id(PromptRun) -> (the PromptRun, tokens it has)
    total = prompts * max_new_tokens * readings

    def on_round(pr) -> None:
        # a batched run interleaves its prompts' rounds: every prompt run counted by its own tokens
        state["made"][id(pr)] = (pr, len(pr.output_ids))
        now = time.monotonic()
        if now - state["shown"] >= PROGRESS_EVERY_S:
            made = sum(n for _, n in state["made"].values())
            done = sum(n >= max_new_tokens for _, n in state["made"].values())  # those stopped by EOS are not seen here
            print(f"speculate: {made:,} of at most {total:,} tokens generated, {done} of "
                  f"{prompts * readings} prompt runs done, {now - start:.0f} s", file=sys.stderr, flush=True)
            state["shown"] = now

    return on_round


def figure_path(path, what: str = "figure"):
    """Where `-o FIG` writes a figure: checked as an output file, '.png' added to a bare name,
    an unknown format refused (one line, exit 2)."""
    from matplotlib.backend_bases import FigureCanvasBase

    from helpers.core.errors import BadInputError
    from helpers.core.outputs import output_file

    p = output_file(path, what)
    if not p.suffix:
        return output_file(p.with_name(p.name + ".png"), what)
    known = FigureCanvasBase.get_supported_filetypes()
    if p.suffix[1:].lower() not in known:
        raise BadInputError(p, f"unknown figure format {p.suffix!r} (use one of {', '.join('.' + k for k in sorted(known))})")
    return p


def plot_path(path: str):
    """Where `--plot PATH` writes (matplotlib adds .png to a name without a suffix), checked."""
    from matplotlib.backend_bases import FigureCanvasBase

    from helpers.core.errors import BadInputError
    from helpers.core.outputs import output_file

    p = output_file(path, "plot")  # a folder given as PATH is refused here, before any suffix is added
    known = FigureCanvasBase.get_supported_filetypes()
    if not p.suffix:
        return output_file(p.with_name(p.name + ".png"), "plot")
    if p.suffix[1:].lower() not in known:
        raise BadInputError(p, f"unknown plot format {p.suffix!r} (use one of {', '.join('.' + k for k in sorted(known))})")
    return p


# the one line a command that needs the drafting shape prints without one
NO_SHAPE = ("give the drafting shape: --num-speculative-tokens K (vLLM, a chain of K; or --draft-tokens K "
            "alone) or --speculative-num-steps S [--speculative-eagle-topk T --speculative-num-draft-tokens N] "
            "(SGLang; aliases --steps, --topk, --draft-tokens)")


SHAPE_TEXT = """\
Drafting shape, as the engines spell it (copy it from the launch command): vLLM's
--num-speculative-tokens K (a chain of K drafted tokens), or SGLang's --speculative-num-steps S
--speculative-eagle-topk T --speculative-num-draft-tokens N (N counts the root: a chain of S
verifies S + 1). --steps, --topk and --draft-tokens are aliases of SGLang's three, --draft-tokens
counting the root beside any other shape flag. Flags that disagree (--num-speculative-tokens 3
--speculative-num-steps 5, --steps 3 --speculative-num-steps 4): one line, exit 2."""

DRAFT_TOKENS_LONE = {
    "drafted": "alone (no other shape flag): a chain of N drafted tokens, this command's older meaning, kept",
    "refuse": "alone it is refused (it meant a chain of N - 1 here before): give --num-speculative-tokens K",
}
SHAPE_DESTS = ("steps", "topk", "draft_tokens", "num_speculative_tokens", "speculative_num_steps",
               "speculative_eagle_topk", "speculative_num_draft_tokens")


def drafting(p, lone: str, title: str | None = None, *, aliases: bool = True, vllm: bool = True,
             group: bool = True) -> None:
    """The drafting-shape flags as the engines spell them, plus the kit's older aliases; all read
    by `shape_flags` -> `helpers.acceptance.drafting.Drafting.read_flags`, one meaning each.

    `lone`: what `--draft-tokens` with no other shape flag means here ("drafted": a chain of N, the
    older meaning of simulate/rate-for/speculate/reproduce; "refuse": one line, where it meant N - 1).
    `aliases=False` leaves out --steps/--topk/--draft-tokens (a command whose --steps means something
    else); `vllm=False` leaves out --num-speculative-tokens (a command that declares it itself);
    `group=False` adds them to `p` as it is (an argument group already)."""
    g = p if not group else p.add_argument_group(
        title or "drafting shape (the engines' own flags, to copy from a launch command)")
    if vllm:
        g.add_argument("--num-speculative-tokens", type=int, default=None, metavar="K",
                       help="vLLM's speculative_config num_speculative_tokens: a chain of K drafted tokens")
    g.add_argument("--speculative-num-steps", type=int, default=None, metavar="S",
                   help="SGLang's drafting depth (with --speculative-eagle-topk 1, a chain of S)")
    g.add_argument("--speculative-eagle-topk", type=int, default=None, metavar="T",
                   help="SGLang's children per expanded node (1: a chain)")
    g.add_argument("--speculative-num-draft-tokens", type=int, default=None, metavar="N",
                   help="SGLang's tokens verified per step, the root counted (a chain of S verifies S + 1)")
    if not aliases:
        return
    g.add_argument("--steps", type=int, default=None, metavar="S", help="alias of --speculative-num-steps")
    g.add_argument("--topk", type=int, default=None, metavar="T", help="alias of --speculative-eagle-topk")
    g.add_argument("--draft-tokens", type=int, default=None, metavar="N",
                   help="alias of --speculative-num-draft-tokens (the root counted) beside any other shape flag; "
                        f"{DRAFT_TOKENS_LONE[lone]}")


def shape_flags(args, lone: str) -> dict:
    """The shape flags given, read once (`Drafting.read_flags`): {steps, topk, draft_tokens} in
    SGLang's terms, None where not given; flags that disagree or mean nothing alone: one line, exit 2."""
    from helpers.acceptance.drafting import Drafting
    from helpers.core.errors import BadInputError

    given = {name: getattr(args, name, None) for name in SHAPE_DESTS}
    try:
        return Drafting.read_flags(**given, lone=lone)
    except ValueError as e:
        raise BadInputError(None, str(e)) from None


ALIAS_DESTS = ("steps", "topk", "draft_tokens")  # the kit's aliases of SGLang's three shape flags


def engines_spelling(message: str) -> str:
    """A shape message with the kit's aliases (--steps, --topk, --draft-tokens) in the engines' spelling."""
    import re

    for alias, flag in (("--steps", "--speculative-num-steps"), ("--topk", "--speculative-eagle-topk"),
                        ("--draft-tokens", "--speculative-num-draft-tokens")):
        message = re.sub(rf"(?<![\w-]){alias}\b", flag, message)
    return message


def as_typed(args, message: str) -> str:
    """A shape message in the spelling the user typed: the engines' flag names when no alias was given."""
    if any(getattr(args, name, None) is not None for name in ALIAS_DESTS):
        return message
    return engines_spelling(message)


def drafting_from(args, lone: str, positions: int | None = None):
    """The `Drafting` the flags give (None when none given and no `positions`); a shape no engine
    runs, or flags that disagree, is one line naming the flag, exit 2. What it needs of `args` is
    read before the shape is checked: the flags (`shape_flags`) and whether an alias was typed."""
    from helpers.acceptance.drafting import Drafting
    from helpers.core.errors import BadInputError

    aliased = any(getattr(args, name, None) is not None for name in ALIAS_DESTS)
    f = shape_flags(args, lone)
    try:
        return Drafting.from_flags(f["steps"], f["topk"], f["draft_tokens"], lone=lone, positions=positions)
    except ValueError as e:
        raise BadInputError(None, str(e) if aliased else engines_spelling(str(e))) from None
