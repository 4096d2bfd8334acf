"""InMemoryLogReplay: the state of a table from a checkpoint and the commits after it.

Follows Delta's `InMemoryLogReplay`: versions are appended in order into registries for the
protocol, the metadata, transactions by appId, domain metadata by domain, active files and
tombstones. The file registries are resolved vectorised with pyarrow: a logical file's key is its
canonical path plus its deletion-vector id, and the newest action of each key wins. Files from a
checkpoint keep the checkpoint's order; files added later follow in log order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from typing import Protocol as Interface
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import CorruptLogError
from airflow_delta.engine.protocol.action_types import ADD_TYPE, REMOVE_TYPE
from airflow_delta.engine.protocol.actions import (
    CheckpointMetadata,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    SetTransaction,
    Sidecar,
    action_from_json,
    iter_log_lines,
)
from airflow_delta.engine.protocol.columnar import (
    array_from_pylist,
    bool_mask,
    concat,
    concat_consuming,
    int_values,
    scalar,
)

#: A piece of a table's file actions: AddFiles and RemoveFiles as ADD_TYPE/REMOVE_TYPE structs.
FileActions = tuple[pa.StructArray, pa.StructArray]


class UnreadFileActions(Interface):
    """A checkpoint's file actions, not read yet: read whole, or streamed in bounded pieces."""

    def read(self, stats: bool = True) -> FileActions:
        """Every AddFile and RemoveFile of the checkpoint, in its order (without `stats`, the
        AddFiles' stats are null: not read)."""

    def read_stats(self) -> pa.StringArray:
        """The stats of every AddFile, in the order `read` returns them."""

    def read_in_batches(self) -> Iterator[FileActions]:
        """The same actions in the same order, a bounded number of rows at a time."""

    def max_rows(self) -> int:
        """An upper bound of the number of file actions (from the files' metadata)."""


@dataclass
class LogBatch:
    """The actions of one commit, or of a whole checkpoint.

    A checkpoint's file actions are columnar (`adds`, `removes`), and so are a commit's when
    `json_commits` decoded it; the per-line parser leaves them parsed JSON rows until replay
    converts the rows of every such commit in one go. `add_lines`/`remove_lines` give each
    action's position in the commit, so that an add and a remove of one file resolve in order.
    A checkpoint's file actions are read when first needed, its AddFiles' stats only when a
    caller asks for them, and `release_files` drops them again (they are re-read if needed).
    """

    source: str = ""
    unread_files: UnreadFileActions | None = None
    adds: pa.StructArray | None = None
    removes: pa.StructArray | None = None
    add_rows: list[dict[str, Any]] = field(default_factory=list)
    remove_rows: list[dict[str, Any]] = field(default_factory=list)
    add_lines: list[int] | np.ndarray = field(default_factory=list)
    remove_lines: list[int] | np.ndarray = field(default_factory=list)
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    txns: list[SetTransaction] = field(default_factory=list)
    domains: list[DomainMetadata] = field(default_factory=list)
    commit_info: CommitInfo | None = None
    sidecars: list[Sidecar] = field(default_factory=list)
    checkpoint_metadata: CheckpointMetadata | None = None
    is_checkpoint: bool = False
    _read_from: UnreadFileActions | None = None
    _stats_unread: bool = False

    @property
    def num_file_actions(self) -> int:
        """File actions in the batch (loads a checkpoint's file actions)."""
        self._load_files(stats=False)
        arrays = sum(len(a) for a in (self.adds, self.removes) if a is not None)
        return arrays + len(self.add_rows) + len(self.remove_rows)

    def _load_files(self, stats: bool) -> None:
        unread = self.unread_files
        if unread is not None:
            self.adds, self.removes = unread.read(stats=stats)
            self._read_from, self.unread_files, self._stats_unread = unread, None, not stats
        elif stats and self._stats_unread and self._read_from is not None and self.adds is not None:
            self.adds = with_field(self.adds, "stats", self._read_from.read_stats())
            self._stats_unread = False

    def release_files(self) -> None:
        """Drop the checkpoint's file actions read so far (read again when next needed)."""
        if self._read_from is not None:
            self.unread_files, self.adds, self.removes = self._read_from, None, None
            self._read_from = None

    def add_array(self, stats: bool = True) -> pa.StructArray:
        """The AddFiles of this batch as ADD_TYPE structs (stats null unless `stats`)."""
        self._load_files(stats)
        if self.adds is None:
            self.adds = _struct_array(self.add_rows, ADD_TYPE, self.source, "add")
        return self.adds

    def remove_array(self) -> pa.StructArray:
        """The RemoveFiles of this batch as REMOVE_TYPE structs."""
        self._load_files(stats=False)
        if self.removes is None:
            self.removes = _struct_array(self.remove_rows, REMOVE_TYPE, self.source, "remove")
        return self.removes


