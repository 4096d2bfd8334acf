"""The `airflow-delta` command: inspect and maintain Delta tables from a shell.

Every subcommand prints compact JSON on stdout: one object (`describe`, `checkpoint`,
`vacuum`, `delete`, `update`, `optimize`, `restore`, `write`) or JSON lines (`files`, `history`). On
failure the exit code is 1 and stderr holds exactly one line,
``error: <ExceptionClassName>: <message>``. Argument errors keep argparse's exit code 2.

Examples::

    airflow-delta describe s3://bucket/events --storage-option AWS_REGION=eu-west-1
    airflow-delta describe /data/events --timestamp 2024-05-01T00:00:00Z
    airflow-delta files /data/events --version 12
    airflow-delta history /data/events --limit 5
    airflow-delta checkpoint /data/events
    airflow-delta vacuum /data/events --retention-hours 168 --dry-run
    airflow-delta delete /data/events --predicate "day < '2024-01-01' AND user_id = 42"
    airflow-delta update /data/orders --set "status='closed'" --predicate "status = 'open'"
    airflow-delta update /data/orders --set "amount=amount * 2" --predicate "id = 7" --spark
    airflow-delta optimize /data/events --partition-filter "day = '2024-06-01'" --zorder-by user_id
    airflow-delta restore /data/events --version 12
    airflow-delta write /data/events --source /landing/2024-06-01/ --mode overwrite \
        --replace-where "day = '2024-06-01'"

The commands that commit (`delete`, `update`, `optimize`, `restore`, `write`) print the
commit's result:
`{table, version, operation, skipped, read_version, attempts, conflicts_resolved, hooks,
metrics}`; `version` is null and `skipped` true when there was nothing to change.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from airflow_delta import __version__

JsonDict = dict[str, Any]


# -- output ------------------------------------------------------------------------------------


def _dumps(obj: Any) -> str:
    """Compact JSON; values JSON does not know (Decimal, datetime, bytes) become strings."""
    return json.dumps(obj, separators=(",", ":"), default=str)


def _emit(lines: Iterable[str]) -> None:
    """Write lines to stdout (built in full beforehand, so a failure never leaves half output)."""
    out = "".join(f"{line}\n" for line in lines)
    sys.stdout.write(out)
    sys.stdout.flush()


def _error_line(exc: BaseException) -> str:
    """`error: <ExceptionClassName>: <message>` on one line."""
    message = " ".join(str(exc).split()) or repr(exc)
    return f"error: {type(exc).__name__}: {message}"


# -- helpers -----------------------------------------------------------------------------------


def _storage_option(text: str) -> tuple[str, str]:
    """Parse one `KEY=VALUE` storage option."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _delta_log(args: argparse.Namespace) -> Any:
    """The DeltaLog of the table the command names (engine imported lazily: fast `--help`)."""
    from airflow_delta.engine import DeltaLog

    return DeltaLog.for_table(args.uri, dict(args.storage_options or []))


def _map(pairs: Any) -> dict[str, Any] | None:
    """A pyarrow map value (list of (key, value) tuples) as a dict."""
    return None if pairs is None else dict(pairs)


def _deletion_vector(dv: JsonDict | None) -> JsonDict | None:
    """A deletion vector descriptor in the log's JSON field names (unset fields left out)."""
    if dv is None:
        return None
    return {k: v for k, v in dv.items() if v is not None}


# -- subcommands -------------------------------------------------------------------------------


def cmd_describe(args: argparse.Namespace) -> int:
    """Print one JSON object describing the table at a version (latest by default)."""
    snapshot = _delta_log(args).snapshot_at(version=args.version, timestamp=args.timestamp)
    protocol, metadata = snapshot.protocol, snapshot.metadata
    schema = json.loads(metadata.schema_string) if metadata.schema_string is not None else None
    row: JsonDict = {
        "version": snapshot.version,
        "timestamp": snapshot.timestamp,
        "min_reader_version": protocol.min_reader_version,
        "min_writer_version": protocol.min_writer_version,
        "reader_features": protocol.reader_features,
        "writer_features": protocol.writer_features,
        "table_id": metadata.id,
        "name": metadata.name,
        "description": metadata.description,
        "created_time": metadata.created_time,
        "format": {"provider": metadata.format.provider, "options": metadata.format.options},
        "partition_columns": snapshot.partition_columns,
        "configuration": metadata.configuration,
        "num_files": snapshot.num_files,
        "size_bytes": snapshot.size_in_bytes,
        # Rows: stats.numRecords minus deletion-vector cardinality; null if a file has no stats.
        "num_records": snapshot.num_records,
        "transactions": snapshot.transactions,
        "domain_metadata": {
            domain: dm.configuration for domain, dm in snapshot.domain_metadata.items()
        },
        "checkpoint_version": snapshot.log_segment.checkpoint_version,
        "schema": schema,
    }
    _emit([_dumps(row)])
    return 0


