"""Benchmark tables, written as Delta log files directly (seconds, not minutes).

`get_table(spec)` returns the path of a cached, verified table under `bench/.data/` keyed by
the spec's parameters; `fresh_copy(spec, name)` gives a benchmark that writes (e.g. a
checkpoint) its own throw-away copy.

The standard table (`LOG_100K`): a classic checkpoint at version `checkpoint_version` holding
protocol, metaData, a few txn actions, `n_files` adds (partitioned by `date`, JSON stats on
three columns) and `n_removes` expired tombstones, `_last_checkpoint`, then `n_commits` commit
files after it, each a commitInfo plus one blind-append add. Data files do not exist: these
tables are for log-only workloads. Everything is derived from `seed`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import uuid
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

BENCH_DIR = Path(__file__).resolve().parent
DATA_DIR = BENCH_DIR / ".data"
WORK_DIR = DATA_DIR / "work"

#: Bump when the generated layout changes, so cached tables are rebuilt.
GENERATOR_VERSION = 1

# 2024-01-01T00:00:00Z in ms: all timestamps are fixed, so the data is deterministic.
BASE_TS = 1_704_067_200_000


@dataclass(frozen=True)
class TableSpec:
    n_files: int = 100_000
    n_commits: int = 100
    n_partitions: int = 100
    n_removes: int = 1_000
    n_txns: int = 3
    checkpoint_version: int = 100
    seed: int = 42

    @property
    def key(self) -> str:
        return (
            f"log-f{self.n_files}-c{self.n_commits}-p{self.n_partitions}-r{self.n_removes}"
            f"-t{self.n_txns}-v{self.checkpoint_version}-s{self.seed}-g{GENERATOR_VERSION}"
        )

    @property
    def latest_version(self) -> int:
        return self.checkpoint_version + self.n_commits

    @property
    def active_files(self) -> int:
        return self.n_files + self.n_commits


#: B1/B4 table: 100k files in a classic checkpoint + 100 single-file commits after it.
LOG_100K = TableSpec()

# -- schema (Spark's classic checkpoint layout, for a reader 1 / writer 2 table) ------------

STRING_MAP = pa.map_(pa.string(), pa.string())

ADD = pa.struct(
    [
        ("path", pa.string()),
        ("partitionValues", STRING_MAP),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("tags", STRING_MAP),
        ("stats", pa.string()),
    ]
)
REMOVE = pa.struct(
    [
        ("path", pa.string()),
        ("deletionTimestamp", pa.int64()),
        ("dataChange", pa.bool_()),
        ("extendedFileMetadata", pa.bool_()),
        ("partitionValues", STRING_MAP),
        ("size", pa.int64()),
        ("tags", STRING_MAP),
    ]
)
METADATA = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STRING_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("configuration", STRING_MAP),
        ("createdTime", pa.int64()),
    ]
)
PROTOCOL = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
TXN = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])

CHECKPOINT_SCHEMA = pa.schema(
    [("txn", TXN), ("add", ADD), ("remove", REMOVE), ("metaData", METADATA), ("protocol", PROTOCOL)]
)

TABLE_SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "value", "type": "double", "nullable": True, "metadata": {}},
        {"name": "name", "type": "string", "nullable": True, "metadata": {}},
        {"name": "date", "type": "string", "nullable": True, "metadata": {}},
    ],
}


class _Gen:
    """Deterministic values from one seeded RNG."""

    def __init__(self, seed: int):
        self.rnd = random.Random(seed)
        self.np = np.random.default_rng(seed)

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rnd.getrandbits(128), version=4))


def _dates(n: int) -> list[str]:
    start = date(2024, 1, 1)
    return [(start + timedelta(days=i)).isoformat() for i in range(n)]


def _stats(num_records: int, id_min: int, v_min: float, v_max: float, name_i: int) -> str:
    return (
        f'{{"numRecords":{num_records},'
        f'"minValues":{{"id":{id_min},"value":{v_min:.3f},"name":"name-{name_i:06d}"}},'
        f'"maxValues":{{"id":{id_min + num_records - 1},"value":{v_max:.3f},'
        f'"name":"name-{name_i + num_records - 1:06d}"}},'
        f'"nullCount":{{"id":0,"value":0,"name":{num_records // 100}}}}}'
    )


def _file_rows(g: _Gen, n: int, dates: list[str], id_start: int, part_start: int):
    """Columns for `n` add actions, spread round-robin over the `date` partitions."""
    part_idx = [(part_start + i) % len(dates) for i in range(n)]
    records = g.np.integers(10_000, 1_000_000, n)
    sizes = (records * 8 + g.np.integers(1_000, 100_000, n)).astype(np.int64)
    vmin = g.np.random(n) * 1000
    vmax = vmin + g.np.random(n) * 1000
    paths, stats = [], []
    ident = id_start
    for i in range(n):
        d = dates[part_idx[i]]
        paths.append(f"date={d}/part-{i % 100_000:05d}-{g.uuid()}.c000.snappy.parquet")
        r = int(records[i])
        stats.append(_stats(r, ident, float(vmin[i]), float(vmax[i]), ident % 900_000))
        ident += r
    return paths, [dates[p] for p in part_idx], sizes, stats


def _partition_map(values: list[str]) -> pa.MapArray:
    n = len(values)
    offsets = pa.array(np.arange(n + 1, dtype=np.int32))
    keys = pa.array(["date"] * n, pa.string())
    return pa.MapArray.from_arrays(offsets, keys, pa.array(values, pa.string()), type=STRING_MAP)


def _section(column: str, arr: pa.Array) -> pa.Table:
    n = len(arr)
    return pa.table(
        {f.name: (arr if f.name == column else pa.nulls(n, f.type)) for f in CHECKPOINT_SCHEMA},
        schema=CHECKPOINT_SCHEMA,
    )


def _metadata(g: _Gen) -> dict:
    return {
        "id": g.uuid(),
        "name": None,
        "description": None,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(TABLE_SCHEMA, separators=(",", ":")),
        "partitionColumns": ["date"],
        "configuration": {},
        "createdTime": BASE_TS,
    }


def build_table(spec: TableSpec, table_dir: Path) -> None:
    """Write the `_delta_log` of `spec` into `table_dir` (which must not exist)."""
    g = _Gen(spec.seed)
    log_dir = table_dir / "_delta_log"
    log_dir.mkdir(parents=True)
    dates = _dates(spec.n_partitions)
    cpv = spec.checkpoint_version

    # Checkpoint: protocol, metaData, txns, adds, expired tombstones (Spark's row order).
    meta = _metadata(g)
    paths, parts, sizes, stats = _file_rows(g, spec.n_files, dates, 0, 0)
    mtimes = BASE_TS + np.sort(g.np.integers(0, cpv * 60_000, spec.n_files)).astype(np.int64)
    adds = pa.StructArray.from_arrays(
        [
            pa.array(paths, pa.string()),
            _partition_map(parts),
            pa.array(sizes),
            pa.array(mtimes),
            pa.array(np.zeros(spec.n_files, dtype=bool)),
            pa.nulls(spec.n_files, STRING_MAP),
            pa.array(stats, pa.string()),
        ],
        fields=list(ADD),
    )
    sections = [
        _section("protocol", pa.array([{"minReaderVersion": 1, "minWriterVersion": 2}], PROTOCOL)),
        _section("metaData", pa.array([meta], METADATA)),
    ]
    if spec.n_txns:
        txns = [
            {"appId": f"app-{i}", "version": 10 * (i + 1), "lastUpdated": BASE_TS + i}
            for i in range(spec.n_txns)
        ]
        sections.append(_section("txn", pa.array(txns, TXN)))
    sections.append(_section("add", adds))
    if spec.n_removes:
        rdates = [dates[i % len(dates)] for i in range(spec.n_removes)]
        removes = [
            {
                "path": f"date={d}/part-{i:05d}-{g.uuid()}.c000.snappy.parquet",
                "deletionTimestamp": BASE_TS + i,  # long expired: dropped by checkpoints
                "dataChange": True,
                "extendedFileMetadata": True,
                "partitionValues": [("date", d)],
                "size": 1000 + i,
                "tags": None,
            }
            for i, d in enumerate(rdates)
        ]
        sections.append(_section("remove", pa.array(removes, REMOVE)))
    checkpoint = pa.concat_tables(sections)
    cp_name = f"{cpv:020d}.checkpoint.parquet"
    pq.write_table(checkpoint, log_dir / cp_name, compression="snappy")
    last = {
        "version": cpv,
        "size": checkpoint.num_rows,
        "sizeInBytes": (log_dir / cp_name).stat().st_size,
        "numOfAddFiles": spec.n_files,
    }
    (log_dir / "_last_checkpoint").write_text(json.dumps(last, separators=(",", ":")))
    cp_time = BASE_TS + cpv * 60_000
    os.utime(log_dir / cp_name, (cp_time / 1000, cp_time / 1000))

    # Commits after the checkpoint: each a commitInfo and one blind-append add.
    cpaths, cparts, csizes, cstats = _file_rows(g, spec.n_commits, dates, 10**12, 7)
    for i in range(spec.n_commits):
        version = cpv + 1 + i
        ts = BASE_TS + version * 60_000
        commit_info = {
            "timestamp": ts,
            "operation": "WRITE",
            "operationParameters": {"mode": "Append", "partitionBy": "[]"},
            "readVersion": version - 1,
            "isolationLevel": "Serializable",
            "isBlindAppend": True,
            "operationMetrics": {"numFiles": "1", "numOutputRows": "1000"},
            "engineInfo": "airflow-delta-bench",
            "txnId": g.uuid(),
        }
        add = {
            "path": cpaths[i],
            "partitionValues": {"date": cparts[i]},
            "size": int(csizes[i]),
            "modificationTime": ts,
            "dataChange": True,
            "stats": cstats[i],
        }
        lines = [
            json.dumps({"commitInfo": commit_info}, separators=(",", ":")),
            json.dumps({"add": add}, separators=(",", ":")),
        ]
        path = log_dir / f"{version:020d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (ts / 1000, ts / 1000))


def _relative(uri: str, table: Path) -> str:
    """A deltalake file URI (absolute path or file:// URI) relative to `table`."""
    for prefix in (str(table.resolve()) + "/", table.resolve().as_uri() + "/"):
        if uri.startswith(prefix):
            return uri[len(prefix) :]
    return uri


def verify_table(path: Path, spec: TableSpec) -> dict:
    """Load `path` with deltalake and with this engine; both must see the same state."""
    from deltalake import DeltaTable

    from airflow_delta.engine import DeltaLog

    dt = DeltaTable(str(path))
    dl_paths = sorted(_relative(u, path) for u in dt.file_uris())
    snap = DeltaLog.for_table(str(path)).update()
    our_paths = sorted(snap.files().field("path").to_pylist())
    out = {
        "deltalake_version": dt.version(),
        "ours_version": snap.version,
        "deltalake_files": len(dl_paths),
        "ours_files": len(our_paths),
        "expected_version": spec.latest_version,
        "expected_files": spec.active_files,
    }
    ok = (
        dt.version() == snap.version == spec.latest_version
        and len(dl_paths) == len(our_paths) == spec.active_files
        and dl_paths == our_paths
    )
    if not ok:
        raise RuntimeError(f"benchmark table {path} is not seen alike by both engines: {out}")
    return out


def get_table(spec: TableSpec = LOG_100K, verify: bool = True) -> Path:
    """The cached table of `spec` (generated, and verified once, if missing)."""
    root = DATA_DIR / spec.key
    table = root / "table"
    marker = root / "verified.json"
    if marker.exists():
        return table
    if root.exists():
        shutil.rmtree(root)
    tmp = DATA_DIR / (spec.key + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    build_table(spec, tmp / "table")
    tmp.rename(root)
    info = {"spec": asdict(spec)}
    if verify:
        info["verify"] = verify_table(table, spec)
    marker.write_text(json.dumps(info, indent=2))
    return table


def fresh_copy(spec: TableSpec, name: str) -> Path:
    """A private copy of the table of `spec` under `bench/.data/work/<name>` (replaced)."""
    src = get_table(spec)
    dst = WORK_DIR / name
    if dst.exists():
        shutil.rmtree(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dst)
    _sync_tree(dst)
    return dst


def _sync_tree(root: Path) -> None:
    """fsync a fresh copy: reading still-dirty pages while the kernel writes them back is
    several times slower and would charge whichever system happens to read first."""
    for dirpath, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def drop_copy(path: Path) -> None:
    if path.exists() and WORK_DIR in path.parents:
        shutil.rmtree(path)


# -- logs written directly (B8, B10) ---------------------------------------------------------


def created_log_actions(table_id: str, timestamp: int, operation: str) -> list[dict]:
    """commitInfo, protocol (1, 2) and metaData of a table (id long, name string, date string)
    partitioned by `date`: version 0 of the logs B8 and B10 write directly."""
    schema = {
        "type": "struct",
        "fields": [
            {"name": n, "type": t, "nullable": True, "metadata": {}}
            for n, t in (("id", "long"), ("name", "string"), ("date", "string"))
        ],
    }
    return [
        {"commitInfo": {"timestamp": timestamp, "operation": operation}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": table_id,
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": ["date"],
                "configuration": {},
                "createdTime": timestamp,
            }
        },
    ]


def write_log_commit(log_dir: Path, version: int, actions: list[dict]) -> None:
    """Write `actions` as commit `version` in `log_dir` (compact JSON, one action a line)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
    (log_dir / f"{version:020d}.json").write_text(text)


# -- tables the table-command benchmarks change (B12-B15) ---------------------------------------


def work_copy(src: Path, name: str) -> Path:
    """A private, fsynced copy of the table at `src` under `bench/.data/work/<name>`."""
    dst = WORK_DIR / name
    if dst.exists():
        shutil.rmtree(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dst)
    _sync_tree(dst)
    return dst


def run_on_copies(
    result, module: str, src: Path, reps: int, metric: str, check, systems=None
) -> None:
    """Alternating repetitions of `module`'s children (`systems`, default ours and
    deltalake), each on a fresh copy of `src` (the copy is not timed); `check(system,
    sample)` validates each sample."""
    from bench.common import SYSTEMS, record, run_child

    systems = tuple(systems or SYSTEMS)
    for rep in range(reps):
        for system in systems if rep % 2 == 0 else systems[::-1]:
            copy = work_copy(src, f"{module}-{system}")
            try:
                sample = run_child(module, system, copy, timeout=600)
            finally:
                drop_copy(copy)
            check(system, sample)
            record(result, system, sample, {"total": metric})
