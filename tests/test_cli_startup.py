"""The command line builds only the command it is asked for: `d2t-lab simulate ...` imports
helpers/commands/simulate.py and the shared options, not the other commands' modules (so a light
command starts light: benchmarks/bench_startup.py), while `--help` and a mistyped command still see
every command."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers.__main__ import build_parser, command_modules

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_named_command_imports_only_its_own_module():
    r = _run("import sys\nfrom helpers.__main__ import main\n"
             "rc = main(['simulate', '--accept-rate', '0.7', '--num-speculative-tokens', '3', '--trials', '100'])\n"
             "print(rc, sorted(m for m in sys.modules if m.startswith('helpers.commands.')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "0 ['helpers.commands._options', 'helpers.commands.simulate']"


def test_help_and_a_mistyped_command_list_every_command():
    names = list(command_modules())
    assert "rate-for" in names and "simulate" in names and len(names) >= 15
    helptext = build_parser().format_help()
    assert all(n in helptext for n in names)
    r = subprocess.run([sys.executable, "-m", "helpers", "simulat"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "invalid choice: 'simulat'" in r.stderr
    assert all(f"'{n}'" in r.stderr for n in names)
    # an option before the command (or none at all) builds every command
    assert build_parser(["--timeout", "5", "simulate"])._subparsers._group_actions[0].choices.keys() == set(names)
    assert list(build_parser(["simulate"])._subparsers._group_actions[0].choices) == ["simulate"]


def test_help_and_the_light_commands_import_no_torch_pandas_or_matplotlib():
    """`d2t-lab --help` builds every command's options, so every add_arguments must stay light: an option's
    help text taken from a module that imports torch at its top (speculate's result module once pulled
    measure.replay, the acceptance rules pulled torch) made --help 18x the numpy import."""
    heavy = "print(sorted(m for m in ('torch', 'pandas', 'matplotlib') if m in sys.modules))"
    for argv in (["--help"], ["simulate", "--help"], ["logs", "--help"], ["throughput", "--help"]):
        r = _run(f"import sys\nfrom helpers.__main__ import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
                 + heavy)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip().splitlines()[-1] == "[]", (argv, r.stdout.strip().splitlines()[-1])
