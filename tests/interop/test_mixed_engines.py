"""Tables other engines wrote, read by the engine's in-process MERGE.

1. deltalake's MERGE and UPDATE write parquet with Arrow view types (`string_view`,
   `binary_view`); other writers use large types. The in-process MERGE reads them as the table's
   types (`data_reader.conform`), and takes Arrow sources of those types.
2. Data file paths in the log are URI references resolved against the table root
   (`paths.resolve_path`): relative and URL-encoded, absolute-path references (`/abs/...`, as
   DuckDB writes them), `file:` URIs. The in-process MERGE reads the file each one names, and
   refuses one its filesystem cannot open with UnsupportedStorageError.

Rows are read back through `pyarrow.dataset` over deltalake's `file_uris()` (never
`to_pyarrow_table()`, which can abort the process). The same tables are read by Spark in
tests/spark/test_mixed_engines.py.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.dataset as pds
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine import AddFile, DeltaLog, Operation
from airflow_delta.engine.commands.data_reader import (
    conform,
    conform_table,
    plain_type,
    same_family,
)
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.errors import UnsupportedStorageError
from airflow_delta.engine.protocol.paths import resolve_path, table_root

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("b", pa.binary())])
VIEW_TYPES = (pa.types.is_string_view, pa.types.is_binary_view)
LARGE_TYPES = (pa.types.is_large_string, pa.types.is_large_binary, pa.types.is_large_list)


def rows_of(uri: str) -> list[tuple]:
    """The table's rows (sorted), read by pyarrow from the files the engine's snapshot lists.

    (deltalake 1.6.6's `file_uris()` puts the table root before a `file:` URI path.)
    """
    log = DeltaLog.for_table(uri)
    root = table_root(uri, log.table_path)
    files = [resolve_path(root, f.path).fs_path for f in log.update().all_files()]
    data = pds.dataset(files, format="parquet").to_table(columns=SCHEMA.names)
    return sorted((tuple(r.values()) for r in data.to_pylist()), key=repr)


def odd_types(path: str) -> list[pa.DataType]:
    """The view and large types of a parquet file's schema (as pyarrow reads them)."""
    found = []
    for field in pq.read_schema(path):
        for t in (field.type, getattr(field.type, "value_type", None)):
            if t is not None and any(f(t) for f in VIEW_TYPES + LARGE_TYPES):
                found.append(t)
    return found


def commit_adds(uri: str, paths: list[str], files: list[Path]) -> int:
    """Commit adds of `files` with the log paths `paths` (as given) through the engine."""
    now = int(time.time() * 1000)
    adds = [AddFile(p, {}, f.stat().st_size, now) for p, f in zip(paths, files, strict=True)]
    return DeltaLog.for_table(uri).start_transaction().commit(adds, Operation("WRITE"))


# -- view and large types ------------------------------------------------------------------


def test_merge_over_files_of_deltalake_merge_and_update(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"k": ["a", "b", "c"], "v": [1, 2, 3], "b": [b"1"] * 3}, SCHEMA))
    source = pa.table({"k": ["b", "d"], "v": [20, 40], "b": [b"2", b"4"]}, SCHEMA)
    (
        DeltaTable(uri)
        .merge(source, "t.k = s.k", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    DeltaTable(uri).update({"v": "v + 100"}, predicate="k = 'a'")
    written = DeltaTable(uri).file_uris()
    assert any(odd_types(f) for f in written), [pq.read_schema(f) for f in written]

    updates = pa.table({"k": ["a", "d", "e"], "v": [7, 8, 9], "b": [b"7", b"8", b"9"]}, SCHEMA)
    metrics = (
        merge_arrow(uri, updates, "t.k = s.k")
        .when_matched_update({"v": "s.v"})
        .when_not_matched_insert_all()
        .execute()
        .metrics
    )
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (2, 1)
    assert rows_of(uri) == [
        ("a", 7, b"1"),
        ("b", 20, b"2"),
        ("c", 3, b"1"),
        ("d", 8, b"4"),
        ("e", 9, b"9"),
    ]


def test_merge_over_large_and_view_files_committed_by_the_engine(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, SCHEMA)
    large = pa.schema([("k", pa.large_string()), ("v", pa.int64()), ("b", pa.large_binary())])
    view = pa.schema([("k", pa.string_view()), ("v", pa.int64()), ("b", pa.binary_view())])
    files = []
    for i, (schema, keys) in enumerate([(large, ["a", "b"]), (view, ["c", None])]):
        data = pa.table({"k": keys, "v": [i, i], "b": [b"x", None]}).cast(schema)
        files.append(Path(uri) / f"part-{i}.parquet")
        pq.write_table(data, files[-1])
        assert len(odd_types(str(files[-1]))) == 2
    commit_adds(uri, [f.name for f in files], files)
    updates = pa.table({"k": ["b", "c"], "v": [10, 11], "b": [b"y", b"z"]}, SCHEMA)
    metrics = merge_arrow(uri, updates, "t.k = s.k").when_matched_update_all().execute().metrics
    assert metrics["numTargetRowsUpdated"] == 2
    assert metrics["numTargetRowsCopied"] == 2
    assert rows_of(uri) == sorted(
        [("a", 0, b"x"), ("b", 10, b"y"), ("c", 11, b"z"), (None, 1, None)], key=repr
    )


def test_sources_of_view_and_large_types_merge_in_process(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"k": ["a", "b"], "v": [1, 2], "b": [b"1", b"2"]}, SCHEMA))
    source = pa.table(
        {
            "k": pa.array(["b", "c"], pa.string_view()),
            "v": [5, 6],
            "b": pa.array([b"5", b"6"], pa.large_binary()),
        }
    )
    builder = merge_arrow(uri, source, "t.k = s.k")
    builder.when_matched_update_all("s.k = 'b'").when_not_matched_insert_all().execute()
    assert builder.executor == "in-process"
    assert rows_of(uri) == [("a", 1, b"1"), ("b", 5, b"5"), ("c", 6, b"6")]


