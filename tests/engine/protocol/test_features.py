"""Which tables the engine writes: the writer features a commit honours.

A table may carry the variant type's features without a variant column: deltalake 1.6 puts
`variantType` on every table with deletion vectors. Such a table is written, and so is one with
variant columns (tests/spark/test_golden_variant_writes.py); shredded variants are refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_delta.engine import DeltaLog, Metadata, Protocol, delete, read_table
from airflow_delta.engine.errors import DeltaProtocolError, InvalidTablePropertyError
from airflow_delta.engine.protocol.features import check_writer_support

VARIANT = Protocol(3, 7, ["variantType", "deletionVectors"], ["variantType", "deletionVectors"])


def schema_with(*fields: tuple[str, object]) -> str:
    return json.dumps(
        {
            "type": "struct",
            "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields],
        }
    )


def test_a_deltalake_deletion_vector_table_is_written(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    data = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]})
    write_deltalake(uri, data, configuration={"delta.enableDeletionVectors": "true"})
    assert "variantType" in (DeltaLog.for_table(uri).update().protocol.writer_features or [])
    result = delete(uri, "id = 2")
    assert result.version == 1 and result.metrics["numDeletionVectorsAdded"] == 1
    assert sorted(read_table(uri).column("id").to_pylist()) == [1, 3]


@pytest.mark.parametrize(
    "fields",
    [
        (("id", "long"), ("payload", "variant")),
        (
            ("id", "long"),
            (
                "s",
                {
                    "type": "struct",
                    "fields": [
                        {"name": "inner", "type": "variant", "nullable": True, "metadata": {}}
                    ],
                },
            ),
        ),
    ],
)
def test_a_table_with_variant_columns_is_writable(fields) -> None:
    metadata = Metadata(schema_string=schema_with(*fields))
    check_writer_support(VARIANT, "/data/t", metadata)
    check_writer_support(VARIANT, "/data/t")


def test_shredded_variants_are_refused() -> None:
    shredding = ["variantType", "variantShredding-preview"]
    with pytest.raises(DeltaProtocolError, match="variantShredding-preview"):
        check_writer_support(Protocol(3, 7, shredding, shredding), "/data/t")


@pytest.mark.parametrize(
    "configuration",
    [
        {"delta.checkpointPolicy": "classic"},
        {"delta.checkpointPolicy": "Classic"},
        {"delta.columnMapping.mode": "None"},
        {"delta.enableDeletionVectors": "FALSE"},
        {"delta.enableChangeDataFeed": "false", "delta.enableTypeWidening": "false"},
    ],
)
def test_a_property_set_to_its_off_value_adds_no_feature(tmp_path: Path, configuration) -> None:
    """Only a value that turns a feature on adds it: a table created with the default
    checkpoint policy, or a flag spelt 'FALSE', stays (1, 2) for every reader."""
    log = DeltaLog.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]),
                                configuration=configuration)  # fmt: skip
    assert log.update().protocol == Protocol(1, 2)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("delta.enableTypeWidening", "0"),
        ("delta.enableDeletionVectors", "yes"),
        ("delta.checkpointPolicy", "v3"),
        ("delta.columnMapping.mode", "names"),
        ("delta.columnMapping.mode", "name "),
        ("delta.enableRowTracking", "false "),
    ],
)
def test_a_feature_property_of_no_known_value_is_refused(tmp_path: Path, key, value) -> None:
    uri = str(tmp_path / "t")
    with pytest.raises(InvalidTablePropertyError, match=rf"Table {uri}: .*{key}='{value}'"):
        DeltaLog.create_table(uri, pa.schema([("id", pa.int64())]), configuration={key: value})
    assert not (tmp_path / "t" / "_delta_log").exists() or not any(
        (tmp_path / "t" / "_delta_log").glob("*.json")
    )


def test_a_feature_request_property_adds_the_feature_and_is_not_kept(tmp_path: Path) -> None:
    """`delta.feature.<name>=supported` (delta-spark's way to add a feature) added nothing to
    the protocol and stayed in the metadata; now it adds the feature, as delta-spark does."""
    uri = str(tmp_path / "t")
    configuration = {"delta.feature.deletionVectors": "supported"}
    log = DeltaLog.create_table(uri, pa.schema([("id", pa.int64())]), configuration=configuration)
    snapshot = log.update()
    assert "deletionVectors" in snapshot.protocol.reader_features
    assert "deletionVectors" in snapshot.protocol.writer_features
    assert snapshot.metadata.configuration == {}
    schema = pa.schema([("id", pa.int64())])
    with pytest.raises(InvalidTablePropertyError, match=r"delta\.feature\.rowTracking='yes'"):
        DeltaLog.create_table(str(tmp_path / "u"), schema, [], {"delta.feature.rowTracking": "yes"})
    with pytest.raises(DeltaProtocolError, match="bogusFeature"):
        DeltaLog.create_table(
            str(tmp_path / "v"), schema, [], {"delta.feature.bogusFeature": "supported"}
        )
