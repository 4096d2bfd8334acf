"""VACUUM and log cleanup on local disk and on S3 (moto): only unreferenced keys the table's own
listing found are ever deleted, whatever characters the keys hold.

The storage is checked through an independent client (pathlib, boto3), not through the engine.
S3 objects cannot be back-dated, so "old" is expressed by running vacuum at a later `now_ms`.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import AddFile, DeltaLog, Operation
from airflow_delta.engine.commands.maintenance import vacuum
from tests.conftest import s3_client
from tests.engine.commands.test_maintenance_vacuum import SCHEMA as PARTITIONED_SCHEMA

DAY_MS = 86_400_000
LATER = int(time.time() * 1000) + 30 * DAY_MS  # every file is older than any retention then


class Storage:
    """A place for tables, with an independent view of its keys."""

    def __init__(self, kind: str, base: str, options: dict[str, str], client=None) -> None:
        self.kind, self.base, self.options, self.client = kind, base, options, client

    def uri(self, name: str) -> str:
        return f"{self.base}/{name}"

    def put(self, key: str, data: bytes = b"PAR1 data") -> None:
        if self.kind == "local":
            path = Path(self.base) / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        else:
            bucket, prefix = self._bucket_prefix()
            self.client.put_object(Bucket=bucket, Key=prefix + key, Body=data)

    def _bucket_prefix(self) -> tuple[str, str]:
        bucket, _, prefix = self.base.removeprefix("s3://").partition("/")
        return bucket, prefix + "/" if prefix else ""

    def listed(self) -> set[str]:
        if self.kind == "local":
            root = Path(self.base)
            return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
        bucket, prefix = self._bucket_prefix()
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return {obj["Key"][len(prefix) :] for page in pages for obj in page.get("Contents", [])}


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def storage(request, tmp_path) -> Storage:
    if request.param == "local":
        return Storage("local", str(tmp_path), {})

    bucket, options = request.getfixturevalue("s3_bucket")
    client = s3_client(options)
    return Storage("s3", f"s3://{bucket}", options, client)


def _fresh(storage: Storage) -> Storage:
    """A new sub-location of `storage`, for one hypothesis example."""
    sub = uuid.uuid4().hex[:8]
    if storage.kind == "local":
        Path(storage.base, sub).mkdir()
    return Storage(storage.kind, f"{storage.base}/{sub}", storage.options, storage.client)


def _table(storage: Storage, name: str, active: list[str]) -> DeltaLog:
    """A table at `name` whose one commit adds `active` (log paths), partitioned by `_k`."""
    log = DeltaLog.create_table(
        storage.uri(name), PARTITIONED_SCHEMA, ["_k"], None, storage.options
    )
    adds = [AddFile(p, {"_k": "a"}, 9, 0) for p in active]
    log.start_transaction().commit(adds, Operation("WRITE"))
    return log


def _run_vacuum(log: DeltaLog):
    return vacuum(log.location, now_ms=LATER)


# A key segment made of characters fsspec would treat as a pattern, URI syntax and the like.
_SEGMENT = st.text(
    alphabet=st.sampled_from(list("ab*?[]{}!% #=:~é-")), min_size=1, max_size=6
).filter(lambda s: s not in (".", ".."))
_KEY = st.lists(_SEGMENT, min_size=1, max_size=3).map(lambda parts: "p" + "/".join(parts))


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    keys=st.lists(_KEY, min_size=2, max_size=6, unique=True).filter(
        # a local file cannot also be a directory: no key under another
        lambda ks: not any(a.startswith(b + "/") for a in ks for b in ks)
    ),
    data=st.data(),
)
def test_vacuum_deletes_exactly_the_unreferenced_keys_it_listed(storage, keys, data) -> None:
    """Whatever the keys hold (`*`, `?`, `[...]`, `%`, spaces), vacuum deletes the orphans and
    nothing else: not the active files, not the log, not a neighbouring table whose name a
    glob of the root would match."""
    where = _fresh(storage)
    active = data.draw(st.lists(st.sampled_from(keys), unique=True, max_size=len(keys) - 1))
    orphans = [k for k in keys if k not in active]
    root = "t[1]"  # a glob of it matches the neighbour `t1`
    for key in keys:
        where.put(f"{root}/{key}")
    log = _table(where, root, [quote(k) for k in active])
    neighbour = _table(where, "t1", [quote(k) for k in keys])
    for key in keys:
        where.put(f"t1/{key}")
    before = where.listed()

    result = _run_vacuum(log)

    assert sorted(result.files_deleted) == sorted(orphans)
    assert where.listed() == before - {f"{root}/{k}" for k in orphans}
    assert len(_run_vacuum(neighbour).files_deleted) == 0


@pytest.mark.parametrize("glob_key", ["**", "*", "p?.parquet", "p[1].parquet", "[!x]*"])
def test_a_stray_glob_key_deletes_only_itself(storage, glob_key) -> None:
    """The reproduction of the issue: a stray key named like a pattern, beside active files
    whose names it would match."""
    active = ["p1.parquet", "pa.parquet", "x.parquet"]
    for key in [*active, glob_key]:
        storage.put(f"t/{key}")
    log = _table(storage, "t", active)

    assert _run_vacuum(log).files_deleted == [glob_key]

    assert {k for k in storage.listed() if not k.startswith("t/_delta_log/")} == {
        f"t/{k}" for k in active
    }
    assert any(k.startswith("t/_delta_log/") for k in storage.listed())


@pytest.mark.parametrize("suffix", ["?versionId=1", "?versionId=", "?versionId=a?versionId=b"])
def test_a_stray_key_naming_a_version_deletes_only_itself(storage, suffix) -> None:
    """s3fs cuts `?versionId=...` off any key it splits: vacuum's delete of a stray key
    `<active file>?versionId=1` deleted the active file itself (the table lost it) and left
    the stray. Keys are deleted literally; only the stray goes."""
    active = ["p1.parquet", "x.parquet"]
    for key in [*active, f"p1.parquet{suffix}"]:
        storage.put(f"t/{key}")
    log = _table(storage, "t", active)

    assert _run_vacuum(log).files_deleted == [f"p1.parquet{suffix}"]

    assert {k for k in storage.listed() if not k.startswith("t/_delta_log/")} == {
        f"t/{k}" for k in active
    }


def test_an_s3_table_path_s3fs_would_misaddress_is_refused(s3_bucket) -> None:
    """`s3://b/t?versionId=1/x`: s3fs would read and write every file of the table at the key
    `t` (the rest taken for an object version); refused, naming the table."""
    from airflow_delta.engine.errors import UnsupportedStorageError

    bucket, options = s3_bucket
    uri = f"s3://{bucket}/t?versionId=1/x"
    with pytest.raises(UnsupportedStorageError, match=r"Table s3://.*'\?versionId='"):
        DeltaLog.create_table(uri, PARTITIONED_SCHEMA, ["_k"], None, options)
    assert not Storage("s3", f"s3://{bucket}", options, s3_client(options)).listed()


def _odd_spellings(storage: Storage, table_path: str) -> dict[str, str]:
    """Log spellings of an active file -> the key each one names, for this storage."""
    if storage.kind == "local":
        return {
            "a//double.parquet": "a/double.parquet",
            f"file://localhost{table_path}/b/localhost.parquet": "b/localhost.parquet",
            f"file://{table_path}/c/triple.parquet": "c/triple.parquet",
            f"file:{table_path}/d/one.parquet": "d/one.parquet",
            "e/./dot.parquet": "e/dot.parquet",
            "f/x/../up.parquet": "f/up.parquet",
            f"{table_path}/g/absolute.parquet": "g/absolute.parquet",
        }
    bucket_path = table_path  # bucket/key
    return {
        "a//double.parquet": "a//double.parquet",
        f"s3://{bucket_path}/b/uri.parquet": "b/uri.parquet",
        f"s3a://{bucket_path}/c/s3a.parquet": "c/s3a.parquet",
        "e/./dot.parquet": "e/dot.parquet",
        f"/{bucket_path.partition('/')[2]}/g/absolute.parquet": "g/absolute.parquet",
    }


def test_vacuum_keeps_active_files_however_the_log_spells_them(storage) -> None:
    """`//`, `file://localhost/`, `file:///`, `s3a://`, dot segments and absolute-path
    references all name an active file that vacuum must keep."""
    uri = storage.uri("t")
    table_path = DeltaLog.for_table(uri, storage.options).table_path
    spellings = _odd_spellings(storage, table_path)
    for key in spellings.values():
        storage.put(f"t/{key}")
    storage.put("t/orphan.parquet")
    log = _table(storage, "t", list(spellings))

    assert _run_vacuum(log).files_deleted == ["orphan.parquet"]
    assert {f"t/{k}" for k in spellings.values()} <= storage.listed()


@pytest.mark.s3
def test_a_stale_writer_on_s3_fails_instead_of_vanishing(s3_bucket) -> None:
    """The stale-writer reproduction on S3: cleanup (run as if 40 days later) removes the
    commits below the checkpoint; the stale writer's conditional PUT of version 2 succeeds,
    and the commit is withdrawn with StaleCommitError instead of returning 2."""
    from airflow_delta.engine.commands.maintenance import cleanup_expired_logs
    from airflow_delta.engine.errors import StaleCommitError

    bucket, options = s3_bucket
    uri = f"s3://{bucket}/stale"
    log = DeltaLog.create_table(
        uri, PARTITIONED_SCHEMA, ["_k"], {"delta.checkpointInterval": "1000"}, options
    )
    log.start_transaction().commit([AddFile("_k=a/f1", {"_k": "a"}, 9, 0)], Operation("WRITE"))
    stale = DeltaLog.for_table(uri, options).start_transaction()
    for i in range(2, 6):
        log.start_transaction().commit(
            [AddFile(f"_k=a/f{i}", {"_k": "a"}, 9, 0)], Operation("WRITE")
        )
    log.checkpoint()
    assert "00000000000000000002.json" in cleanup_expired_logs(
        log.location, now_ms=LATER + 2 * DAY_MS
    )

    with pytest.raises(StaleCommitError):
        stale.commit([AddFile("_k=a/lost", {"_k": "a"}, 9, 0)], Operation("WRITE"))

    assert not DeltaLog.for_table(uri, options).store.exists(
        f"{bucket}/stale/_delta_log/00000000000000000002.json"
    )
    assert DeltaLog.for_table(uri, options).update().version == 5