def with_field(array: pa.StructArray, name: str, values: pa.Array) -> pa.StructArray:
    """`array` with its field `name` replaced by `values` (no copy of the other fields)."""
    children = [values if f.name == name else array.field(i) for i, f in enumerate(array.type)]
    mask = array.is_null() if array.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(array.type), mask=mask)


def _struct_array(
    rows: list[dict[str, Any]], type_: pa.StructType, source: str, name: str
) -> pa.Array:
    try:
        return array_from_pylist(rows, type_)
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise CorruptLogError(f"{source}: malformed {name!r} action ({exc})") from None


def _file_actions(batches: list[LogBatch], kind: str) -> pa.StructArray:
    """The `kind` ("add"/"remove") actions of several commits, in order: columnar batches as
    they are, the JSON rows of the others converted at once."""
    type_ = ADD_TYPE if kind == "add" else REMOVE_TYPE
    rows = [r for b in batches for r in getattr(b, f"{kind}_rows")]
    try:
        converted = array_from_pylist(rows, type_)
    except (TypeError, ValueError, AttributeError, OverflowError):
        for b in batches:  # error path only: find the commit that holds the bad action
            getattr(b, f"{kind}_array")()
        raise
    pieces, used = [], 0
    for b in batches:
        n = len(getattr(b, f"{kind}_rows"))
        if n:
            pieces.append(converted.slice(used, n))
            used += n
        else:
            arrays = b.adds if kind == "add" else b.removes
            if arrays is not None:
                pieces.append(arrays)
    return concat(pieces, type_)


#: How each action other than add/remove goes into a batch.
SMALL_ACTIONS: dict[str, Callable[[LogBatch, Any], None]] = {
    "protocol": lambda b, a: setattr(b, "protocol", a),
    "metaData": lambda b, a: setattr(b, "metadata", a),
    "txn": lambda b, a: b.txns.append(a),
    "domainMetadata": lambda b, a: b.domains.append(a),
    "commitInfo": lambda b, a: setattr(b, "commit_info", a),
    "sidecar": lambda b, a: b.sidecars.append(a),
    "checkpointMetadata": lambda b, a: setattr(b, "checkpoint_metadata", a),
}


def parse_log_batch(data: bytes, source: str) -> LogBatch:
    """Parse newline-delimited JSON actions (a commit or a JSON v2 checkpoint) into a batch.

    Unknown actions and unknown fields are ignored, as the spec requires of readers. A line that
    is not a JSON object, a file with no action, and file actions without a path are refused with
    CorruptLogError naming `source`.
    """
    batch = LogBatch(source=source)
    n_actions = 0
    for lineno, key, body in iter_log_lines(data, source):
        n_actions += 1
        if key in ("add", "remove"):
            if not isinstance(body, dict) or body.get("path") is None:
                raise CorruptLogError(f"{source}: line {lineno}: {key} action without a path")
            getattr(batch, f"{key}_rows").append(body)
            getattr(batch, f"{key}_lines").append(lineno)
        elif key in SMALL_ACTIONS:
            SMALL_ACTIONS[key](batch, action_from_json(key, body, f"{source}: line {lineno}"))
    if n_actions == 0:
        raise CorruptLogError(f"{source}: the log file holds no action (empty or blank)")
    return batch


#: A resolved state of at least this many file actions hands the memory pool's freed pages
#: back to the OS (about a millisecond).
RELEASE_MEMORY_ROWS = 100_000
_EMPTY = scalar("", pa.string())


_PERCENT = re.compile(b"%")


def _may_hold_escapes(strings: pa.Array) -> bool:
    """Whether any string may hold a `%`: a scan of the character data in place (for a slice,
    of its whole buffer, so a superset)."""
    data = strings.buffers()[2]
    return data is not None and _PERCENT.search(data) is not None


