"""Print `airflow-delta history` JSON lines (stdin) as a short table: version, operation, the
Airflow task that committed it, and the row metrics."""

import json
import sys

METRICS = ("numOutputRows", "numTargetRowsUpdated", "numTargetRowsInserted", "numRemovedFiles")

print(f"{'version':>7}  {'operation':<9}  {'airflow task':<24}  metrics")
for line in sys.stdin:
    commit = json.loads(line)
    metrics = commit.get("operationMetrics", {})
    shown = ", ".join(f"{k}={metrics[k]}" for k in METRICS if k in metrics)
    task = commit.get("airflow", {}).get("task_id", "")
    print(f"{commit['version']:>7}  {commit['operation']:<9}  {task:<24}  {shown}")
