"""B9: load the latest snapshot and list its files at 10k, 100k and 1M files: time and memory.

The tables are B1's shape (a classic checkpoint + 100 commits after it) with 10k, 100k and 1M
files in the checkpoint. Each repetition runs in a fresh process; the child times load + list
(the paths as a Python list, as B1) and reports its peak RSS. Printed as a curve: time and peak
RSS per size for both systems; the target applies at 1M (time <= 0.3, peak RSS <= 0.6).

* ours:      `DeltaLog.for_table(p).update().files(stats=False).field("path").to_pylist()`
* deltalake: `DeltaTable(p).file_uris()`

A listing needs no stats, which ours reads only when asked; one run of ours with the stats read
(`files()`, as a data-skipping read does) is reported beside, time and peak RSS, not compared.
"""

from __future__ import annotations

ID = "B9"
TITLE = "scale: load + list at 10k / 100k / 1M files (time, peak RSS)"
TARGET = 0.3
HEADLINE = "load+list @1M"
SIZES = (10_000, 100_000, 1_000_000)
RSS_TARGET = 0.6


def _label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


def run(reps: int = 5):
    import statistics
    from dataclasses import replace

    from bench.common import SYSTEMS, BenchResult, record, run_child
    from bench.tables import LOG_100K, get_table

    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {})
    rss: dict[str, dict[str, float]] = {}
    for n in SIZES:
        spec = replace(LOG_100K, n_files=n)
        path = get_table(spec)
        label = _label(n)
        samples: dict[str, list[float]] = {}
        for system in SYSTEMS:  # warm-up (discarded)
            run_child("b1_snapshot", system, path, timeout=600)
        for rep in range(reps if n < 1_000_000 else max(3, reps // 2)):
            for system in SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]:
                sample = run_child("b1_snapshot", system, path, timeout=600)
                if sample["files"] != spec.active_files:
                    raise RuntimeError(f"B9 {system} @{label}: wrong snapshot {sample}")
                record(result, system, sample, {"total": f"load+list @{label}"})
                samples.setdefault(system, []).append(sample["maxrss_mb"])
        with_stats = run_child("b1_snapshot", "ours_with_stats", path, timeout=600)
        samples.setdefault("ours_with_stats", []).append(with_stats["maxrss_mb"])
        result.info.setdefault("ours_with_stats_total_s", {})[label] = round(with_stats["total"], 3)
        for system, values in samples.items():
            rss.setdefault(system, {})[label] = round(statistics.median(values), 1)
    result.info["peak_rss_mb_median"] = rss
    top = _label(SIZES[-1])
    ratio = rss["ours"][top] / rss["deltalake"][top]
    result.info["peak_rss_ratio_at_top"] = round(ratio, 2)
    result.notes.append(f"peak RSS (median, MB) per size: {rss}")
    verdict = "PASS" if ratio <= RSS_TARGET else "MISS"
    result.notes.append(
        f"peak RSS at {top}: ours / deltalake = {ratio:.2f} (target <= {RSS_TARGET}: {verdict})"
    )
    result.notes.append("the same child as B1 (b1_snapshot); fresh process per repetition")
    return result
