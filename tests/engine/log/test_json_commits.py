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
from airflow_delta.engine.protocol.actions import Metadata, Protocol

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
#: Protocols a log may switch to: the fields their features define are read columnar.
FEATURED = [
    {
        "protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"],
            "writerFeatures": ["deletionVectors", "rowTracking", "domainMetadata"],
        }
    },
    {
        "protocol": {
            "minReaderVersion": 1,
            "minWriterVersion": 7,
            "writerFeatures": ["clustering", "domainMetadata"],
        }
    },
]


def metadata_partitioned_by(columns: list[str]) -> dict[str, Any]:
    """METADATA, partitioned by `columns` (all of them string columns of the schema)."""
    return {"metaData": {**METADATA["metaData"], "partitionColumns": columns}}


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
def file_action(draw: Any, columns: list[str], features: set[str]) -> dict[str, Any]:
    """An add or remove under a table partitioned by `columns`, with the fields its protocol's
    `features` define (a deletion vector and tags also without: those go per-line)."""
    kind = draw(st.sampled_from(["add", "add", "remove"]))
    body: dict[str, Any] = {
        "path": draw(names) + ".parquet",
        "partitionValues": {c: draw(values) for c in columns},
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
    if "rowTracking" in features and draw(st.booleans()):
        body["baseRowId"] = draw(st.integers(0, 10**6))
        body["defaultRowCommitVersion"] = draw(st.integers(0, 99))
    if kind == "add" and "clustering" in features and draw(st.booleans()):
        body["clusteringProvider"] = "liquid"
    if draw(st.integers(0, 9)) == 0:
        body["tags"] = {"INSERTION_TIME": "1"}
    if columns and draw(st.integers(0, 9)) == 0:
        del body["partitionValues"][columns[0]]  # a writer that left a null value out
    return {kind: body}


@st.composite
def commit(draw: Any, version: int, table: dict[str, Any]) -> bytes:
    """Commit `version` of a table whose partition columns and protocol features are in
    `table` (updated when the commit changes them)."""
    actions: list[dict[str, Any]] = [{"commitInfo": {"operation": "WRITE", "v": version}}]
    if version == 0:
        actions += [PROTOCOL, METADATA]
    elif draw(st.integers(0, 5)) == 0:  # a protocol upgrade or a new partitioning mid-log
        action = draw(
            st.one_of(
                st.sampled_from(FEATURED),
                st.sampled_from([[], ["q"], COLUMNS]).map(metadata_partitioned_by),
                st.just(METADATA),
            )
        )
        actions.append(action)
        if "protocol" in action:
            table["features"] = set(action["protocol"]["writerFeatures"])
        else:
            table["columns"] = action["metaData"]["partitionColumns"]
    file_actions = file_action(table["columns"], table["features"])
    actions += draw(st.lists(file_actions, max_size=8))
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
    table: dict[str, Any] = {"columns": COLUMNS, "features": set()}
    return [draw(commit(v, table)) for v in range(n)]


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
    decoded = decode_commits(commits, None, None)
    assert replayed(decoded) == replayed(expected)
    for got, want in zip(decoded, expected, strict=True):
        assert got.commit_info == want.commit_info
        assert got.metadata == want.metadata and got.protocol == want.protocol


def test_a_run_of_commits_is_decoded_columnar() -> None:
    first = b"\n".join(json.dumps(a).encode() for a in (PROTOCOL, METADATA)) + b"\n"
    add = {"add": {"path": "f.parquet", "partitionValues": {"p": "1", "q": None}, "size": 1}}
    later = [(json.dumps(add).encode(), f"{v}.json") for v in range(1, 4)]
    batches = decode_commits([(first, "0.json"), *later], None, None)
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
        batches = decode_commits(
            commits,
            Metadata.from_json_dict(METADATA["metaData"]),
            Protocol.from_json_dict(PROTOCOL["protocol"]),
        )
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
    batches = decode_commits([(first, "0.json"), (json.dumps(add).encode(), "1.json")], None, None)
    assert batches[1].add_rows == []  # decoded columnar
    values = batches[1].add_array().to_pylist()[0]["partitionValues"]
    assert values == [("col-1a", "2024-01-01")]


def test_commits_after_a_protocol_upgrade_are_read_with_its_fields() -> None:
    """A protocol that adds deletion vectors and row tracking mid-log: the commits after it are
    still decoded columnar, with those fields; those before it without them."""
    first = b"\n".join(json.dumps(a).encode() for a in (PROTOCOL, METADATA)) + b"\n"
    add: dict[str, Any] = {"path": "f.parquet", "partitionValues": {"p": "1", "q": None}, "size": 1}
    dv = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f", "offset": None}
    dv |= {"sizeInBytes": 40, "cardinality": 2}
    with_fields = {**add, "deletionVector": dv, "baseRowId": 7, "defaultRowCommitVersion": 3}
    commits = [
        (first, "0.json"),
        (json.dumps({"add": add}).encode(), "1.json"),
        (json.dumps(FEATURED[0]).encode(), "2.json"),
        (json.dumps({"add": with_fields}).encode(), "3.json"),
        (json.dumps({"add": {**with_fields, "path": "g.parquet"}}).encode(), "4.json"),
    ]
    batches = decode_commits(commits, None, None)
    assert [b.add_rows for b in batches[3:]] == [[], []]  # columnar after the upgrade
    got = batches[3].add_array().to_pylist()[0]
    assert got["deletionVector"]["cardinality"] == 2 and got["deletionVector"]["offset"] is None
    assert (got["baseRowId"], got["defaultRowCommitVersion"]) == (7, 3)
    assert replayed(batches) == replayed([parse_log_batch(*c) for c in commits])


def test_a_new_partitioning_mid_log_reads_the_later_commits_by_its_columns() -> None:
    first = b"\n".join(json.dumps(a).encode() for a in (PROTOCOL, METADATA)) + b"\n"
    add = {"add": {"path": "f.parquet", "partitionValues": {"q": "x"}, "size": 1}}
    evolved = {"commitInfo": {}}, metadata_partitioned_by(["q"])
    commits = [
        (first, "0.json"),
        (b"\n".join(json.dumps(a).encode() for a in evolved), "1.json"),
        (json.dumps(add).encode(), "2.json"),
    ]
    batches = decode_commits(commits, None, None)
    assert batches[2].add_rows == []
    assert batches[2].add_array().to_pylist()[0]["partitionValues"] == [("q", "x")]
