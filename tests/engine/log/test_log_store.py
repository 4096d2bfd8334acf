"""LogStore: atomic put-if-absent and listings on local, memory, S3 and other filesystems."""

from __future__ import annotations

import multiprocessing
import os
import random
import resource
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

import airflow_delta
from airflow_delta.engine.errors import UnsupportedStorageError
from airflow_delta.engine.log.log_store import (
    FileStatus,
    FsspecLogStore,
    LocalLogStore,
    LogStore,
    MemoryLogStore,
    S3LogStore,
    SingleWriterLogStore,
    get_log_store,
)

COMMIT_0 = "00000000000000000000.json"
COMMIT_1 = "00000000000000000001.json"
MIB = 2**20


def _payload(mib: int) -> bytes:
    """`mib` MiB of pseudo-random bytes, the same in every process, each MiB different."""
    block = random.Random(mib).randbytes(MIB)
    return b"".join(block[i * 4099 :] + block[: i * 4099] for i in range(mib))


def _now_ms() -> int:
    return time.time_ns() // 10**6


# --- local ---------------------------------------------------------------------------------


def test_local_uri_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cases = {
        "tbl": f"{tmp_path}/tbl",
        "./tbl/": f"{tmp_path}/tbl",
        f"{tmp_path}/tbl/": f"{tmp_path}/tbl",
        f"file://{tmp_path}/tbl": f"{tmp_path}/tbl",
        f"file:{tmp_path}/tbl/": f"{tmp_path}/tbl",
        f"file://localhost{tmp_path}/tbl": f"{tmp_path}/tbl",
        f"file://{tmp_path}/my%20tbl": f"{tmp_path}/my tbl",
    }
    for uri, root in cases.items():
        store, got = get_log_store(uri)
        assert isinstance(store, LocalLogStore), uri
        assert got == root, uri
    assert store.join(root, "_delta_log", COMMIT_0) == f"{tmp_path}/my tbl/_delta_log/{COMMIT_0}"
    with pytest.raises(ValueError, match="remote host"):
        get_log_store("file://otherhost/tbl")


@pytest.mark.parametrize("suffix", ["?x", "#x", "?", "#", "?a#b"])
def test_a_file_uri_with_a_query_or_fragment_is_refused(tmp_path: Path, suffix: str) -> None:
    """`file:///data/t#1` was the table `/data/t` (the query or fragment silently dropped): a
    write went to another table. Refused with the escape to use; plain paths stay literal."""
    from airflow_delta.engine.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=r"Table file://.*%3F.*%23"):
        get_log_store(f"file://{tmp_path}/t{suffix}")
    assert get_log_store(f"{tmp_path}/t{suffix}")[1] == f"{tmp_path}/t{suffix}"
    escaped = suffix.replace("?", "%3F").replace("#", "%23")
    assert get_log_store(f"file://{tmp_path}/t{escaped}")[1] == f"{tmp_path}/t{suffix}"


def test_local_put_if_absent_keeps_first_and_leaves_no_temp(tmp_path: Path) -> None:
    store, root = get_log_store(str(tmp_path / "tbl"))
    log_dir = store.join(root, "_delta_log")
    path = store.join(log_dir, COMMIT_0)
    store.write(path, b"first")  # creates the missing directories
    with pytest.raises(FileExistsError):
        store.write(path, b"second")
    assert store.read(path) == b"first"
    assert os.listdir(log_dir) == [COMMIT_0]

    store.write(path, b"replaced", overwrite=True)
    store.write(store.join(log_dir, "_last_checkpoint"), b"{}", overwrite=True)
    assert store.read(path) == b"replaced"
    assert sorted(os.listdir(log_dir)) == [COMMIT_0, "_last_checkpoint"]

    assert store.exists(path)
    store.delete(path)
    store.delete(path)
    assert not store.exists(path)
    with pytest.raises(FileNotFoundError):
        store.read(path)


