"""`make demo` (until the Airflow operators land): the engine on a table delta-rs wrote.

1. deltalake (delta-rs) creates a partitioned table and appends to it, 12 versions in all.
2. airflow-delta replays the log, lists the files and time travels.
3. airflow-delta writes a checkpoint; deltalake opens the table through it.
4. `airflow-delta describe` and `history` print the table.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from airflow_delta.engine import DeltaLog

TABLE = Path(__file__).resolve().parents[1] / "demo-output" / "engine_demo_table"


def batch(day: int) -> pa.Table:
    """Ten orders of one day."""
    return pa.table(
        {
            "order_id": pa.array(range(day * 10, day * 10 + 10), pa.int64()),
            "amount": pa.array([1.5 * i for i in range(10)], pa.float64()),
            "region": pa.array(["eu", "us"] * 5),
            "day": pa.array([date(2024, 1, 1) + timedelta(days=day)] * 10, pa.date32()),
        }
    )


def main() -> None:
    shutil.rmtree(TABLE, ignore_errors=True)
    for day in range(12):
        write_deltalake(str(TABLE), batch(day), mode="append", partition_by=["region"])
    print(f"deltalake wrote {TABLE} up to version {DeltaTable(str(TABLE)).version()}")

    log = DeltaLog.for_table(str(TABLE))
    snap = log.update()
    print(
        f"airflow-delta replayed version {snap.version}: {snap.num_files} files, "
        f"{snap.num_records} rows, partitioned by {snap.partition_columns}"
    )
    print(f"time travel: version 3 had {log.snapshot_at(version=3).num_records} rows")

    result = log.checkpoint()
    print(f"checkpoint written at version {result.version}: {result.num_actions} actions")
    dt = DeltaTable(str(TABLE))
    print(f"deltalake reopens it at version {dt.version()} with {len(dt.file_uris())} files")

    cli = [sys.executable, "-m", "airflow_delta.cli"]
    described = subprocess.run([*cli, "describe", str(TABLE)], check=True, capture_output=True)
    print("airflow-delta describe:")
    print(json.dumps(json.loads(described.stdout), indent=2))
    history = subprocess.run(
        [*cli, "history", str(TABLE), "--limit", "3"], check=True, capture_output=True
    )
    print("airflow-delta history --limit 3:")
    for line in history.stdout.decode().splitlines():
        entry = json.loads(line)
        print(f"  v{entry['version']}: {entry.get('operation')} {entry.get('operationParameters')}")


if __name__ == "__main__":
    main()
