"""read_delta / scan_files: Delta tables as Spark DataFrames.

1. Every golden table with data files reads with the catalog's row count, or is refused with the
   typed error listed in REFUSED (with the reason).
2. Contents the source repositories assert (EXPECTED_RESULTS.tsv), partition values from the
   log, column mapping (name and id modes, nested fields), deletion vectors (on disk, inline,
   absolute paths with special characters), variant columns.
3. Time travel by version and timestamp against deltalake; partition pruning before Spark lists
   anything; refusals raised before any data file is opened (the data files of those tables do
   not exist, so reading one would fail with a Spark error instead).
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import os
import shutil
import struct
import uuid
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import (
    CorruptLogError,
    DeltaError,
    DeltaProtocolError,
    UnsupportedStorageError,
)
from airflow_delta.spark.read import read_delta, scan_files
from tests.engine.protocol.dv_helpers import portable_bitmap, z85

GOLDEN = Path(os.environ.get("DELTA_GOLDEN", Path(__file__).parents[3] / "shared" / "golden"))
if not GOLDEN.exists():
    GOLDEN = Path("/work/shared/golden")
TABLES = GOLDEN / "tables"


def _tsv(name: str) -> list[dict[str, str]]:
    with open(GOLDEN / name, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


CATALOG = {row["table_dir"]: row for row in _tsv("CATALOG.tsv")}
EXPECT = {row["table_dir"]: row for row in _tsv("EXPECT.tsv")}
WITH_DATA = sorted(t for t, row in CATALOG.items() if int(row["data_files_present"] or 0) > 0)

#: Golden tables the reader refuses, the typed error, and why.
REFUSED: dict[str, tuple[type[DeltaError], str]] = {
    "delta-rs__data_err_logs__table_c": (CorruptLogError, "commit 12 missing after checkpoint"),
    "delta-rs__data_err_logs__table_d": (DeltaProtocolError, "reader feature catalogOwned"),
    "delta-rs__data_err_logs__table_e": (DeltaProtocolError, "reader feature catalogOwned"),
    "delta-rs__data_err_logs__table_f": (DeltaProtocolError, "reader feature catalogOwned"),
    "delta-rs__simple_table_features": (DeltaProtocolError, "reader version 5, unknown feature"),
    "delta__data-reader-absolute-paths-escaped-chars": (CorruptLogError, "no metaData"),
    "delta__deltalog-invalid-protocol-version": (DeltaProtocolError, "minReaderVersion 99"),
    "delta__deltalog-state-reconstruction-from-checkpoint-missing-protocol": (
        CorruptLogError,
        "checkpoint without protocol",
    ),
    "delta__deltalog-state-reconstruction-without-metadata": (CorruptLogError, "no metaData"),
    "delta__versions-not-contiguous": (CorruptLogError, "versions 0 and 2 only"),
}
DV_TEMPLATE = "{{FOLDER_WITH_SPECIAL_CHAR}}"


def _expected_rows(table_dir: str) -> int:
    row = CATALOG[table_dir]
    return int(row["row_count_via_deltalake"] or row["rows_via_parquet_footers"])


def _golden(table_dir: str, tmp_path: Path) -> str:
    """The table's path; a copy with the DV folder substituted for the templated table."""
    source = TABLES / table_dir
    if table_dir != "delta__spark__table-with-dv-special-char":
        return str(source)
    copy = tmp_path / table_dir
    shutil.copytree(source, copy)
    folder = quote(str(copy / "folder&with%special char"))  # a URI path: file:{{...}}/...
    for commit in (copy / "_delta_log").glob("*.json"):
        os.chmod(commit, 0o644)
        commit.write_text(commit.read_text().replace(DV_TEMPLATE, folder))
    return str(copy)


def _ids(df: Any, column: str = "id") -> list[int]:
    return sorted(r[0] for r in df.select(column).collect())


def _strings(df: Any) -> list[tuple]:
    """Rows with every column cast to string in Spark (timestamps shown in UTC)."""
    rows = df.select([F.col(f"`{c}`").cast("string") for c in df.columns]).collect()
    return sorted((tuple(r) for r in rows), key=lambda row: [(v is not None, v) for v in row])


