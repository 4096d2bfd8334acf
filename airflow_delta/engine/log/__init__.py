"""The transaction log: the log store (the only fsspec user), log replay, checkpoints and
snapshots.
"""
