"""The scripts that make data_samples/ and build the engine environments; run each from the repository root as
`python -m scripts.NAME` (scripts/README.md lists them)."""