# --------------------------------------------------------------------------- golden tables


def test_refusal_list_matches_expectations() -> None:
    refused = {t for t, row in EXPECT.items() if row["expect"] == "refuse"}
    assert refused == set(REFUSED)


@pytest.mark.parametrize("table_dir", WITH_DATA)
def test_golden_row_count(spark: SparkSession, table_dir: str, tmp_path: Path) -> None:
    uri = _golden(table_dir, tmp_path)
    if table_dir in REFUSED:
        with pytest.raises(REFUSED[table_dir][0]):
            read_delta(spark, uri)
        return
    assert read_delta(spark, uri).count() == _expected_rows(table_dir)


@pytest.mark.parametrize("table_dir", sorted(t for t in REFUSED if t not in WITH_DATA))
def test_golden_log_only_refusals(spark: SparkSession, table_dir: str) -> None:
    with pytest.raises(REFUSED[table_dir][0]):
        read_delta(spark, str(TABLES / table_dir))


def test_templated_dv_table_needs_its_folder(spark: SparkSession) -> None:
    with pytest.raises(CorruptLogError, match=r"deletion vector file .* is missing"):
        read_delta(spark, str(TABLES / "delta__spark__table-with-dv-special-char"))


@pytest.mark.parametrize(
    ("table_dir", "expected"),
    [
        ("delta__basic-with-inserts-overwrite-restore", list(range(200))),
        ("delta__kernel-defaults__basic-dv-no-checkpoint", list(range(2, 10))),
        ("delta__only-checkpoint-files", sorted([*range(5, 10), *range(20)])),
        ("delta__corrupted-last-checkpoint-kernel", list(range(100))),
        ("delta-rs__simple_table", [5, 7, 9]),
        ("delta__spark__table-with-dv-special-char", [1, 3, 5, 7, 9]),
    ],
)
def test_golden_ids(spark: SparkSession, table_dir: str, expected: list, tmp_path: Path) -> None:
    assert _ids(read_delta(spark, _golden(table_dir, tmp_path))) == expected


