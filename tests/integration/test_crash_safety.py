"""A writer killed with SIGKILL at any moment leaves a readable table with no partial commit.

A writer process (`writers_procs.crash_writer`, forked from a forkserver) commits in a loop,
small commits and 2000-file ones (a long write window). It is killed at seeded random moments
and restarted; half of the kills are random delays after its start, half are aimed at a random
moment just after it began writing a large commit file. After every kill the table must load,
its versions must be contiguous, every commit file must parse completely, and the active files
must be exactly those of the committed versions. A second test does the same on a table that
checkpoints every 2 versions and also writes multi-part checkpoints, with kills aimed at
checkpoint writes; there, time travel to the newest checkpointed versions must also work.

Where each kill landed (from the writer's markers, and the temporary files and incomplete
multi-part checkpoints killed writes leave in `_delta_log`) is printed (`pytest -s`).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import re
import signal
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.log.snapshot import Snapshot
from tests.integration.writers_procs import crash_writer
from tests.waiting import GENEROUS

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string())])
COMMIT_NAME = re.compile(r"^(\d{20})\.json$")
CHECKPOINT_NAME = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
#: Markers of the writer: the start of the write of a commit file of 100 kB or more ...
BIG_COMMIT_WRITE = r"W \d{20}\.json \d{6}"
#: ... of a single-file checkpoint ...
CHECKPOINT_WRITE = r"W \d{20}\.checkpoint\.parquet "
#: ... and of a part of a multi-part checkpoint.
MULTI_PART_CHECKPOINT_WRITE = r"W \d{20}\.checkpoint\.\d{10}\.\d{10}\.parquet "
TMP_NAME = re.compile(r"^\.(.+)\.[0-9a-f]{32}\.tmp$")


class Writer:
    """One run of the crash writer in a fresh process, killed by `kill()`.

    The processes come from a forkserver that has imported the engine (never deltalake), so a
    restart costs milliseconds rather than a Python start-up, and the kills land in commits.
    """

    def __init__(self, uri: str, seed: int, journal: Path, markers: Path, parts: int) -> None:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["tests.integration.writers_procs"])
        self.markers = markers
        self.proc = ctx.Process(
            target=crash_writer, args=(uri, seed, str(journal), str(markers), parts), daemon=True
        )
        self.proc.start()
        deadline = time.monotonic() + GENEROUS  # the forkserver's first start imports
        while not (markers.exists() and markers.read_bytes().startswith(b"ready\n")):
            assert self.proc.is_alive(), f"writer died: {self.lines()}"
            assert time.monotonic() < deadline, f"writer did not start within {GENEROUS} s"
            time.sleep(0.002)

    def wait_for(self, pattern: str, timeout: float = GENEROUS) -> None:
        """Wait (spinning, to react within microseconds) for a marker line matching `pattern`."""
        deadline = time.monotonic() + timeout
        regex = re.compile(("^" + pattern).encode(), re.MULTILINE)
        with open(self.markers, "rb") as f:
            seen = b""
            while not regex.search(seen):
                chunk = f.read()
                if chunk:
                    seen = seen[-200:] + chunk
                    continue
                assert self.proc.is_alive(), f"writer died: {self.lines()[-3:]}"
                assert time.monotonic() < deadline, f"writer never wrote {pattern!r}"

    def lines(self) -> list[str]:
        return self.markers.read_text().splitlines() if self.markers.exists() else []

    def kill(self) -> str:
        """SIGKILL the writer; the last marker it wrote."""
        assert self.proc.is_alive(), f"writer died on its own: {self.lines()[-3:]}"
        self.proc.kill()
        self.proc.join()
        assert self.proc.exitcode == -signal.SIGKILL
        lines = self.lines()
        errors = [line for line in lines if line.startswith("E ")]
        assert not errors, errors[0]
        return kill_point(lines)


def kill_point(lines: list[str]) -> str:
    """Where the writer was when killed, from its last markers."""
    tag = lines[-1].split()[0]
    if tag in ("W", "w"):
        name = next(line for line in reversed(lines) if line.startswith("W ")).split()[1]
        kind = (
            "commit"
            if COMMIT_NAME.match(name)
            else "checkpoint"
            if CHECKPOINT_NAME.match(name)
            else name
        )
        return f"{'writing' if tag == 'W' else 'wrote'} {kind}"
    return {
        "C": "in commit",
        "V": "after commit",
        "K": "in checkpoint",
        "k": "after checkpoint",
        "ready": "before first commit",
    }[tag]


def paths(snapshot: Snapshot) -> list[str]:
    return snapshot.files().field("path").to_pylist()


class LogChecker:
    """What the commit files on disk say, each file parsed once (commit files never change)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.log_dir = Path(uri, "_delta_log")
        self.commits: dict[int, tuple[int, list[str]]] = {}  # version -> (size, add paths)
        self.tmp_seen: set[str] = set()
        self.incomplete: set[tuple[int, int]] = set()

    def parse(self, version: int, path: Path) -> list[str]:
        data = path.read_bytes()
        size = len(data)
        known = self.commits.get(version)
        if known is not None:
            assert known[0] == size, f"commit {version} changed size: {known[0]} -> {size}"
            return known[1]
        assert data.endswith(b"\n"), f"commit {version} is cut short (no final newline)"
        adds, removes = [], 0
        for n, line in enumerate(data.decode().split("\n")[:-1]):
            try:
                action = json.loads(line)
            except ValueError as exc:
                raise AssertionError(f"commit {version} line {n} is not JSON: {exc}") from None
            if "add" in action:
                adds.append(action["add"]["path"])
            removes += "remove" in action
        assert removes == 0, f"commit {version} removes files (the writer only appends)"
        if version > 0:
            assert adds, f"commit {version} has no add (a commit of the writer always has)"
        self.commits[version] = (size, adds)
        return adds

    def check(self) -> tuple[Snapshot, Counter[str]]:
        """Load the table and check it against the commit files; new leftover temp files."""
        names = os.listdir(self.log_dir)
        versions = sorted(int(m[1]) for n in names if (m := COMMIT_NAME.match(n)))
        assert versions == list(range(len(versions))), "commit versions are not contiguous"
        expected: set[str] = set()
        total = 0
        for v in versions:
            adds = self.parse(v, self.log_dir / f"{v:020d}.json")
            total += len(adds)
            expected.update(adds)
        assert len(expected) == total, "a file path was added twice"
        snapshot = DeltaLog.for_table(self.uri).update()  # must not raise
        assert snapshot.version == versions[-1]
        assert snapshot.num_files == total
        assert set(paths(snapshot)) == expected
        leftovers: Counter[str] = Counter()
        parts: Counter[tuple[int, int]] = Counter()
        for n in names:
            if (m := CHECKPOINT_NAME.match(n)) and m[3]:
                parts[int(m[1]), int(m[3])] += 1
        for (cv, total), count in parts.items():
            if count < total and (cv, total) not in self.incomplete:
                self.incomplete.add((cv, total))
                leftovers["incomplete multi-part checkpoint"] += 1
        for n in names:
            m = TMP_NAME.match(n)
            if m and n not in self.tmp_seen:
                self.tmp_seen.add(n)
                target = m[1]
                kind = (
                    "commit"
                    if COMMIT_NAME.match(target)
                    else "checkpoint"
                    if CHECKPOINT_NAME.match(target)
                    else target
                )
                leftovers[kind] += 1
        return snapshot, leftovers

    def check_journal(self, journal: Path) -> int:
        """Every commit the writer saw succeed is in the log, with its files."""
        lines = journal.read_text().splitlines() if journal.exists() else []
        for line in lines:
            entry = json.loads(line)
            adds = self.commits[entry["version"]][1]
            assert len(adds) == entry["n"] and adds[0] == entry["first"], entry
        return len(lines)

    def files_at(self, version: int) -> set[str]:
        return {p for v in range(version + 1) for p in self.commits[v][1]}