def test_conform_nested_types() -> None:
    given_type = pa.struct(
        [
            ("s", pa.string_view()),
            ("l", pa.large_list(pa.field("element", pa.binary_view()))),
            ("m", pa.map_(pa.string_view(), pa.list_view(pa.large_string()))),
            ("f", pa.list_(pa.large_string(), 2)),
        ]
    )
    table_type = pa.struct(
        [
            ("s", pa.string()),
            ("l", pa.list_(pa.binary())),
            ("m", pa.map_(pa.string(), pa.list_(pa.string()))),
            ("f", pa.list_(pa.string(), 2)),
        ]
    )
    assert plain_type(given_type) == table_type
    assert same_family(given_type, table_type)
    value = {"s": "x", "l": [b"y", None], "m": [("k", ["v", "w"])], "f": ["p", "q"]}
    column = pa.chunked_array([pa.array([value, None], given_type)])
    conformed = conform(column, table_type)
    assert conformed.type == table_type
    assert conformed.to_pylist() == [
        {"s": "x", "l": [b"y", None], "m": [("k", ["v", "w"])], "f": ["p", "q"]},
        None,
    ]
    # list views: pyarrow's cast to a list drops values, so they are rebuilt (sliced, nulls)
    cases = [
        ([["v", "w"], None, ["x"], []], pa.list_view(pa.string_view()), pa.list_(pa.string())),
        (
            [[("a", ["1"])], [("k", ["v", "w"])], None, [("j", [])]],
            pa.map_(pa.string_view(), pa.list_view(pa.large_string())),
            pa.map_(pa.string(), pa.list_(pa.string())),
        ),
        (
            [{"a": ["v"], "b": 1}, None, {"a": None, "b": 2}, {"a": ["z", "y"], "b": None}],
            pa.struct([("a", pa.large_list_view(pa.string())), ("b", pa.int64())]),
            pa.struct([("a", pa.list_(pa.string())), ("b", pa.int64())]),
        ),
        (
            [[["a"], ["b", "c"]], None, [None, ["d"]]],
            pa.list_(pa.list_view(pa.string()), 2),
            pa.list_(pa.list_(pa.string()), 2),
        ),
        (
            [[["a"], ["b", "c"]], None, [None, ["d"]], []],
            pa.large_list(pa.list_view(pa.string())),
            pa.list_(pa.list_(pa.string())),
        ),
    ]
    for values, layout, plain in cases:
        array = pa.array(values, layout)
        for part in (array, array[1:], array[:-1]):
            conformed = conform(part, plain)
            assert conformed.type == plain
            assert conformed.to_pylist() == part.to_pylist()
    dictionary = pa.array(["a", "b", "a"]).dictionary_encode()
    assert conform(dictionary, pa.string()).to_pylist() == ["a", "b", "a"]
    # another family, another struct field name, another fixed size: left to the caller
    assert not same_family(pa.string_view(), pa.binary())
    assert not same_family(pa.struct([("a", pa.string_view())]), pa.struct([("b", pa.string())]))
    assert not same_family(pa.list_(pa.int8(), 2), pa.list_(pa.int8(), 3))
    assert conform(pa.array([1], pa.int32()), pa.int64()).type == pa.int32()
    table = conform_table(pa.table({"c": column, "n": [1, 2]}), pa.schema([("c", table_type)]))
    assert table.schema == pa.schema([("c", table_type), ("n", pa.int64())])