def cmd_files(args: argparse.Namespace) -> int:
    """Print one JSON line per active file of the table at a version (latest by default)."""
    from airflow_delta.engine.protocol.action_types import stats_num_records

    snapshot = _delta_log(args).snapshot_at(version=args.version)
    files = snapshot.files()
    counts = stats_num_records(files.field("stats")).to_pylist()
    lines = [
        _dumps(
            {
                "path": add["path"],
                "partition_values": _map(add["partitionValues"]) or {},
                "size": add["size"],
                "num_records": n,
                "deletion_vector": _deletion_vector(add["deletionVector"]),
            }
        )
        for add, n in zip(files.to_pylist(), counts, strict=True)
    ]
    _emit(lines)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """Print the commitInfo of each commit plus its `version`, newest first, as JSON lines."""
    _emit(_dumps(entry) for entry in _delta_log(args).history(limit=args.limit))
    return 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    """Write a checkpoint of the latest version and print what was written."""
    result = _delta_log(args).checkpoint()
    _emit([_dumps(dataclasses.asdict(result))])
    return 0


def cmd_vacuum(args: argparse.Namespace) -> int:
    """Delete (or with --dry-run list) the data files no retained version references."""
    result = _delta_log(args).vacuum(
        retention_hours=args.retention_hours,
        dry_run=args.dry_run,
        enforce_retention_duration=not args.force,
    )
    row: JsonDict = {
        "files_deleted": len(result.files_deleted),
        "bytes_deleted": result.bytes_deleted,
        "dry_run": result.dry_run,
        "retention_hours": result.retention_hours,
        "files": result.files_deleted,
    }
    _emit([_dumps(row)])
    return 0


def _commit_properties(args: argparse.Namespace) -> Any:
    """The CommitProperties of a committing command (its --user-metadata)."""
    from airflow_delta.engine import CommitProperties

    return CommitProperties(user_metadata=args.user_metadata)


def _emit_commit(result: Any) -> int:
    """Print a command's CommitResult as one JSON object."""
    _emit([_dumps(result.to_dict())])
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    """DELETE the rows matching --predicate (every row with --all-rows), in process (on Spark
    with --spark)."""
    from airflow_delta.engine import delete

    predicate = None if args.all_rows else args.predicate
    options = dict(args.storage_options or [])
    properties = _commit_properties(args)
    if args.spark:
        from airflow_delta.spark import delete as delete_on_spark
        from airflow_delta.spark import get_spark

        result = delete_on_spark(
            get_spark(),
            args.uri,
            predicate,
            storage_options=options,
            commit_properties=properties,
        )
    else:
        result = delete(args.uri, predicate, storage_options=options, commit_properties=properties)
    return _emit_commit(result)


def cmd_update(args: argparse.Namespace) -> int:
    """UPDATE the rows matching --predicate (every row with --all-rows), in process (on Spark
    with --spark)."""
    from airflow_delta.engine import update

    assignments: dict[str, str] = {}
    for column, value in args.assignments:
        if column in assignments:
            raise ValueError(f"--set assigns column {column!r} twice")
        assignments[column] = value
    predicate = None if args.all_rows else args.predicate
    options = dict(args.storage_options or [])
    properties = _commit_properties(args)
    if args.spark:
        from airflow_delta.spark import get_spark
        from airflow_delta.spark import update as update_on_spark

        result = update_on_spark(
            get_spark(),
            args.uri,
            assignments,
            predicate,
            storage_options=options,
            commit_properties=properties,
        )
    else:
        result = update(
            args.uri, assignments, predicate, storage_options=options, commit_properties=properties
        )
    return _emit_commit(result)


def cmd_optimize(args: argparse.Namespace) -> int:
    """OPTIMIZE (compact, or Z-order with --zorder-by) the table or the filtered partitions."""
    from airflow_delta.engine import optimize

    result = optimize(
        args.uri,
        args.partition_filter,
        target_size=args.target_size,
        min_file_size=args.min_file_size,
        zorder_by=args.zorder_by or None,
        storage_options=dict(args.storage_options or []),
        commit_properties=_commit_properties(args),
    )
    return _emit_commit(result)


def cmd_restore(args: argparse.Namespace) -> int:
    """RESTORE the table to --version or --timestamp, as a new commit."""
    from airflow_delta.engine import restore

    result = restore(
        args.uri,
        version=args.version,
        timestamp=args.timestamp,
        ignore_missing_files=args.ignore_missing_files,
        storage_options=dict(args.storage_options or []),
        commit_properties=_commit_properties(args),
    )
    return _emit_commit(result)


