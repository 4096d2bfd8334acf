"""The README's engine snippets run as shown: one creates a table, writes a real data file and
commits it, and other readers (deltalake) read the row it holds (the snippet used to commit a
file that did not exist); another writes Arrow data with `write_table`."""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_engine_snippet_commits_a_real_file(tmp_path: Path) -> None:
    text = README.read_text()
    start = text.index("import os\nimport pyarrow as pa\nimport pyarrow.parquet as pq")
    code = text[start : text.index("```", start)].replace("/data/new", str(tmp_path / "new"))
    namespace: dict = {}
    exec("from airflow_delta.engine import DeltaLog\n" + code, namespace)
    assert namespace["version"] == 1
    rows = DeltaTable(str(tmp_path / "new")).to_pyarrow_table().to_pylist()
    assert rows == [{"id": 1, "day": "2024-05-01"}, {"id": 2, "day": "2024-05-01"}]


def test_readme_write_table_snippet(tmp_path: Path) -> None:
    text = README.read_text()
    start = text.index("import pyarrow as pa\nfrom airflow_delta.engine import write_table")
    code = text[start : text.index("```", start)].replace("/data/arrow", str(tmp_path / "t"))
    namespace: dict = {}
    exec(code, namespace)
    assert namespace["result"].version == 0
    rows = DeltaTable(str(tmp_path / "t")).to_pyarrow_table().sort_by("id").to_pylist()
    assert rows == [{"id": 1, "part": "x"}, {"id": 2, "part": "y"}]
