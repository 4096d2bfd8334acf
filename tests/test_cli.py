"""The `airflow-delta` CLI against tables deltalake writes and the golden tables.

deltalake (delta-rs) is the independent view each answer is checked against. Its
`to_pyarrow_table()`/`to_pandas()` can abort the process, so only metadata is read from it.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import airflow_delta
from airflow_delta import cli, provider
from airflow_delta.cli import main
from tests.conftest import s3_client

REPO_ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path("/work/shared/golden/tables")

needs_golden = pytest.mark.skipif(not GOLDEN.is_dir(), reason="golden tables not available")

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """Run the CLI in-process: (exit code, stdout, stderr)."""

    def _run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return _run


def ok_json(run: Run, *argv: str) -> Any:
    """The single JSON object a successful command prints."""
    code, out, err = run(*argv)
    assert (code, err) == (0, ""), err
    lines = out.splitlines()
    assert len(lines) == 1, out
    return json.loads(lines[0])


def ok_lines(run: Run, *argv: str) -> list[dict[str, Any]]:
    """The JSON lines a successful command prints."""
    code, out, err = run(*argv)
    assert (code, err) == (0, ""), err
    return [json.loads(line) for line in out.splitlines()]


def assert_error(result: tuple[int, str, str], class_name: str) -> str:
    """Exit 1, nothing on stdout, exactly one `error: <class_name>: ...` line on stderr."""
    code, out, err = result
    assert code == 1
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(f"error: {class_name}: "), err
    assert "Traceback" not in err
    return err.rstrip("\n")


def file_name(path: str) -> str:
    return unquote(path).rsplit("/", 1)[-1]


def batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array(["a" if i % 2 else "b" for i in ids], pa.string()),
            "value": pa.array([i * 1.5 for i in ids], pa.float64()),
        }
    )


@pytest.fixture(params=[False, True], ids=["unpartitioned", "partitioned"])
def made_table(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, bool]:
    """A table deltalake wrote: v0 3 rows, v1 +4, v2 +5, v3 overwrite with 6 rows."""
    partitioned: bool = request.param
    path = str(tmp_path / "t")
    part = ["part"] if partitioned else None
    write_deltalake(path, batch(0, 3), partition_by=part)
    write_deltalake(path, batch(3, 4), mode="append")
    write_deltalake(path, batch(7, 5), mode="append")
    write_deltalake(path, batch(100, 6), mode="overwrite")
    return path, partitioned


def set_commit_times(path: str, stamps: dict[int, datetime]) -> None:
    """Set the modification times of commit files (timestamp time travel reads them)."""
    for version, when in stamps.items():
        commit = Path(path, "_delta_log", f"{version:020d}.json")
        os.utime(commit, (when.timestamp(), when.timestamp()))


# -- describe ------------------------------------------------------------------------------


def test_describe_matches_deltalake(run: Run, made_table: tuple[str, bool]) -> None:
    path, partitioned = made_table
    dt = DeltaTable(path)
    d = ok_json(run, "describe", path)
    assert d["version"] == dt.version() == 3
    assert d["partition_columns"] == dt.metadata().partition_columns
    assert d["partition_columns"] == (["part"] if partitioned else [])
    proto = dt.protocol()
    assert d["min_reader_version"] == proto.min_reader_version
    assert d["min_writer_version"] == proto.min_writer_version
    assert set(d["reader_features"] or []) == set(proto.reader_features or [])
    assert set(d["writer_features"] or []) == set(proto.writer_features or [])
    assert d["num_files"] == len(dt.file_uris())
    assert d["num_records"] == 6
    sizes = pa.table(dt.get_add_actions(flatten=True))["size_bytes"].to_pylist()
    assert d["size_bytes"] == sum(sizes)
    assert d["table_id"] == dt.metadata().id
    assert d["configuration"] == dt.metadata().configuration
    assert d["transactions"] == {}
    assert d["checkpoint_version"] is None
    assert isinstance(d["timestamp"], int)
    assert d["schema"]["type"] == "struct"
    assert [f["name"] for f in d["schema"]["fields"]] == ["id", "part", "value"]
    assert [f["type"] for f in d["schema"]["fields"]] == ["long", "string", "double"]
    for key in ("min_reader_version", "writer_features", "domain_metadata", "created_time"):
        assert key in d


def test_describe_version_time_travel(run: Run, made_table: tuple[str, bool]) -> None:
    path, _ = made_table
    expected_rows = {0: 3, 1: 7, 2: 12, 3: 6}
    for version, rows in expected_rows.items():
        d = ok_json(run, "describe", path, "--version", str(version))
        dt = DeltaTable(path, version=version)
        assert d["version"] == version
        assert d["num_records"] == rows
        assert d["num_files"] == len(dt.file_uris())


def test_describe_timestamp_time_travel(run: Run, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    for i in range(3):
        write_deltalake(path, batch(i * 10, 2), mode="append")
    set_commit_times(path, {v: datetime(2024, 1, 1 + v, tzinfo=UTC) for v in range(3)})
    cases = {
        "2024-01-01T00:00:00Z": 0,
        "2024-01-02T12:00:00+00:00": 1,
        "2024-01-03T01:00:00": 2,  # no offset: UTC
        "2030-01-01T00:00:00Z": 2,
    }
    for stamp, version in cases.items():
        d = ok_json(run, "describe", path, "--timestamp", stamp)
        assert d["version"] == version, stamp
        assert d["num_records"] == 2 * (version + 1)
    assert_error(
        run("describe", path, "--timestamp", "2023-12-31T00:00:00Z"), "VersionNotFoundError"
    )


def test_describe_version_and_timestamp_are_exclusive(run: Run, made_table: tuple[str, bool]):
    path, _ = made_table
    code, out, _ = run("describe", path, "--version", "1", "--timestamp", "2024-01-01")
    assert code == 2
    assert out == ""


def test_describe_version_out_of_range(run: Run, made_table: tuple[str, bool]) -> None:
    path, _ = made_table
    err = assert_error(run("describe", path, "--version", "99"), "VersionNotFoundError")
    assert "99" in err


@needs_golden
def test_describe_golden_txn_and_checkpoint(run: Run) -> None:
    path = str(GOLDEN / "delta-rs__delta-0.2.0")
    dt = DeltaTable(path)
    d = ok_json(run, "describe", path)
    assert d["version"] == dt.version() == 3
    assert d["transactions"] == {"e4a20b59-dd0e-4c50-b074-e8ae4786df30": 0}
    assert d["checkpoint_version"] == 3
    assert d["num_files"] == len(dt.file_uris())
    assert d["num_records"] is None  # files without stats
    assert d["schema"]["fields"][0]["name"] == "value"


@needs_golden
@pytest.mark.parametrize(
    "table",
    [
        "delta-rs__delta-0.8.0",
        "delta-rs__delta-0.8.0-partitioned",
        "delta-rs__checkpoints_vacuumed",
        "delta-rs__simple_table",
        "delta-rs__table-with-dv-small",
        "delta-rs__table-with-domain-metadata",
    ],
)
def test_describe_golden_matches_deltalake(run: Run, table: str) -> None:
    path = str(GOLDEN / table)
    dt = DeltaTable(path)
    d = ok_json(run, "describe", path)
    assert d["version"] == dt.version()
    assert d["partition_columns"] == dt.metadata().partition_columns
    assert d["min_reader_version"] == dt.protocol().min_reader_version
    assert d["min_writer_version"] == dt.protocol().min_writer_version
    assert set(d["reader_features"] or []) == set(dt.protocol().reader_features or [])
    assert set(d["writer_features"] or []) == set(dt.protocol().writer_features or [])
    assert d["num_files"] == len(dt.file_uris())
    assert d["table_id"] == dt.metadata().id


@needs_golden
def test_describe_golden_deletion_vectors_and_domains(run: Run) -> None:
    dv = ok_json(run, "describe", str(GOLDEN / "delta-rs__table-with-dv-small"))
    assert dv["num_records"] == 8  # 10 rows in stats, 2 deleted by the deletion vector
    assert dv["reader_features"] == ["deletionVectors"]
    dm = ok_json(run, "describe", str(GOLDEN / "delta-rs__table-with-domain-metadata"))
    assert "delta.clustering" in dm["domain_metadata"]
    assert json.loads(dm["domain_metadata"]["delta.clustering"])["clusteringColumns"]


# -- files ---------------------------------------------------------------------------------


def test_files_match_deltalake(run: Run, made_table: tuple[str, bool]) -> None:
    path, partitioned = made_table
    rows = ok_lines(run, "files", path)
    adds = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    assert sorted(file_name(r["path"]) for r in rows) == sorted(
        file_name(p) for p in adds["path"].to_pylist()
    )
    for r in rows:
        assert set(r) == {"path", "partition_values", "size", "num_records", "deletion_vector"}
        assert r["deletion_vector"] is None
        assert isinstance(r["size"], int) and r["size"] > 0
        assert (Path(path) / unquote(r["path"])).stat().st_size == r["size"]
        if partitioned:
            assert set(r["partition_values"]) == {"part"}
            assert r["path"].startswith(f"part={r['partition_values']['part']}/")
        else:
            assert r["partition_values"] == {}
    assert sum(r["num_records"] for r in rows) == 6


def test_files_version_time_travel(run: Run, made_table: tuple[str, bool]) -> None:
    path, _ = made_table
    for version in range(4):
        rows = ok_lines(run, "files", path, "--version", str(version))
        uris = DeltaTable(path, version=version).file_uris()
        assert sorted(file_name(r["path"]) for r in rows) == sorted(map(file_name, uris))


@needs_golden
def test_files_golden_deletion_vector(run: Run) -> None:
    (row,) = ok_lines(run, "files", str(GOLDEN / "delta-rs__table-with-dv-small"))
    assert row["num_records"] == 10
    assert row["deletion_vector"] == {
        "storageType": "u",
        "pathOrInlineDv": "vBn[lx{q8@P<9BNH/isA",
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 2,
    }


@needs_golden
def test_files_golden_without_stats(run: Run) -> None:
    path = str(GOLDEN / "delta-rs__delta-0.2.0")
    rows = ok_lines(run, "files", path)
    assert len(rows) == len(DeltaTable(path).file_uris())
    assert all(r["num_records"] is None for r in rows)


# -- history -------------------------------------------------------------------------------


def test_history_newest_first(run: Run, made_table: tuple[str, bool]) -> None:
    path, _ = made_table
    rows = ok_lines(run, "history", path)
    theirs = DeltaTable(path).history()
    assert [r["version"] for r in rows] == [3, 2, 1, 0]
    assert [r["version"] for r in rows] == [h["version"] for h in theirs]
    assert [r["operation"] for r in rows] == [h["operation"] for h in theirs]
    assert rows[0]["operationParameters"]["mode"] == "Overwrite"
    assert all(isinstance(r["timestamp"], int) for r in rows)
    limited = ok_lines(run, "history", path, "--limit", "2")
    assert [r["version"] for r in limited] == [3, 2]
    assert ok_lines(run, "history", path, "--limit", "0") == []


@needs_golden
def test_history_golden(run: Run) -> None:
    rows = ok_lines(run, "history", str(GOLDEN / "delta-rs__delta-0.2.0"))
    assert [r["version"] for r in rows] == [3, 2, 1, 0]
    assert rows[0]["operation"] == "STREAMING UPDATE"


# -- checkpoint ----------------------------------------------------------------------------


def check_checkpoint(run: Run, path: str) -> dict[str, Any]:
    before = DeltaTable(path)
    version, n_files = before.version(), len(before.file_uris())
    out = ok_json(run, "checkpoint", path)
    assert out["version"] == version
    assert out["parts"] == 1
    assert out["num_actions"] >= n_files + 2  # protocol, metadata and every add
    assert out["num_of_add_files"] == n_files
    assert out["size_in_bytes"] > 0
    log = Path(path, "_delta_log")
    assert (log / f"{version:020d}.checkpoint.parquet").is_file()
    last = json.loads((log / "_last_checkpoint").read_text())
    assert last["version"] == version
    assert last["size"] == out["num_actions"]
    after = DeltaTable(path)
    assert after.version() == version
    assert sorted(map(file_name, after.file_uris())) == sorted(map(file_name, before.file_uris()))
    d = ok_json(run, "describe", path)
    assert d["checkpoint_version"] == version
    assert d["num_files"] == n_files
    return out


def test_checkpoint_made_table(run: Run, made_table: tuple[str, bool]) -> None:
    path, _ = made_table
    check_checkpoint(run, path)
    assert ok_json(run, "describe", path)["num_records"] == 6


@needs_golden
@pytest.mark.parametrize(
    "table", ["delta-rs__delta-0.8.0", "delta-rs__delta-0.2.0", "delta-rs__checkpoints_vacuumed"]
)
def test_checkpoint_golden_copy(run: Run, tmp_path: Path, table: str) -> None:
    path = str(tmp_path / table)
    shutil.copytree(GOLDEN / table, path)
    before = ok_json(run, "describe", path)
    check_checkpoint(run, path)
    after = ok_json(run, "describe", path)
    for key in ("version", "transactions", "schema", "num_files", "size_bytes", "num_records"):
        assert after[key] == before[key], key


# -- errors and options --------------------------------------------------------------------


@pytest.mark.parametrize("command", ["describe", "files", "history", "checkpoint"])
def test_missing_table(run: Run, tmp_path: Path, command: str) -> None:
    missing = str(tmp_path / "no-such-table")
    assert_error(run(command, missing), "TableNotFoundError")
    assert not Path(missing).exists()


@needs_golden
@pytest.mark.parametrize(
    ("table", "error"),
    [
        ("delta__versions-not-contiguous", "CorruptLogError"),
        ("delta__deltalog-invalid-protocol-version", "DeltaProtocolError"),
    ],
)
def test_golden_refused(run: Run, table: str, error: str) -> None:
    assert_error(run("describe", str(GOLDEN / table)), error)
    assert_error(run("files", str(GOLDEN / table)), error)


def test_error_message_is_one_line(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(args: Any) -> int:
        raise RuntimeError("first line\nsecond line\n\tthird")

    monkeypatch.setattr(cli, "cmd_describe", boom)
    err = assert_error(run("describe", "/nowhere"), "RuntimeError")
    assert err == "error: RuntimeError: first line second line third"


def test_other_libraries_logging_stays_off_stderr() -> None:
    """gcsfs logs a traceback as a warning before it retries an unreachable host: with no
    handler anywhere, logging's last resort printed it before the one `error:` line. In a
    process of its own (pytest's log capture would stand in for the missing handler)."""
    script = (
        "import logging, sys\n"
        "from airflow_delta import cli\n"
        "def noisy(args):\n"
        "    logging.getLogger('gcsfs').warning('retrying\\nTraceback (most recent call last)')\n"
        "    raise ConnectionError('Cannot connect to host storage.googleapis.com:443')\n"
        "cli.cmd_describe = noisy\n"
        "sys.exit(cli.main(['describe', 'gs://bucket/t']))\n"
    )
    pythonpath = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert_error((done.returncode, done.stdout, done.stderr), "ConnectionError")


def test_storage_options_reach_the_engine(
    run: Run, monkeypatch: pytest.MonkeyPatch, made_table: tuple[str, bool]
) -> None:
    from airflow_delta.engine import DeltaLog

    seen: list[dict[str, str]] = []
    original = DeltaLog.for_table.__func__  # type: ignore[attr-defined]

    def spy(cls: type[DeltaLog], uri: str, storage_options: Any = None) -> DeltaLog:
        seen.append(dict(storage_options or {}))
        return original(cls, uri, storage_options)

    monkeypatch.setattr(DeltaLog, "for_table", classmethod(spy))
    path, _ = made_table
    argv = ["--storage-option", "A=1", "--storage-option", "B=x=y", "--storage-option", "C="]
    for command in ("describe", "files", "history", "checkpoint"):
        code, _, err = run(command, path, *argv)
        assert (code, err) == (0, "")
    assert seen == [{"A": "1", "B": "x=y", "C": ""}] * 4


def test_bad_arguments_exit_2(run: Run, made_table: tuple[str, bool]) -> None:
    path, _ = made_table
    assert run("describe", path, "--storage-option", "no-equals")[0] == 2
    assert run("files", path, "--version", "-1")[0] == 2
    assert run("history", path, "--limit", "many")[0] == 2
    assert run()[0] == 2


def test_help_exits_0(run: Run) -> None:
    code, out, _ = run("--help")
    assert code == 0
    assert "describe" in out and "checkpoint" in out


@needs_golden
@pytest.mark.s3
def test_s3_with_storage_options(run: Run, s3_bucket: tuple[str, dict[str, str]]) -> None:

    bucket, options = s3_bucket
    source = GOLDEN / "delta-rs__delta-0.8.0"
    client = s3_client(options)
    for f in source.rglob("*"):
        if f.is_file():
            client.upload_file(str(f), bucket, f"t/{f.relative_to(source).as_posix()}")
    uri = f"s3://{bucket}/t"
    argv = [arg for key, value in options.items() for arg in ("--storage-option", f"{key}={value}")]
    local = ok_json(run, "describe", str(source))
    remote = ok_json(run, "describe", uri, *argv)
    remote.pop("timestamp"), local.pop("timestamp")  # the upload's, not the commit's
    assert remote == local
    assert len(ok_lines(run, "files", uri, *argv)) == local["num_files"]
    assert ok_lines(run, "history", uri, *argv)[0]["version"] == local["version"]
    out = ok_json(run, "checkpoint", uri, *argv)
    assert out["version"] == local["version"]
    name = f"t/_delta_log/{local['version']:020d}.checkpoint.parquet"
    client.head_object(Bucket=bucket, Key=name)
    assert ok_json(run, "describe", uri, *argv)["checkpoint_version"] == local["version"]
    assert DeltaTable(uri, storage_options=options).version() == local["version"]


# -- as a process --------------------------------------------------------------------------


@needs_golden
def test_subprocess(tmp_path: Path) -> None:
    pythonpath = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    cmd = [sys.executable, "-m", "airflow_delta.cli"]
    table = str(GOLDEN / "delta-rs__delta-0.8.0")
    ok = subprocess.run([*cmd, "describe", table], env=env, capture_output=True, text=True)
    assert (ok.returncode, ok.stderr) == (0, "")
    assert json.loads(ok.stdout)["version"] == DeltaTable(table).version()

    missing = str(tmp_path / "missing")
    bad = subprocess.run([*cmd, "files", missing], env=env, capture_output=True, text=True)
    assert_error((bad.returncode, bad.stdout, bad.stderr), "TableNotFoundError")


# -- provider ------------------------------------------------------------------------------


def test_provider_info() -> None:
    info = provider.get_provider_info()
    assert info["package-name"] == "airflow-delta"
    assert info["name"] == "Delta Lake (airflow-delta)"
    assert info["description"]
    assert info["versions"] == [airflow_delta.__version__]
    assert info["integrations"] == [
        {
            "integration-name": "Delta Lake",
            "external-doc-url": "https://delta.io",
            "tags": ["software"],
        }
    ]
    json.dumps(info)
    tree = ast.parse(Path(provider.__file__).read_text())
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ] + [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [m for m in imported if m.split(".")[0] == "airflow"]
