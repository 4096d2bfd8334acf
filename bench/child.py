"""Child side of a fresh-process measurement: `python -m bench.child MODULE TASK PATH`.

Runs `bench.MODULE.CHILD_TASKS[TASK](PATH)` and prints its result, plus the process's peak RSS
(`maxrss_mb`), as one JSON line. Only the standard library is imported before the task runs;
the task times its own imports. With `BENCH_PROFILE=<file>` in the environment the task runs
under cProfile, stats dumped to <file> (see `bench/prof.py`).
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys


def peak_rss_mb() -> float:
    """This process's peak RSS in MB since its exec (`VmHWM`; `ru_maxrss` would carry over the
    parent's high-water mark through fork and exec). A Spark JVM is a child: not included."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str]) -> int:
    module, task, path = argv
    fn = importlib.import_module(f"bench.{module}").CHILD_TASKS[task]
    out = os.environ.get("BENCH_PROFILE")
    if out:
        import cProfile

        prof = cProfile.Profile()
        result = prof.runcall(fn, path)
        prof.dump_stats(out)
    else:
        result = fn(path)
    result["maxrss_mb"] = peak_rss_mb()
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