def test_local_list_from(tmp_path: Path) -> None:
    store = LocalLogStore()
    log_dir = str(tmp_path / "_delta_log")
    names = [
        "00000000000000000000.json",
        "00000000000000000001.checkpoint.parquet",
        "00000000000000000001.json",
        "00000000000000000002.json",
        "00000000000000000010.json",
    ]
    for name in reversed(names):
        store.write(store.join(log_dir, name), name.encode())
    store.write(store.join(log_dir, "_sidecars", "a.parquet"), b"sidecar")

    listed = store.list_from(log_dir)
    assert [f.name for f in listed] == names
    assert listed[0] == FileStatus(
        path=os.path.join(log_dir, names[0]),
        name=names[0],
        size=len(names[0]),
        modification_time=listed[0].modification_time,
    )
    assert [f.name for f in store.list_from(log_dir, "00000000000000000001")] == names[1:]
    assert [f.name for f in store.list_from(log_dir, "00000000000000000001.json")] == names[2:]
    assert store.list_from(log_dir, "00000000000000000011") == []
    assert store.list_from(str(tmp_path / "missing")) == []


def test_local_modification_time_in_ms(tmp_path: Path) -> None:
    store = LocalLogStore()
    path = str(tmp_path / COMMIT_0)
    store.write(path, b"x")
    [status] = store.list_from(str(tmp_path))
    assert abs(status.modification_time - _now_ms()) < 60_000
    os.utime(path, ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    [status] = store.list_from(str(tmp_path))
    assert status.modification_time == 1_700_000_000_123


_WRITER = """
import resource, signal, sys
from airflow_delta.engine.log.log_store import LocalLogStore
from test_log_store import _payload

path, mib, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = _payload(mib)
if limit >= 0:  # the kernel kills us with SIGXFSZ when a write crosses `limit` bytes
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
print("writing", flush=True)
LocalLogStore().write(path, data)
"""


def _start_writer(path: Path, mib: int, limit: int = -1) -> subprocess.Popen[str]:
    """A real child process that writes `_payload(mib)` to `path` through LocalLogStore."""
    pythonpath = [str(Path(airflow_delta.__file__).parents[1]), str(Path(__file__).parent)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    cmd = [sys.executable, "-c", _WRITER, str(path), str(mib), str(limit)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "writing\n"
    return proc


@pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_FSIZE)[1] != resource.RLIM_INFINITY,
    reason="needs an unlimited hard RLIMIT_FSIZE",
)
def test_local_writer_killed_mid_write_leaves_no_partial_commit(tmp_path: Path) -> None:
    mib = 24
    payload = _payload(mib)

    # The kernel kills the writer at an exact byte of its data: the commit must not exist,
    # and the temporary file proves the kill came in the middle of the data.
    for limit in (0, 1, len(payload) // 2, len(payload) - 1):
        log_dir = tmp_path / f"limit-{limit}"
        proc = _start_writer(log_dir / COMMIT_0, mib, limit)
        assert proc.wait(timeout=30) == -signal.SIGXFSZ
        assert not (log_dir / COMMIT_0).exists()
        [temp] = log_dir.iterdir()
        assert temp.name.startswith(f".{COMMIT_0}.") and temp.name.endswith(".tmp")
        assert temp.stat().st_size == limit

    # SIGKILL at moments spread over the write, fsync and link: all or nothing.
    for delay in (0.0, 0.005, 0.02, 0.05, 0.1, 0.25):
        target = tmp_path / f"kill-{delay}" / COMMIT_0
        proc = _start_writer(target, mib)
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert not target.exists() or target.read_bytes() == payload, delay

    target = tmp_path / "complete" / COMMIT_0
    assert _start_writer(target, mib).wait(timeout=30) == 0
    assert target.read_bytes() == payload
    assert os.listdir(target.parent) == [COMMIT_0]


def _race_payload(worker: int, round_: int) -> bytes:
    return f"{worker}:{round_}|".encode() * (worker + 1)


def _race_worker(log_dir: str, rounds: int, worker: int, barrier: Any, results: Any) -> None:
    """Spawned process: put-if-absent commit `round_` of every round at the barrier."""
    store = LocalLogStore()
    for round_ in range(rounds):
        data = _race_payload(worker, round_)
        barrier.wait()
        try:
            store.write(os.path.join(log_dir, f"{round_:020d}.json"), data)
            results.put((round_, worker, True))
        except FileExistsError:
            results.put((round_, worker, False))


def test_local_processes_racing_for_a_version_have_one_winner(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    workers, rounds = 4, 100
    barrier, results = ctx.Barrier(workers), ctx.Queue()
    procs = [
        ctx.Process(target=_race_worker, args=(str(tmp_path), rounds, w, barrier, results))
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60) for _ in range(workers * rounds)]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0

    for round_ in range(rounds):
        winners = [w for r, w, won in outcomes if r == round_ and won]
        losers = [w for r, w, won in outcomes if r == round_ and not won]
        assert len(winners) == 1 and len(losers) == workers - 1, round_
        content = (tmp_path / f"{round_:020d}.json").read_bytes()
        assert content == _race_payload(winners[0], round_)
    assert sorted(os.listdir(tmp_path)) == [f"{r:020d}.json" for r in range(rounds)]


# --- memory --------------------------------------------------------------------------------


def test_memory_put_if_absent_with_racing_threads() -> None:
    store, root = get_log_store(f"memory://tables/{uuid.uuid4().hex}/")
    assert isinstance(store, MemoryLogStore)
    assert root.startswith("/tables/") and not root.endswith("/")
    log_dir = store.join(root, "_delta_log")
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible to expose races
    try:
        threads_n, rounds = 8, 40
        barrier = threading.Barrier(threads_n)
        winners: list[tuple[int, int]] = []

        def race(i: int) -> None:
            for r in range(rounds):
                barrier.wait()
                try:
                    store.write(store.join(log_dir, f"{r:020d}.json"), f"{i}".encode())
                    winners.append((r, i))
                except FileExistsError:
                    pass

        threads = [threading.Thread(target=race, args=(i,)) for i in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert sorted(r for r, _ in winners) == list(range(rounds))
    for r, i in winners:
        assert store.read(store.join(log_dir, f"{r:020d}.json")) == f"{i}".encode()

    path = store.join(log_dir, COMMIT_0)
    with pytest.raises(FileExistsError):
        store.write(path, b"late")
    store.write(path, b"replaced", overwrite=True)
    assert store.read(path) == b"replaced"
    status = store.list_from(log_dir)[0]
    assert (status.path, status.name, status.size) == (path, COMMIT_0, len(b"replaced"))
    assert abs(status.modification_time - _now_ms()) < 60_000
    assert len(store.list_from(log_dir, "00000000000000000039")) == 1
    store.delete(path)
    store.delete(path)
    assert not store.exists(path)


# --- a filesystem without put-if-absent ----------------------------------------------------


class PlainFileSystem(MemoryFileSystem):
    """A real in-memory filesystem under its own scheme, standing in for hdfs://, gs://, ...

    It accepts no storage options, so an option leaking through to fsspec fails loudly.
    """

    protocol = "plainfs"
    store: dict[str, Any] = {}
    pseudo_dirs = [""]

    def __init__(self, **storage_options: Any) -> None:
        if storage_options:
            raise TypeError(f"unexpected storage options {storage_options}")
        super().__init__()

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        return super()._strip_protocol(path.removeprefix("plainfs://"))


fsspec.register_implementation("plainfs", PlainFileSystem, clobber=True)


class ListingCacheFileSystem(PlainFileSystem):
    """PlainFileSystem answering `exists` from its cached listing of the parent directory, as
    s3fs and adlfs do (a stand-in: no such filesystem without put-if-absent runs here)."""

    protocol = "listingcachefs"

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        return super()._strip_protocol(path.removeprefix("listingcachefs://"))

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        found = super().ls(path, detail=True, **kwargs)
        self.dircache[self._strip_protocol(path).rstrip("/")] = found
        return found if detail else [f["name"] for f in found]

    def exists(self, path: str, **kwargs: Any) -> bool:
        path = self._strip_protocol(path)
        listed = self.dircache.get(path.rsplit("/", 1)[0])
        if listed is not None:
            return any(f["name"] == path for f in listed)
        return bool(super().exists(path))

    def invalidate_cache(self, path: str | None = None) -> None:
        if path is None:
            self.dircache.clear()
        else:
            self.dircache.pop(self._strip_protocol(path).rstrip("/"), None)


fsspec.register_implementation("listingcachefs", ListingCacheFileSystem, clobber=True)


def test_a_single_writer_commit_never_replaces_one_its_cached_listing_misses() -> None:
    """A commit that another writer (breaking the single-writer promise) created after this
    store listed the log is not overwritten: the existence check asks the storage."""
    store, root = get_log_store(
        f"listingcachefs://bucket/{uuid.uuid4().hex}", {"single_writer": "true"}
    )
    assert isinstance(store, SingleWriterLogStore)
    log_dir = store.join(root, "_delta_log")
    store.write(store.join(log_dir, COMMIT_0), b"first")
    assert [f.name for f in store.list_from(log_dir)] == [COMMIT_0]  # cached by the listing
    other = fsspec.filesystem("listingcachefs", skip_instance_cache=True)
    other.pipe_file(store.join(log_dir, COMMIT_1), b"theirs")
    with pytest.raises(FileExistsError):
        store.write(store.join(log_dir, COMMIT_1), b"ours")
    assert store.read(store.join(log_dir, COMMIT_1)) == b"theirs"


# --- data files ----------------------------------------------------------------------------


def test_list_range_is_list_from_cut_at_the_end_name(tmp_path: Path) -> None:
    memory, memory_root = get_log_store(f"memory://tables/{uuid.uuid4().hex}")
    for store, directory in ((LocalLogStore(), str(tmp_path)), (memory, memory_root)):
        for name in (COMMIT_0, COMMIT_1, "00000000000000000002.json", "_last_checkpoint"):
            store.write(store.join(directory, name), b"{}")
        for start, end in (("", None), (COMMIT_1, None), ("", COMMIT_1), (COMMIT_0, "1")):
            everything = store.list_from(directory, start)
            expected = [f for f in everything if end is None or f.name < end]
            got = store.list_range(directory, start, end)
            assert [(f.name, f.size) for f in got] == [(f.name, f.size) for f in expected]
        assert store.list_range(store.join(directory, "missing"), "", None) == []


@pytest.mark.parametrize("size", [100, 3 * MIB])
def test_open_input_reads_a_small_file_whole(tmp_path: Path, size: int) -> None:
    local = LocalLogStore()
    path = str(tmp_path / "f.bin")
    Path(path).write_bytes(b"x" * size)
    with local.open_input(path) as source:
        assert source == path  # no size given: the path, to memory-map
    with local.open_input(path, 10) as source:  # the actual size decides on local disk
        assert (source == path) if size > MIB else (source.to_pybytes() == b"x" * size)
    memory, root = get_log_store(f"memory://tables/{uuid.uuid4().hex}")
    remote = f"{root}/f.bin"
    memory.fs.pipe_file(remote, b"y" * size)
    with memory.open_input(remote, size) as source:
        data = source.read() if hasattr(source, "read") else source.to_pybytes()
        assert data == b"y" * size
    with pytest.raises(FileNotFoundError):
        local.open_input(str(tmp_path / "missing.bin"), 10)
    with pytest.raises(FileNotFoundError):
        memory.open_input(f"{root}/missing.bin", 10)


def test_other_scheme_refuses_put_if_absent_and_names_the_fix() -> None:
    for i, options in enumerate([None, {"single_writer": "false"}]):
        store, root = get_log_store(f"plainfs://bucket/refused-{i}/", options)
        assert type(store) is FsspecLogStore
        assert root == f"/bucket/refused-{i}"
        log_dir = store.join(root, "_delta_log")
        store.fs.pipe_file(store.join(log_dir, COMMIT_0), b"written by another engine")

        assert [f.name for f in store.list_from(log_dir)] == [COMMIT_0]
        assert store.read(store.join(log_dir, COMMIT_0)) == b"written by another engine"
        path = store.join(log_dir, "00000000000000000001.json")
        with pytest.raises(UnsupportedStorageError) as err:
            store.write(path, b"commit")
        assert "plainfs://" in str(err.value)
        assert '"single_writer": "true"' in str(err.value)
        assert not store.exists(path)
        store.write(store.join(log_dir, "_last_checkpoint"), b"{}", overwrite=True)
        assert store.read(store.join(log_dir, "_last_checkpoint")) == b"{}"


def test_other_scheme_single_writer_opt_in() -> None:
    for flag in ("true", True):
        store, root = get_log_store(f"plainfs://bucket/{uuid.uuid4().hex}", {"single_writer": flag})
        assert isinstance(store, SingleWriterLogStore)
        path = store.join(root, "_delta_log", COMMIT_0)
        store.write(path, b"first")
        with pytest.raises(FileExistsError):
            store.write(path, b"second")
        assert store.read(path) == b"first"


# --- S3 (moto_server) ----------------------------------------------------------------------


def _s3_store(s3_bucket: tuple[str, dict[str, str]]) -> tuple[LogStore, str]:
    bucket, options = s3_bucket
    return get_log_store(f"s3://{bucket}/tbl/", options)


@pytest.mark.s3
def test_s3_put_if_absent_is_a_conditional_put(s3_bucket: tuple[str, dict[str, str]]) -> None:
    store, root = _s3_store(s3_bucket)
    assert isinstance(store, S3LogStore)
    assert root == f"{s3_bucket[0]}/tbl"
    path = store.join(root, "_delta_log", COMMIT_0)
    assert not store.exists(path)
    store.write(path, b"first")
    with pytest.raises(FileExistsError):
        store.write(path, b"second")
    assert store.read(path) == b"first"
    # A retried PUT that finds its own bytes already there has succeeded.
    store.write(path, b"first")

    store.write(path, b"replaced", overwrite=True)
    assert store.read(path) == b"replaced"
    store.delete(path)
    store.delete(path)
    assert not store.exists(path)
    with pytest.raises(FileNotFoundError):
        store.read(path)


@pytest.mark.s3
def test_s3_threads_racing_for_a_version_have_one_winner(
    s3_bucket: tuple[str, dict[str, str]],
) -> None:
    store, root = _s3_store(s3_bucket)
    path = store.join(root, "_delta_log", COMMIT_0)
    barrier = threading.Barrier(8)
    winners: list[int] = []

    def race(i: int) -> None:
        barrier.wait()
        try:
            store.write(path, f"writer {i}".encode())
            winners.append(i)
        except FileExistsError:
            pass

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    assert store.read(path) == f"writer {winners[0]}".encode()


@pytest.mark.s3
def test_s3_list_from_pages_and_starts_at_name(s3_bucket: tuple[str, dict[str, str]]) -> None:
    bucket = s3_bucket[0]
    store, root = _s3_store(s3_bucket)
    log_dir = store.join(root, "_delta_log")
    names = [
        "00000000000000000000.json",
        "00000000000000000001.checkpoint.parquet",
        "00000000000000000001.json",
        "00000000000000000002.json",
        "00000000000000000003.json",
        "00000000000000000010.json",
        "00000000000000000011.json",
    ]
    for name in names:
        store.write(store.join(log_dir, name), name.encode())
    store.write(store.join(log_dir, "_sidecars", "a.parquet"), b"not directly in the log")
    store.write(store.join(root, "_delta_log.json"), b"next to the log, not in it")

    paged = S3LogStore(store.fs, page_size=2)
    listed = paged.list_from(log_dir)
    assert [f.name for f in listed] == names
    assert listed[0].path == f"{bucket}/tbl/_delta_log/{names[0]}"
    assert listed[0].size == len(names[0])
    assert abs(listed[0].modification_time - _now_ms()) < 60_000
    assert [f.name for f in paged.list_from(log_dir, "00000000000000000001")] == names[1:]
    assert [f.name for f in paged.list_from(log_dir, "00000000000000000001.json")] == names[2:]
    assert [f.name for f in paged.list_from(log_dir, "00000000000000000003.json")] == names[4:]
    assert paged.list_from(log_dir, "00000000000000000012") == []
    assert store.list_from(store.join(root, "missing")) == []
    assert store.list_from(f"no-such-bucket-{uuid.uuid4().hex[:8]}/tbl/_delta_log") == []


@pytest.mark.s3
def test_s3_listing_is_never_stale(s3_bucket: tuple[str, dict[str, str]]) -> None:
    import boto3

    bucket, options = s3_bucket
    store, root = _s3_store(s3_bucket)
    log_dir = store.join(root, "_delta_log")
    store.write(store.join(log_dir, COMMIT_0), b"0")
    assert [f.name for f in store.list_from(log_dir)] == [COMMIT_0]
    store.fs.ls(log_dir)  # would fill s3fs's listing cache if it were on

    other_writer = boto3.client(
        "s3",
        endpoint_url=options["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    other_writer.put_object(Bucket=bucket, Key=f"tbl/_delta_log/{COMMIT_1}", Body=b"1")
    assert [f.name for f in store.list_from(log_dir)] == [COMMIT_0, COMMIT_1]
    assert store.exists(store.join(log_dir, COMMIT_1))
    assert store.fs.ls(log_dir)[-1].endswith(COMMIT_1)


@pytest.mark.s3
def test_s3_storage_option_styles(s3_bucket: tuple[str, dict[str, str]]) -> None:
    bucket, options = s3_bucket
    endpoint = options["AWS_ENDPOINT_URL"]
    styles: list[dict[str, Any]] = [
        {
            "key": "testing",
            "secret": "testing",
            "endpoint_url": endpoint,
            "client_kwargs": {"region_name": "us-east-1"},
        },
        {
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "aws_default_region": "us-east-1",
            "aws_endpoint": endpoint,
        },
        {
            **options,
            "AWS_S3_LOCKING_PROVIDER": "dynamodb",
            "AWS_CONDITIONAL_PUT": "etag",
            "DELTA_DYNAMO_TABLE_NAME": "delta_log",
        },
    ]
    for i, style in enumerate(styles):
        store, root = get_log_store(f"s3a://{bucket}/style-{i}", style)
        assert isinstance(store, S3LogStore)
        assert root == f"{bucket}/style-{i}"
        path = store.join(root, "_delta_log", COMMIT_0)
        store.write(path, b"ok")
        assert store.read(path) == b"ok"


def test_listing_times_with_milliseconds_convert_exactly() -> None:
    """An object store's listing time (GCS's `updated`, with milliseconds) converts to its
    exact millisecond; the float `timestamp() * 1000` made this one 1 ms early."""
    import datetime as dt

    from airflow_delta.engine.log.log_store import info_mtime_ms

    fs = fsspec.filesystem("memory")
    assert info_mtime_ms(fs, {"updated": "2039-02-13T04:54:50.174Z"}) == 2_181_185_690_174
    moment = dt.datetime(2039, 2, 13, 4, 54, 50, 174000, tzinfo=dt.UTC)
    assert info_mtime_ms(fs, {"LastModified": moment}) == 2_181_185_690_174


@pytest.mark.parametrize("kind", ["commit", "overwrite", "parquet"])
def test_local_writes_are_durable_when_they_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A power loss (not a killed process: the kernel keeps its caches then) must not lose a
    write that returned: the file's bytes are synced before its name is linked, and the
    directory holding the new name is synced after, as POSIX needs for a new entry to last."""
    import pyarrow as pa

    store = LocalLogStore()
    log_dir = tmp_path / "_delta_log"
    log_dir.mkdir()
    target = log_dir / (
        "00000000000000000001.checkpoint.parquet" if kind == "parquet" else COMMIT_0
    )
    synced: list[tuple[str, bool]] = []  # (what was synced, whether the name existed then)
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        what = "directory" if st.st_ino == log_dir.stat().st_ino else "file"
        synced.append((what, target.exists()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    if kind == "parquet":
        table = pa.table({"a": [1, 2]})
        store.write_parquet(str(target), [table], table.schema)
    else:
        store.write(str(target), b'{"commitInfo":{}}\n', overwrite=kind == "overwrite")
    assert synced == [("file", False), ("directory", True)]
