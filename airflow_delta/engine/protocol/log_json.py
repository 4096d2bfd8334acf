"""JSON read from a table's log, with every way it can fail mapped to `CorruptLogError`.

A log is written by other engines and sometimes by hand, so its JSON is untrusted input: beside
syntax errors, nesting deeper than Python's recursion limit raises `RecursionError` from the
standard decoder. Every JSON text taken from the log (commit lines, `_last_checkpoint`,
schema strings, stats) is parsed here.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections.abc import Mapping
from typing import Any

from airflow_delta.engine.errors import CorruptLogError


def parse_json(text: str | bytes, source: str) -> Any:
    """The value of the JSON `text`; CorruptLogError naming `source` when it is not JSON or is
    nested too deeply to decode.

    >>> parse_json('{"a": 1}', "x")
    {'a': 1}
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise CorruptLogError(f"{source} is nested too deeply to be read as JSON") from None
    except ValueError as exc:
        raise CorruptLogError(f"{source} is not valid JSON ({exc})") from None


#: A string as JSON, as the log's compact encoder writes it (ASCII, escaped).
json_string = json.encoder.encode_basestring_ascii


def json_string_map(values: Mapping[str, str | None]) -> str:
    """A map of strings (values may be None) as JSON, as the log's compact encoder writes it;
    TypeError for a key or value of another type."""
    if not values:
        return "{}"
    items = (
        f"{json_string(k)}:{'null' if v is None else json_string(v)}" for k, v in values.items()
    )
    return "{" + ",".join(items) + "}"


# --------------------------------------------------------------------------- file statistics

#: Characters of a string kept in minValues/maxValues (Delta's stats string prefix length).
STRING_PREFIX_LENGTH = 32


def _string_upper_bound(prefix: str) -> str | None:
    """The shortest string above every string that starts with `prefix` (None if none is)."""
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if code == 0xD800:  # skip the surrogates, which UTF-8 text cannot hold
            code = 0xE000
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None


def stats_value(value: Any, upper: bool) -> Any:
    """A min (or, `upper`, max) value as Delta writes it in the stats JSON; None to leave out.

    Strings keep a prefix (a max then rounds up past every string it starts), timestamps keep
    milliseconds (a max rounds up), in UTC with `Z` unless they have no time zone; NaN, the
    infinities and values JSON has no form for (bytes) are left out: no bound is a safe bound.
    """
    if isinstance(value, str):
        if len(value) <= STRING_PREFIX_LENGTH:
            return value
        prefix = value[:STRING_PREFIX_LENGTH]
        return _string_upper_bound(prefix) if upper else prefix
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dt.datetime):
        extra = value.microsecond % 1000
        if upper and extra:
            try:
                value += dt.timedelta(microseconds=1000 - extra)
            except OverflowError:
                return None
        if value.tzinfo is not None:
            text = value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(timespec="milliseconds")
            return text + "Z"
        return value.isoformat(timespec="milliseconds")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bool | int | decimal.Decimal):
        return value
    return None


def stats_json(value: Any) -> str:
    """JSON text of stats built of dicts, strings and numbers; decimals become JSON numbers
    with all their digits."""
    if isinstance(value, dict):
        items = (f"{json.dumps(k, ensure_ascii=False)}:{stats_json(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return json.dumps(value, allow_nan=False, ensure_ascii=False)


def parsed_stats_json(stats: Mapping[str, Any]) -> str:
    """A checkpoint's `stats_parsed` of one file (as Python values) as the text of its `stats`
    field: each bound as `stats_value` writes it, NULLs (unknown) left out."""

    def tree(values: Any, leaf: Any) -> dict[str, Any]:
        out = {}
        for name, value in (values or {}).items():
            kept = tree(value, leaf) if isinstance(value, dict) else leaf(value)
            if kept is not None and kept != {}:
                out[name] = kept
        return out

    out: dict[str, Any] = {}
    for key, value in stats.items():
        if key in ("minValues", "maxValues"):
            upper = key == "maxValues"
            out[key] = tree(value, lambda v, upper=upper: stats_value(v, upper))
        elif key == "nullCount":
            out[key] = tree(value, lambda v: v if isinstance(v, int) else None)
        elif isinstance(value, bool | int):  # numRecords, tightBounds
            out[key] = value
    return stats_json(out)
