"""Deletion vectors for the Spark data plane: the engine's codec
(`airflow_delta.engine.protocol.deletion_vectors`), re-exported under its former home.

Nothing here is Spark-specific: `read.py` decodes DVs on the driver with numpy through these
names, and new code imports the engine module directly.
"""

from __future__ import annotations

from airflow_delta.engine.protocol.deletion_vectors import (
    FILE_FORMAT_VERSION,
    MAGIC_NUMBER,
    NATIVE_MAGIC_NUMBER,
    Z85_ALPHABET,
    deleted_row_indexes,
    dv_bytes_from_file,
    inline_dv_bytes,
    relative_dv_path,
    z85_decode,
)

__all__ = [
    "FILE_FORMAT_VERSION",
    "MAGIC_NUMBER",
    "NATIVE_MAGIC_NUMBER",
    "Z85_ALPHABET",
    "deleted_row_indexes",
    "dv_bytes_from_file",
    "inline_dv_bytes",
    "relative_dv_path",
    "z85_decode",
]
