"""Child-side helpers of the Spark benchmarks (B5, B6): the session they share and phase timers.

Imports only the standard library at top level (like the benchmark modules): a child pays for
Spark when its task starts the session, outside the timed region.
"""

from __future__ import annotations

import functools
from time import perf_counter
from typing import Any

#: The session every Spark benchmark child starts (`get_spark(MASTER, conf=SPARK_CONF)`).
MASTER = "local[2]"
SPARK_CONF: dict[str, str] = {
    "spark.driver.memory": "3g",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.enabled": "false",
}
#: Seconds a Spark child may take (JVM start, warm-up, the timed work, the checks).
CHILD_TIMEOUT = 600


def start_spark() -> tuple[Any, float]:
    """A fresh local session with `SPARK_CONF` after one tiny job; (session, seconds taken)."""
    t0 = perf_counter()
    from airflow_delta.spark.session import get_spark

    spark = get_spark(MASTER, conf=SPARK_CONF, app_name="airflow-delta-bench")
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(1000).selectExpr("sum(id)").collect()
    return spark, perf_counter() - t0


class PhaseTimer:
    """Seconds spent in named functions, measured by wrapping them where they are looked up.

    Only wraps what exists (a renamed private function is skipped, never an error), so the
    benchmark keeps working while the measured code changes. Wrapping costs two
    `perf_counter` calls per call.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        original = getattr(owner, attr, None)
        if original is None or not callable(original):
            return

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[label] = self.seconds.get(label, 0.0) + perf_counter() - t0
                self.calls[label] = self.calls.get(label, 0) + 1

        self._undo.append((owner, attr, original))
        setattr(owner, attr, timed)

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()

    def restore(self) -> None:
        for owner, attr, original in reversed(self._undo):
            setattr(owner, attr, original)
        self._undo.clear()
