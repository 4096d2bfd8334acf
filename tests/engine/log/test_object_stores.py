"""Commits on GCS and Azure: the engine against emulators on 127.0.0.1.

- Azure Blob: Azurite (npm registry, installed by `make install` under `.venv/azurite`)
  honours `If-None-Match: *`, so the put-if-absent is tested for real, with several writer
  processes racing for versions.
- GCS: `gcp-storage-emulator` (PyPI) serves reads, writes and listings but ignores the
  `ifGenerationMatch=0` precondition (a second create of an object succeeds). So the GCS tests
  check that every commit is sent with the precondition (from the emulator's request log) and
  that a table lives there end to end; what a real bucket answers to a lost race (412, which
  gcsfs raises as FileExistsError) is the same code path as Azure's and S3's.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaLog, read_table
from airflow_delta.engine.log.log_store import AzureLogStore, GCSLogStore
from airflow_delta.engine.log.table_location import TableLocation

# gcsfs asks a gRPC control plane for the bucket's layout first (60 s against an emulator)
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

REPO = Path(__file__).resolve().parents[3]
AZURITE = REPO / ".venv" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's well-known development account (public, documented by Microsoft)
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.string())])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the emulator exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {deadline_s} s")


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Path]]:
    """(storage options, request log) of a fresh gcp-storage-emulator with bucket `lake`."""
    binary = shutil.which("gcp-storage-emulator", path=str(Path(sys.executable).parent))
    if binary is None:
        pytest.skip("gcp-storage-emulator is not installed (pip install gcp-storage-emulator)")
    port = _free_port()
    requests = tmp_path_factory.mktemp("gcs") / "requests.log"
    with requests.open("wb") as out:
        proc = subprocess.Popen(
            [binary, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for_port(port, proc)
        options = {"endpoint_url": f"http://127.0.0.1:{port}", "token": "anon", "project": "t"}
        import gcsfs

        gcsfs.GCSFileSystem(**options).mkdir("lake")
        yield options, requests
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def azure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Storage options of a fresh Azurite with container `lake`."""
    if not AZURITE.exists() or shutil.which("node") is None:
        pytest.skip(f"Azurite is not installed at {AZURITE} (make install installs it with npm)")
    port = _free_port()
    workdir = tmp_path_factory.mktemp("azurite")
    args = ["--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(workdir)]
    proc = subprocess.Popen(
        [str(AZURITE), *args, "--skipApiVersionCheck", "--loose", "--silent"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, proc)
        endpoint = f"http://127.0.0.1:{port}/{ACCOUNT}"
        options = {
            "connection_string": f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};"
            f"AccountKey={KEY};BlobEndpoint={endpoint};"
        }
        import adlfs

        adlfs.AzureBlobFileSystem(**options).mkdir("lake")
        yield options
    finally:
        proc.kill()
        proc.wait(timeout=30)


def _append(uri: str, options: dict[str, str], ids: list[int], writer: str) -> int:
    """One commit appending a data file of `ids` (written with the engine's data writer)."""
    from airflow_delta.engine.commands.merge_in_process import merge_arrow

    rows = pa.table({"id": ids, "writer": [writer] * len(ids)}, SCHEMA)
    builder = merge_arrow(uri, rows, "t.id = s.id", storage_options=options)
    return builder.when_not_matched_insert_all().execute().version


def test_gcs_table_end_to_end_with_preconditioned_commits(gcs) -> None:
    options, requests = gcs
    uri = "gs://lake/events"
    DeltaLog.create_table(uri, SCHEMA, storage_options=options)
    assert isinstance(TableLocation.of(uri, options).store, GCSLogStore)
    for n in range(3):
        assert _append(uri, options, [n], "w") == n + 1
    DeltaLog.for_table(uri, options).checkpoint()
    assert sorted(read_table(uri, storage_options=options).column("id").to_pylist()) == [0, 1, 2]
    uploads = [line for line in requests.read_text().splitlines() if "POST /upload" in line]
    conditional = [line for line in uploads if "ifGenerationMatch=0" in line]
    assert len(conditional) == 4, uploads  # the 4 commits; data files and checkpoints overwrite


def test_azure_put_if_absent_is_honoured(azure) -> None:
    location = TableLocation.of("az://lake/raw", azure)
    store = location.store
    assert isinstance(store, AzureLogStore)
    path = store.join(location.log_path, "00000000000000000000.json")
    store.write(path, b'{"commitInfo":{}}\n')
    store.write(path, b'{"commitInfo":{}}\n')  # a retry of the same bytes counts as done
    with pytest.raises(FileExistsError):
        store.write(path, b'{"commitInfo":{"other":1}}\n')


def _writer(uri: str, options: dict[str, str], writer: int, commits: int) -> None:
    from airflow_delta.engine.errors import DeltaConcurrentModificationException

    for n in range(commits):
        while True:
            try:
                _append(uri, options, [1000 * writer + n], f"w{writer}")
                break
            except DeltaConcurrentModificationException:
                continue  # another writer won a version: run again on the new snapshot


def test_azure_writers_in_several_processes_lose_nothing(azure) -> None:
    uri = "az://lake/multi"
    DeltaLog.create_table(uri, SCHEMA, storage_options=azure)
    writers, commits = 3, 4
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_writer, args=(uri, azure, w, commits)) for w in range(writers)
    ]
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=240)
    assert [p.exitcode for p in processes] == [0] * writers
    snapshot = DeltaLog.for_table(uri, azure).update()
    assert snapshot.version == writers * commits
    ids = sorted(read_table(uri, storage_options=azure).column("id").to_pylist())
    assert ids == sorted(1000 * w + n for w in range(writers) for n in range(commits))
    history = DeltaLog.for_table(uri, azure).history()
    assert [h["version"] for h in history] == list(range(writers * commits, -1, -1))


