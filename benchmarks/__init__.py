"""Named benchmarks for scripts/bench: each module lists `BENCHES` (see benchmarks/_harness.py)."""
