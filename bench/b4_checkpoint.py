"""B4: write a checkpoint of a 100k-file table (checkpoint at 100 + 100 commits -> write v200).

Each repetition runs in a fresh process on its own fresh copy of the table, so neither system
finds an existing checkpoint at the new version:

* ours:      `dl = DeltaLog.for_table(p); s = dl.update(); dl.checkpoint(s)` (what the CLI,
  `DeltaCheckpointOperator` and the post-commit hook run)
* deltalake: `dt = DeltaTable(p); dt.create_checkpoint()`

Headline: load + checkpoint (what a user pays). The split differs between the two: `update()`
reads only the small actions, and `checkpoint()` streams the old checkpoint's file actions into
the new one, while `DeltaTable()` loads every file eagerly.

Also reported, from its own child (`ours-resolved`): a checkpoint of a snapshot whose file set was
resolved first (`s.files()` in the load phase), which writes from memory instead of streaming.
"""

from __future__ import annotations

import os
from pathlib import Path
from time import perf_counter

ID = "B4"
TITLE = "write a checkpoint of a 100k-file table (load + checkpoint)"
TARGET = 0.5
HEADLINE = "load+checkpoint"


def _checkpoint_name(version: int) -> str:
    return f"{version:020d}.checkpoint.parquet"


def _ours(path: str, resolve_files: bool = False) -> dict:
    t0 = perf_counter()
    from airflow_delta.engine import DeltaLog

    t1 = perf_counter()
    dl = DeltaLog.for_table(path)
    snap = dl.update()
    if resolve_files:
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
        "version": version,
        "checkpoint_bytes": os.path.getsize(cp) if os.path.exists(cp) else None,
    }


def _ours_resolved(path: str) -> dict:
    return _ours(path, resolve_files=True)


CHILD_TASKS = {"ours": _ours, "deltalake": _deltalake, "ours-resolved": _ours_resolved}

_METRICS = {
    "total": HEADLINE,
    "write": "checkpoint call",
    "load": "load (ours: small actions only)",
    "import": "import (not timed above)",
}
#: Metrics of the `ours-resolved` child, each compared with deltalake's same measurement.
_RESOLVED_METRICS = {
    "resolved:total": "files() first: load+checkpoint",
    "resolved:write": "files() first: checkpoint call",
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
    children = [("ours", "ours"), ("deltalake", "deltalake"), ("ours", "ours-resolved")]
    for rep in range(reps):
        for system, task in children[rep % 3 :] + children[: rep % 3]:  # rotate the order
            path = fresh_copy(spec, f"b4-{task}")
            sample = run_child("b4_checkpoint", task, path)
            if sample["version"] != spec.latest_version or not sample["checkpoint_bytes"]:
                raise RuntimeError(f"B4 {task}: no checkpoint written at v{spec.latest_version}")
            sizes[task] = sample["checkpoint_bytes"]
            if task == "deltalake":  # the baseline of the resolved-first metrics too
                sample.update({f"resolved:{k}": sample[k] for k in ("total", "write")})
            if task == "ours-resolved":
                sample = {f"resolved:{k}": sample[k] for k in ("total", "write")}
                record(result, system, sample, _RESOLVED_METRICS)
            else:
                record(result, system, sample, {**_METRICS, **_RESOLVED_METRICS})
                rss.setdefault(system, []).append(sample["maxrss_mb"])
            if rep < reps - 1 or task == "ours-resolved":
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
        "ours: DeltaLog.checkpoint(update()); deltalake: DeltaTable(p).create_checkpoint(); "
        "fresh process and fresh table copy per repetition"
    )
    if len(last) == 2:
        result.notes += _cross_check(last, spec.latest_version, spec.active_files)
    for p in last.values():
        drop_copy(Path(p))
    return result
