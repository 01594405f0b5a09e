"""d2t-lab: an investigation kit for EAGLE-3 draft models and their d2t/t2d vocab mapping.

Importing the package is cheap: `VocabMapping` and `build_from_frequencies` (which need torch)
are imported the first time they are used, so `d2t-lab --help` and the arithmetic commands
start without loading torch.
"""
from .errors import BadInputError

__version__ = "0.1.0"
__all__ = ["BadInputError", "VocabMapping", "build_from_frequencies", "__version__"]
_LAZY = {"VocabMapping": "mapping", "build_from_frequencies": "mapping"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
