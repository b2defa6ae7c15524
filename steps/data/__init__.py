"""Corpora generated for tests and benchmarks."""
