"""B3: 4 processes x 50 blind appends on one small table: wall time, lost and failed commits.

Each repetition of a system runs on its own fresh copy of a 10-file table (classic checkpoint
at v10, nothing after it). A fresh coordinator process (`bench.child`) starts 4 worker processes
with the `spawn` start method (deltalake panics in forked children); each imports its library
and opens the table, then all wait on one barrier; from there each makes 50 commits, each a
fresh transaction on the latest version with one add action of a data file that is not
written (log work only, as in B2):

* ours:      `dl.start_transaction().commit([AddFile], Operation("WRITE", ...))` -- default
             `CommitProperties` (max_commit_attempts 100, jittered exponential backoff)
* deltalake: `dt.update_incremental(); dt.create_write_transaction([AddAction], "append", ...)`
             -- default `CommitProperties` (max_commit_retries 15)

Wall time: from the barrier to the last commit of the last worker (`time.monotonic`, one clock
for all processes on Linux). After a run the parent reads every commit file and the final
snapshot (with both engines) and counts:

* lost: commits a worker saw succeed whose add action is not in the final table, plus versions
  missing or duplicated (final version != start + successful commits),
* failed: commits that raised (after the library's own retries),
* retries: ours exactly (`txn.attempts - 1`); deltalake does not expose its attempts, so for
  both systems `overtaken` counts the commits that landed later than read version + 1 (another
  writer committed between the refresh and the write: at least one conflict check).

Checkpoints written during the run are each system's default (ours every 10 versions,
deltalake every 100) and are part of the time; the counts are reported.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from time import perf_counter

ID = "B3"
TITLE = "4 processes x 50 blind appends on one table (wall time; zero lost, zero failed)"
TARGET = 0.5
HEADLINE = "wall (barrier->last)"

WORKERS = 4
COMMITS_PER_WORKER = 50
#: Repetitions are capped (a run takes seconds: 4 spawned interpreters + 200 commits).
MAX_REPS = 7
#: Seconds the coordinator waits for its workers.
WORKER_TIMEOUT = 150


def table_spec():
    """The table each run copies (also used by `bench/prof.py`)."""
    from bench.tables import TableSpec

    # 9 files in a classic checkpoint at v9 and one commit after it (v10, 10 files): the
    # workers commit v11 and on. (deltalake rejects a table whose latest commit file is missing.)
    return TableSpec(
        n_files=9, n_commits=1, n_partitions=10, n_removes=0, n_txns=0, checkpoint_version=9
    )


def _add_path(worker: int, i: int) -> tuple[str, dict[str, str]]:
    day = f"2024-02-{1 + (worker * COMMITS_PER_WORKER + i) % 28:02d}"
    name = f"date={day}/part-w{worker}-c{i:03d}-{uuid.uuid4()}.c000.snappy.parquet"
    return name, {"date": day}


STATS = '{"numRecords":1,"minValues":{"id":1},"maxValues":{"id":1},"nullCount":{"id":0}}'


def _worker(system: str, path: str, worker: int, n: int, barrier, queue) -> None:
    """One writer process: import, open, wait at the barrier, then `n` blind appends."""
    t0 = perf_counter()
    if system == "ours":
        from airflow_delta.engine import AddFile, DeltaLog, Operation

        dl = DeltaLog.for_table(path)
        dl.update()  # as deltalake's DeltaTable(p) below: the table is loaded before the start
        operation = Operation("WRITE", {"mode": "Append"})
    else:
        from deltalake import DeltaTable
        from deltalake.transaction import AddAction

        dt = DeltaTable(path)
        schema, partition_by = dt.schema(), dt.metadata().partition_columns
    ready = perf_counter() - t0
    commits: list[dict] = []
    errors: list[str] = []
    profile_to = os.environ.get("BENCH_PROFILE")  # bench/prof.py: profile the commit loop
    prof = None
    if profile_to:
        import cProfile

        prof = cProfile.Profile()
    barrier.wait()
    start = time.monotonic()
    if prof:
        prof.enable()
    for i in range(n):
        name, parts = _add_path(worker, i)
        now = int(time.time() * 1000)
        rec: dict = {"path": name}
        c0 = time.monotonic()
        try:
            if system == "ours":
                txn = dl.start_transaction()
                rec["read"] = txn.read_version
                try:
                    rec["version"] = txn.commit(
                        [AddFile(name, parts, 1000 + i, now, True, STATS)], operation
                    )
                finally:
                    rec["attempts"] = txn.attempts
            else:
                dt.update_incremental()
                rec["read"] = dt.version()
                dt.create_write_transaction(
                    [AddAction(name, 1000 + i, parts, now, True, STATS)],
                    mode="append",
                    schema=schema,
                    partition_by=partition_by,
                )
        except Exception as exc:  # counted as failed: the library gave up
            rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            errors.append(rec["error"])
        rec["seconds"] = time.monotonic() - c0
        commits.append(rec)
    end = time.monotonic()
    if prof:
        prof.disable()
        prof.dump_stats(f"{profile_to}.worker{worker}")
    queue.put({"worker": worker, "ready": ready, "start": start, "end": end, "commits": commits})


def _coordinate(system: str, path: str) -> dict:
    """Child task: run the workers of one system on `path`; their raw results."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(system, path, w, COMMITS_PER_WORKER, barrier, queue))
        for w in range(WORKERS)
    ]
    for p in procs:
        p.start()
    results = []
    deadline = time.monotonic() + WORKER_TIMEOUT
    try:
        for _ in procs:
            results.append(queue.get(timeout=max(1.0, deadline - time.monotonic())))
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    codes = [p.exitcode for p in procs]
    if any(codes):
        raise RuntimeError(f"B3 {system}: worker exit codes {codes}")
    return {"system": system, "workers": sorted(results, key=lambda r: r["worker"])}


