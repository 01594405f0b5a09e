"""The speed and memory benchmarks; run each from the repository root as `python -m benchmarks.NAME`
(`make benchmarks` runs them all)."""