@pytest.mark.parametrize("store", ["gcs", "azure"])
def test_a_commit_or_write_to_a_missing_bucket_is_table_not_found(store, request) -> None:
    """Creating a table in a missing bucket failed with the client's bare error (gcsfs:
    FileNotFoundError of an upload URL, adlfs: azure's ResourceNotFoundError or a RuntimeError
    'Failed to upload block'): every write, commit or data file, is TableNotFoundError naming
    the file, and no bucket is created."""
    from airflow_delta.engine import write_table
    from airflow_delta.engine.errors import TableNotFoundError

    fixture = request.getfixturevalue(store)
    options = fixture[0] if store == "gcs" else fixture
    scheme = "gs" if store == "gcs" else "az"
    missing = f"typo{os.getpid()}x{time.monotonic_ns() % 10**6}"
    uri = f"{scheme}://{missing}/events"
    rows = pa.table({"id": list(range(3)), "writer": ["w"] * 3}, SCHEMA)
    attempts = [
        lambda: DeltaLog.create_table(uri, SCHEMA, storage_options=options),
        lambda: write_table(uri, rows, storage_options=options),
    ]
    for attempt in attempts:
        with pytest.raises(TableNotFoundError, match=r"bucket \(or container\)") as caught:
            attempt()
        assert f"{missing}/events/" in str(caught.value)
    fs = TableLocation.of(uri, options).store.fs
    fs.invalidate_cache()
    assert not fs.exists(missing)


@pytest.mark.parametrize("store", ["gcs", "azure"])
def test_an_empty_last_checkpoint_is_ignored(store, request) -> None:
    """Azure answers a ranged read of an empty blob with 416 InvalidRange: an empty
    `_last_checkpoint` (a writer such as Hadoop's ABFS creates it empty, then appends) made the
    table unreadable there (HttpResponseError) instead of being ignored as a bad hint."""
    fixture = request.getfixturevalue(store)
    options = fixture[0] if store == "gcs" else fixture
    uri = f"{'gs' if store == 'gcs' else 'az'}://lake/empty-hint-{time.monotonic_ns()}"
    DeltaLog.create_table(uri, SCHEMA, storage_options=options)
    _append(uri, options, [1], "w")
    DeltaLog.for_table(uri, options).checkpoint()
    location = TableLocation.of(uri, options)
    hint = location.store.join(location.log_path, "_last_checkpoint")
    location.store.read(hint, max_size=1000)  # a listing of the hint's size may be cached
    location.store.write(hint, b"", overwrite=True)
    assert location.store.read(hint, max_size=1000) == b""
    assert DeltaLog.for_table(uri, options).update().version == 1
    assert read_table(uri, storage_options=options).column("id").to_pylist() == [1]


@pytest.mark.parametrize("store", ["gcs", "azure"])
def test_exists_sees_what_another_process_deleted_after_a_listing(store, request) -> None:
    """adlfs answers `exists` from its cached listing of the parent directory, and its
    `invalidate_cache(path)` drops only `path`'s entry: a commit another process deleted after
    this one listed `_delta_log` still existed (the stale-commit check and the version probe
    ask `exists`)."""
    fixture = request.getfixturevalue(store)
    options = fixture[0] if store == "gcs" else fixture
    location = TableLocation.of(
        f"{'gs' if store == 'gcs' else 'az'}://lake/ex-{time.monotonic_ns()}", options
    )
    store_, log_path = location.store, location.log_path
    names = [f"{v:020d}.json" for v in range(3)]
    for name in names:
        store_.write(store_.join(log_path, name), b"{}\n")
    assert [f.name for f in store_.list_from(log_path)] == names  # cached by the filesystem
    other = type(store_.fs)(**options, skip_instance_cache=True)  # another process
    other.rm_file(store_.join(log_path, names[1]))
    other.pipe_file(store_.join(log_path, names[2]), b"{}\n{}\n")
    assert not store_.exists(store_.join(log_path, names[1]))
    assert store_.exists(store_.join(log_path, names[2]))
    assert store_.read(store_.join(log_path, names[2]), max_size=100) == b"{}\n{}\n"