def _ours(path: str) -> dict:
    return _coordinate("ours", path)


def _deltalake(path: str) -> dict:
    return _coordinate("deltalake", path)


CHILD_TASKS = {"ours": _ours, "deltalake": _deltalake}


def _analyse(path: Path, raw: dict, start_version: int, start_files: int) -> dict:
    """Wall time and the lost / failed / retried commits of one run, from the log itself."""
    from deltalake import DeltaTable

    from airflow_delta.engine import DeltaLog
    from bench.tables import _relative

    workers = raw["workers"]
    commits = [c for w in workers for c in w["commits"]]
    ok = [c for c in commits if "error" not in c]
    failed = [c for c in commits if "error" in c]

    # Which version holds which add: read every commit file written during the run.
    log_dir = path / "_delta_log"
    landed: dict[str, list[int]] = {}
    versions = sorted(int(p.name[:20]) for p in log_dir.glob("*.json") if p.name[:20].isdigit())
    versions = [v for v in versions if v > start_version]
    for v in versions:
        for line in (log_dir / f"{v:020d}.json").read_text().splitlines():
            add = json.loads(line).get("add") if line.strip() else None
            if add:
                landed.setdefault(add["path"], []).append(v)

    snap = DeltaLog.for_table(str(path)).update()
    ours_paths = set(snap.files().field("path").to_pylist())
    dt = DeltaTable(str(path))
    dl_paths = {_relative(u, path) for u in dt.file_uris()}
    final = snap.version
    expected = start_version + len(ok)
    lost_adds = [c["path"] for c in ok if c["path"] not in ours_paths or c["path"] not in dl_paths]
    duplicated = [p for p, vs in landed.items() if len(vs) > 1]
    contiguous = versions == list(range(start_version + 1, final + 1))
    overtaken = 0
    for c in ok:
        vs = landed.get(c["path"])
        if vs and vs[0] > c["read"] + 1:
            overtaken += 1
    retries = None
    if raw["system"] == "ours":
        retries = sum(c["attempts"] - 1 for c in commits if "attempts" in c)
        wrong = [c for c in ok if landed.get(c["path"], [None])[0] != c["version"]]
        if wrong:
            lost_adds += [c["path"] for c in wrong]
    checkpoints = [
        p for p in log_dir.glob("*.checkpoint*.parquet") if int(p.name[:20]) > start_version
    ]
    return {
        "wall": max(w["end"] for w in workers) - min(w["start"] for w in workers),
        "start_skew": max(w["start"] for w in workers) - min(w["start"] for w in workers),
        "ready": max(w["ready"] for w in workers),
        "attempted": len(commits),
        "succeeded": len(ok),
        "failed": len(failed),
        "errors": sorted({c["error"] for c in failed})[:3],
        "final_version": final,
        "expected_version": expected,
        "deltalake_version": dt.version(),
        "lost": len(lost_adds)
        + max(0, expected - final)
        + len(duplicated)
        + (0 if contiguous else 1),
        "extra_versions": max(0, final - expected),
        "files": len(ours_paths),
        "expected_files": start_files + len(ok),
        "retries": retries,
        "overtaken": overtaken,
        "checkpoints_written": len(checkpoints),
    }


