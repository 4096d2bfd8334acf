"""S3 and GCS object keys taken literally.

s3fs and gcsfs parse parts of the paths they are given: s3fs cuts `?versionId=...` off every key
it splits (version aware or not), so a stray object `t/x.parquet?versionId=1` is addressed as
the table's file `t/x.parquet`; a version-aware gcsfs reads `#<n>` or `?generation=<n>` ending
a path as an object generation. The S3 log store deletes objects by their literal keys
(`delete_objects`), and the log store refuses a table whose own paths would be addressed
elsewhere (`check_s3_addressable`) and a version-aware GCS filesystem (`check_gcs_literal`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_delta.engine.errors import UnsupportedStorageError

#: Keys per DeleteObjects request (S3 takes at most 1000).
DELETE_BATCH = 1000
#: What s3fs takes for the start of an object version in a path (`split_path`).
S3_VERSION = "?versionId="


def literal_key(fs: Any, path: str) -> tuple[str, str]:
    """(bucket, key) of `path` (`bucket/key`) on the s3fs filesystem `fs`, the key as it is
    (s3fs's `split_path` gives the bucket only: its key would lose a `?versionId=...`)."""
    bucket = fs.split_path(path)[0]
    if not path.startswith(f"{bucket}/"):
        raise ValueError(f"{path!r} is not an S3 object path of the form bucket/key")
    return bucket, path[len(bucket) + 1 :]


def delete_objects(fs: Any, paths: Sequence[str]) -> None:
    """Delete the objects `paths` by literal key through s3fs's client, up to DELETE_BATCH per
    DeleteObjects request; a key S3 reports it could not delete raises OSError naming it."""
    by_bucket: dict[str, list[str]] = {}
    for path in paths:
        bucket, key = literal_key(fs, path)
        by_bucket.setdefault(bucket, []).append(key)
    for bucket, keys in by_bucket.items():
        for start in range(0, len(keys), DELETE_BATCH):
            objects = [{"Key": k} for k in keys[start : start + DELETE_BATCH]]
            out = fs.call_s3(
                "delete_objects", Bucket=bucket, Delete={"Objects": objects, "Quiet": True}
            )
            errors = out.get("Errors") or []
            if errors:
                first = errors[0]
                raise OSError(
                    f"S3 could not delete {len(errors)} objects of bucket {bucket}, e.g. "
                    f"{first.get('Key')!r}: {first.get('Code')} {first.get('Message')}"
                )


def check_s3_addressable(uri: str, root: str) -> None:
    """Raise UnsupportedStorageError when s3fs would address the files of the table `uri`
    (rooted at `root`) under other keys: its path holds S3_VERSION."""
    if S3_VERSION in root:
        raise UnsupportedStorageError(
            f"Table {uri}: s3fs reads {S3_VERSION!r} in an S3 path as an object version and "
            "cuts it and all after it off the key, so the table's files would be read and "
            f"written elsewhere. Choose a table path without {S3_VERSION!r}."
        )


def check_gcs_literal(uri: str, fs: Any) -> None:
    """Raise UnsupportedStorageError when the gcsfs filesystem `fs` is version aware."""
    if getattr(fs, "version_aware", False):
        raise UnsupportedStorageError(
            f"Table {uri}: with version_aware, gcsfs reads '#<number>' or "
            "'?generation=<number>' at the end of a path as an object generation, so a stray "
            "object named like a table file plus one would be deleted as that file. Remove the "
            "storage option version_aware (Delta tables do not use it)."
        )
