"""Remote reads stay inside `helpers.io`: a checkpoint (and its tensor store) owns its origin.

Outside `helpers/io/`, no module imports `helpers.io.remote`; the callers ask an open `Checkpoint`
(`is_remote`, `display_name`, `local_folder`, `shown`) or an `helpers.io.origin.Origin`. Of
`helpers.io.remote_access`, modules outside io may use only the network's time limits
(`--timeout`, `--refresh`, `within_deadline`), which metrics and probe calls share with the
checkpoint reads; the remote folder itself (`RemoteFolder`, listings, ranges) stays in io.
"""
from __future__ import annotations

import ast
import functools
import http.server
import shutil
import threading
from pathlib import Path

import pytest

from conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[1]
HELPERS = ROOT / "helpers"
GOOD = SAMPLES / "tiny_draft_sglang"
TIME_LIMITS = {"timeout", "within_deadline", "set_timeout", "set_refresh", "TIMEOUT_ENV", "REFRESH_ENV"}


def _uses(tree: ast.AST, module: str) -> list[tuple[int, str]]:
    """(line, name) of each use of `helpers.io.<module>` in a parsed file: imports, and attributes
    read on the module where it was imported as a whole."""
    out, aliases = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == f"helpers.io.{module}":
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "helpers.io":
            for a in node.names:
                if a.name == module:
                    aliases.add(a.asname or a.name)
                    out.append((node.lineno, "(the module)"))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == f"helpers.io.{module}":
                    out.append((node.lineno, "(the module)"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            out.append((node.lineno, node.attr))
    return out


@functools.cache
def _parsed() -> tuple:
    return tuple((p, ast.parse(p.read_text())) for p in sorted(HELPERS.rglob("*.py")) if (HELPERS / "io") not in p.parents)


def _outside_io():
    return _parsed()


def test_nothing_outside_io_imports_remote():
    found = [f"{p.relative_to(ROOT)}:{line}: {name}" for p, tree in _outside_io() for line, name in _uses(tree, "remote")]
    assert not found, "helpers.io.remote used outside helpers/io (ask the Checkpoint or an Origin):\n" + "\n".join(found)


def test_outside_io_remote_access_is_only_the_time_limits():
    found = [f"{p.relative_to(ROOT)}:{line}: {name}" for p, tree in _outside_io()
             for line, name in _uses(tree, "remote_access") if name not in TIME_LIMITS | {"(the module)"}]
    assert not found, "helpers.io.remote_access used outside helpers/io beyond the time limits:\n" + "\n".join(found)


def test_the_checks_catch_a_use(tmp_path):
    """The two checks above see each way of importing (so they can fail)."""
    tree = ast.parse("from helpers.io import remote\nremote.mirror('x')\nfrom helpers.io.remote_access import RemoteFolder\n"
                     "import helpers.io.remote\n")
    assert [n for _, n in _uses(tree, "remote")] == ["(the module)", "(the module)", "mirror"]
    assert [n for _, n in _uses(tree, "remote_access")] == ["RemoteFolder"]


@pytest.fixture
def served(tmp_path, monkeypatch):
    """(local folder, URL) of a small draft served over http://127.0.0.1, with an empty cache."""
    root = tmp_path / "served"
    shutil.copytree(GOOD, root / "draft")
    monkeypatch.setenv("D2T_LAB_CACHE", str(tmp_path / "cache"))
    for k in ("D2T_LAB_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(k, raising=False)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a, **kw: Quiet(*a, directory=str(root), **kw))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root / "draft", f"http://127.0.0.1:{server.server_address[1]}/draft"
    server.shutdown()
    server.server_close()


def test_a_checkpoint_knows_its_origin(served):
    from helpers.io.checkpoint import load_mapping, open_checkpoint
    from helpers.io.origin import Origin

    local, url = served
    far, near = open_checkpoint(url), open_checkpoint(local)
    assert far.is_remote and not near.is_remote
    assert far.display_name == url and near.display_name == str(local)
    assert far.local_folder.is_dir() and not str(far.local_folder).startswith(str(local))
    assert far.sources and all(s.startswith(url + "/") for s in far.sources)
    assert [s.removeprefix(url + "/") for s in far.sources] == [Path(s).name for s in near.sources]
    assert load_mapping(far).sources == [s.replace(str(local), url) for s in load_mapping(near).sources]
    # the cached stand-in opened as a local folder still reads as the URL's files
    again = open_checkpoint(far.local_folder)
    assert not again.is_remote and again.sources == far.sources
    assert Origin(url).is_remote and Origin(url).parent_name == url.rsplit("/", 1)[0]
    assert not Origin(local).is_remote and Origin(str(local)).parent_name == str(local.parent)
