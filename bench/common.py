"""Shared helpers for benchmarks: fresh-process runs, medians, results.

Parent side only (the child side is `bench/child.py`). A benchmark module `bench/bN_*.py`
exposes:

* `ID`, `TITLE`, `TARGET` (the ratio this project / deltalake must stay at or below),
* `CHILD_TASKS`: `{task name: function(path) -> dict}` run in a fresh process by
  `run_child(module, task, path)`. Benchmark modules import only the standard library at top
  level, so a child pays for exactly the imports its task makes (and times them itself),
* `run(reps) -> BenchResult`.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SYSTEMS = ("ours", "deltalake")


def run_child(module: str, task: str, path: str | Path, timeout: float = 120) -> dict[str, Any]:
    """Run `task` of `bench.<module>` on `path` in a fresh interpreter; its JSON result."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.child", module, task, str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"bench child {module}.{task} on {path} failed ({proc.returncode}):\n{proc.stderr}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


@dataclass
class Metric:
    """Samples (seconds) of one measurement for both systems (`systems`: ours, the baseline)."""

    name: str
    samples: dict[str, list[float]] = field(default_factory=dict)
    systems: tuple[str, str] = SYSTEMS

    def __post_init__(self) -> None:
        for s in self.systems:
            self.samples.setdefault(s, [])

    def median(self, system: str) -> float | None:
        xs = self.samples.get(system) or []
        return statistics.median(xs) if xs else None

    @property
    def ratio(self) -> float | None:
        ours, theirs = self.median(self.systems[0]), self.median(self.systems[1])
        if ours is None or not theirs:
            return None
        return ours / theirs

    def to_json(self) -> dict[str, Any]:
        return {
            "median": {s: self.median(s) for s in self.samples},
            "ratio": self.ratio,
            "samples": self.samples,
        }


@dataclass
class BenchResult:
    id: str
    title: str
    target: float
    headline: str
    metrics: dict[str, Metric]
    notes: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    #: Requirements besides the ratio that this run broke (e.g. "lost commits"): a MISS.
    failed_requirements: list[str] = field(default_factory=list)
    #: What ours is compared with (the second system): deltalake unless the benchmark says
    #: otherwise (B5 compares with Spark's own parquet writer).
    baseline: str = SYSTEMS[1]

    @property
    def systems(self) -> tuple[str, str]:
        return (SYSTEMS[0], self.baseline)

    def metric(self, name: str) -> Metric:
        if name not in self.metrics:
            self.metrics[name] = Metric(name, systems=self.systems)
        return self.metrics[name]

    @property
    def ratio(self) -> float | None:
        return self.metrics[self.headline].ratio

    @property
    def passed(self) -> bool:
        r = self.ratio
        return r is not None and r <= self.target and not self.failed_requirements

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "target": self.target,
            "headline": self.headline,
            "baseline": self.baseline,
            "ratio": self.ratio,
            "pass": self.passed,
            "failed_requirements": self.failed_requirements,
            "metrics": {k: m.to_json() for k, m in self.metrics.items()},
            "notes": self.notes,
            "info": self.info,
        }


def record(result: BenchResult, system: str, sample: dict[str, Any], names: dict[str, str]):
    """Append the child timings `sample[key]` to metric `names[key]` of `system`."""
    for key, metric in names.items():
        if sample.get(key) is not None:
            result.metric(metric).samples[system].append(float(sample[key]))


def environment() -> dict[str, Any]:
    import importlib.metadata as md

    def version(pkg: str) -> str | None:
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return None

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "pyarrow": version("pyarrow"),
        "deltalake": version("deltalake"),
        "airflow-delta": version("airflow-delta"),
    }


def fmt_s(x: float | None) -> str:
    if x is None:
        return f"{'-':>11}"
    return f"{x * 1000:8.1f} ms" if x < 10 else f"{x:8.2f} s "


def fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"
