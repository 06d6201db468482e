"""Tessel benchmarks (plain scripts: `python -m benchmarks.<name>`)."""
