"""Every table of ../shared/golden, replayed by the engine and checked against its catalog.

Default expectation: the table reads, and its version and active-file count equal the catalog's
`latest_version` and `active_files_replay` (and `num_records` equals `rows_via_stats` when the
catalog has it). EXPECT.tsv overrides this with `refuse` (a typed error, listed below per table)
or `either` (read correctly, or refuse with a typed error).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import (
    CorruptLogError,
    DeltaError,
    DeltaProtocolError,
    VersionNotFoundError,
)

GOLDEN = Path(os.environ.get("DELTA_GOLDEN", Path(__file__).parents[3] / "shared" / "golden"))
if not GOLDEN.exists():  # the checkout sits beside shared/ on CI and on developer machines
    GOLDEN = Path("/work/shared/golden")


def _tsv(name: str) -> list[dict[str, str]]:
    with open(GOLDEN / name, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


CATALOG = {row["table_dir"]: row for row in _tsv("CATALOG.tsv")}
EXPECT = {row["table_dir"]: row for row in _tsv("EXPECT.tsv")}

#: The typed error each table marked `refuse` must raise.
REFUSALS: dict[str, type[DeltaError]] = {
    "delta-rs__data_err_logs__table_c": CorruptLogError,
    "delta-rs__data_err_logs__table_d": DeltaProtocolError,
    "delta-rs__data_err_logs__table_e": DeltaProtocolError,
    "delta-rs__data_err_logs__table_f": DeltaProtocolError,
    "delta-rs__simple_table_features": DeltaProtocolError,
    "delta__data-reader-absolute-paths-escaped-chars": CorruptLogError,
    "delta__deltalog-invalid-protocol-version": DeltaProtocolError,
    "delta__deltalog-state-reconstruction-from-checkpoint-missing-protocol": CorruptLogError,
    "delta__deltalog-state-reconstruction-without-metadata": CorruptLogError,
    "delta__versions-not-contiguous": CorruptLogError,
}


def test_catalog_is_complete() -> None:
    on_disk = {p.name for p in (GOLDEN / "tables").iterdir() if p.is_dir()}
    assert on_disk == set(CATALOG), "every golden table must be in the catalog and tested"
    refused = {t for t, row in EXPECT.items() if row["expect"] == "refuse"}
    assert refused == set(REFUSALS)


@pytest.mark.parametrize("table_dir", sorted(CATALOG))
def test_golden_table(table_dir: str) -> None:
    row = CATALOG[table_dir]
    expect = EXPECT.get(table_dir, {}).get("expect", "read")
    path = str(GOLDEN / "tables" / table_dir)
    if expect == "refuse":
        with pytest.raises(REFUSALS[table_dir]) as err:
            DeltaLog.for_table(path).update()
        assert (
            path in str(err.value) or table_dir in str(err.value) or "_delta_log" in str(err.value)
        )
        return
    try:
        snapshot = DeltaLog.for_table(path).update()
    except DeltaError:
        if expect == "either":
            return
        raise
    if expect == "either":
        if EXPECT[table_dir]["num_files"]:
            assert snapshot.num_files == int(EXPECT[table_dir]["num_files"])
        return
    assert snapshot.version == int(row["latest_version"])
    assert snapshot.num_files == int(row["active_files_replay"])
    if row["rows_via_stats"]:
        assert snapshot.num_records == int(row["rows_via_stats"])


def _load(name: str, **kw: object):
    return DeltaLog.for_table(str(GOLDEN / "tables" / name)).snapshot_at(**kw)  # type: ignore[arg-type]


def test_checkpoint_then_one_file_left() -> None:
    snap = _load("delta__checkpoint")
    assert snap.version == 14
    assert [f.path for f in snap.all_files()] == ["15"]


def test_delta_0_2_0_files_and_txn() -> None:
    snap = _load("delta-rs__delta-0.2.0")
    assert (snap.version, snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (
        3,
        1,
        2,
    )
    names = sorted(f.path.split("-")[2] for f in snap.all_files())
    assert names == ["7c2deba3", "c373a5bd", "cb6b150b"]
    assert snap.transactions == {"e4a20b59-dd0e-4c50-b074-e8ae4786df30": 0}


def test_txn_version_for_app_id() -> None:
    snap = _load("delta__deltalog-getChanges")
    assert snap.transactions.get("fakeAppId") == 3
    assert "unknown" not in snap.transactions


def test_special_characters_keep_raw_path() -> None:
    assert _load("delta__log-replay-special-characters-a").num_files == 0
    files = _load("delta__log-replay-special-characters-b").all_files()
    assert [f.path for f in files] == ["special%20p@%23h"]


def test_delete_and_re_add_in_later_transaction() -> None:
    snap = _load("delta__delete-re-add-same-file-different-transactions")
    files = {f.path: f for f in snap.all_files()}
    assert set(files) == {"foo", "bar"}
    assert files["foo"].modification_time == 1700000000000


def test_vacuumed_log_time_travel() -> None:
    log = DeltaLog.for_table(str(GOLDEN / "tables" / "delta-rs__checkpoints_vacuumed"))
    assert log.update().version == 12
    assert len(log.history()) == 8  # commits 5..12 remain
    assert log.snapshot_at(version=5).version == 5
    with pytest.raises(VersionNotFoundError):
        log.snapshot_at(version=3)


def test_delta_0_8_0_records() -> None:
    snap = _load("delta-rs__delta-0.8.0")
    assert (snap.version, snap.num_files, snap.num_records) == (1, 2, 4)
    assert _load("delta-rs__delta-0.8.0", version=0).num_files == 2
