"""Names of the files in `_delta_log`: commits, checkpoints, checksums, compactions.

Versions are zero-padded to 20 digits, multi-part checkpoint part numbers to 10, so that the
lexicographic order of a listing is the version order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

LAST_CHECKPOINT = "_last_checkpoint"
SIDECAR_DIR = "_sidecars"

Kind = Literal["commit", "checkpoint", "crc", "compaction"]

_LOG_FILE = re.compile(
    r"^(?P<version>\d{20})\."
    r"(?:(?P<commit>json)"
    r"|(?P<crc>crc)"
    r"|(?P<end>\d{20})\.compacted\.json"
    r"|checkpoint\.(?P<part>\d{10})\.(?P<parts>\d{10})\.parquet"
    r"|checkpoint\.(?P<uuid>[0-9A-Za-z-]+)\.(?P<uuid_fmt>json|parquet)"
    r"|checkpoint\.(?P<classic>parquet))$"
)


def delta_file(version: int) -> str:
    """The commit file name of `version`."""
    return f"{version:020d}.json"


def checkpoint_file_single(version: int) -> str:
    """The classic (single-file) checkpoint name of `version`."""
    return f"{version:020d}.checkpoint.parquet"


def checkpoint_file_parts(version: int, parts: int) -> list[str]:
    """The names of a multi-part checkpoint of `version` in `parts` parts."""
    return [f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)]


def version_prefix(version: int) -> str:
    """The name prefix every log file of `version` starts with (used to list from a version)."""
    return f"{version:020d}"


@dataclass(frozen=True)
class LogFileName:
    """A parsed `_delta_log` file name."""

    name: str
    kind: Kind
    version: int
    part: int | None = None
    num_parts: int | None = None
    uuid: str | None = None
    end_version: int | None = None

    @property
    def is_multi_part(self) -> bool:
        return self.num_parts is not None


def parse_log_file_name(name: str) -> LogFileName | None:
    """Parse a file name of `_delta_log`; None for anything that is not a log file."""
    m = _LOG_FILE.match(name)
    if m is None:
        return None
    version = int(m["version"])
    if m["commit"]:
        return LogFileName(name, "commit", version)
    if m["crc"]:
        return LogFileName(name, "crc", version)
    if m["end"]:
        return LogFileName(name, "compaction", version, end_version=int(m["end"]))
    if m["parts"]:
        return LogFileName(
            name, "checkpoint", version, part=int(m["part"]), num_parts=int(m["parts"])
        )
    if m["uuid"]:
        return LogFileName(name, "checkpoint", version, uuid=m["uuid"])
    return LogFileName(name, "checkpoint", version)
