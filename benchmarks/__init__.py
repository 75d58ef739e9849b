"""Benchmarks run by `make bench`; each prints its numbers."""
