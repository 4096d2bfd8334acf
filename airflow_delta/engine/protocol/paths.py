"""Data file paths: what a path in the log names, resolved once for every user.

PROTOCOL.md: the `path` of an add, remove or cdc action (and a deletion vector's `p`/`u` path)
is a URI (RFC 2396) that is either relative to the table root or absolute; it must be decoded to
get the file's path. Resolution against the table root follows the RFC:

- a relative reference (`a=1/part%20one.parquet`) is the root, a `/`, and the decoded path;
- an absolute-path reference (`/data/x.parquet`, as DuckDB's writer produces) keeps the root's
  scheme and authority and takes the decoded path as is: `s3://bucket/t` + `/x` is
  `s3://bucket/x`, a local table's `/x` is the local file `/x`;
- an absolute URI (`s3://bucket/k`, `file:/abs`, `file:///abs`, `file://localhost/abs`) names
  itself (`localhost` is the local host).

`.` and `..` segments are removed as RFC 3986 does; empty segments (`a//b`) are kept, because
object stores take keys literally. Vacuum, readers, MERGE and manifests all resolve through
`resolve_path`, so they agree on which file a log entry names.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import unquote

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
#: Schemes (and fsspec protocols) that name one filesystem.
_ALIASES = {"s3a": "s3", "s3n": "s3", "": "file", "local": "file"}


def canonical_scheme(scheme: str) -> str:
    """The one name of a filesystem's URI scheme or fsspec protocol (`s3a` -> `s3`).

    >>> canonical_scheme("s3a")
    's3'
    """
    return _ALIASES.get(scheme, scheme)


@dataclass(frozen=True)
class FileLocation:
    """A file: URI scheme (lower case, `file` for local), authority (bucket, host or empty)
    and the decoded path (always starting with `/`)."""

    scheme: str
    authority: str
    path: str

    @property
    def uri(self) -> str:
        """The decoded URI: `file:/abs/x`, `s3://bucket/key`."""
        authority = f"//{self.authority}" if self.authority or self.scheme != "file" else ""
        return f"{self.scheme}:{authority}{self.path}"

    @property
    def fs_path(self) -> str:
        """The path in fsspec terms: the OS path of a local file, `bucket/key` elsewhere."""
        return self.path if self.scheme == "file" else f"{self.authority}{self.path}"

    def same_filesystem(self, other: FileLocation) -> bool:
        """Whether both live on one filesystem (`s3a://b` and `s3://b` do)."""
        return (canonical_scheme(self.scheme), self.authority) == (
            canonical_scheme(other.scheme),
            other.authority,
        )

    def child(self, relative: str) -> FileLocation:
        """The location of a decoded `relative` path under this one (dot segments removed)."""
        joined = f"{self.path.rstrip('/')}/{relative}"
        return FileLocation(self.scheme, self.authority, remove_dot_segments(joined))


def table_root(table_uri: str, fs_root: str) -> FileLocation:
    """The root of a table whose URI is `table_uri` and whose fsspec root path is `fs_root`
    (what `get_log_store` returns)."""
    scheme = table_uri.split("://", 1)[0].lower() if "://" in table_uri else ""
    if scheme in ("", "file") or table_uri.startswith("file:"):
        return FileLocation("file", "", fs_root)
    authority, _, path = fs_root.partition("/")
    return FileLocation(scheme, authority, "/" + path)


def resolve_path(root: FileLocation, path: str) -> FileLocation:
    """The file a log `path` names in the table at `root` (see the module docstring).

    >>> root = FileLocation("s3", "bucket", "/t")
    >>> resolve_path(root, "a=1/x%20y.parquet").uri
    's3://bucket/t/a=1/x y.parquet'
    >>> resolve_path(root, "/elsewhere/z.parquet").uri
    's3://bucket/elsewhere/z.parquet'
    >>> resolve_path(FileLocation("file", "", "/t"), "file://localhost/t/x.parquet").fs_path
    '/t/x.parquet'
    """
    scheme = _SCHEME.match(path)
    if scheme is None:
        if path.startswith("//"):  # a network-path reference: another authority
            authority, rest = _split_authority(path[2:])
            return FileLocation(root.scheme, authority, _decoded_path(rest))
        if path.startswith("/"):
            return FileLocation(root.scheme, root.authority, _decoded_path(path))
        return root.child(unquote(path))
    name, rest = scheme[0][:-1].lower(), path[scheme.end() :]
    authority = ""
    if rest.startswith("//"):
        authority, rest = _split_authority(rest[2:])
    if name == "file" and authority == "localhost":
        authority = ""
    return FileLocation(name, authority, _decoded_path(rest))


def _split_authority(text: str) -> tuple[str, str]:
    """`bucket/key` -> (`bucket`, `/key`). No query or fragment is split off: a `?` or `#` in
    a log path is part of the file name (writers that forgot to escape them exist)."""
    authority, slash, rest = text.partition("/")
    return authority, slash + rest


def relative_key(root: FileLocation, location: FileLocation) -> str | None:
    """`location` as a path relative to `root` in the root filesystem's terms, or None when it
    lies outside the root. Local paths are normalised as the OS resolves them (`a//b` is
    `a/b`); object-store keys are compared literally."""
    if not root.same_filesystem(location):
        return None
    path = location.path
    if root.scheme == "file":
        path = os.path.normpath(path)
    prefix = root.path.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


def remove_dot_segments(path: str) -> str:
    """RFC 3986's dot-segment removal: `.` dropped, `..` pops a segment; empty segments stay.

    >>> remove_dot_segments("/t/a/../b/./c//d")
    '/t/b/c//d'
    """
    if "." not in path:
        return path
    out: list[str] = []
    segments = path.split("/")
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == ".":
            if last:
                out.append("")
        elif segment == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(segment)
    return "/".join(out)


def _decoded_path(path: str) -> str:
    decoded = remove_dot_segments(unquote(path))
    return decoded if decoded.startswith("/") else "/" + decoded
