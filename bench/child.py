"""Child side of a fresh-process measurement: `python -m bench.child MODULE TASK PATH`.

Runs `bench.MODULE.CHILD_TASKS[TASK](PATH)` and prints its result as one JSON line. Only the
standard library is imported before the task runs; the task times its own imports. With
`BENCH_PROFILE=<file>` in the environment the task runs under cProfile, stats dumped to <file>
(see `bench/prof.py`).
"""

from __future__ import annotations

import importlib
import json
import os
import sys


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
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
