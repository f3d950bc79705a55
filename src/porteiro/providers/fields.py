"""Typed readers for the JSON the gateways send: each failure is a ParseError naming the field.

`where` is the path of the object read from (`data.order`, `pix[0]`), so a message names
`data.order.id`; without it, the key alone. Absent and JSON null read as None, and so does
"" for strings (a field the gateway left unfilled).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, tzinfo
from typing import Any, TypeVar

from porteiro.errors import ParseError
from porteiro.jsontext import UNPARSED, fast_load
from porteiro.model import UNPARSEABLE_TYPE, WARNINGS_KEY, Kind, ParsedEvent

T = TypeVar("T")

_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})"
)


def load_object(
    raw: bytes | str,
    *,
    error: Callable[[str], Exception] = ParseError,
    not_json: str = "body is not valid JSON: {exc}",
    not_object: str = "body must be a JSON object",
) -> dict[str, Any]:
    """A request body that must be one JSON object; the result and the errors are those
    of `json.loads` (orjson only speeds up the bodies on which both agree: jsontext).
    A failure raises `error` with `not_json` (`{exc}`: json's message, `{kind}`: its
    exception's name) or `not_object`: an adapter whose verify must refuse such a body
    with a 401 passes its own."""
    body = fast_load(raw) if isinstance(raw, bytes) else UNPARSED
    if body is UNPARSED:
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise error(not_json.format(exc=exc, kind=type(exc).__name__)) from None
    if not isinstance(body, dict):
        raise error(not_object)
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


# -- reading past a deviation --------------------------------------------------------------
#
# The rule every adapter follows: a delivery (or one item of it) is dead-lettered only when
# Porteiro cannot tell what happened to which payment. Fields that decide money (ids, type
# or status, amount, direction) are read strictly; an ancillary field that deviates (a
# timestamp's format, an id's length, a list sent as one object) is read the way the
# gateway means it and the deviation is kept on the event as a warning.


def warning(rule: str, detail: str) -> dict[str, str]:
    """One warning: `rule` a stable code (`<gateway>.<what>`, a metric label), `detail`
    what was seen (no personal data, no secret: the admin API shows it)."""
    return {"rule": rule, "detail": detail}


def with_warnings(event: ParsedEvent, warnings: Sequence[Mapping[str, str]]) -> ParsedEvent:
    """`event` with `warnings` added to its data (the same event when there are none)."""
    if not warnings:
        return event
    kept = [*event.warnings, *warnings]
    return replace(event, data={**event.data, WARNINGS_KEY: kept})


def lenient_time(
    value: object,
    *,
    field: str,
    rule: str,
    warnings: list[dict[str, str]],
    naive: tzinfo | None = None,
) -> datetime | None:
    """An ancillary timestamp: RFC 3339 as `parse_rfc3339`; without an offset, read in
    `naive` (the zone the gateway documents for it) with a warning; unreadable, None with
    a warning (never a reason to dead-letter: the ledger orders by it, nothing more)."""
    if value is None or value == "":
        return None
    try:
        return parse_rfc3339(value, field=field)
    except ParseError as exc:
        problem = str(exc)
    if naive is not None and isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is None:
            warnings.append(warning(rule, f"{field} has no UTC offset: read as {naive}"))
            return moment.replace(tzinfo=naive)
    warnings.append(warning(rule, f"{problem}: ignored"))
    return None


def unreadable(item: object, *, where: str, error: ParseError | str) -> ParsedEvent:
    """One item of a delivery that cannot be read, as an event of its own: stored `dead`
    with the reason while the delivery's other items apply; `porteiro replay` re-parses
    it after an upgrade. Keyed by the item's content, so a re-sent delivery repeats it."""
    canonical = json.dumps(item, sort_keys=True, ensure_ascii=True, default=str)
    digest = hashlib.sha256(canonical.encode("ascii")).hexdigest()[:32]
    return ParsedEvent(
        dedup_key=f"porteiro:unparseable-item:{digest}",
        kind=Kind.OTHER,
        type=UNPARSEABLE_TYPE,
        object_id=None,
        data={"item": where},
        error=f"{where}: {error}",
    )


def each_item(
    items: Sequence[T], read: Callable[[T, str], Sequence[ParsedEvent]], *, where: str
) -> list[ParsedEvent]:
    """The events of every item of a list (`read(item, "where[i]")`); an item that raises
    ParseError becomes `unreadable` on its own and never sinks the others."""
    events: list[ParsedEvent] = []
    for index, item in enumerate(items):
        at = f"{where}[{index}]"
        try:
            events.extend(read(item, at))
        except ParseError as exc:
            events.append(unreadable(item, where=at, error=exc))
    return events
