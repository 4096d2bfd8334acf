"""The pandas-free arrow builders, and the promise they keep: loading a snapshot and writing a
checkpoint never import pandas (a 150-250 ms import in a fresh process)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.protocol.action_types import ADD_TYPE, METADATA_TYPE, PROTOCOL_TYPE
from airflow_delta.engine.protocol.columnar import (
    array_from_pylist,
    concat_consuming,
    lazy_nulls,
    scalar,
    sorted_unique,
)
from tests.delta_log_builder import make_table, write_commit
from tests.pandas_free import imports_pandas

ROWS = {
    ADD_TYPE: [
        {
            "path": "a=1/f%20x.parquet",
            "partitionValues": {"a": "1", "b": None},
            "size": 3,
            "modificationTime": 4,
            "dataChange": True,
            "stats": '{"numRecords":1}',
            "deletionVector": {
                "storageType": "u",
                "pathOrInlineDv": "zz",
                "offset": 1,
                "sizeInBytes": 3,
                "cardinality": 2,
            },
            "unknown": [1, 2],
        },
        None,
        {"path": "b", "partitionValues": {}, "size": 5, "dataChange": False},
    ],
    METADATA_TYPE: [
        {
            "id": "x",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": "{}",
            "partitionColumns": ["a", "b"],
            "configuration": {"k": "v"},
            "createdTime": None,
        }
    ],
    PROTOCOL_TYPE: [
        {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"],
            "writerFeatures": [],
        }
    ],
}


@pytest.mark.parametrize("type_", list(ROWS), ids=["add", "metaData", "protocol"])
def test_builder_matches_pyarrow(type_: pa.StructType) -> None:
    built = array_from_pylist(ROWS[type_], type_)
    built.validate(full=True)
    assert built.equals(pa.array(ROWS[type_], type=type_))


def test_wrong_python_types_are_refused() -> None:
    with pytest.raises(ValueError):
        array_from_pylist([{"path": "a", "size": "big"}], ADD_TYPE)
    with pytest.raises((TypeError, ValueError)):
        array_from_pylist([{"path": "a", "partitionValues": ["x"]}], ADD_TYPE)
    with pytest.raises(TypeError):
        array_from_pylist([{"path": "a", "partitionValues": "x"}], ADD_TYPE)


def test_scalar() -> None:
    assert scalar(5, pa.int64()).as_py() == 5
    assert scalar(None, pa.string()).as_py() is None


def test_load_and_checkpoint_do_not_import_pandas(tmp_path: Path) -> None:
    make_table(tmp_path, 12)
    write_commit(
        tmp_path,
        12,
        [
            {"remove": {"path": "f0", "deletionTimestamp": 2**62}},
            {
                "add": {
                    "path": "f%201",
                    "partitionValues": {},
                    "size": 1,
                    "modificationTime": 0,
                    "dataChange": True,
                }
            },
        ],
    )
    script = (
        "import sys\n"
        "from airflow_delta.engine import DeltaLog\n"
        f"log = DeltaLog.for_table({str(tmp_path)!r})\n"
        "s = log.update(); s.files(); s.num_records; s.tombstones(); s.size_in_bytes\n"
        "log.checkpoint(); log.update().files()\n"
        "print('pandas' in sys.modules)\n"
    )
    assert not imports_pandas(script)


@pytest.mark.parametrize(
    "type_",
    [
        pa.int64(),
        pa.int32(),
        pa.bool_(),
        pa.string(),
        pa.binary(),
        pa.list_(pa.string()),
        pa.map_(pa.string(), pa.string()),
        ADD_TYPE,
    ],
    ids=str,
)
def test_lazy_nulls_are_nulls_without_resident_memory(type_) -> None:
    small = lazy_nulls(5, type_)
    small.validate(full=True)
    assert small.equals(pa.nulls(5, type_))
    before = pa.total_allocated_bytes()
    big = lazy_nulls(1_000_000, type_)
    assert big.null_count == 1_000_000
    assert pa.total_allocated_bytes() - before < 10_000  # numpy zero pages, not arrow's pool


def test_concat_consuming_is_concat_and_empties_its_input() -> None:
    rows = ROWS[ADD_TYPE]
    pieces = [array_from_pylist(rows, ADD_TYPE), array_from_pylist(rows * 2, ADD_TYPE)]
    expected = pa.concat_arrays(pieces)
    pieces.append(pa.nulls(0, ADD_TYPE))
    result = concat_consuming(pieces, ADD_TYPE)
    result.validate(full=True)
    assert result.equals(expected) and pieces == []


def test_concat_consuming_keeps_all_null_fields_lazy() -> None:
    pieces = [lazy_nulls(500_000, ADD_TYPE), lazy_nulls(500_000, ADD_TYPE)]
    before = pa.total_allocated_bytes()
    result = concat_consuming(pieces, ADD_TYPE)
    assert result.field("deletionVector").null_count == 1_000_000
    assert pa.total_allocated_bytes() - before < 2**20  # the struct's validity, no field copied


@given(st.lists(st.integers(-3, 3), max_size=12))
@settings(max_examples=60, deadline=None)
def test_sorted_unique_is_numpy_unique_of_sorted_values(values: list[int]) -> None:
    ordered = np.sort(np.array(values, dtype=np.int64))
    assert sorted_unique(ordered).tolist() == np.unique(ordered).tolist()
