"""Benchmarks that print figures against a baseline measured in the same run:
`python -m bench.run [--short]` (see `bench/run.py`). Never timed unit tests."""
