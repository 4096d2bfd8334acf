"""The columnar commit decoder agrees with the per-line parser on every log it is given."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import CorruptLogError
from airflow_delta.engine.log.json_commits import decode_commits
from airflow_delta.engine.log.replay import InMemoryLogReplay, LogBatch, parse_log_batch

COLUMNS = ["p", "q"]
METADATA = {
    "metaData": {
        "id": "t",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(
            {
                "type": "struct",
                "fields": [
                    {"name": c, "type": "string", "nullable": True, "metadata": {}}
                    for c in ["x", *COLUMNS]
                ],
            }
        ),
        "partitionColumns": COLUMNS,
        "configuration": {},
    }
}
PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}

names = st.sampled_from(["a", "b", "c", "d e", "f%20g", "日本", "x=1/y"])
values = st.one_of(st.none(), st.sampled_from(["", "1", "a b", "é", '"q"', "}{", "2024-01-01"]))
dv = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "storageType": st.just("u"),
            "pathOrInlineDv": st.sampled_from(["ab^-aO@vk8iR*Yx3h", "cd^-aO@vk8iR*Yx3h"]),
            "offset": st.integers(1, 9),
            "sizeInBytes": st.integers(1, 99),
            "cardinality": st.integers(1, 99),
        }
    ),
)


@st.composite
def file_action(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["add", "add", "remove"]))
    body: dict[str, Any] = {
        "path": draw(names) + ".parquet",
        "partitionValues": {c: draw(values) for c in COLUMNS},
        "size": draw(st.integers(0, 10**12)),
        "dataChange": draw(st.booleans()),
    }
    if kind == "add":
        body["modificationTime"] = draw(st.integers(0, 2 * 10**12))
        if draw(st.booleans()):
            body["stats"] = json.dumps({"numRecords": draw(st.integers(0, 99))})
    else:
        body["deletionTimestamp"] = draw(st.integers(0, 2 * 10**12))
    if draw(st.booleans()):
        body["deletionVector"] = draw(dv)
    if draw(st.integers(0, 9)) == 0:
        body["tags"] = {"INSERTION_TIME": "1"}
    if draw(st.integers(0, 9)) == 0:
        del body["partitionValues"][COLUMNS[0]]  # a writer that left a null value out
    return {kind: body}


@st.composite
def commit(draw: Any, version: int) -> bytes:
    actions: list[dict[str, Any]] = [{"commitInfo": {"operation": "WRITE", "v": version}}]
    if version == 0:
        actions += [PROTOCOL, METADATA]
    actions += draw(st.lists(file_action(), max_size=8))
    if draw(st.integers(0, 4)) == 0:
        actions.append({"txn": {"appId": draw(names), "version": version}})
    lines = []
    for action in actions:
        if draw(st.integers(0, 9)) == 0:
            lines.append(b"")  # a blank line
        separators = draw(st.sampled_from([(",", ":"), (", ", ": ")]))
        lines.append(json.dumps(action, separators=separators, ensure_ascii=False).encode())
    if len(lines) > 2 and draw(st.integers(0, 9)) == 0:  # two actions on one line
        a, b = json.loads(lines[-1] or b"{}"), json.loads(lines[-2] or b"{}")
        if set(a).isdisjoint(b):
            lines[-2:] = [json.dumps({**b, **a}).encode()]
    return b"\n".join(lines) + draw(st.sampled_from([b"\n", b""]))


@st.composite
def logs(draw: Any) -> list[bytes]:
    n = draw(st.integers(1, 6))
    return [draw(commit(v)) for v in range(n)]


def replayed(batches: list[LogBatch]) -> tuple[list[Any], list[Any], dict[str, int]]:
    """The state the batches replay to. A partition column a writer left out of a file's
    partitionValues reads as null: the decoder gives it an entry with a null value."""
    replay = InMemoryLogReplay(min_file_retention_timestamp=0)
    for version, batch in enumerate(batches):
        replay.append(version, batch)

    def rows(files: Any) -> list[Any]:
        out = files.to_pylist()
        for row in out:
            if row["partitionValues"] is not None:
                row["partitionValues"] = {c: dict(row["partitionValues"]).get(c) for c in COLUMNS}
        return out

    return (
        rows(replay.active_files()),
        rows(replay.get_tombstones()),
        {app: t.version for app, t in replay.transactions.items()},
    )


@settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(logs())
def test_the_decoder_replays_like_the_per_line_parser(log: list[bytes]) -> None:
    commits = [(data, f"{v:020d}.json") for v, data in enumerate(log)]
    expected = [parse_log_batch(data, source) for data, source in commits]
    decoded = decode_commits(commits, None)
    assert replayed(decoded) == replayed(expected)
    for got, want in zip(decoded, expected, strict=True):
        assert got.commit_info == want.commit_info
        assert got.metadata == want.metadata and got.protocol == want.protocol


def test_a_run_of_commits_is_decoded_columnar() -> None:
    first = b"\n".join(json.dumps(a).encode() for a in (PROTOCOL, METADATA)) + b"\n"
    add = {"add": {"path": "f.parquet", "partitionValues": {"p": "1", "q": None}, "size": 1}}
    later = [(json.dumps(add).encode(), f"{v}.json") for v in range(1, 4)]
    batches = decode_commits([(first, "0.json"), *later], None)
    assert [b.add_rows for b in batches[1:]] == [[], [], []]  # no JSON rows kept
    assert batches[1].add_array().to_pylist()[0]["partitionValues"] == [("p", "1"), ("q", None)]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"add": {"size": 1}}\n', "add action without a path"),
        (b'{"add": {"path": "a", "size": "big"}}\n', "malformed 'add' action"),
        (b"[1, 2]\n", "is not a JSON object"),
        (b"{not json}\n", "line 1"),
        (b"\n\n", "holds no action"),
    ],
)
def test_bad_commits_get_the_per_line_parsers_errors(data: bytes, message: str) -> None:
    commits = [(data, "00000000000000000001.json")]
    with pytest.raises(CorruptLogError, match=message):
        batches = decode_commits(commits, COLUMNS)
        for batch in batches:
            batch.add_array()


def test_replaying_commits_does_not_import_pandas(tmp_path: Any) -> None:
    from tests.pandas_free import imports_pandas

    log = tmp_path / "t" / "_delta_log"
    log.mkdir(parents=True)
    (log / f"{0:020d}.json").write_text(
        "\n".join(json.dumps(a) for a in ({"commitInfo": {}}, PROTOCOL, METADATA)) + "\n"
    )
    add = {"add": {"path": "f.parquet", "partitionValues": {"p": "1", "q": None}, "size": 1}}
    (log / f"{1:020d}.json").write_text(json.dumps(add) + "\n")
    script = (
        "import sys\n"
        "from airflow_delta.engine import DeltaLog\n"
        f"snapshot = DeltaLog.for_table({str(tmp_path / 't')!r}).update()\n"
        "assert len(snapshot.files()) == 1\n"
        "print('pandas' in sys.modules)\n"
    )
    assert not imports_pandas(script)


def test_column_mapped_partition_values_are_read_by_physical_name() -> None:
    field = {
        "name": "day",
        "type": "string",
        "nullable": True,
        "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-1a"},
    }
    metadata = {
        "metaData": {
            **METADATA["metaData"],
            "schemaString": json.dumps({"type": "struct", "fields": [field]}),
            "partitionColumns": ["day"],
            "configuration": {"delta.columnMapping.mode": "name"},
        }
    }
    first = b"\n".join(json.dumps(a).encode() for a in (PROTOCOL, metadata)) + b"\n"
    add = {"add": {"path": "f.parquet", "partitionValues": {"col-1a": "2024-01-01"}, "size": 1}}
    batches = decode_commits([(first, "0.json"), (json.dumps(add).encode(), "1.json")], None)
    assert batches[1].add_rows == []  # decoded columnar
    values = batches[1].add_array().to_pylist()[0]["partitionValues"]
    assert values == [("col-1a", "2024-01-01")]
