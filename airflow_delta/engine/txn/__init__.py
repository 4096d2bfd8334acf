"""Optimistic transactions: commit, conflict detection and post-commit hooks."""
