"""JSON read from a table's log, with every way it can fail mapped to `CorruptLogError`.

A log is written by other engines and sometimes by hand, so its JSON is untrusted input: beside
syntax errors, nesting deeper than Python's recursion limit raises `RecursionError` from the
standard decoder. Every JSON text taken from the log (commit lines, `_last_checkpoint`,
schema strings, stats) is parsed here.
"""

from __future__ import annotations

import json
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
