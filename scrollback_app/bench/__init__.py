"""Benchmarks: every speed and memory figure measured beside its baseline in the same run."""
