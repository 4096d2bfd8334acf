"""The partition columns the predicate tests use: one of each type predicates compare."""

from __future__ import annotations

COLUMNS = {
    "date": "date",
    "region": "string",
    "n": "integer",
    "big": "long",
    "ts": "timestamp",
    "ntz": "timestamp_ntz",
    "d": "decimal(5,2)",
    "f": "double",
    "b": "boolean",
}