def canonicalize_paths(paths: pa.Array) -> pa.Array:
    """Paths in canonical form: `file:` scheme dropped and percent-escapes decoded.

    So `file:/a/b%20c`, `file:///a/b%20c`, `file://localhost/a/b%20c` and `/a/b c` are one
    file (as `paths.resolve_path` reads them). Decoding is done once per distinct directory and
    only for file names that contain an escape, never per file.
    """
    if pc.any(pc.starts_with(paths, "file:")).as_py():
        paths = pc.replace_substring_regex(
            paths, pattern="^file:(//(localhost)?)?/", replacement="/"
        )
    if not _may_hold_escapes(paths):
        return paths
    dirs = pc.replace_substring_regex(paths, pattern="[^/]*$", replacement="").dictionary_encode()
    decoded_dirs = array_from_pylist([unquote(d) for d in dirs.dictionary.to_pylist()], pa.string())
    dirs = pc.take(decoded_dirs, dirs.indices)
    names = pc.replace_substring_regex(paths, pattern="^.*/", replacement="")
    escaped = pc.fill_null(pc.match_substring(names, "%"), scalar(False, pa.bool_()))
    if pc.any(escaped).as_py():
        decoded = [unquote(n) for n in names.filter(escaped).to_pylist()]
        fixed = array_from_pylist(decoded, pa.string())
        names = pc.replace_with_mask(names, escaped, fixed)
    return pc.binary_join_element_wise(dirs, names, _EMPTY)


def file_keys(files: pa.StructArray) -> pa.Array:
    """The key of each logical file: canonical path plus deletion-vector unique id."""
    paths = canonicalize_paths(files.field("path"))
    dv = files.field("deletionVector")
    if dv.null_count == len(dv):
        return paths
    storage, where, offset = (
        pc.struct_field(dv, n) for n in ("storageType", "pathOrInlineDv", "offset")
    )
    offset = pc.if_else(
        pc.is_null(offset),
        _EMPTY,
        pc.binary_join_element_wise(scalar("@", pa.string()), pc.cast(offset, pa.string()), _EMPTY),
    )
    dv_id = pc.binary_join_element_wise(storage, where, offset, _EMPTY)
    keyed = pc.binary_join_element_wise(paths, dv_id, scalar("\x00", pa.string()))
    return pc.if_else(pc.is_valid(dv), keyed, paths)


def _without_keys(files: pa.StructArray, keys: pa.Array) -> pa.StructArray:
    """`files` minus those whose key is in `keys` (no copy when none is)."""
    if not len(files) or not len(keys):
        return files
    named = pc.is_in(file_keys(files), value_set=keys)
    return files.filter(pc.invert(named)) if pc.any(named).as_py() else files