def run(reps: int = 9):
    import statistics

    from bench.common import SYSTEMS, BenchResult, run_child
    from bench.tables import drop_copy, fresh_copy

    spec = table_spec()
    reps = max(1, min(reps, MAX_REPS))
    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {})
    result.info.update(
        table=spec.key, workers=WORKERS, commits_per_worker=COMMITS_PER_WORKER, reps=reps
    )
    runs: dict[str, list[dict]] = {s: [] for s in SYSTEMS}
    for rep in range(reps):
        order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
        for system in order:
            path = fresh_copy(spec, f"b3-{system}")
            raw = run_child("b3_concurrent", system, path, timeout=WORKER_TIMEOUT + 30)
            a = _analyse(path, raw, spec.latest_version, spec.active_files)
            runs[system].append(a)
            result.metric(HEADLINE).samples[system].append(a["wall"])
            result.metric("per commit (wall / 200)").samples[system].append(
                a["wall"] / max(1, a["attempted"])
            )
            drop_copy(path)
            os.sync()

    summary = {}
    for system, rs in runs.items():
        summary[system] = {
            "lost": sum(r["lost"] for r in rs),
            "failed": sum(r["failed"] for r in rs),
            "extra_versions": sum(r["extra_versions"] for r in rs),
            "retries": None if rs[0]["retries"] is None else sum(r["retries"] for r in rs),
            "overtaken": sum(r["overtaken"] for r in rs),
            "commits": sum(r["attempted"] for r in rs),
            "checkpoints_per_run": statistics.median(r["checkpoints_written"] for r in rs),
            "final_version_ok": sum(r["final_version"] == r["expected_version"] for r in rs),
            "runs": len(rs),
            "max_start_skew_ms": round(1000 * max(r["start_skew"] for r in rs), 1),
            "errors": sorted({e for r in rs for e in r["errors"]})[:3],
        }
    result.info["summary"] = summary
    result.info["runs"] = runs
    ours = summary["ours"]
    for system, s in summary.items():
        retries = "n/a (not exposed)" if s["retries"] is None else s["retries"]
        result.notes.append(
            f"{system}: {s['commits']} commits in {reps} runs: lost {s['lost']}, failed "
            f"{s['failed']}, retries {retries}, overtaken {s['overtaken']}; final version = "
            f"start + successful commits in {s['final_version_ok']}/{s['runs']} runs; "
            f"checkpoints per run {s['checkpoints_per_run']:g}"
            + (f"; errors: {s['errors']}" if s["errors"] else "")
        )
    # Zero lost and zero failed is required of this project: a MISS whatever the ratio.
    if ours["lost"]:
        result.failed_requirements.append(f"ours lost {ours['lost']} commits")
    if ours["failed"]:
        result.failed_requirements.append(f"ours failed {ours['failed']} commits")
    result.notes.append(
        f"{WORKERS} spawned processes x {COMMITS_PER_WORKER} commits, start barrier, fresh "
        f"10-file table per run; ours: start_transaction().commit([AddFile]); deltalake: "
        f"update_incremental() + create_write_transaction([AddAction]); log-only"
    )
    return result
