"""Keep a `latest status per order` table up to date from the orders table's change data feed,
exactly once, without Spark.

Each run reads the changes of the orders table since the last version the output table holds
(`read_changes`), keeps each order's last change, and MERGEs them into the output in process
(`merge_arrow`): new and updated orders upserted, deleted ones deleted. The MERGE's commit
carries a `SetTransaction` naming the last source version applied, so the marker and the data
land together: a retried or failed run neither skips nor repeats a range (see
docs/change-data-feed.md).

The orders table must have the change data feed on (`delta.enableChangeDataFeed=true`) from
`first_version` on. Configuration: `AIRFLOW_DELTA_DEMO_ROOT` and `AIRFLOW_DELTA_CONN_ID` as for
`delta_orders_pipeline`; params `first_version` (default 0).

Run it with `airflow dags test delta_orders_changes`.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.sdk import DAG, Param, task

from airflow_delta.assets import delta_table_asset

ROOT = os.environ.get("AIRFLOW_DELTA_DEMO_ROOT", "/tmp/airflow-delta-demo").rstrip("/")
ORDERS = f"{ROOT}/tables/orders"
STATUS = f"{ROOT}/tables/order_status"
APP_ID = "delta_orders_changes"
DELTA_CONN_ID = os.environ.get("AIRFLOW_DELTA_CONN_ID") or None

with DAG(
    "delta_orders_changes",
    description="Apply the orders table's change data feed to a status table, exactly once",
    schedule=[delta_table_asset(ORDERS)],
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    params={"first_version": Param(0, type="integer", minimum=0)},
    tags=["delta", "example"],
) as dag:

    @task(outlets=[delta_table_asset(STATUS)])
    def apply_changes(params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Merge the orders' changes since the last applied version into the status table."""
        # Imported here: parsing the DAG file loads neither the engine nor pyarrow.
        import pyarrow as pa
        import pyarrow.compute as pc

        from airflow_delta.engine import CommitProperties, DeltaLog, SetTransaction, read_changes
        from airflow_delta.engine.commands.merge_in_process import merge_arrow
        from airflow_delta.engine.errors import TableNotFoundError
        from airflow_delta.hooks.delta import DeltaHook

        options = DeltaHook(DELTA_CONN_ID).storage_options
        first = int((params or {}).get("first_version", 0))
        latest = DeltaLog.for_table(ORDERS, options).update().version  # pinned before reading
        try:
            done = DeltaLog.for_table(STATUS, options).update().transactions.get(APP_ID, first - 1)
        except TableNotFoundError:
            schema = pa.schema([("order_id", pa.int64()), ("status", pa.string())])
            DeltaLog.create_table(STATUS, schema, storage_options=options)
            done = first - 1
        if latest <= done:
            print(f"{STATUS} holds the changes of {ORDERS} up to version {done}: nothing new")
            return {"from": done + 1, "to": done, "changes": 0}
        changes = read_changes(ORDERS, done + 1, latest, storage_options=options)
        changes = changes.filter(pc.not_equal(changes["_change_type"], "update_preimage"))
        # the last change of each order wins (rows come in commit order)
        changes = changes.append_column("_n", pa.array(range(changes.num_rows), pa.int64()))
        changes = changes.take(changes.group_by("order_id").aggregate([("_n", "max")])["_n_max"])
        rows = changes.select(["order_id", "status", "_change_type"])
        marker = CommitProperties(app_transactions=[SetTransaction(APP_ID, latest)])
        result = (
            merge_arrow(STATUS, rows, "t.order_id = s.order_id", commit_properties=marker)
            .when_matched_delete("s._change_type = 'delete'")
            .when_matched_update({"status": "s.status"})
            .when_not_matched_insert(
                {"order_id": "s.order_id", "status": "s.status"}, "s._change_type != 'delete'"
            )
            .execute()
        )
        print(
            f"Applied the changes of {ORDERS} versions {done + 1}-{latest} "
            f"({rows.num_rows} orders) to {STATUS}: version {result.version}"
        )
        return {"from": done + 1, "to": latest, "changes": rows.num_rows, "version": result.version}

    apply_changes()
