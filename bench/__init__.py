"""Benchmarks, each run as a module from the repository root: python -m bench.bench_step (--help)."""
