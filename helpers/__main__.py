"""`python -m helpers COMMAND ...`: the kit's command line.

Each command lives in `helpers/commands/<name>.py` and exposes `HELP`, `DESCRIPTION`,
`add_arguments(parser)` and `run(args) -> int` (and optionally `RESUME_HINT`, printed after
"interrupted" on Ctrl-C). Bad input of any kind is one line on stderr and exit code 2. Every
command takes `--timeout SECONDS`: how long any remote read (hf://, http(s)://, a metrics URL)
waits to connect and between reads, and for a whole answer; and `--refresh`: the remote cache is
bypassed.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from helpers import __version__, commands
from helpers.core.errors import BadInputError


def _remote_reads(p) -> None:
    """`--timeout SECONDS` and `--refresh`, which every command takes (any input may be a URL);
    `helpers.io.remote_access.set_timeout` / `set_refresh` apply them, the bounds checked there."""
    p.add_argument("--timeout", type=float, metavar="SECONDS", default=None,
                   help="seconds a remote read (hf://, http(s)://, a metrics URL, a probed server) waits to connect "
                        "and between reads, and at most for a whole answer (one more second per 64 kB of a large "
                        "file); in (0, 3600] (default 30; $D2T_LAB_TIMEOUT)")
    p.add_argument("--refresh", action="store_true",
                   help="fetch every remote file again instead of using the cache (default: a cached copy is "
                        "used when the server says it is unchanged)")


def command_modules() -> dict[str, str]:
    """{command name: module name} of helpers/commands (a module's name with '_' as '-'), no module imported."""
    return {info.name.replace("_", "-"): info.name
            for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name)
            if not info.name.startswith("_")}


def _named(argv: list[str] | None, names) -> str | None:
    """The command `argv` names, when it names one before any option (else None: every command is built,
    e.g. for `--help`, or with no argv); only that command's module is imported then, so a light
    command starts light."""
    for a in argv or ():
        if a.startswith("-"):
            return None
        return a if a in names else None
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="d2t-lab",
        description=(
            "d2t-lab: inspect EAGLE-3 draft checkpoints and their d2t/t2d vocab mapping, score the "
            "draft under each reading of d2t, predict accept length, and bundle bug reports."
        ),
        epilog="Run 'd2t-lab COMMAND --help' for the options of one command (python -m helpers works too).",
    )
    parser.add_argument("--version", action="version", version=f"d2t-lab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    mods = command_modules()
    named = _named(argv, mods)
    for name, module in mods.items():
        if named is not None and name != named:
            continue
        mod = importlib.import_module(f"{commands.__name__}.{module}")
        p = sub.add_parser(
            name,
            help=mod.HELP,
            description=getattr(mod, "DESCRIPTION", mod.HELP),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        mod.add_arguments(p)
        _remote_reads(p)
        p.set_defaults(_run=mod.run, _resume=getattr(mod, "RESUME_HINT", None))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    import os

    from helpers.io.remote_access import REFRESH_ENV, TIMEOUT_ENV, set_refresh, set_timeout

    before = {k: os.environ.get(k) for k in (TIMEOUT_ENV, REFRESH_ENV)}
    try:
        set_timeout(args.timeout)  # in the environment, so notebooks a report runs read it too
        set_refresh(args.refresh)
        return int(args._run(args) or 0)
    except BadInputError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        hint = getattr(args, "_resume", None)
        print("interrupted" + (f": {hint}" if hint else ""), file=sys.stderr)
        return 130
    except BrokenPipeError:  # `d2t-lab ... | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__":
    sys.exit(main())