# -- paths ---------------------------------------------------------------------------------


def test_absolute_path_references_and_file_uris(tmp_path: Path) -> None:
    """Adds naming files outside the table by `/abs` references and `file:` URIs."""
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, SCHEMA)
    elsewhere = tmp_path / "other place"
    elsewhere.mkdir()
    files, paths = [], []
    for i, form in enumerate(["relative", "absolute", "uri", "localhost"]):
        place = Path(uri) if form == "relative" else elsewhere
        files.append(place / f"part {i}#%.parquet")
        pq.write_table(pa.table({"k": [f"k{i}"], "v": [i], "b": [b"x"]}, SCHEMA), files[-1])
        paths.append(
            {
                "relative": quote(files[-1].name),
                "absolute": quote(str(files[-1])),
                "uri": files[-1].as_uri(),
                "localhost": "file://localhost" + quote(str(files[-1])),
            }[form]
        )
    commit_adds(uri, paths, files)
    root = table_root(uri, DeltaLog.for_table(uri).table_path)
    assert [resolve_path(root, p).fs_path for p in paths] == [str(f) for f in files]

    updates = pa.table({"k": ["k1", "k3", "new"], "v": [10, 30, 99], "b": [b"y"] * 3}, SCHEMA)
    metrics = (
        merge_arrow(uri, updates, "t.k = s.k")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
        .metrics
    )
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (2, 1)
    assert rows_of(uri) == [
        ("k0", 0, b"x"),
        ("k1", 10, b"y"),
        ("k2", 2, b"x"),
        ("k3", 30, b"y"),
        ("new", 99, b"y"),
    ]


@pytest.mark.parametrize(
    "path", ["s3://bucket/t/part-0.parquet", "file://elsewhere/t/part-0.parquet"]
)
def test_files_the_filesystem_cannot_open(tmp_path: Path, path: str) -> None:
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, SCHEMA)
    data = Path(uri) / "part-0.parquet"
    pq.write_table(pa.table({"k": ["a"], "v": [1], "b": [b"x"]}, SCHEMA), data)
    version = commit_adds(uri, [path], [data])
    merge = merge_arrow(uri, pa.table({"k": ["a"]}), "t.k = s.k").when_matched_delete()
    with pytest.raises(UnsupportedStorageError, match=f"{uri} version {version}: .*{path}"):
        merge.execute()
    assert DeltaLog.for_table(uri).update().version == version


