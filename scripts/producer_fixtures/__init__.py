"""The producer-fixture generators and plain-torch checks, run by scripts/make_producer_fixtures.py in each
producer's own venv as `python -m scripts.producer_fixtures.NAME` from the repository root."""
