"""Partition predicates: SQL boolean expressions over partition columns, evaluated on AddFiles.

`OptimisticTransaction.filter_files` selects files with a predicate such as
`date >= '2024-01-01' AND region IN ('eu', 'us')`, and the conflict checker evaluates the same
predicate on the files that concurrent commits added. `PartitionPredicate.parse` reads the text
(`parser`: the grammar, with Spark's typing of comparisons from `coercion`) into an expression
tree (`tree`), checked against the table's partition columns.

Evaluation is vectorised with pyarrow compute: each referenced column is looked up in
`partitionValues` once and typed by `schema.partition_values_to_arrow`. It uses SQL's
three-valued logic, and a file is selected when the predicate is true for its partition: unknown
(NULL) does not select it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import InvalidPredicateError
from airflow_delta.engine.expressions.parser import PartitionColumns, UsedColumns, parse
from airflow_delta.engine.expressions.tree import And, Const, Expr
from airflow_delta.engine.protocol import columnar
from airflow_delta.engine.protocol.schema import partition_values_to_arrow

_FALSE = columnar.scalar(False, pa.bool_())

_NOT_TEXT = "is not SQL text: pass a str, or a list of them"


class PartitionPredicate:
    """A parsed SQL boolean expression over partition columns."""

    def __init__(self, text: str, root: Expr, used: UsedColumns) -> None:
        self.text = text
        self._root = root
        self._used = dict(used)  # name -> (partitionValues key, Delta type)
        self.columns: frozenset[str] = frozenset(self._used)

    @classmethod
    def parse(cls, text: str, partition_columns: PartitionColumns) -> PartitionPredicate:
        """Parse `text` for a table with `partition_columns` (name -> Delta type).

        A value may also be the column's schema field object (with `name`, `type` and
        `metadata`), so that a column-mapped table's physical names key `partitionValues`.
        Raises InvalidPredicateError for a syntax error, a column that is not a partition
        column, or a literal that cannot be compared with what it is compared with.

        >>> PartitionPredicate.parse("day >= '2024-01-01' AND region = 'eu'",
        ...     {"day": "date", "region": "string"}).columns == {"day", "region"}
        True
        """
        root, used = parse(text, partition_columns)
        return cls(text, root, used)

    @classmethod
    def all_of(cls, predicates: Sequence[PartitionPredicate]) -> PartitionPredicate:
        """The AND of `predicates` (TRUE when there are none)."""
        if not predicates:
            return TRUE
        if len(predicates) == 1:
            return predicates[0]
        text = " AND ".join(f"({p.text})" for p in predicates)
        root = predicates[0]._root
        used = dict(predicates[0]._used)
        for predicate in predicates[1:]:
            root = And((0, len(text)), root, predicate._root)
            used.update(predicate._used)
        return cls(text, root, used)

    def evaluate(self, files: pa.StructArray) -> pa.BooleanArray:
        """For each file (ADD_TYPE-shaped), whether its partition may satisfy the predicate.

        Only `partitionValues` is read; a missing key is null. Unknown (NULL) counts as False,
        as in a SQL WHERE clause. Raises CorruptLogError for a malformed partition value.
        """
        result = self._root.evaluate(partition_arrays(files, self._used))
        if isinstance(result, pa.Scalar):
            return columnar.bool_mask(np.full(len(files), result.as_py() is True))
        return pc.fill_null(result, _FALSE)

    def evaluate_rows(
        self, columns: Mapping[str, pa.Array | pa.ChunkedArray], rows: int
    ) -> npt.NDArray[np.bool_]:
        """For each of `rows` rows, whether the predicate is true (NULL counts as False), given
        the values of the columns it uses (`columns`: name -> array of the column's type)."""
        result = self._root.evaluate(dict(columns))
        if isinstance(result, pa.Scalar):
            return np.full(rows, result.as_py() is True)
        return numpy_mask(result)

    @property
    def root(self) -> Expr:
        """The expression tree."""
        return self._root

    @property
    def used(self) -> UsedColumns:
        """The columns the predicate uses: name -> (key in the log, Delta type)."""
        return dict(self._used)

    def matches_all(self) -> bool:
        """Whether this is the literal TRUE, which selects the whole table."""
        root = self._root
        return isinstance(root, Const) and root.scalar.as_py() is True

    def __repr__(self) -> str:
        return f"PartitionPredicate({self.text!r})"


def numpy_mask(values: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.bool_]:
    """A boolean Arrow array as a numpy bool array, NULL as False. Read from its bits:
    `to_numpy()` of a boolean array would import pandas (pyarrow's shim, 0.3 s)."""
    if isinstance(values, pa.ChunkedArray):
        values = columnar.contiguous(values) if values.num_chunks else pa.array([], pa.bool_())
    mask: npt.NDArray[np.bool_] = columnar.bool_values(pc.fill_null(values, _FALSE))
    return mask


def partition_arrays(files: pa.StructArray, used: UsedColumns) -> dict[str, pa.Array]:
    """The typed partition values of `files` (ADD_TYPE) for the columns `used`."""
    columns = {}
    if used:
        values = pc.struct_field(files, "partitionValues")
        for name, (key, delta_type) in used.items():
            raw = pc.map_lookup(values, columnar.scalar(key, pa.string()), "first")
            columns[name] = partition_values_to_arrow(raw, delta_type)
    return columns


TRUE = PartitionPredicate("true", Const((0, 4), columnar.scalar(True, pa.bool_())), {})
"""The predicate that selects every file."""


def parse_predicates(
    predicate: str | Sequence[str] | None, partition_columns: PartitionColumns
) -> PartitionPredicate:
    """One predicate from None (TRUE), a SQL text, or a list of texts (their AND)."""
    if predicate is None:
        return TRUE
    if isinstance(predicate, str):
        return PartitionPredicate.parse(predicate, partition_columns)
    if not isinstance(predicate, list | tuple):
        raise InvalidPredicateError(repr(predicate), _NOT_TEXT)
    for item in predicate:
        if not isinstance(item, str):
            raise InvalidPredicateError(
                repr(item), "is not SQL text: pass a str (or a list of them)"
            )
    return PartitionPredicate.all_of(
        [PartitionPredicate.parse(p, partition_columns) for p in predicate]
    )
