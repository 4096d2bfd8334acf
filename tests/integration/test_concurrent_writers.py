"""Concurrent writers in real processes (spawned, started together at a barrier) lose nothing.

1. 8 processes x 100 blind appends on one local table.
2. 4 processes of this engine and 4 of deltalake (delta-rs) appending to one table.
3. 8 processes appending back to back for 12 s: no commit gives up (CommitFailedError)
   or comes near it.
4. 4 processes x 50 blind appends on S3 (moto_server, conditional PUT).
5. 6 processes racing to commit the same (appId, version) pair: exactly one wins.

Retry counts are printed (`pytest -s` shows them).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pytest

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.log.log_store import get_log_store
from airflow_delta.engine.txn.commit_types import DEFAULT_MAX_COMMIT_ATTEMPTS
from tests.integration.writers_procs import (
    MIXED_SCHEMA,
    deltalake_appends,
    engine_appends,
    engine_appends_for,
    idempotent_rounds,
    run_workers,
)

#: Several processes each: the workers get `run_workers`' generous deadline, and the test a
#: pytest timeout above it (the default 300 s is too short on a loaded two-core machine).
pytestmark = pytest.mark.timeout(900)

COMMIT_NAME = re.compile(r"^\d{20}\.json$")
SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string())])


def commit_versions(names: list[str]) -> list[int]:
    return sorted(int(n[:20]) for n in names if COMMIT_NAME.match(n))


def read_commit(data: bytes) -> list[dict[str, Any]]:
    """Every action of a commit file; fails on any line that is not complete JSON.

    (deltalake ends its commit files without a newline, this engine with one.)
    """
    return [json.loads(line) for line in data.decode().splitlines()]


def check_engine_results(results: list[dict[str, Any]], final_version: int) -> None:
    """Each worker's versions are distinct across workers and within 1..final_version."""
    versions = [v for r in results for v in r["versions"]]
    assert len(versions) == len(set(versions)), "two commits returned the same version"
    assert all(1 <= v <= final_version for v in versions)


def report(title: str, results: list[dict[str, Any]], seconds: float) -> None:
    commits = sum(len(r["versions"]) for r in results)
    attempts = sum(r["attempts"] for r in results)
    print(
        f"\n[{title}] {len(results)} writers, {commits} commits in {seconds:.1f} s: "
        f"{attempts} attempts, {attempts - commits} retries, max attempts for one commit "
        f"{max(r['max_attempts'] for r in results)}; per writer "
        + ", ".join(f"{r['who']}={r['attempts'] - len(r['versions'])}" for r in results)
    )


def test_eight_processes_append_to_one_local_table(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, SCHEMA)
    writers, per_writer = 8, 100
    started = time.monotonic()
    results = run_workers(
        [(engine_appends, (uri, None, per_writer, f"w{k}")) for k in range(writers)]
    )
    seconds = time.monotonic() - started
    report("local 8x100", results, seconds)

    total = writers * per_writer
    snapshot = DeltaLog.for_table(uri).update()
    assert snapshot.version == total
    active = [f.path for f in snapshot.all_files()]
    assert len(active) == len(set(active)) == total
    active_set = set(active)
    for r in results:
        assert len(r["versions"]) == per_writer
        missing = set(r["paths"]) - active_set
        assert not missing, f"{r['who']} lost {len(missing)} files, e.g. {sorted(missing)[:3]}"
    check_engine_results(results, total)

    log_dir = Path(uri, "_delta_log")
    names = os.listdir(log_dir)
    assert commit_versions(names) == list(range(total + 1))
    leftovers = [n for n in names if n.startswith(".") or n.endswith(".tmp")]
    assert not leftovers, f"temporary files left in _delta_log: {leftovers[:5]}"
    # every commit holds exactly one add, and it is the one its writer says it committed
    by_version = {v: p for r in results for v, p in zip(r["versions"], r["paths"], strict=True)}
    for v in range(1, total + 1):
        actions = read_commit((log_dir / f"{v:020d}.json").read_bytes())
        adds = [a["add"]["path"] for a in actions if "add" in a]
        assert adds == [by_version[v]], f"version {v}: {adds} != {by_version[v]}"


