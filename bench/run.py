"""Run the benchmarks of DESIGN.md "Targets": this project vs deltalake on the same tables.

    .venv/bin/python -m bench.run              # all benchmarks available
    .venv/bin/python -m bench.run B1 B4 --reps 7
    .venv/bin/python bench/run.py B1

Prints medians, the ratio ours/deltalake, the target and PASS/MISS per benchmark, and writes
`bench/results.json`. Benchmark tables are generated once and cached under `bench/.data/`.
The Spark runs (B5 vs Spark's own parquet writer, B6's merge of a Spark DataFrame) start a JVM
per run and cap their repetitions at 3 (about 4 minutes together on 2 cores).

To add a benchmark: create `bench/bN_name.py` (see `bench/common.py` for what it exposes) and
list it in `BENCHMARKS` below.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as a script: `python bench/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench.common import SYSTEMS, BenchResult, environment, fmt_ratio, fmt_s

#: Benchmark id -> module in `bench/`.
BENCHMARKS: dict[str, str] = {
    "B1": "b1_snapshot",
    "B2": "b2_commit",
    "B3": "b3_concurrent",
    "B4": "b4_checkpoint",
    "B5": "b5_spark_write",
    "B6": "b6_merge",
    "B6s": "b6s_spark_merge",
    "B7": "b7_sensor",
    "B8": "b8_json_replay",
    "B9": "b9_scale",
    "B10": "b10_skipping",
    "B11": "b11_dag_parse",
    "B12": "b12_optimize",
    "B13": "b13_delete",
    "B14": "b14_restore",
    "B15": "b15_cdf_merge",
}

RESULTS = Path(__file__).resolve().parent / "results.json"


def print_result(r: BenchResult, elapsed: float) -> None:
    status = "PASS" if r.passed else "MISS"
    reps = f", {r.info['reps']} reps" if "reps" in r.info else ""
    print(f"\n{r.id}  {r.title}   [{elapsed:.0f} s{reps}]")
    print(f"    {'metric':<30} {'ours':>11} {r.baseline[:11]:>11} {'ratio':>7}")
    for name, m in r.metrics.items():
        mark = f"   target <= {r.target:g}: {status}" if name == r.headline else ""
        print(
            f"    {name:<30} {fmt_s(m.median('ours'))} {fmt_s(m.median(r.baseline))} "
            f"{fmt_ratio(m.ratio):>7}{mark}"
        )
    for note in r.notes:
        print(f"    - {note}")
    for failure in r.failed_requirements:
        print(f"    - MISS: {failure}")


def print_summary(results: list[BenchResult]) -> None:
    print("\nSummary (medians; ratio = ours / baseline (deltalake unless named), lower is better)")
    print(f"  {'id':<4} {'metric':<18} {'ours':>11} {'baseline':>11} {'ratio':>6} {'target':>7}  ")
    for r in results:
        m = r.metrics[r.headline]
        versus = "" if r.baseline == SYSTEMS[1] else f"  (vs {r.baseline})"
        print(
            f"  {r.id:<4} {r.headline:<18} {fmt_s(m.median('ours'))} "
            f"{fmt_s(m.median(r.baseline))} {fmt_ratio(m.ratio):>6} "
            f"{'<= ' + format(r.target, 'g'):>7}  {'PASS' if r.passed else 'MISS'}{versus}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "ids", nargs="*", help=f"benchmarks to run (default: {' '.join(BENCHMARKS)})"
    )
    parser.add_argument("--reps", type=int, default=9, help="repetitions per system (default 9)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results JSON file")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when a benchmark misses its target"
    )
    args = parser.parse_args(argv)
    by_upper = {b.upper(): b for b in BENCHMARKS}
    ids = [by_upper.get(i.upper(), i) for i in args.ids] or list(BENCHMARKS)
    unknown = [i for i in ids if i not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; available: {list(BENCHMARKS)}")

    env = environment()
    print(
        f"airflow-delta benchmarks: {' '.join(ids)}, {args.reps} reps each, fresh process per "
        f"rep; {SYSTEMS[0]} vs {SYSTEMS[1]} {env['deltalake']}, pyarrow {env['pyarrow']}, "
        f"python {env['python']}, {env['cpus']} cpus, load average {env['loadavg_at_start']}"
    )
    results: list[BenchResult] = []
    start = time.perf_counter()
    for bid in ids:
        module = importlib.import_module(f"bench.{BENCHMARKS[bid]}")
        t0 = time.perf_counter()
        r = module.run(reps=args.reps)
        elapsed = time.perf_counter() - t0
        r.info["elapsed_s"] = round(elapsed, 1)
        results.append(r)
        print_result(r, elapsed)
    print_summary(results)
    payload = {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "reps": args.reps,
        "environment": env,
        "elapsed_s": round(time.perf_counter() - start, 1),
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "results": {r.id: r.to_json() for r in results},
    }
    if args.out.exists() and set(ids) != set(BENCHMARKS):
        # A partial run updates its benchmarks and keeps the others' last results.
        try:
            previous = json.loads(args.out.read_text()).get("results", {})
        except ValueError:
            previous = {}
        payload["results"] = {**previous, **payload["results"]}
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nwrote {args.out}  ({payload['elapsed_s']:.0f} s)")
    return 1 if args.strict and not all(r.passed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
