"""Benchmarks of ringfleet; run them with ``python -m benchmarks.<name>``."""
