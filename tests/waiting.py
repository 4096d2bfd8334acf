"""Waiting in tests: on a condition, with a generous deadline, never for a fixed time.

The suite runs on small machines under load (two cores, `pytest -n 2`, other jobs beside it):
a deadline is only there to turn a hang into a failure, so it is minutes, not seconds, and a
test that passes never waits for it.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

#: Default deadline (seconds) for a condition that normally holds within a second or two.
GENEROUS = 120.0


def wait_until(
    predicate: Callable[[], T],
    timeout: float = GENEROUS,
    interval: float = 0.05,
    message: str | Callable[[], str] = "",
) -> T:
    """Call `predicate` every `interval` seconds until it returns something truthy; that value.

    Raises TimeoutError (with `message`, or its result when it is a callable) once `timeout`
    seconds have passed without it. Exceptions of `predicate` propagate.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            text = message() if callable(message) else message
            raise TimeoutError(f"not within {timeout:.0f} s: {text or predicate!r}")
        time.sleep(interval)


class Deadline:
    """One deadline shared by several waits (e.g. `communicate()` on several processes)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self, at_least: float = 1.0) -> float:
        """Seconds left (never below `at_least`, so a last wait still gets a chance)."""
        return max(at_least, self.end - time.monotonic())


def communicate_all(procs: Sequence[subprocess.Popen[str]], timeout: float) -> list[str]:
    """The stdout of each process (run at once), all within one `timeout` of seconds.

    Kills every process still running when the time is up or the wait fails (no process, a
    Spark JVM say, outlives the test), then raises subprocess.TimeoutExpired.
    """
    deadline = Deadline(timeout)
    try:
        return [p.communicate(timeout=deadline.left())[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
