#!/usr/bin/env bash
# `make demo`: run the main example DAG (dags_examples/delta_orders_pipeline.py) end to end with
# `airflow dags test` on embedded defaults - a SQLite Airflow database in .demo/airflow, local
# Spark, the table on the local filesystem under .demo/data - for two days, then print the
# table's history. Logs of each step go to .demo/*.log.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$ROOT/.venv/bin"
DEMO="$ROOT/.demo"
rm -rf "$DEMO"
mkdir -p "$DEMO"

export AIRFLOW_HOME="$DEMO/airflow"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_FOLDER="$ROOT/dags_examples"
export AIRFLOW_DELTA_DEMO_ROOT="$DEMO/data"
export SPARK_LOCAL_IP=127.0.0.1
export PYSPARK_PYTHON="$BIN/python" PYSPARK_DRIVER_PYTHON="$BIN/python"
TABLE="$AIRFLOW_DELTA_DEMO_ROOT/tables/orders"

echo "==> airflow db migrate (AIRFLOW_HOME=$AIRFLOW_HOME)"
"$BIN/airflow" db migrate > "$DEMO/db-migrate.log" 2>&1 || { tail -30 "$DEMO/db-migrate.log"; exit 1; }

for day in 2026-01-01 2026-01-02; do
    echo "==> airflow dags test delta_orders_pipeline $day"
    log="$DEMO/dags-test-$day.log"
    "$BIN/airflow" dags test delta_orders_pipeline "$day" > "$log" 2>&1 || true
    if ! grep -q "state=success" "$log"; then
        tail -60 "$log"
        echo "demo: the DAG run of $day did not succeed (log: $log)" >&2
        exit 1
    fi
    grep -o "Committed version [0-9]* of table [^ ]* (operation [^)]*)[^;]*" "$log" || true
    grep -o "Checkpointed table [^ ]* at version [0-9]*: [0-9]* part(s), [0-9]* actions" "$log" || true
done

echo "==> airflow-delta history $TABLE"
"$BIN/airflow-delta" history "$TABLE" | tee "$DEMO/history.jsonl" | "$BIN/python" "$ROOT/examples/history_table.py"
echo "(full commitInfo JSON lines: $DEMO/history.jsonl)"
echo "==> airflow-delta describe $TABLE"
"$BIN/airflow-delta" describe "$TABLE"
