"""Accept-length maths: the chain closed form, SGLang's tree, Monte Carlo draws, every serving or
training source on one scale, tokens/s, and published reference values.

Modules (import them by name; this file imports nothing):
- `chain`
- `drafting`
- `tree`
- `montecarlo`
- `sources`
- `throughput`
- `references`
"""

__all__ = ["chain", "drafting", "tree", "montecarlo", "sources", "throughput", "references"]