def test_engine_and_deltalake_processes_append_to_one_table(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    uri = str(tmp_path / "mixed")
    DeltaLog.create_table(uri, MIXED_SCHEMA)
    per_writer = 25
    jobs = [(engine_appends, (uri, None, per_writer, f"ours{k}", True)) for k in range(4)]
    jobs += [(deltalake_appends, (uri, per_writer, f"dl{k}")) for k in range(4)]
    started = time.monotonic()
    results = run_workers(jobs)
    seconds = time.monotonic() - started
    ours, theirs = results[:4], results[4:]
    report("mixed: this engine's 4 writers", ours, seconds)
    gave_up = [g for r in theirs for g in r["gave_up"]]
    print(
        f"[mixed: deltalake's 4 writers] {4 * per_writer} appends; deltalake gave up on a "
        f"commit {len(gave_up)} times (retried here): "
        + ", ".join(f"{r['who']}={len(r['gave_up'])}" for r in theirs)
        + (f"; first: {gave_up[0]}" if gave_up else "")
    )

    total = 8 * per_writer
    snapshot = DeltaLog.for_table(uri).update()
    assert snapshot.version == total
    check_engine_results(ours, total)
    log_dir = Path(uri, "_delta_log")
    assert commit_versions(os.listdir(log_dir)) == list(range(total + 1))

    # who committed what, from the commit files themselves
    ours_versions, their_versions, their_adds = set(), set(), set()
    for v in range(1, total + 1):
        actions = read_commit((log_dir / f"{v:020d}.json").read_bytes())
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        adds = [a["add"]["path"] for a in actions if "add" in a]
        assert len(adds) == 1, f"version {v} adds {adds}"
        if str(info.get("engineInfo", "")).startswith("airflow-delta"):
            ours_versions.add(v)
        else:
            their_versions.add(v)
            their_adds.update(adds)
    assert ours_versions == {v for r in ours for v in r["versions"]}
    assert len(their_versions) == 4 * per_writer

    ours_paths = {p for r in ours for p in r["paths"]}
    active = {f.path for f in snapshot.all_files()}
    assert snapshot.num_files == total
    assert active == ours_paths | their_adds

    # deltalake reads the same version and file set
    dt = DeltaTable(uri)
    assert dt.version() == total
    dl_paths = pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist()
    assert sorted(dl_paths) == sorted(active)
    # and every row both engines wrote is there exactly once
    rows = pads.dataset(dt.file_uris(), format="parquet").to_table(columns=["who", "seq"])
    got = sorted(zip(rows.column("who").to_pylist(), rows.column("seq").to_pylist(), strict=True))
    want = sorted((r["who"], i) for r in results for i in range(per_writer))
    assert got == want


def test_sustained_contention_fails_no_commit(tmp_path: Path) -> None:
    """Under sustained contention a blind append still gets through within its attempts.

    Blind appends never conflict, so each retry only has to win the race for the next free
    version. A writer that keeps losing that race for 100 attempts (CommitFailedError) is
    starved, not conflicted; so is one that needs more than half of them.
    """
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, SCHEMA)
    writers, seconds = 8, 12
    results = run_workers([(engine_appends_for, (uri, seconds, f"w{k}")) for k in range(writers)])
    attempts = sorted(a for r in results for a in r["attempts"])
    failed = [f for r in results for f in r["failed"]]
    committed = [p for r in results for p in r["paths"]]
    print(
        f"\n[sustained 8 writers x {seconds} s] {len(committed)} commits, {len(failed)} gave up; "
        f"attempts per commit p50={attempts[len(attempts) // 2]} "
        f"p99={attempts[int(len(attempts) * 0.99)]} max={attempts[-1]}; "
        f"commits needing >= 20 attempts: {sum(a >= 20 for a in attempts)}; slowest commit "
        f"{max(r['slowest'] for r in results):.2f} s"
    )
    snapshot = DeltaLog.for_table(uri).update()
    assert snapshot.version == len(committed)  # nothing lost, nothing doubled
    assert sorted(f.path for f in snapshot.all_files()) == sorted(committed)
    assert not failed, f"{len(failed)} blind appends gave up, e.g. {failed[0]}"
    # and none came near giving up: starvation shows as commits needing most of the budget
    assert attempts[-1] <= DEFAULT_MAX_COMMIT_ATTEMPTS // 2, (
        f"a blind append needed {attempts[-1]} of {DEFAULT_MAX_COMMIT_ATTEMPTS} attempts"
    )


@pytest.mark.s3
def test_four_processes_append_on_s3(s3_bucket) -> None:
    bucket, options = s3_bucket
    uri = f"s3://{bucket}/t"
    DeltaLog.create_table(uri, SCHEMA, storage_options=options)
    writers, per_writer = 4, 50
    started = time.monotonic()
    results = run_workers(
        [(engine_appends, (uri, options, per_writer, f"s{k}")) for k in range(writers)]
    )
    seconds = time.monotonic() - started
    report("s3 4x50", results, seconds)

    total = writers * per_writer
    snapshot = DeltaLog.for_table(uri, options).update()
    assert snapshot.version == total
    active = {f.path for f in snapshot.all_files()}
    assert len(active) == snapshot.num_files == total
    assert active == {p for r in results for p in r["paths"]}
    check_engine_results(results, total)
    store, root = get_log_store(uri, options)
    names = [f.name for f in store.list_from(store.join(root, "_delta_log"))]
    assert commit_versions(names) == list(range(total + 1))


def test_racing_writers_commit_an_app_version_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "idem")
    DeltaLog.create_table(uri, SCHEMA)
    writers, rounds, app = 6, 8, "airflow-dag-run"
    results = run_workers(
        [(idempotent_rounds, (uri, app, rounds, f"r{k}")) for k in range(writers)]
    )
    counts: dict[str, int] = {}
    for v in range(rounds):
        outcomes = [r[v] for r in results]
        kinds = [o[0] for o in outcomes]
        assert kinds.count("committed") == 1, f"round {v}: {outcomes}"
        for o in outcomes:
            counts[o[0]] = counts.get(o[0], 0) + 1
            if o[0] == "skipped":
                assert o[1] == v
    print(f"\n[idempotency] {writers} writers x {rounds} versions: {counts}")

    snapshot = DeltaLog.for_table(uri).update()
    assert snapshot.version == rounds
    assert snapshot.num_files == rounds
    assert snapshot.transactions == {app: rounds - 1}
    log_dir = Path(uri, "_delta_log")
    carried: dict[int, list[int]] = {}
    for v in range(1, rounds + 1):
        actions = read_commit((log_dir / f"{v:020d}.json").read_bytes())
        txns = [a["txn"] for a in actions if "txn" in a]
        assert len(txns) == 1 and txns[0]["appId"] == app
        assert sum("add" in a for a in actions) == 1
        carried.setdefault(txns[0]["version"], []).append(v)
    assert carried == {v: [v + 1] for v in range(rounds)}