def cmd_write(args: argparse.Namespace) -> int:
    """Write the rows of --source (parquet, CSV or JSON lines files, read by pyarrow) to the
    table, in process (`engine.write_table`)."""
    import pyarrow.dataset as ds

    from airflow_delta.engine import write_table

    try:
        data = ds.dataset(args.source, format=args.source_format).to_table()
    except (FileNotFoundError, OSError) as exc:
        raise FileNotFoundError(f"cannot read --source {args.source}: {exc}") from None
    result = write_table(
        args.uri,
        data,
        mode=args.mode,
        partition_by=args.partition_by or None,
        replace_where=args.replace_where,
        schema_mode=args.schema_mode,
        storage_options=dict(args.storage_options or []),
        commit_properties=_commit_properties(args),
    )
    return _emit_commit(result)


def _assignment(text: str) -> tuple[str, str]:
    """Parse one `COLUMN=SQL` assignment of `update --set` (a `quoted` column may hold `=`)."""
    text = text.strip()
    if text.startswith("`"):
        end = text.find("`", 1)
        column, rest = (text[1:end], text[end + 1 :].lstrip()) if end > 0 else ("", "")
        sep, value = rest[:1], rest[1:]
    else:
        column, sep, value = text.partition("=")
        column = column.strip()
    if sep != "=" or not column or not value.strip():
        raise argparse.ArgumentTypeError(f"expected COLUMN=SQL, got {text!r}")
    return column, value.strip()


def _columns(text: str) -> list[str]:
    """A comma-separated list of column names."""
    columns = [c.strip() for c in text.split(",")]
    if not all(columns):
        raise argparse.ArgumentTypeError(f"expected column names separated by commas, got {text!r}")
    return columns


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


# -- parser ------------------------------------------------------------------------------------


def _add_common(parser: argparse.ArgumentParser) -> None:
    """The arguments every subcommand takes: the table URI and storage options."""
    parser.add_argument("uri", metavar="URI", help="table location: path, file://, s3://, ...")
    parser.add_argument(
        "--storage-option",
        dest="storage_options",
        metavar="KEY=VALUE",
        type=_storage_option,
        action="append",
        default=[],
        help="filesystem option (repeatable), e.g. AWS_REGION=us-east-1",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `airflow-delta`."""
    parser = argparse.ArgumentParser(
        prog="airflow-delta",
        description="Inspect and maintain Delta Lake tables. Output is JSON on stdout.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log engine progress to stderr"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("describe", help="table version, protocol, metadata, schema and sizes")
    _add_common(p)
    when = p.add_mutually_exclusive_group()
    when.add_argument("--version", type=_non_negative_int, metavar="N", help="time travel")
    when.add_argument(
        "--timestamp",
        metavar="ISO8601",
        help="latest version committed at or before this time (UTC when no offset)",
    )
    p.set_defaults(handler=cmd_describe)

    p = sub.add_parser("files", help="the active data files, one JSON line each")
    _add_common(p)
    p.add_argument("--version", type=_non_negative_int, metavar="N", help="time travel")
    p.set_defaults(handler=cmd_files)

    p = sub.add_parser("history", help="commitInfo of each commit, newest first")
    _add_common(p)
    p.add_argument("--limit", type=_non_negative_int, metavar="N", help="newest N commits only")
    p.set_defaults(handler=cmd_history)

    p = sub.add_parser("checkpoint", help="write a checkpoint of the latest version")
    _add_common(p)
    p.set_defaults(handler=cmd_checkpoint)

    p = sub.add_parser("vacuum", help="delete data files no retained version references")
    _add_common(p)
    p.add_argument(
        "--retention-hours",
        type=_non_negative_float,
        metavar="H",
        help="keep files newer than this (default: delta.deletedFileRetentionDuration, 168)",
    )
    p.add_argument("--dry-run", action="store_true", help="list the files, delete nothing")
    p.add_argument(
        "--force",
        action="store_true",
        help="allow a retention shorter than the table's (unsafe while anyone writes)",
    )
    p.set_defaults(handler=cmd_vacuum)
    _add_table_commands(sub)
    _add_write_command(sub)
    return parser


def _add_write_command(sub: Any) -> None:
    """The write subcommand: files' rows written to the table in process."""
    p = sub.add_parser("write", help="write the rows of parquet/CSV/JSON files (in process)")
    _add_common(p)
    p.add_argument("--source", required=True, metavar="PATH", help="a file or a directory")
    p.add_argument(
        "--source-format",
        choices=("parquet", "csv", "json"),
        default="parquet",
        help="format of the source files (default parquet)",
    )
    p.add_argument("--mode", choices=("append", "overwrite", "error", "ignore"), default="append")
    p.add_argument(
        "--partition-by", action="append", metavar="COLUMN", help="of a new table (repeatable)"
    )
    p.add_argument("--replace-where", metavar="SQL", help="with --mode overwrite: partitions")
    p.add_argument("--schema-mode", choices=("merge", "overwrite"), help="evolve the schema")
    _add_user_metadata(p)
    p.set_defaults(handler=cmd_write)


def _add_table_commands(sub: Any) -> None:
    """The subcommands that change a table in process: delete, update, optimize, restore."""
    p = sub.add_parser("delete", help="DELETE the rows matching a predicate (in process)")
    _add_common(p)
    _add_predicate(p, "delete")
    _add_spark(p)
    _add_user_metadata(p)
    p.set_defaults(handler=cmd_delete)

    p = sub.add_parser("update", help="UPDATE the rows matching a predicate (in process)")
    _add_common(p)
    p.add_argument(
        "--set",
        dest="assignments",
        metavar="COLUMN=SQL",
        type=_assignment,
        action="append",
        required=True,
        help="an assignment (repeatable): a column, a literal ('x', 42, NULL, DATE '...') "
        "or a condition; with --spark any Spark SQL expression",
    )
    _add_predicate(p, "update")
    _add_spark(p)
    _add_user_metadata(p)
    p.set_defaults(handler=cmd_update)

    p = sub.add_parser("optimize", help="compact small files, or Z-order (in process)")
    _add_common(p)
    p.add_argument(
        "--partition-filter",
        metavar="SQL",
        help="only the partitions matching this condition over partition columns",
    )
    p.add_argument(
        "--zorder-by", type=_columns, metavar="COL[,COL...]", help="cluster by these columns"
    )
    p.add_argument(
        "--target-size",
        type=_positive_int,
        metavar="BYTES",
        help="size a compacted file aims at (default: delta.targetFileSize, else 256 MiB)",
    )
    p.add_argument(
        "--min-file-size",
        type=_non_negative_int,
        metavar="BYTES",
        help="files smaller than this are compacted (default: the target size)",
    )
    _add_user_metadata(p)
    p.set_defaults(handler=cmd_optimize)

    p = sub.add_parser("restore", help="RESTORE the table to an earlier version, as a new commit")
    _add_common(p)
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--version", type=_non_negative_int, metavar="N", help="version to restore")
    when.add_argument(
        "--timestamp",
        metavar="ISO8601",
        help="restore the latest version committed at or before this time (UTC when no offset)",
    )
    p.add_argument(
        "--ignore-missing-files",
        action="store_true",
        help="restore even when data files of that version are gone (they are left out)",
    )
    _add_user_metadata(p)
    p.set_defaults(handler=cmd_restore)


def _add_predicate(parser: argparse.ArgumentParser, verb: str) -> None:
    """--predicate SQL, or --all-rows: one of them is required (no command changes every row
    by omission)."""
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--predicate", metavar="SQL", help=f"{verb} the rows where this condition is true"
    )
    which.add_argument("--all-rows", action="store_true", help=f"{verb} every row")