def test_missing_deletion_vector_file_is_a_typed_error(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    shutil.copytree(TABLES / "delta-rs__table-with-dv-small", path)
    for dv in path.glob("deletion_vector_*.bin"):
        dv.unlink()
    with pytest.raises(CorruptLogError, match=r"deletion vector file .* is missing"):
        read_delta(spark, str(path)).count()


def test_deletion_vector_table_of_delta_rs(spark: SparkSession) -> None:
    df = read_delta(spark, str(TABLES / "delta-rs__table-with-dv-small"))
    assert _ids(df, "value") == list(range(1, 9))


def test_empty_parquet_files(spark: SparkSession) -> None:
    df = read_delta(spark, str(TABLES / "delta__125-iterator-bug"))
    assert _ids(df, df.columns[0]) == [1, 2, 3, 4, 5]


def test_vacuum_protocol_check_table(spark: SparkSession) -> None:
    df = read_delta(spark, str(TABLES / "delta__basic-with-vacuum-protocol-check-feature"))
    assert _strings(df) == sorted((str(i), f"val={i}") for i in range(100))


def test_escaped_chars_in_paths(spark: SparkSession) -> None:
    df = read_delta(spark, str(TABLES / "delta__data-reader-escaped-chars"))
    assert _strings(df) == [("foo1", "bar+%21"), ("foo2", "bar+%22"), ("foo3", "bar+%23")]


def test_partition_values_from_the_log(spark: SparkSession) -> None:
    df = read_delta(spark, str(TABLES / "delta-rs__delta-0.8.0-partitioned"))
    assert _strings(df) == sorted(
        [
            ("1", "2020", "1", "1"),
            ("2", "2020", "2", "3"),
            ("3", "2020", "2", "5"),
            ("4", "2021", "4", "5"),
            ("5", "2021", "12", "4"),
            ("6", "2021", "12", "20"),
            ("7", "2021", "12", "20"),
        ]
    )


def test_typed_partition_values(spark: SparkSession) -> None:
    df = read_delta(spark, str(TABLES / "delta__data-reader-partition-values"))
    types = {f.name: f.dataType for f in df.schema.fields}
    assert types["as_int"] == T.IntegerType()
    assert types["as_long"] == T.LongType()
    assert types["as_byte"] == T.ByteType()
    assert types["as_short"] == T.ShortType()
    assert types["as_boolean"] == T.BooleanType()
    assert types["as_float"] == T.FloatType()
    assert types["as_double"] == T.DoubleType()
    assert types["as_date"] == T.DateType()
    assert types["as_timestamp"] == T.TimestampType()
    assert types["as_big_decimal"] == T.DecimalType(1, 0)
    partition_columns = [c for c in df.columns if c.startswith("as_") and "list" not in c]
    rows = _strings(df.select(*partition_columns[:-1], "value"))
    expected = [
        (i, i, i, i, b, f"{i}.0", f"{i}.0", i, "null", "2021-09-08", "2021-09-08 11:11:11", i, i)
        for i, b in (("0", "true"), ("1", "false"))
    ]
    assert rows[1:] == expected
    assert rows[0] == (None,) * 12 + ("2",)  # all-null partition: the log's values, not dirs


def test_nested_struct(spark: SparkSession) -> None:
    df = read_delta(spark, str(TABLES / "delta__data-reader-nested-struct"))
    rows = sorted((r.a.aa, r.a.ab, r.a.ac.aca, r.a.ac.acb, r.b) for r in df.collect())
    assert rows == [(str(i), str(i), i, i, i) for i in range(10)]


def test_column_mapping_name_mode(spark: SparkSession) -> None:
    df = read_delta(spark, str(TABLES / "delta-rs__table_with_column_mapping"))
    assert df.columns == ["Company Very Short", "Super Name"]
    assert ("BME", "Timothy Lamb") in _strings(df)
    assert all(None not in row for row in _strings(df))


def test_column_mapping_nested_fields(spark: SparkSession) -> None:
    table = TABLES / "delta__table-with-columnmapping-mode-name"
    df = read_delta(spark, str(table))
    schema = json.loads(DeltaLog.for_table(str(table)).update().metadata.schema_string)
    assert df.columns == [f["name"] for f in schema["fields"]]
    nested = df.schema["nested_struct"].dataType
    assert nested.names == ["aa", "ac"]
    assert nested["ac"].dataType.names == ["aca"]
    rows = df.select(
        "IntegerType", "nested_struct.aa", "nested_struct.ac.aca", "array_of_structs.ab"
    ).collect()
    expected = [(i, str(i), i, [i, i]) for i in range(5)]
    assert sorted(tuple(r) for r in rows if r[0] is not None) == expected
    assert [tuple(r) for r in rows if r[0] is None] == [(None, None, None, None)]
    values = df.select(F.map_values("map_of_rows").getItem(0).getField("ab")).collect()
    assert sorted(r[0] for r in values if r[0] is not None) == [0, 20, 40, 60, 80]


def test_column_mapping_partitions_by_physical_name(spark: SparkSession) -> None:
    mapped = "delta__kernel-defaults__data-reader-partition-values-column-mapping-name"
    df = read_delta(spark, str(TABLES / mapped))
    assert _strings(df.select("as_int", "as_timestamp", "value")) == [
        (None, None, "2"),
        ("0", "2021-09-08 11:11:11", "0"),
        ("1", "2021-09-08 11:11:11", "1"),
    ]


def test_column_mapping_id_mode_matches_unmapped_table(spark: SparkSession) -> None:
    plain = read_delta(spark, str(TABLES / "delta__data-reader-timestamp_ntz"))
    mapped = read_delta(spark, str(TABLES / "delta__data-reader-timestamp_ntz-id-mode"))
    assert mapped.schema == plain.schema
    assert mapped.schema["tsNtz"].dataType == T.TimestampNTZType()
    assert _strings(mapped) == _strings(plain)
    assert len(_strings(mapped)) == 9


def test_deletion_vectors_with_column_mapping_and_pruning(spark: SparkSession) -> None:
    uri = str(TABLES / "delta__dv-with-columnmapping")
    assert read_delta(spark, uri).count() == 35
    assert read_delta(spark, uri, partition_filter="part = 0").count() == 2


def test_variant_columns(spark: SparkSession) -> None:
    df = read_delta(spark, str(TABLES / "delta__spark__variant-stats-no-checkpoint"))
    assert df.schema["v"].dataType == T.VariantType()
    rows = df.select("i", F.to_json("v"), F.to_json("nv.v")).collect()
    assert sorted((i, json.loads(v), json.loads(nv)) for i, v, nv in rows) == [
        (100 + k, {"id": k, "name": str(10 - k)}, {"id": 10 + k, "name": str(20 - k)})
        for k in range(10)
    ]


def test_empty_table_keeps_its_schema(spark: SparkSession) -> None:
    df = read_delta(spark, str(TABLES / "delta-rs__delta-0.8-empty"))
    assert df.count() == 0
    assert df.columns == ["column"]


# --------------------------------------------------------------------------- time travel


def _deltalake_ids(path: Path, version: int) -> list[int]:
    table = DeltaTable(str(path), version=version).to_pyarrow_dataset().to_table()
    return sorted(table.column("id").to_pylist())


@pytest.fixture(scope="module")
def versioned_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Versions 0-3 written by deltalake: append, append, overwrite of a partition, append."""
    path = tmp_path_factory.mktemp("versions") / "table"
    batches = [
        ("append", {"id": [1, 2, 3], "part": ["a", "b", "a"]}),
        ("append", {"id": [4, 5], "part": ["b", "c"]}),
        ("overwrite", {"id": [6], "part": ["a"]}),
        ("append", {"id": [7, 8], "part": ["c", "a"]}),
    ]
    for mode, data in batches:
        table = pa.table({"id": pa.array(data["id"], pa.int64()), "part": data["part"]})
        write_deltalake(str(path), table, mode=mode, partition_by=["part"])
    return path


def test_time_travel_by_version(spark: SparkSession, versioned_table: Path) -> None:
    for version in range(4):
        df = read_delta(spark, str(versioned_table), version=version)
        assert _ids(df) == _deltalake_ids(versioned_table, version), version
    assert _ids(read_delta(spark, str(versioned_table))) == [6, 7, 8]


def test_time_travel_by_timestamp(spark: SparkSession, versioned_table: Path, tmp_path) -> None:
    path = tmp_path / "table"
    shutil.copytree(versioned_table, path)
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    for version in range(4):
        stamp = (base + dt.timedelta(days=version)).timestamp()
        os.utime(path / "_delta_log" / f"{version:020d}.json", (stamp, stamp))
    for version in range(4):
        at = base + dt.timedelta(days=version, hours=12)
        assert _ids(read_delta(spark, str(path), timestamp=at)) == _deltalake_ids(path, version)
    assert _ids(read_delta(spark, str(path), timestamp="2024-01-02T00:00:00Z")) == [1, 2, 3, 4, 5]


def test_partition_filter_prunes_before_spark(spark: SparkSession, versioned_table: Path) -> None:
    uri = str(versioned_table)
    whole = read_delta(spark, uri, version=1)
    pruned = read_delta(spark, uri, version=1, partition_filter="part IN ('a', 'c')")
    assert len(whole.inputFiles()) == 4
    assert len(pruned.inputFiles()) == 2
    assert all("part=b" not in f for f in pruned.inputFiles())
    assert _ids(pruned) == [1, 3, 5]
    both = read_delta(spark, uri, version=1, partition_filter=["part != 'b'", "part < 'b'"])
    assert _ids(both) == [1, 3]
    assert read_delta(spark, uri, partition_filter="part = 'zzz'").count() == 0


def test_filter_skips_files_by_stats(spark: SparkSession, versioned_table: Path) -> None:
    uri = str(versioned_table)
    selective = read_delta(spark, uri, version=1, filter="id = 4")
    assert len(selective.inputFiles()) == 1
    assert _ids(selective) == [4]
    mixed = read_delta(spark, uri, version=1, filter=["id > 2", "part = 'a'"])
    assert len(mixed.inputFiles()) == 1
    assert _ids(mixed) == [3]  # Spark still filters the rows of the kept files
    spark_only = read_delta(spark, uri, version=1, filter="abs(id) = 5")
    assert len(spark_only.inputFiles()) == 4
    assert _ids(spark_only) == [5]


def test_partition_filters_on_typed_columns(spark: SparkSession) -> None:
    uri = str(TABLES / "delta-rs__partition-type-primitives")
    for predicate in ("year = '2020'", "is_active = 'true'", "event_date = '2023-01-01'"):
        assert read_delta(spark, uri, partition_filter=predicate).count() == 8, predicate


# --------------------------------------------------------------------------- scan_files


def test_file_and_row_index_columns(spark: SparkSession) -> None:
    snapshot = DeltaLog.for_table(str(TABLES / "delta-rs__table-with-dv-small")).update()
    files = snapshot.files()
    df = scan_files(spark, snapshot, files, file_column="_file", row_index_column="_row")
    assert df.columns == ["value", "_file", "_row"]
    rows = sorted(df.select("value", "_file", "_row").collect())
    path = files.field("path")[0].as_py()
    assert [(r.value, r._file, r._row) for r in rows] == [(i, path, i) for i in range(1, 9)]
    with pytest.raises(ValueError, match="taken"):
        scan_files(spark, snapshot, files, file_column="VALUE")


def test_file_id_column_is_the_position_in_files(spark: SparkSession) -> None:
    """`file_id_column` numbers the files as `files` lists them (any order, any subset), on a
    partitioned table and an unpartitioned one."""
    for name in ("delta__data-reader-partition-values", "delta-rs__simple_table"):
        snapshot = DeltaLog.for_table(str(TABLES / name)).update()
        files = snapshot.files()
        files = files.take(list(reversed(range(len(files)))))  # another order than the log's
        df = scan_files(spark, snapshot, files, file_column="f", file_id_column="i")
        assert dict(df.schema["i"].jsonValue()) == {
            "name": "i",
            "type": "integer",
            "nullable": True,
            "metadata": {},
        }
        pairs = {(r.f, r.i) for r in df.select("f", "i").collect()}
        paths = files.field("path").to_pylist()
        assert len(pairs) > 1 and all(paths[i] == path for path, i in pairs), name
        subset = files.slice(max(i for _, i in pairs), 1)  # a file with rows, alone
        only = scan_files(spark, snapshot, subset, file_id_column="i").select("i").distinct()
        assert [r.i for r in only.collect()] == [0]
    with pytest.raises(ValueError, match="taken"):
        scan_files(spark, snapshot, files, file_id_column="ID")


def test_scan_of_no_files_is_empty_with_schema(spark: SparkSession) -> None:
    snapshot = DeltaLog.for_table(str(TABLES / "delta__data-reader-partition-values")).update()
    df = scan_files(spark, snapshot, snapshot.files().slice(0, 0), file_column="f")
    assert df.count() == 0
    assert df.columns[-2:] == ["value", "f"]
    assert df.schema["as_timestamp"].dataType == T.TimestampType()


def test_scan_of_some_files(spark: SparkSession) -> None:
    snapshot = DeltaLog.for_table(str(TABLES / "delta-rs__delta-0.8.0-partitioned")).update()
    files = snapshot.files()
    df = scan_files(spark, snapshot, files.slice(1, 2), file_column="file")
    assert sorted(r.file for r in df.collect()) == sorted(files.field("path")[1:3].to_pylist())


# --------------------------------------------------------------------------- hand-made tables


def _write_table(
    root: Path,
    fields: list[dict],
    files: list[tuple[str, pa.Table | None, dict, dict | None]],
    *,
    partition_columns: tuple[str, ...] = (),
    configuration: dict | None = None,
    reader_features: list[str] | None = None,
) -> str:
    """A one-commit table: protocol, metadata and one add per (path, data, partitions, dv).

    `path` is written to the log as given (URL-encoded); `data` None writes no file.
    """
    log = root / "_delta_log"
    log.mkdir(parents=True)
    protocol: dict[str, Any] = {"minReaderVersion": 1, "minWriterVersion": 2}
    if reader_features is not None:
        protocol = {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": reader_features,
            "writerFeatures": reader_features,
        }
    metadata = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps({"type": "struct", "fields": fields}),
        "partitionColumns": list(partition_columns),
        "configuration": configuration or {},
    }
    actions: list[dict] = [{"protocol": protocol}, {"metaData": metadata}]
    for path, data, partitions, dv in files:
        size = 0
        if data is not None:
            target = root / unquote(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(data, target)
            size = target.stat().st_size
        add = {
            "path": path,
            "partitionValues": partitions,
            "size": size,
            "modificationTime": 0,
            "dataChange": True,
        }
        if dv is not None:
            add["deletionVector"] = dv
        actions.append({"add": add})
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    return str(root)


def _field(name: str, type_: Any, metadata: dict | None = None) -> dict:
    return {"name": name, "type": type_, "nullable": True, "metadata": metadata or {}}


def test_special_characters_in_file_paths(spark: SparkSession, tmp_path: Path) -> None:
    """Partition values and file names that Hadoop and java.net.URI escape differently."""
    values = [
        "a b",
        "p%20q",
        "x+y",
        "ü ñ",
        "c=1#2",
        "br[1]",
        "cur{ly}",
        "q?m",
        "nb\u00a0sp",
        "t\tx",
    ]
    files = []
    for i, value in enumerate(values):
        data = pa.table({"id": pa.array([i], pa.int64()), "_metadata": [f"m{i}"]})
        files.append((quote(f"k={value}/part {i}%.parquet", safe="/="), data, {"k": value}, None))
    fields = [_field("id", "long"), _field("_metadata", "string"), _field("k", "string")]
    uri = _write_table(tmp_path / "t", fields, files, partition_columns=("k",))
    df = read_delta(spark, uri)
    assert sorted(tuple(r) for r in df.collect()) == [
        (i, f"m{i}", value) for i, value in enumerate(values)
    ]
    df = read_delta(spark, uri, partition_filter="k = 'br[1]'")
    assert [tuple(r) for r in df.collect()] == [(5, "m5", "br[1]")]


def test_absolute_file_uris(spark: SparkSession, tmp_path: Path) -> None:
    elsewhere = tmp_path / "other place"
    elsewhere.mkdir()
    pq.write_table(pa.table({"id": pa.array([41, 42], pa.int64())}), elsewhere / "f.parquet")
    absolute = (elsewhere / "f.parquet").as_uri()
    uri = _write_table(tmp_path / "t", [_field("id", "long")], [(absolute, None, {}, None)])
    assert _ids(read_delta(spark, uri)) == [41, 42]


def test_inline_and_absolute_deletion_vectors(spark: SparkSession, tmp_path: Path) -> None:
    data = pa.table({"id": pa.array(range(30), pa.int64())})
    inline = portable_bitmap([3, 4, 7, 11, 18, 29])
    dv_dir = tmp_path / "dv dir%"
    dv_dir.mkdir()
    on_disk = portable_bitmap([0, 1, 2, 20], runs=True)
    payload = struct.pack(">i", len(on_disk)) + on_disk + struct.pack(">I", zlib.crc32(on_disk))
    (dv_dir / "my dv.bin").write_bytes(b"\x01" + b"junk" + payload)
    files = [
        (
            "a.parquet",
            data,
            {},
            {
                "storageType": "i",
                "pathOrInlineDv": z85(inline),
                "sizeInBytes": len(inline),
                "cardinality": 6,
            },
        ),
        (
            "b.parquet",
            data,
            {},
            {
                "storageType": "p",
                "pathOrInlineDv": (dv_dir / "my dv.bin").as_uri(),
                "offset": 5,
                "sizeInBytes": len(on_disk),
                "cardinality": 4,
            },
        ),
    ]
    uri = _write_table(
        tmp_path / "t", [_field("id", "long")], files, reader_features=["deletionVectors"]
    )
    df = read_delta(spark, uri)
    snapshot = DeltaLog.for_table(uri).update()
    by_file = scan_files(spark, snapshot, snapshot.files(), file_column="f")
    kept_a = [i for i in range(30) if i not in (3, 4, 7, 11, 18, 29)]
    kept_b = [i for i in range(30) if i not in (0, 1, 2, 20)]
    assert _ids(by_file.where("f = 'a.parquet'")) == kept_a
    assert _ids(by_file.where("f = 'b.parquet'")) == kept_b
    assert df.count() == 50


def test_deletion_vector_cardinality_mismatch(spark: SparkSession, tmp_path: Path) -> None:
    inline = portable_bitmap([1, 2])
    dv = {"storageType": "i", "pathOrInlineDv": z85(inline), "sizeInBytes": len(inline)}
    files = [("a.parquet", None, {}, {**dv, "cardinality": 3})]
    uri = _write_table(tmp_path / "t", [_field("id", "long")], files, reader_features=[])
    with pytest.raises(CorruptLogError, match="deletes 2 rows"):
        read_delta(spark, uri)


def test_type_widening_reads_older_files(spark: SparkSession, tmp_path: Path) -> None:
    changes = [{"toType": "long", "fromType": "integer"}]
    decimal_changes = [{"toType": "decimal(12,4)", "fromType": "decimal(5,2)"}]
    fields = [
        _field("n", "long", {"delta.typeChanges": changes}),
        _field("d", "decimal(12,4)", {"delta.typeChanges": decimal_changes}),
        _field("day", "timestamp_ntz", {"delta.typeChanges": [{"fromType": "date"}]}),
    ]
    data = pa.table(
        {
            "n": pa.array([1, 2], pa.int32()),
            "d": pa.array([decimal.Decimal(1), decimal.Decimal(2)], pa.decimal128(5, 2)),
            "day": pa.array([0, 1], pa.int32()).cast(pa.date32()),
        }
    )
    uri = _write_table(
        tmp_path / "t", fields, [("a.parquet", data, {}, None)], reader_features=["typeWidening"]
    )
    assert _strings(read_delta(spark, uri)) == [
        ("1", "1.0000", "1970-01-01 00:00:00"),
        ("2", "2.0000", "1970-01-02 00:00:00"),
    ]


@pytest.mark.parametrize(
    ("fields", "features", "configuration", "path", "error", "match"),
    [
        (
            [_field("x", "double", {"delta.typeChanges": [{"fromType": "long"}]})],
            ["typeWidening"],
            None,
            "a.parquet",
            DeltaProtocolError,
            "widened from 'long'",
        ),
        (
            [
                _field(
                    "s",
                    {"type": "array", "elementType": "long", "containsNull": True},
                    {"delta.typeChanges": [{"fromType": "string", "fieldPath": "element"}]},
                )
            ],
            ["typeWidening"],
            None,
            "a.parquet",
            DeltaProtocolError,
            "widened from 'string'",
        ),
        (
            [_field("x", "long", {"delta.columnMapping.physicalName": "c1"})],
            ["columnMapping"],
            {"delta.columnMapping.mode": "position"},
            "a.parquet",
            DeltaProtocolError,
            "column mapping mode",
        ),
        (
            [_field("x", "long")],
            ["columnMapping"],
            {"delta.columnMapping.mode": "name"},
            "a.parquet",
            CorruptLogError,
            "physicalName",
        ),
        ([_field("x", "long")], None, None, "_hidden.parquet", DeltaProtocolError, "hidden"),
        (
            [_field("x", "long")],
            None,
            None,
            "s3://bucket/t/a.parquet",
            UnsupportedStorageError,
            "spark.hadoop.fs.s3.impl",
        ),
    ],
    ids=[
        "long-to-double",
        "nested-string-to-long",
        "unknown-mapping-mode",
        "mapping-without-physical-name",
        "hidden-file-name",
        "s3-without-hadoop-fs",
    ],
)
def test_refused_before_reading(
    spark: SparkSession,
    tmp_path: Path,
    fields: list,
    features: list | None,
    configuration: dict | None,
    path: str,
    error: type[Exception],
    match: str,
) -> None:
    files = [(path, None, {}, None)]  # no data file: reading one would fail differently
    uri = _write_table(
        tmp_path / "t", fields, files, configuration=configuration, reader_features=features
    )
    with pytest.raises(error, match=match):
        read_delta(spark, uri)


def test_mapping_property_ignored_without_the_feature(spark: SparkSession, tmp_path) -> None:
    data = pa.table({"x": pa.array([1], pa.int64())})
    uri = _write_table(
        tmp_path / "t",
        [_field("x", "long")],
        [("a.parquet", data, {}, None)],
        configuration={"delta.columnMapping.mode": "name"},
    )
    assert _ids(read_delta(spark, uri), "x") == [1]
