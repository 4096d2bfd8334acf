"""Every operator on a deletion-vector table that deltalake 1.6 created (it carries the
`variantType` writer feature without a variant column), run by `dag.test()` in one DAG
(t_deltalake_dv_table in tests/airflow/dags/deltalake_table_dags.py): a Spark write, a MERGE
in process, DELETE and UPDATE writing deletion vectors, a MERGE into the files that have them,
a MERGE on Spark, OPTIMIZE purging them, RESTORE, checkpoint and VACUUM. After each, engine,
deltalake and DuckDB read the same rows (checked at every version afterwards)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from airflow_delta.engine.delta_log import DeltaLog
from tests.airflow.conftest import load_dag
from tests.airflow.metadata import task_states, xcoms
from tests.airflow.operators.test_commit import fresh_table
from tests.engine.commands.dml_tables import SCHEMA, batch, rows

TASKS = [
    "write",
    "merge_in_process",
    "delete",
    "update",
    "merge_into_dvs",
    "merge_on_spark",
    "optimize",
    "restore",
    "checkpoint",
]


def ids_at(uri: str, version: int) -> list[tuple[int, str]]:
    """(id, s) of the table's rows at `version`, as deltalake reads them (DVs applied)."""
    query = "SELECT id, s FROM t"
    table = DeltaTable(uri, version=version)
    result = pa.table(QueryBuilder().register("t", table).execute(query).read_all())
    ids, texts = result.column("id").to_pylist(), result.column("s").to_pylist()
    return sorted(zip(ids, texts, strict=True))


def initial(ids: range) -> list[tuple[int, str]]:
    return [(i, f"s{i % 3}") for i in ids]


@pytest.mark.usefixtures("airflow_db", "spark")
def test_every_operator_writes_a_deltalake_deletion_vector_table() -> None:
    uri = fresh_table("deltalake_dv")
    write_deltalake(
        uri,
        batch(range(10)),
        partition_by=["p"],
        configuration={"delta.enableDeletionVectors": "true"},
    )
    protocol = DeltaLog.for_table(uri).update().protocol
    assert {"variantType", "deletionVectors"} <= set(protocol.writer_features or [])

    dag_run = load_dag("t_deltalake_dv_table").test()
    assert task_states(dag_run) == dict.fromkeys(TASKS, "success")
    results: dict[str, Any] = {t: xcoms(dag_run, t).get("return_value") for t in TASKS}
    versions = [results[t]["version"] for t in TASKS[:-1]]
    assert versions == list(range(1, 9))
    executors = {t: results[t]["executor"] for t in TASKS[:-1]}
    assert executors["write"] == "spark" and executors["merge_on_spark"] == "spark"
    assert executors["merge_in_process"] == executors["merge_into_dvs"] == "in-process"
    assert results["delete"]["metrics"]["numDeletionVectorsAdded"] >= 1
    assert results["update"]["metrics"]["numDeletionVectorsAdded"] >= 1
    assert results["optimize"]["metrics"]["numFilesRemoved"] >= 2

    merged = initial(range(10)) + initial(range(100, 106))
    merged = [(i, "merged" if i in (4, 5) else s) for i, s in merged] + [
        (200, "merged"),
        (201, "merged"),
    ]
    after_delete = [(i, s) for i, s in merged if i >= 3]
    after_update = [(i, "updated" if i == 7 else s) for i, s in after_delete]
    after_merge = [(i, s) for i, s in after_update if i not in (4, 5, 200, 201)]
    spark_rows = [(i, "spark" if i in (8, 9) else s) for i, s in after_merge] + [
        (10, "spark"),
        (11, "spark"),
    ]
    expected = {
        1: initial(range(10)) + initial(range(100, 106)),
        2: merged,
        3: after_delete,
        4: after_update,
        5: after_merge,
        6: spark_rows,
        7: spark_rows,  # OPTIMIZE changes no row
        8: initial(range(10)) + initial(range(100, 106)),  # RESTORE to version 1
    }
    for version, want in expected.items():
        assert ids_at(uri, version) == sorted(want), f"version {version}"
    assert len(rows(uri)) == 16  # engine, deltalake and DuckDB agree on the restored table

    snapshot = DeltaLog.for_table(uri).update()
    assert snapshot.version == 8
    assert set(snapshot.protocol.writer_features or []) == set(protocol.writer_features or [])
    assert results["checkpoint"]["version"] == 8
    assert snapshot.metadata.schema.names == SCHEMA.names