class InMemoryLogReplay:
    """Replays versions in order into the registries of a table's state (InMemoryLogReplay)."""

    def __init__(self, min_file_retention_timestamp: int) -> None:
        self.min_file_retention_timestamp = min_file_retention_timestamp
        self.current_version = -1
        self.current_protocol_version: Protocol | None = None
        self.current_metadata: Metadata | None = None
        self.transactions: dict[str, SetTransaction] = {}
        self.domain_metadata: dict[str, DomainMetadata] = {}
        self.last_commit_info: CommitInfo | None = None
        self._base: LogBatch | None = None
        self._later: list[LogBatch] = []
        self._later_files: tuple[pa.StructArray, pa.StructArray, pa.Array] | None = None
        self._resolved: FileActions | None = None
        self._resolved_with_stats = False

    def append(self, version: int, batch: LogBatch, first: int | None = None) -> None:
        """Add the actions of `version` to their registries (of the versions `first` to
        `version`, for a log compaction file)."""
        first = version if first is None else first
        if not (self.current_version == -1 or first == self.current_version + 1):
            raise AssertionError(
                f"Attempted to replay version {first}, but state is at {self.current_version}"
            )
        self.current_version = version
        self.last_commit_info = batch.commit_info
        if batch.protocol is not None:
            self.current_protocol_version = batch.protocol
        if batch.metadata is not None:
            self.current_metadata = batch.metadata
        for txn in batch.txns:
            self.transactions[txn.app_id] = txn
        for dm in batch.domains:
            if dm.removed:
                self.domain_metadata.pop(dm.domain, None)
            else:
                self.domain_metadata[dm.domain] = dm
        if self._base is None and batch.is_checkpoint:
            self._base = batch
        elif batch.num_file_actions:
            self._later.append(batch)
        self._later_files = None
        self._resolved = None

    def _resolve_later(self) -> tuple[pa.StructArray, pa.StructArray, pa.Array]:
        """The winning adds and removes of the commits after the checkpoint, and every key
        those commits name: the newest action per key wins, ordered by (batch, line)."""
        if self._later_files is not None:
            return self._later_files
        if not self._later:
            self._later_files = (pa.nulls(0, ADD_TYPE), pa.nulls(0, REMOVE_TYPE), pa.nulls(0))
            return self._later_files
        adds = _file_actions(self._later, "add")
        removes = _file_actions(self._later, "remove")
        order = np.concatenate(
            [
                np.asarray(getattr(b, kind), dtype=np.int64) | np.int64(i << 32)
                for kind in ("add_lines", "remove_lines")
                for i, b in enumerate(self._later)
            ]
        )
        keys = concat([file_keys(adds), file_keys(removes)], pa.string())
        encoded = keys.dictionary_encode()
        key_ids = int_values(encoded.indices)
        newest = np.full(int(key_ids.max(initial=-1)) + 1, -1, dtype=np.int64)
        np.maximum.at(newest, key_ids, order)
        is_winner = bool_mask(newest[key_ids] == order)
        n_add = len(adds)
        self._later_files = (
            adds.filter(is_winner.slice(0, n_add)),
            removes.filter(is_winner.slice(n_add)),
            encoded.dictionary,  # each key once
        )
        return self._later_files

    def _resolve(self, stats: bool = True) -> FileActions:
        """The active AddFiles and all RemoveFiles: the checkpoint's files unless a later action
        names the same key, then the later winners. Without `stats`, a checkpoint's AddFiles
        have null stats (not read). The checkpoint's arrays are released once resolved."""
        if self._resolved is None or (stats and not self._resolved_with_stats):
            self._resolved = None  # free the previous resolution before reading again
            later_adds, later_removes, later_keys = self._resolve_later()
            adds, removes = [later_adds], [later_removes]
            if self._base is not None:
                adds.insert(0, _without_keys(self._base.add_array(stats), later_keys))
                removes.insert(0, _without_keys(self._base.remove_array(), later_keys))
                self._base.release_files()  # the lists hold the only references now
            self._resolved = (
                concat_consuming(adds, ADD_TYPE),
                concat_consuming(removes, REMOVE_TYPE),
            )
            self._resolved_with_stats = stats or self._base is None
            if sum(map(len, self._resolved)) >= RELEASE_MEMORY_ROWS:
                # the decoded checkpoint and the pieces concatenated are free now: without
                # this the allocator keeps their pages, and what the caller builds next (a
                # list of paths) comes on top (B9 at 1M files: peak RSS 605 -> 445 MB)
                pa.default_memory_pool().release_unused()
        return self._resolved

    def _unread_base(self) -> UnreadFileActions | None:
        """The checkpoint's file actions when they are still to be read for a full state (not
        resolved yet, or resolved without their stats)."""
        if self._base is None or (self._resolved is not None and self._resolved_with_stats):
            return None
        return self._base.unread_files

    def file_actions_in_batches(self) -> Iterator[FileActions]:
        """The active AddFiles and the retained tombstones, in pieces.

        When the checkpoint's file actions have not been read yet, they are streamed in bounded
        pieces and not kept (so writing a checkpoint holds one piece at a time), followed by the
        later commits' winners. Otherwise the resolved state is one piece.
        """
        unread = self._unread_base()
        if unread is None:
            yield self.active_files(), self.get_tombstones()
            return
        later_adds, later_removes, later_keys = self._resolve_later()
        for adds, removes in unread.read_in_batches():
            removes = self._retained(_without_keys(removes, later_keys))
            yield _without_keys(adds, later_keys), removes
        yield later_adds, self._retained(later_removes)

    def max_file_actions(self) -> int:
        """An upper bound of the number of pieces' rows `file_actions_in_batches` yields."""
        unread = self._unread_base()
        if unread is None:
            return len(self.active_files()) + len(self.get_tombstones())
        later_adds, later_removes, _ = self._resolve_later()
        return unread.max_rows() + len(later_adds) + len(later_removes)

    def active_files(self, stats: bool = True) -> pa.StructArray:
        """The AddFiles of the table's state, as ADD_TYPE structs (with null stats unless
        `stats`, when they come from a checkpoint whose stats were not read yet)."""
        return self._resolve(stats)[0]

    def get_tombstones(self) -> pa.StructArray:
        """RemoveFiles newer than minFileRetentionTimestamp, as REMOVE_TYPE structs."""
        return self._retained(self._resolve(stats=False)[1])

    def _retained(self, removes: pa.StructArray) -> pa.StructArray:
        """The RemoveFiles newer than minFileRetentionTimestamp."""
        ts = pc.fill_null(removes.field("deletionTimestamp"), scalar(0, pa.int64()))
        return removes.filter(pc.greater(ts, scalar(self.min_file_retention_timestamp, pa.int64())))
