"""`@task.pyspark` (the apache-spark provider) prepares the data, our operators commit it: both
on the same Spark connection.

The PySpark task cleans a day of raw orders with Spark and stages them as parquet (it may run
any PySpark code: joins, UDFs, ML features); `DeltaWriteOperator` then commits the staged files
to the Delta table in one transaction (exactly once, conflicts re-run, the table's asset event),
and `DeltaMergeOperator` upserts the day's corrections.

Configuration (environment variables, read when the DAG file is parsed):

- `AIRFLOW_DELTA_DEMO_ROOT`: where the staging files and the table live; default
  `/tmp/airflow-delta-demo`.
- `AIRFLOW_DELTA_SPARK_CONN_ID`: a `spark` (master URL, such as `local[2]` or
  `spark://host:7077`) or `spark_connect` (`sc://host:15002`) connection of the apache-spark
  provider, used by the PySpark task and by our operators alike; default none (local Spark).
  For example `AIRFLOW_CONN_SPARK_LOCAL='{"conn_type": "spark", "host": "local[2]"}'` and
  `AIRFLOW_DELTA_SPARK_CONN_ID=spark_local`.
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, task

from airflow_delta.operators.merge import DeltaMergeOperator
from airflow_delta.operators.write import DeltaWriteOperator

ROOT = os.environ.get("AIRFLOW_DELTA_DEMO_ROOT", "/tmp/airflow-delta-demo").rstrip("/")
ORDERS = f"{ROOT}/tables/pyspark_orders"
STAGING = f"{ROOT}/staging/pyspark_orders"
SPARK_CONN_ID = os.environ.get("AIRFLOW_DELTA_SPARK_CONN_ID") or None

with DAG(
    "delta_pyspark_orders",
    description="@task.pyspark stages a day of orders; DeltaWriteOperator commits them",
    schedule="@daily",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["delta", "example", "pyspark"],
) as dag:

    @task.pyspark(conn_id=SPARK_CONN_ID)
    def prepare_orders(spark=None, ds: str | None = None) -> str:
        """Clean a day of raw orders with Spark and stage them as parquet; the staged path."""
        from pyspark.sql import functions as F

        raw = spark.range(0, 500).select(
            (F.col("id") + F.lit(dt.date.fromisoformat(ds).toordinal() * 1000)).alias("order_id"),
            (F.col("id") % 50).cast("int").alias("customer_id"),
            F.round(F.rand(seed=7) * 100, 2).alias("amount"),
            F.to_date(F.lit(ds)).alias("order_date"),
        )
        path = f"{STAGING}/{ds}"
        raw.where("amount > 1").write.mode("overwrite").parquet(path)
        return path

    staged = prepare_orders()

    commit_orders = DeltaWriteOperator(
        task_id="commit_orders",
        table_uri=ORDERS,
        source="{{ ti.xcom_pull(task_ids='prepare_orders') }}",
        source_format="parquet",
        mode="overwrite",
        replace_where="order_date = '{{ ds }}'",
        partition_by=["order_date"],
        spark_conn_id=SPARK_CONN_ID,
    )

    correct_amounts = DeltaMergeOperator(
        task_id="correct_amounts",
        table_uri=ORDERS,
        source="SELECT order_id, amount * 1.1 AS amount FROM parquet.`{{ "
        "ti.xcom_pull(task_ids='prepare_orders') }}` WHERE customer_id = 0",
        condition="t.order_id = s.order_id AND t.order_date = '{{ ds }}'",
        clauses=[{"when": "matched", "then": "update", "set": {"amount": "s.amount"}}],
        spark_conn_id=SPARK_CONN_ID,
    )

    staged >> commit_orders >> correct_amounts
