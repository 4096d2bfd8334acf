"""Predicates the engine and Spark would read at different instants.

The engine reads a timestamp literal without a zone as UTC (`engine/expressions/coercion.py`);
Spark reads it in the session time zone (`spark.sql.session.timeZone`), and casts a date to a
timestamp at the session's midnight. In a session whose zone is not UTC, a predicate comparing
a `timestamp` column with `'2024-01-01 12:00:00'` therefore means another instant to each: the
files the engine selects by partition values or stats are not those holding the rows Spark
matches. A DELETE or UPDATE then misses rows (the files holding them were pruned) or, when the
engine alone decides (a predicate over partition columns only), removes rows the predicate does
not match; a MERGE misses its matches; a replaceWhere removes other partitions than those its
rows were checked against.

`zone_dependent` tells such a conjunct; `zone_safe` leaves those out of the pruning predicates
(Spark still applies them to every row read: only pruning is lost), and
`check_replace_where` refuses a replaceWhere the two would read differently.

    >>> zone_safe(spark, txn, ["ts = '2024-01-01 12:00:00'", "d = '2024-01-01'"])
    ["d = '2024-01-01'"]  # in a session whose zone is America/Los_Angeles
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from airflow_delta.engine.errors import InvalidArgumentError, InvalidPredicateError
from airflow_delta.engine.expressions.tokens import tokenize
from airflow_delta.engine.txn.transaction import OptimisticTransaction

TIME_ZONE_CONF = "spark.sql.session.timeZone"
#: Zone names that are UTC at every instant (Java ZoneId spellings).
_UTC_NAMES = frozenset(
    {"utc", "z", "gmt", "uct", "zulu", "universal", "greenwich", "gmt0", "+00:00", "-00:00"}
    | {"etc/utc", "etc/gmt", "etc/uct", "etc/zulu", "etc/universal", "etc/greenwich"}
    | {"etc/gmt0", "etc/gmt+0", "etc/gmt-0", "utc+0", "utc-0", "gmt+0", "gmt-0", "+00", "+0"}
    | {"utc+00:00", "gmt+00:00", "utc-00:00", "gmt-00:00"}
)
#: Functions whose value depends on the session time zone.
_ZONED_FUNCTIONS = frozenset(
    {"current_date", "current_timestamp", "now", "localtimestamp", "curdate", "current_timezone"}
)
#: A string literal ending with an explicit zone, which both read as the same instant.
_WITH_ZONE = re.compile(
    r"\s*\d{4}-\d{1,2}-\d{1,2}[T ]\d{1,2}:\d{2}(:\d{2}(\.\d*)?)?\s*"
    r"(Z|UTC|GMT|[+-]\d{1,2}(:?\d{2})?)\s*",
    re.IGNORECASE,
)


def session_time_zone(spark: Any) -> str:
    """The session's time zone (`spark.sql.session.timeZone`)."""
    return str(spark.conf.get(TIME_ZONE_CONF, None) or "UTC")


def is_utc(zone: str) -> bool:
    """Whether the Spark session time zone `zone` is UTC at every instant."""
    return zone.strip().lower() in _UTC_NAMES


def _column_types(metadata: Any) -> dict[str, Any]:
    fields = json.loads(metadata.schema_string or "{}").get("fields", [])
    return {f["name"].lower(): f["type"] for f in fields}


def zone_dependent(txn: OptimisticTransaction, conjunct: str, zone: str) -> bool:
    """Whether the engine and a Spark session in `zone` may read `conjunct` (a predicate the
    engine parses) as different instants: never in UTC; else when it calls a function of the
    session zone, compares a `timestamp` column with a string without an explicit zone,
    a `timestamp_ntz` column with one with a zone, or a date column with a time."""
    if is_utc(zone):
        return False
    try:
        columns = txn.parse_file_predicate(conjunct).columns
    except InvalidPredicateError:
        return False  # not the engine's to read: it prunes nothing by it
    return _dependent(txn.metadata, conjunct, columns, zone)


def zone_unsafe_filter(spark: Any, snapshot: Any, condition: str, parsed: Any) -> bool:
    """Whether `read_delta` must not skip files by `condition` (`parsed`: the engine's parse of
    it): the engine and the session would read it as different instants."""
    zone = session_time_zone(spark)
    return not is_utc(zone) and _dependent(snapshot.metadata, condition, parsed.columns, zone)


def _dependent(metadata: Any, conjunct: str, columns: Any, zone: str) -> bool:
    try:
        tokens = tokenize(conjunct, lenient=True)
    except InvalidPredicateError:
        return True
    types = _column_types(metadata)
    kinds = {types.get(c.lower()) for c in columns}
    words = {t.value.lower() for t in tokens if t.kind in ("ident", "other")}
    strings = [t.value.strip() for t in tokens if t.kind == "string"]
    if words & _ZONED_FUNCTIONS:
        return True
    if "timestamp" in kinds and any(not _WITH_ZONE.fullmatch(s) for s in strings):
        return True
    if "timestamp_ntz" in kinds and any(_WITH_ZONE.fullmatch(s) for s in strings):
        return True
    return "date" in kinds and ("timestamp" in words or any(":" in s for s in strings))


def zone_safe(spark: Any, txn: OptimisticTransaction, predicates: Sequence[str]) -> list[str]:
    """`predicates` (for pruning) without those `zone_dependent` in the session's zone."""
    zone = session_time_zone(spark)
    return [p for p in predicates if not zone_dependent(txn, p, zone)]


def check_replace_where(spark: Any, txn: OptimisticTransaction, replace_where: str) -> None:
    """InvalidArgumentError when the files the engine replaces for `replace_where` and the
    rows Spark checks against it would be read in different time zones."""
    zone = session_time_zone(spark)
    if not zone_dependent(txn, replace_where, zone):
        return
    raise InvalidArgumentError(
        f"Write to {txn.table} (version {txn.read_version}): replace_where {replace_where!r} "
        f"compares a date or timestamp in a way the Delta log reads in UTC but Spark reads in "
        f"the session time zone {zone!r}, so other rows would be replaced than those it "
        f"names. Write each timestamp literal with its zone (such as "
        f"'2024-01-01 12:00:00Z' or '...+01:00'), or set {TIME_ZONE_CONF}=UTC for the write."
    )
