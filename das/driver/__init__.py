"""The driver: run specs, preflight, the pipeline of a release, whole and partitioned runs."""
