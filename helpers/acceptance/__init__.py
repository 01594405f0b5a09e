"""Accept-length maths: the chain closed form, SGLang's tree, Monte Carlo draws, every serving or
training source on one scale, tokens/s, published reference values, and the predicted accept length
from a measured rank table.

Modules (import them by name; this file imports nothing):
- `chain`
- `drafting`
- `tree`
- `montecarlo`
- `sources`
- `throughput`
- `references`
- `prediction`
- `sampling`
"""

__all__ = ["chain", "drafting", "tree", "montecarlo", "sources", "throughput", "references", "prediction", "sampling"]
