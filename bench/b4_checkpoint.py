"""B4: write a checkpoint of a 100k-file table (checkpoint at 100 + 100 commits -> write v200).

Each repetition runs in a fresh process on its own fresh copy of the table, so neither system
finds an existing checkpoint at the new version:

* ours:      `dl = DeltaLog.for_table(p); s = dl.update(); s.files(); dl.checkpoint(s)`
* deltalake: `dt = DeltaTable(p); dt.create_checkpoint()`

Headline: load + checkpoint (what a user pays). Also reported: the checkpoint write alone of an
already-loaded table (`s.files()` is called in the load phase so that our lazily resolved
file set is materialised there, as deltalake's `DeltaTable()` does eagerly).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from time import perf_counter

ID = "B4"
TITLE = "write a checkpoint of a 100k-file table (load + checkpoint)"
TARGET = 0.5
HEADLINE = "load+checkpoint"


def _checkpoint_name(version: int) -> str:
    return f"{version:020d}.checkpoint.parquet"


def _ours(path: str) -> dict:
    t0 = perf_counter()
    from airflow_delta.engine import DeltaLog

    t1 = perf_counter()
    dl = DeltaLog.for_table(path)
    snap = dl.update()
    snap.files()
    t2 = perf_counter()
    dl.checkpoint(snap)
    t3 = perf_counter()
    return _sample(path, snap.version, t0, t1, t2, t3)


def _deltalake(path: str) -> dict:
    t0 = perf_counter()
    from deltalake import DeltaTable

    t1 = perf_counter()
    dt = DeltaTable(path)
    t2 = perf_counter()
    dt.create_checkpoint()
    t3 = perf_counter()
    return _sample(path, dt.version(), t0, t1, t2, t3)


def _sample(path: str, version: int, t0: float, t1: float, t2: float, t3: float) -> dict:
    cp = os.path.join(path, "_delta_log", _checkpoint_name(version))
    return {
        "import": t1 - t0,
        "load": t2 - t1,
        "write": t3 - t2,
        "total": t3 - t1,
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "version": version,
        "checkpoint_bytes": os.path.getsize(cp) if os.path.exists(cp) else None,
    }


CHILD_TASKS = {"ours": _ours, "deltalake": _deltalake}

_METRICS = {
    "total": HEADLINE,
    "write": "checkpoint write only",
    "load": "load",
    "import": "import (not timed above)",
}


def _cross_check(paths: dict[str, str], version: int, files: int) -> list[str]:
    """Each system reads the checkpoint the other wrote (via `_last_checkpoint`)."""
    from deltalake import DeltaTable

    from airflow_delta.engine import DeltaLog

    notes = []
    ours_cp = DeltaLog.for_table(paths["deltalake"]).update()
    n_ours = len(ours_cp.files())
    if ours_cp.log_segment.checkpoint_version != version or n_ours != files:
        raise RuntimeError(f"B4: ours reading deltalake's checkpoint: {n_ours} files")
    dt = DeltaTable(paths["ours"])
    n_dl = len(dt.file_uris())
    if dt.version() != version or n_dl != files:
        raise RuntimeError(f"B4: deltalake reading our checkpoint: {n_dl} files")
    notes.append(
        f"cross-read OK: each system reads the other's v{version} checkpoint ({files} files)"
    )
    return notes


def run(reps: int = 9):
    import statistics

    from bench.common import SYSTEMS, BenchResult, record, run_child
    from bench.tables import LOG_100K, drop_copy, fresh_copy

    spec = LOG_100K
    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {})
    result.info["table"] = spec.key
    rss: dict[str, list[float]] = {}
    sizes: dict[str, int | None] = {}
    last: dict[str, str] = {}
    for system in SYSTEMS:  # warm-up (discarded)
        path = fresh_copy(spec, f"b4-{system}")
        run_child("b4_checkpoint", system, path)
        drop_copy(path)
        os.sync()
    for rep in range(reps):
        order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
        for system in order:
            path = fresh_copy(spec, f"b4-{system}")
            sample = run_child("b4_checkpoint", system, path)
            if sample["version"] != spec.latest_version or not sample["checkpoint_bytes"]:
                raise RuntimeError(f"B4 {system}: no checkpoint written at v{spec.latest_version}")
            sizes[system] = sample["checkpoint_bytes"]
            record(result, system, sample, _METRICS)
            rss.setdefault(system, []).append(sample["maxrss_mb"])
            if rep < reps - 1:
                drop_copy(path)
            else:
                last[system] = str(path)
            # Flush what this run wrote (deltalake does not fsync its checkpoint): on ext4 the
            # next run's fsync would otherwise pay for writing back the previous run's file.
            os.sync()
    result.info["checkpoint_bytes"] = sizes
    result.info["peak_rss_mb_median"] = {k: round(statistics.median(v), 1) for k, v in rss.items()}
    result.notes.append(f"peak RSS of the child (median, MB): {result.info['peak_rss_mb_median']}")
    result.notes.append(
        "ours: DeltaLog.checkpoint() after update()+files(); deltalake: "
        "DeltaTable(p).create_checkpoint(); fresh process and fresh table copy per repetition"
    )
    if len(last) == 2:
        result.notes += _cross_check(last, spec.latest_version, spec.active_files)
    for p in last.values():
        drop_copy(Path(p))
    return result
