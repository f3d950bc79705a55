"""Typed readers for the JSON the gateways send: each failure is a ParseError naming the field.

`where` is the path of the object read from (`data.order`, `pix[0]`), so a message names
`data.order.id`; without it, the key alone. Absent and JSON null read as None, and so does
"" for strings (a field the gateway left unfilled).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from porteiro.errors import ParseError
from porteiro.jsontext import UNPARSED, fast_load

_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})"
)


def load_object(raw: bytes | str) -> dict[str, Any]:
    """A request body that must be one JSON object; the result and the errors are those
    of `json.loads` (orjson only speeds up the bodies on which both agree: jsontext)."""
    body = fast_load(raw) if isinstance(raw, bytes) else UNPARSED
    if body is UNPARSED:
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise ParseError(f"body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ParseError("body must be a JSON object")
    return body


def opt_str(obj: Mapping[str, Any], key: str, *, where: str | None = None) -> str | None:
    """A string field; absent, null and "" are None."""
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise ParseError(f"{_name(key, where)} must be a string")
    return value or None


def req_str(
    obj: Mapping[str, Any],
    key: str,
    *,
    where: str | None = None,
    missing: str = "must be a non-empty string",
) -> str:
    """A string field that must be present and non-empty; `missing` ends the message
    for an absent one."""
    value = opt_str(obj, key, where=where)
    if value is None:
        raise ParseError(f"{_name(key, where)} {missing}")
    return value


def opt_int(
    obj: Mapping[str, Any], key: str, *, where: str | None = None, non_negative: bool = True
) -> int | None:
    """An integer amount in minor units (never a bool, a float or a numeric string)."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or (non_negative and value < 0):
        sign = "a non-negative" if non_negative else "an"
        raise ParseError(f"{_name(key, where)} must be {sign} integer (minor units)")
    return value


def parse_rfc3339(value: object, *, field: str) -> datetime:
    """An RFC 3339 date-time with an offset; fractions beyond microseconds are cut."""
    if not isinstance(value, str):
        raise ParseError(f"{field} must be an RFC 3339 string")
    match = _RFC3339.fullmatch(value.strip())
    if match is None:
        raise ParseError(f"{field} is not an RFC 3339 date-time with an offset")
    date, time, fraction, offset = match.groups()
    micro = f".{(fraction or '0')[:6]}"
    offset = "+00:00" if offset in ("Z", "z") else offset
    try:
        return datetime.fromisoformat(f"{date}T{time}{micro}{offset}")
    except ValueError:
        raise ParseError(f"{field} is not a valid date-time") from None


def opt_rfc3339(value: object, *, field: str) -> datetime | None:
    """`parse_rfc3339`, with None (an absent field) read as None."""
    return None if value is None else parse_rfc3339(value, field=field)


def _name(key: str, where: str | None) -> str:
    return f"{where}.{key}" if where else key