#: File names other engines write, or users choose: URI-reserved and glob characters, unicode.
NAMES = st.text(alphabet=" %#?[]*={}+&;,'!~@$üñ中xX1", min_size=1, max_size=10)


def encodings(name: str) -> list[str]:
    """Ways a log may write the relative path `name`: fully encoded, or only `%` escaped."""
    return [quote(name), name.replace("%", "%25")]


@settings(max_examples=25, deadline=None)
@given(names=st.lists(NAMES, min_size=1, max_size=3, unique=True), minimal=st.booleans())
def test_odd_file_names_resolve_and_read_alike(names: list[str], minimal: bool) -> None:
    """Each name as a file inside the table (relative reference, in a folder of that name) and
    outside it (absolute-path reference and `file:` URI): resolve_path names the file written,
    and the in-process MERGE reads every row of them."""
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"{tmp}/t"
        DeltaLog.create_table(uri, SCHEMA)
        outside = Path(tmp) / "out"
        files, paths = [], []
        for name in names:
            inner = Path(uri) / f"d{name}" / f"p{name}.parquet"
            absolute = outside / f"d{name}" / f"a{name}.parquet"
            file_uri = outside / f"d{name}" / f"u{name}.parquet"
            for file, path in (
                (inner, encodings(f"d{name}/p{name}.parquet")[minimal]),
                (absolute, encodings(str(absolute))[minimal]),
                (file_uri, file_uri.as_uri()),
            ):
                file.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(pa.table({"k": [path], "v": [0], "b": [b""]}, SCHEMA), file)
                files.append(file)
                paths.append(path)
        root = table_root(uri, DeltaLog.for_table(uri).table_path)
        assert [resolve_path(root, p).fs_path for p in paths] == [str(f) for f in files]
        commit_adds(uri, paths, files)
        source = pa.table({"k": paths, "v": range(1, len(paths) + 1)}, SCHEMA.remove(2))
        merge = merge_arrow(uri, source, "t.k = s.k").when_matched_update({"v": "s.v"})
        metrics = merge.execute().metrics
        assert metrics["numTargetRowsUpdated"] == metrics["numTargetFilesRemoved"] == len(files)
        assert rows_of(uri) == sorted(((p, i, b"") for i, p in enumerate(paths, 1)), key=repr)
        shutil.rmtree(tmp, ignore_errors=True)


def test_absolute_path_reference_on_s3(s3_bucket: tuple[str, dict[str, str]]) -> None:
    """On S3, `/key` keeps the table's bucket: s3://bucket/t + `/elsewhere/x` is
    s3://bucket/elsewhere/x, which the in-process MERGE reads through the table's s3fs."""
    bucket, options = s3_bucket
    uri = f"s3://{bucket}/t"
    log = DeltaLog.create_table(uri, SCHEMA, storage_options=options)
    fs = log.store.fs
    keys = [f"{bucket}/t/in #1.parquet", f"{bucket}/elsewhere/a b%.parquet"]
    sizes = []
    for i, key in enumerate(keys):
        with fs.open(key, "wb") as out:
            pq.write_table(pa.table({"k": [f"k{i}"], "v": [i], "b": [b""]}, SCHEMA), out)
        sizes.append(fs.size(key))
    paths = [quote("in #1.parquet"), quote("/elsewhere/a b%.parquet")]
    adds = [AddFile(p, {}, n, 0) for p, n in zip(paths, sizes, strict=True)]
    log.start_transaction().commit(adds, Operation("WRITE"))
    root = table_root(uri, log.table_path)
    assert [resolve_path(root, p).fs_path for p in paths] == keys
    updates = pa.table({"k": ["k0", "k1"], "v": [10, 11], "b": [b"x", b"y"]}, SCHEMA)
    merge = merge_arrow(uri, updates, "t.k = s.k", storage_options=options)
    metrics = merge.when_matched_update_all().execute().metrics
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetFilesRemoved"]) == (2, 2)