def run_kills(
    tmp_path: Path,
    kills: int,
    seed: int,
    max_delay: float,
    targets: list[tuple[str, float]],
    parts: int = 0,
    **config: str,
) -> tuple[LogChecker, Counter[str], Counter[str], float]:
    """Kill a writer `kills` times and check the table after each kill.

    Even kills come a random 0..`max_delay` s after the writer started. Odd kills are aimed
    at a window, taking the `targets` in turn: a random 0..`delay` s after the writer wrote a
    marker line matching the regular expression `pattern` (e.g. the start of the write of a
    large commit file).
    """
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, SCHEMA, configuration=config or None)
    checker = LogChecker(uri)
    journal = tmp_path / "journal"
    rng = random.Random(seed)
    where: Counter[str] = Counter()
    leftovers: Counter[str] = Counter()
    started = time.monotonic()
    for k in range(kills):
        writer = Writer(uri, seed * 1000 + k, journal, tmp_path / f"markers-{k}", parts)
        if k % 2:
            pattern, delay = targets[(k // 2) % len(targets)]
            writer.wait_for(pattern)
            time.sleep(rng.uniform(0, delay))
        else:
            time.sleep(rng.uniform(0, max_delay))
        where[writer.kill()] += 1
        snapshot, new = checker.check()
        leftovers.update(new)
        checker.check_journal(journal)
        if parts:
            # time travel to the newest checkpoints on disk, complete or not
            names = os.listdir(checker.log_dir)
            cps = sorted({int(m[1]) for n in names if (m := CHECKPOINT_NAME.match(n))})
            for cv in cps[-2:]:
                snap = DeltaLog.for_table(uri).snapshot_at(version=cv)
                assert set(paths(snap)) == checker.files_at(cv)
        del snapshot
    return checker, where, leftovers, time.monotonic() - started


def describe(title: str, checker: LogChecker, where: Counter, leftovers: Counter, secs: float):
    versions = max(checker.commits)
    files = sum(len(a) for _, a in checker.commits.values())
    print(
        f"\n[{title}] {sum(where.values())} kills in {secs:.1f} s, table at version {versions} "
        f"with {files} files; where the writer was when killed: {dict(where)}; "
        f"writes cut short (temporary files left): {dict(leftovers)}"
    )


def test_writer_killed_at_random_moments_leaves_a_sound_table(tmp_path: Path) -> None:
    checker, where, leftovers, secs = run_kills(
        tmp_path, kills=50, seed=7, max_delay=0.35, targets=[(BIG_COMMIT_WRITE, 0.003)]
    )
    describe("append kills", checker, where, leftovers, secs)
    assert checker.check_journal(tmp_path / "journal") > 0, "no commit ever completed"
    assert where["writing commit"] + leftovers["commit"] > 0, "no kill cut a commit write short"


def test_writer_killed_while_checkpointing_leaves_a_loadable_table(tmp_path: Path) -> None:
    checker, where, leftovers, secs = run_kills(
        tmp_path,
        kills=24,
        seed=11,
        max_delay=0.5,
        targets=[(CHECKPOINT_WRITE, 0.003), (MULTI_PART_CHECKPOINT_WRITE, 0.05)],
        parts=700,
        **{"delta.checkpointInterval": "2"},
    )
    describe("checkpoint kills", checker, where, leftovers, secs)
    names = os.listdir(checker.log_dir)
    assert any(CHECKPOINT_NAME.match(n) for n in names), "no checkpoint was ever written"
    inside = ("writing checkpoint", "wrote checkpoint", "in checkpoint")
    cut_short = leftovers["checkpoint"] + leftovers["incomplete multi-part checkpoint"]
    assert sum(where[k] for k in inside) + cut_short > 0, "no kill landed in a checkpoint"
