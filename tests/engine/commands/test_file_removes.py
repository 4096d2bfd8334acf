"""remove_files: the RemoveFiles of columnar AddFiles, the same as AddFile.remove."""

from __future__ import annotations

import json

import pytest

from airflow_delta.engine.commands.file_removes import remove_files
from airflow_delta.engine.log.replay import parse_log_batch
from airflow_delta.engine.protocol.action_types import add_files_from_arrow

ADDS = [
    {"path": "a=1/x%20y.parquet", "partitionValues": {"a": "1"}, "size": 10,
     "modificationTime": 5, "dataChange": True, "stats": '{"numRecords":3}'},
    {"path": "b.parquet", "partitionValues": {"a": None}, "size": 0, "modificationTime": 5,
     "dataChange": False, "tags": {"k": "v"}, "baseRowId": 7, "defaultRowCommitVersion": 2,
     "deletionVector": {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
                        "offset": 4, "sizeInBytes": 40, "cardinality": 6}},
    {"path": "c.parquet", "partitionValues": {}, "size": 3, "modificationTime": 1,
     "dataChange": True,
     "deletionVector": {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr9",
                        "sizeInBytes": 40, "cardinality": 1, "maxRowIndex": 9}},
]  # fmt: skip


@pytest.mark.parametrize("data_change", [True, False])
@pytest.mark.parametrize("count", [0, 1, 3])
def test_remove_files_equal_add_file_remove(data_change: bool, count: int) -> None:
    lines = "".join(json.dumps({"add": a}) + "\n" for a in ADDS[:count]).encode()
    files = parse_log_batch(lines or b'{"commitInfo":{}}\n', "test").add_array()
    expected = [f.remove(1234, data_change) for f in add_files_from_arrow(files)]
    got = remove_files(files, 1234, data_change)
    assert [r.json() for r in got] == [r.json() for r in expected]
    assert got == expected
