"""Spark's parse and analysis errors of the SQL a user hands a command (a DELETE or UPDATE
predicate, an UPDATE assignment, a MERGE condition, clause condition or assignment) as this
project's typed errors, naming the table, the version and what to fix."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pyspark.errors import AnalysisException

from airflow_delta.engine.errors import InvalidArgumentError, InvalidPredicateError


def spark_problem(exc: BaseException) -> str:
    """The first line of a Spark error's message, without its SQLSTATE."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    return lines[0].split(" SQLSTATE:")[0].rstrip(" .;")


@contextlib.contextmanager
def spark_predicate(predicate: str | None, table: str, version: int) -> Iterator[None]:
    """InvalidPredicateError (naming the table and version) for a `predicate` Spark cannot
    parse or resolve over the table while the body plans or runs it."""
    try:
        yield
    except AnalysisException as exc:  # ParseException is one
        if predicate is None:
            raise
        raise InvalidPredicateError(
            predicate,
            f"is not a predicate Spark can evaluate over the table's columns: {spark_problem(exc)}",
            table=f"Table {table} version {version}",
        ) from None


@contextlib.contextmanager
def spark_expressions(command: str, version: int, fix: str) -> Iterator[None]:
    """InvalidArgumentError for SQL of `command` (e.g. "MERGE into <table>") that Spark cannot
    parse or resolve while the body plans or runs it; `fix` tells the user what to change."""
    try:
        yield
    except AnalysisException as exc:  # ParseException is one
        raise InvalidArgumentError(
            f"{command} (version {version}): Spark cannot evaluate its SQL: "
            f"{spark_problem(exc)}. {fix}"
        ) from None
