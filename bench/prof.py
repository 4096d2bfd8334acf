"""Profile our side of a benchmark in a fresh process, as the benchmark runs it.

    .venv/bin/python -m bench.prof B1            # cProfile of ours, top entries
    .venv/bin/python -m bench.prof B4 --system deltalake --top 40
    .venv/bin/python -m bench.prof B3              # the 4 workers' commit loops, summed

The child task runs under cProfile (imports included, as they happen inside the task);
the stats are printed sorted by cumulative and by own time. Benchmarks with worker processes
(B3) profile each worker's timed loop instead (`<stats>.workerN`), printed summed.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import os
import pstats
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench.common import SYSTEMS, run_child
from bench.run import BENCHMARKS
from bench.tables import LOG_100K, drop_copy, fresh_copy, get_table

#: Benchmarks whose task writes to the table: profile them on a fresh copy.
WRITES = {"B2", "B4"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("id", choices=sorted(BENCHMARKS))
    parser.add_argument("--system", choices=SYSTEMS, default="ours")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    bid = args.id.upper()
    module = importlib.import_module(f"bench.{BENCHMARKS[bid]}")
    if not getattr(module, "PROFILE", True):
        parser.error(
            f"{bid} runs on Spark: a cProfile of the driver only shows py4j waits. Its phase "
            f"metrics (`python -m bench.run {bid}`) split ours' time instead."
        )
    spec = module.table_spec() if hasattr(module, "table_spec") else LOG_100K
    writes = bid in WRITES or hasattr(module, "table_spec")
    path = fresh_copy(spec, f"prof-{bid}") if writes else get_table(spec)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "stats")
        os.environ["BENCH_PROFILE"] = out
        try:
            sample = run_child(BENCHMARKS[bid], args.system, path)
        finally:
            del os.environ["BENCH_PROFILE"]
            if writes:
                drop_copy(path)
        print(f"{bid} {args.system}: {str(sample)[:2000]}")
        workers = sorted(glob.glob(out + ".worker*"))
        stats = pstats.Stats(*workers) if workers else pstats.Stats(out)
        stats.sort_stats("cumulative").print_stats(args.top)
        stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
