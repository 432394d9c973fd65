"""Foundations every layer uses: errors, the arguments' rules, files written whole, progress, and where independent tasks run."""
