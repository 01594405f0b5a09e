"""d2t-lab: an investigation kit for EAGLE-3 draft models and their d2t/t2d vocab mapping."""
from .errors import BadInputError
from .mapping import VocabMapping, build_from_frequencies

__version__ = "0.1.0"
__all__ = ["BadInputError", "VocabMapping", "build_from_frequencies", "__version__"]
