"""B1: load the latest snapshot and list the active files (100k-file checkpoint + 100 commits).

Each repetition runs in a fresh process; the child times load + list (imports excluded and
reported separately). Comparable calls, both ending in a Python list of the 100,100 paths:

* ours:      `DeltaLog.for_table(p).update().files(stats=False).field("path").to_pylist()`
* deltalake: `DeltaTable(p).file_uris()`

`load` and `list` are reported separately too, but only the total is comparable: our replay
resolves the file set lazily (in `files()`), deltalake's `DeltaTable()` loads it eagerly.
`list (arrow)` is ours without the conversion to Python strings. A listing does not need the
files' stats, which the engine reads only when asked (`files(stats=False)`); deltalake loads
them eagerly. B9 also reports ours with the stats read (`ours_with_stats`).
"""

from __future__ import annotations

from time import perf_counter

ID = "B1"
TITLE = "load latest snapshot + list files (100k files, checkpoint + 100 commits)"
TARGET = 0.3  # issue 13: also with many actions in the commits after the checkpoint
HEADLINE = "load+list"


def _ours(path: str, stats: bool = False) -> dict:
    t0 = perf_counter()
    from airflow_delta.engine import DeltaLog

    t1 = perf_counter()
    snap = DeltaLog.for_table(path).update()
    t2 = perf_counter()
    arrow_paths = snap.files(stats=stats).field("path")
    t3 = perf_counter()
    paths = arrow_paths.to_pylist()
    t4 = perf_counter()
    return {
        "import": t1 - t0,
        "load": t2 - t1,
        "list": t4 - t2,
        "list_arrow": t3 - t2,
        "total": t4 - t1,
        "version": snap.version,
        "files": len(paths),
    }


def _deltalake(path: str) -> dict:
    t0 = perf_counter()
    from deltalake import DeltaTable

    t1 = perf_counter()
    dt = DeltaTable(path)
    t2 = perf_counter()
    paths = dt.file_uris()
    t3 = perf_counter()
    return {
        "import": t1 - t0,
        "load": t2 - t1,
        "list": t3 - t2,
        "total": t3 - t1,
        "version": dt.version(),
        "files": len(paths),
    }


def _ours_with_stats(path: str) -> dict:
    """Ours, with the files' stats read too (as a data-skipping read needs them)."""
    return _ours(path, stats=True)


CHILD_TASKS = {"ours": _ours, "deltalake": _deltalake, "ours_with_stats": _ours_with_stats}

_METRICS = {
    "total": HEADLINE,
    "load": "load",
    "list": "list",
    "list_arrow": "list (arrow, no to_pylist)",
    "import": "import (not timed above)",
}


def run(reps: int = 9):
    import statistics

    from bench.common import SYSTEMS, BenchResult, record, run_child
    from bench.tables import LOG_100K, get_table

    spec = LOG_100K
    path = get_table(spec)
    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {})
    result.info["table"] = spec.key
    rss: dict[str, list[float]] = {}
    for system in SYSTEMS:  # warm-up (discarded): shared libraries and the table into the cache
        run_child("b1_snapshot", system, path)
    for rep in range(reps):
        order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
        for system in order:
            sample = run_child("b1_snapshot", system, path)
            if sample["version"] != spec.latest_version or sample["files"] != spec.active_files:
                raise RuntimeError(f"B1 {system}: wrong snapshot {sample}")
            record(result, system, sample, _METRICS)
            rss.setdefault(system, []).append(sample["maxrss_mb"])
    result.info["peak_rss_mb_median"] = {k: round(statistics.median(v), 1) for k, v in rss.items()}
    result.notes.append(f"peak RSS of the child (median, MB): {result.info['peak_rss_mb_median']}")
    result.notes.append(
        "ours: DeltaLog.for_table(p).update().files(stats=False).field('path').to_pylist(); "
        "deltalake: DeltaTable(p).file_uris(); fresh process per repetition"
    )
    return result