def _put_blob_literally(store: str, options: dict[str, str], key: str) -> None:
    """Write `key` (bucket/name) with the storage's own SDK, the name taken literally."""
    bucket, _, name = key.partition("/")
    if store == "azure":
        from azure.storage.blob import BlobServiceClient

        service = BlobServiceClient.from_connection_string(options["connection_string"])
        service.get_blob_client(bucket, name).upload_blob(b"stray", overwrite=True)
    else:
        import gcsfs

        gcsfs.GCSFileSystem(**options, skip_instance_cache=True).pipe_file(key, b"stray")


@pytest.mark.parametrize("suffix", ["#", "?", "?x#y", "#x?y", "[1]*"])
@pytest.mark.parametrize("store", ["gcs", "azure"])
def test_vacuum_deletes_stray_blobs_by_their_literal_names(store, suffix, request) -> None:
    """adlfs reads a path as a URL: vacuum's delete of a stray blob `<active file>#` deleted
    the active file itself (the table lost it) and left the stray. Deletes name blobs
    literally; only the strays go."""
    from airflow_delta.engine.commands.maintenance import vacuum

    fixture = request.getfixturevalue(store)
    options = fixture[0] if store == "gcs" else fixture
    uri = f"{'gs' if store == 'gcs' else 'az'}://lake/stray-{time.monotonic_ns()}"
    DeltaLog.create_table(uri, SCHEMA, storage_options=options)
    _append(uri, options, [1], "w")
    location = TableLocation.of(uri, options)
    (active,) = [f.path for f in DeltaLog.for_table(uri, options).update().all_files()]
    _put_blob_literally(store, options, f"{location.table_path}/{active}{suffix}")
    later = int(time.time() * 1000) + 30 * 86_400_000

    assert vacuum(location, now_ms=later).files_deleted == [active + suffix]

    assert read_table(uri, storage_options=options).column("id").to_pylist() == [1]
    names = [f.name for f in location.store.list_recursive(location.table_path)]
    assert active in names and active + suffix not in names


@pytest.mark.parametrize("path", ["a?b#c/t", "t#", "t?"])
def test_an_azure_table_path_adlfs_would_misaddress_is_refused(azure, path) -> None:
    """`az://lake/a?b#c/t` was silently written at `lake/a#c/t?b` (and `t#` at `t`), where no
    other engine given the same URI finds it: refused, naming the table."""
    from airflow_delta.engine.errors import UnsupportedStorageError

    uri = f"az://lake/odd-{time.monotonic_ns()}/{path}"
    with pytest.raises(UnsupportedStorageError, match=r"Table az://.*'\?' or '#'"):
        DeltaLog.create_table(uri, SCHEMA, storage_options=azure)
    for fine in ("q?x/t", "h#x/t?y", "my table %41 #x é"):
        uri = f"az://lake/fine-{time.monotonic_ns()}/{fine}"
        DeltaLog.create_table(uri, SCHEMA, storage_options=azure)
        assert TableLocation.of(uri, azure).table_path == uri.removeprefix("az://")


@pytest.mark.parametrize("store", ["gcs", "azure"])
def test_a_log_file_replaced_after_a_listing_is_read_whole(store, request) -> None:
    """adlfs opens a file with the size its cached listing of the directory holds: a checkpoint
    another process rewrote (another engine's checkpoint of the same version) after this one
    listed `_delta_log` was read at the old size (ArrowInvalid: no parquet footer)."""
    import io

    import pyarrow.parquet as pq

    def parquet(rows: int) -> bytes:
        sink = io.BytesIO()
        pq.write_table(pa.table({"x": list(range(rows))}), sink)
        return sink.getvalue()

    fixture = request.getfixturevalue(store)
    options = fixture[0] if store == "gcs" else fixture
    location = TableLocation.of(
        f"{'gs' if store == 'gcs' else 'az'}://lake/re-{time.monotonic_ns()}", options
    )
    store_ = location.store
    path = store_.join(location.log_path, "00000000000000000010.checkpoint.parquet")
    store_.write(path, parquet(3), overwrite=True)
    assert [f.name for f in store_.list_from(location.log_path)] == [path.rsplit("/", 1)[1]]
    other = type(store_.fs)(**options, skip_instance_cache=True)  # another process
    other.pipe_file(path, parquet(5000))
    assert store_.open_parquet(path).read().num_rows == 5000
    with store_.open_input(path) as f:
        assert pq.read_table(f).num_rows == 5000


def test_a_version_aware_gcs_filesystem_is_refused(gcs) -> None:
    """gcsfs with version_aware takes `x.parquet#123` for generation 123 of `x.parquet`: a
    delete of such a stray object would delete that generation of the table's file. Refused,
    naming the table and the option; without it the same table works."""
    from airflow_delta.engine.errors import UnsupportedStorageError

    options = gcs[0]
    uri = f"gs://lake/versions-{time.monotonic_ns()}"
    with pytest.raises(UnsupportedStorageError, match=r"Table gs://.*version_aware"):
        DeltaLog.create_table(uri, SCHEMA, storage_options={**options, "version_aware": True})
    DeltaLog.create_table(uri, SCHEMA, storage_options=options)
    assert DeltaLog.for_table(uri, options).update().version == 0
