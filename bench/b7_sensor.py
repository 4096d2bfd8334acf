"""B7: sensor poll -- the cost of detecting a new version must not grow with history length.

Two tables written as log JSON directly, one add per commit, with a classic checkpoint every
100 versions (written by the engine) as a real table has: latest version 100 and 10,000. Each
repetition is a fresh process on the cached table; a "writer" in that process appends commit
files (JSON written directly) and the parent removes them before the next repetition. Timed,
median of `INNER` detections per process (imports excluded):

* ours, the trigger's poll: `poll_table_version(log, baseline)` + `version_event(log, check)`
  on the trigger's DeltaLog, baseline = the previous latest version, one new commit appended;
  also a poll that finds nothing new, a cold poll (a new DeltaLog, as a sensor poke builds),
  and `DeltaTableVersionTrigger(...).run()` until its event (in one event loop);
* deltalake: `dt.update_incremental(); dt.version()` on an already-loaded table (new commit /
  nothing new), and the cold `DeltaTable(p).version()`.

Headline: ours at 10,000 versions / ours at 100 (target "flat": <= 1.5), measured in the same
processes: each repetition also runs a child that alternates `PAIRED` detections on the two
tables (one new commit on each, the trigger's poll), so the speed one process happens to get
(it varies by a third from one process to the next for the same ~100 us poll) weighs on both
sizes alike. The other metrics are this project / deltalake at each size.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from time import perf_counter, time

ID = "B7"
TITLE = "sensor poll: detect one new version, 100 vs 10,000 versions of history"
TARGET = 1.5
HEADLINE = "poll 10k / 100 (ours)"

#: Latest versions of the two tables.
SIZES = (100, 10_000)
CHECKPOINT_INTERVAL = 100
#: Detections timed per process (the median is the sample).
INNER = 25
#: Alternating detections (each size) per process of the headline's paired child.
PAIRED = 200
#: Bump when the generated layout changes, so cached tables are rebuilt.
GENERATOR_VERSION = 1
BASE_TS = 1_704_067_200_000  # 2024-01-01T00:00:00Z

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "date", "type": "string", "nullable": True, "metadata": {}},
    ],
}


def _commit(version: int, ts: int) -> bytes:
    """The commit file of a blind append of one file at `version`."""
    day = f"2024-01-{version % 28 + 1:02d}"
    actions: list[dict] = [
        {
            "commitInfo": {
                "timestamp": ts,
                "operation": "WRITE",
                "operationParameters": {"mode": "Append", "partitionBy": '["date"]'},
                "readVersion": version - 1,
                "isBlindAppend": True,
            }
        }
    ]
    if version == 0:
        actions[0]["commitInfo"].update(operation="CREATE TABLE", readVersion=None)
        actions.append({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
        actions.append(
            {
                "metaData": {
                    "id": "b7-sensor-table",
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": json.dumps(SCHEMA),
                    "partitionColumns": ["date"],
                    "configuration": {},
                    "createdTime": ts,
                }
            }
        )
    actions.append(
        {
            "add": {
                "path": f"date={day}/part-{version:05d}-b7.c000.snappy.parquet",
                "partitionValues": {"date": day},
                "size": 1000 + version,
                "modificationTime": ts,
                "dataChange": True,
                "stats": '{"numRecords":1,"minValues":{"id":1},"maxValues":{"id":1}}',
            }
        }
    )
    return b"".join(json.dumps(a).encode() + b"\n" for a in actions)


def _commit_path(table: str | Path, version: int) -> Path:
    return Path(table) / "_delta_log" / f"{version:020d}.json"


def build_table(latest: int, table: Path) -> None:
    """Commits 0 .. `latest` written directly, a checkpoint every CHECKPOINT_INTERVAL."""
    from airflow_delta.engine import DeltaLog

    (table / "_delta_log").mkdir(parents=True)
    for version in range(latest + 1):
        _commit_path(table, version).write_bytes(_commit(version, BASE_TS + version * 60_000))
        if version and version % CHECKPOINT_INTERVAL == 0:
            DeltaLog.for_table(str(table)).checkpoint()


def get_table(latest: int) -> Path:
    """The cached table whose latest version is `latest` (built and verified if missing)."""
    from deltalake import DeltaTable

    from airflow_delta.engine import DeltaLog
    from bench.tables import DATA_DIR

    root = DATA_DIR / f"b7-v{latest}-i{CHECKPOINT_INTERVAL}-g{GENERATOR_VERSION}"
    table, marker = root / "table", root / "verified.json"
    if marker.exists():
        return table
    shutil.rmtree(root, ignore_errors=True)
    build_table(latest, table)
    seen = {
        "ours": DeltaLog.for_table(str(table)).update().version,
        "deltalake": DeltaTable(str(table)).version(),
    }
    if set(seen.values()) != {latest}:
        raise RuntimeError(f"B7 table {table} is not at version {latest} for both: {seen}")
    marker.write_text(json.dumps({"latest": latest, "seen": seen}))
    return table


def reset_table(table: Path, latest: int) -> None:
    """Remove what a repetition appended after `latest`."""
    for f in (table / "_delta_log").iterdir():
        if f.name[:20].isdigit() and int(f.name[:20]) > latest:
            f.unlink()


class _Writer:
    """Appends the next commit of the table, as a concurrent writer would."""

    def __init__(self, table: str, version: int) -> None:
        self.table, self.version = table, version

    def commit(self) -> int:
        self.version += 1
        with open(_commit_path(self.table, self.version), "xb") as f:
            f.write(_commit(self.version, int(time() * 1000)))
        return self.version


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def _ours(path: str) -> dict:
    t0 = perf_counter()
    import asyncio

    from airflow_delta.engine import DeltaLog
    from airflow_delta.triggers.version import (
        DeltaTableVersionTrigger,
        current_version,
        poll_table_version,
        version_event,
    )

    t1 = perf_counter()
    log = DeltaLog.for_table(path)
    baseline = current_version(log)
    writer = _Writer(path, baseline)
    new, same, cold, runs = [], [], [], []
    for _ in range(INNER):
        s = perf_counter()
        check = poll_table_version(log, baseline)
        same.append(perf_counter() - s)
        assert not check.done and check.version == baseline, check
        writer.commit()
        s = perf_counter()
        check = poll_table_version(log, baseline)
        event = version_event(log, check)
        new.append(perf_counter() - s)
        assert check.done and event["version"] == baseline + 1 == writer.version, event
        assert event["operation"] == "WRITE"
        baseline = check.version
    for _ in range(INNER):
        writer.commit()
        s = perf_counter()
        fresh = DeltaLog.for_table(path)
        event = version_event(fresh, poll_table_version(fresh, baseline))
        cold.append(perf_counter() - s)
        assert event["version"] == writer.version, event
        baseline = event["version"]

    async def trigger_runs() -> None:
        nonlocal baseline
        for _ in range(INNER):
            writer.commit()
            trigger = DeltaTableVersionTrigger(path, baseline, poll_interval=0.0)
            s = perf_counter()
            event = await anext(trigger.run())
            runs.append(perf_counter() - s)
            assert event.payload["event"]["version"] == writer.version, event
            baseline = writer.version

    asyncio.run(trigger_runs())
    return {
        "import": t1 - t0,
        "poll_new": _median(new),
        "poll_same": _median(same),
        "cold": _median(cold),
        "trigger_run": _median(runs),
        "last_version": writer.version,
    }


def _deltalake(path: str) -> dict:
    t0 = perf_counter()
    from deltalake import DeltaTable

    t1 = perf_counter()
    dt = DeltaTable(path)
    baseline = dt.version()
    writer = _Writer(path, baseline)
    new, same, cold = [], [], []
    for _ in range(INNER):
        s = perf_counter()
        dt.update_incremental()
        version = dt.version()
        same.append(perf_counter() - s)
        assert version == baseline, (version, baseline)
        writer.commit()
        s = perf_counter()
        dt.update_incremental()
        version = dt.version()
        new.append(perf_counter() - s)
        assert version == baseline + 1 == writer.version, (version, baseline)
        baseline = version
    for _ in range(INNER):
        writer.commit()
        s = perf_counter()
        version = DeltaTable(path).version()
        cold.append(perf_counter() - s)
        assert version == writer.version, (version, writer.version)
    return {
        "import": t1 - t0,
        "poll_new": _median(new),
        "poll_same": _median(same),
        "cold": _median(cold),
        "last_version": writer.version,
    }


def _ours_paired(paths: str) -> dict:
    """The trigger's poll of one new commit, alternating between the tables `paths` names
    (small, large; joined by os.pathsep): the median per table, from one process."""
    from airflow_delta.engine import DeltaLog
    from airflow_delta.triggers.version import current_version, poll_table_version, version_event

    polls = []
    for path in paths.split(os.pathsep):
        log = DeltaLog.for_table(path)
        baseline = current_version(log)
        polls.append((log, _Writer(path, baseline), [baseline], []))
    for _ in range(PAIRED):
        for log, writer, baseline, times in polls:
            writer.commit()
            s = perf_counter()
            check = poll_table_version(log, baseline[0])
            event = version_event(log, check)
            times.append(perf_counter() - s)
            assert check.done and event["version"] == writer.version, event
            baseline[0] = check.version
    small, large = (_median(times) for *_, times in polls)
    return {"small": small, "large": large, "last_versions": [w.version for _, w, *_ in polls]}


CHILD_TASKS = {"ours": _ours, "deltalake": _deltalake, "ours_paired": _ours_paired}


def _label(latest: int) -> str:
    return "10k" if latest == 10_000 else str(latest)


def _metrics(latest: int) -> dict[str, str]:
    n = _label(latest)
    return {
        "poll_new": f"poll, new version @{n}",
        "poll_same": f"poll, nothing new @{n}",
        "cold": f"open+poll (cold) @{n}",
        "trigger_run": f"trigger.run() event @{n}",
    }


def run(reps: int = 9):
    import statistics

    from bench.common import SYSTEMS, BenchResult, Metric, record, run_child
    from bench.tables import DATA_DIR

    # Importing the trigger imports Airflow, which writes its config into AIRFLOW_HOME.
    os.environ.setdefault("AIRFLOW_HOME", str(DATA_DIR / "airflow-home"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    small = SIZES[0]
    flat = Metric(HEADLINE, systems=("ours", f"ours@{small}"))
    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {HEADLINE: flat})
    tables = {latest: get_table(latest) for latest in SIZES}
    result.info["tables"] = {latest: str(t) for latest, t in tables.items()}
    result.info["inner_detections_per_process"] = INNER
    imports: dict[str, list[float]] = {}
    for latest, table in tables.items():  # warm-up (discarded)
        for system in SYSTEMS:
            reset_table(table, latest)
            run_child("b7_sensor", system, table)
    for rep in range(reps):
        order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
        for latest, table in tables.items():
            for system in order:
                reset_table(table, latest)
                sample = run_child("b7_sensor", system, table)
                if sample["last_version"] != latest + (3 if system == "ours" else 2) * INNER:
                    raise RuntimeError(f"B7 {system} @{latest}: missed versions: {sample}")
                record(result, system, sample, _metrics(latest))
                imports.setdefault(system, []).append(sample["import"])
        for latest, table in tables.items():
            reset_table(table, latest)
        paired = os.pathsep.join(str(tables[latest]) for latest in SIZES)
        sample = run_child("b7_sensor", "ours_paired", paired)
        if sample["last_versions"] != [latest + PAIRED for latest in SIZES]:
            raise RuntimeError(f"B7 paired polls missed versions: {sample}")
        flat.samples["ours"].append(sample["large"])
        flat.samples[f"ours@{small}"].append(sample["small"])
    for latest, table in tables.items():
        reset_table(table, latest)
    for system, xs in imports.items():
        result.notes.append(f"import, not timed ({system}): {statistics.median(xs) * 1000:.0f} ms")

    def growth(system: str, key: str) -> str:
        a, b = (result.metrics[_metrics(v)[key]].median(system) for v in SIZES)
        return "-" if not a or b is None else f"{b / a:.2f}"

    result.notes.append(
        f"growth 10k / 100 versions -- ours: poll new {growth('ours', 'poll_new')}, poll nothing "
        f"new {growth('ours', 'poll_same')}, cold {growth('ours', 'cold')}, trigger.run() "
        f"{growth('ours', 'trigger_run')}; deltalake: update_incremental new "
        f"{growth('deltalake', 'poll_new')}, nothing new {growth('deltalake', 'poll_same')}, "
        f"DeltaTable(p).version() {growth('deltalake', 'cold')}"
    )
    micros = ", ".join(
        f"{name} {m.median('ours') * 1e6:.0f}"
        for name, m in result.metrics.items()
        if name != HEADLINE and m.median("ours") is not None
    )
    result.notes.append(f"ours in microseconds (medians): {micros}")
    result.notes.append(
        f"{HEADLINE}: ours' poll of a new version on the 10k-version table (first column) over "
        f"the same on the 100-version table ({flat.systems[1]}), not a ratio to deltalake; "
        f"each sample the median of {PAIRED} detections per table in one process alternating "
        f"between the two (the separate processes' ratio: poll new below)"
    )
    result.notes.append(
        "ours: poll_table_version + version_event (the trigger's poll: probes N.json from the "
        "baseline, reads the new commit's commitInfo); deltalake: update_incremental() + "
        f"version() on a loaded DeltaTable; cold: new DeltaLog + poll vs DeltaTable(p).version(); "
        f"median of {INNER} detections per fresh process, checkpoint every "
        f"{CHECKPOINT_INTERVAL} versions"
    )
    return result
