"""d2t-lab: an investigation kit for EAGLE-3 draft models and their d2t/t2d vocab mapping.

The package is laid out by job, lowest first; a package imports only those before it
(docs/architecture.md has the map, tests/test_architecture.py checks it):

    core -> io -> model -> acceptance -> measure -> speculate -> serving -> doctor -> plots -> ui -> commands

Importing `helpers` or one of its packages imports nothing else, so `d2t-lab --help` and the
arithmetic commands start without loading torch.
"""

__version__ = "0.1.0"
__all__ = ["core", "io", "model", "acceptance", "measure", "speculate", "serving", "doctor", "plots", "ui",
           "commands", "__version__"]