def _add_spark(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spark",
        action="store_true",
        help="run on Spark (the active session, else a local one; needs pyspark): for "
        "predicates and assignments the in-process command does not evaluate, such as "
        "arithmetic and function calls",
    )


def _add_user_metadata(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user-metadata", metavar="TEXT", help="stored as commitInfo.userMetadata")


# -- entry point -------------------------------------------------------------------------------


def _quiet_engine_logs(verbose: bool) -> Callable[[], None]:
    """Route engine logging: to stderr with --verbose, nowhere otherwise (nor the logging of
    the libraries underneath: gcsfs, s3fs, botocore). Returns an undo."""
    handler: logging.Handler
    if verbose:
        logger = logging.getLogger("airflow_delta")
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        old_level = logger.level
        logger.setLevel(logging.INFO)
    else:
        # Without any handler, logging's last resort would print any library's warnings (a
        # traceback gcsfs logs before retrying) to stderr and break the one-line error contract.
        logger = logging.getLogger()
        handler = logging.NullHandler()
        old_level = logger.level
    logger.addHandler(handler)

    def undo() -> None:
        logger.removeHandler(handler)
        logger.setLevel(old_level)

    return undo


def main(argv: Sequence[str] | None = None) -> int:
    """Run `airflow-delta` with `argv` (default: the process arguments); return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or an argument error (argparse printed it)
        return exc.code if isinstance(exc.code, int) else 2
    undo = _quiet_engine_logs(args.verbose)
    try:
        with warnings.catch_warnings():
            if not args.verbose:
                warnings.simplefilter("ignore")
            return args.handler(args)
    except BrokenPipeError:
        # The reader of stdout went away (`... | head`): stop quietly, as Unix tools do.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except Exception as exc:
        print(_error_line(exc), file=sys.stderr)
        return 1
    finally:
        undo()


if __name__ == "__main__":
    raise SystemExit(main())
