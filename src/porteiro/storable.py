"""Whether the store can hold what an adapter read from a body, checked before it tries.

A correctly signed body can carry values JSON allows and the stores refuse: an integer
beyond signed 64 bits (SQLite INTEGER, PostgreSQL bigint), a NUL character (PostgreSQL
text and jsonb), a lone surrogate (no UTF-8 encoding at all: both stores), NaN or an
infinity (not JSON: jsonb), a date-time whose UTC form falls outside years 1-9999.
Written as they are, the whole delivery fails (a 500, the same on every retry of the
same bytes: lost in practice). So such an event is a parse error of its own instead:
replaced by a dead `porteiro.unparseable` event saying why (`fields.unreadable`), while
the delivery's raw bytes and its other events are stored as usual.

`data` is held to what Porteiro's own readers can write back out too: orjson (the admin
API, the sinks) refuses integers beyond 64 bits and nesting past 255 levels.

Pure and cheap for ordinary events: ASCII strings cost one NUL search each, and only
non-ASCII ones an encode attempt. Reasons name the column (and a top-level data key
when it reads as a name) and never the text itself: they are shown by the admin API.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final

from porteiro.model import ParsedEvent
from porteiro.providers.fields import unreadable

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
# Below orjson's 255-level limit, with room for the admin API's own wrapping of `data`.
MAX_DATA_DEPTH: Final = 128
_TEXT_COLUMNS: Final = ("dedup_key", "type", "object_id", "reference", "currency")
# Every one of those columns is indexed, and a PostgreSQL btree entry holds at most 2,704
# bytes: a longer id fails the insert, and with it the whole group-committed batch. No
# gateway's id comes near 1 KiB; a body that carries one is a parse error of its event.
MAX_KEY_BYTES: Final = 1024
_INT_COLUMNS: Final = ("amount", "refunded_total")
# A data key is named in a reason only when it looks like an adapter's field name.
_KEY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
# Numbers are quoted in a reason up to this many digits (a reason stays one short line).
_QUOTED_DIGITS = 40


def text_problem(value: str, limit: int | None = None) -> str | None:
    """Why a store cannot hold `value` as text (within `limit` UTF-8 bytes), or None."""
    if "\x00" in value:
        return "holds a NUL character"
    size = len(value)
    if not value.isascii():
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            return "holds a lone surrogate"
    if limit is not None and size > limit:
        return f"is {size} bytes long, beyond the {limit} the store can index"
    return None


def text(value: str) -> str:
    """`value` made storable for a reason column (parse_error, last_error): a NUL and a
    lone surrogate are written as their escapes. The same string when already fine."""
    if text_problem(value) is None:
        return value
    return value.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def headers(values: Sequence[tuple[str, str]]) -> Sequence[tuple[str, str]]:
    """Request headers made storable: a NUL in a value (which a lenient server may pass
    through; PostgreSQL jsonb refuses it) is written as its escape, so the delivery is
    stored rather than refused. Names and values are latin-1 text (no surrogates can
    occur). The same object when none holds a NUL, the common case."""
    for _, value in values:
        if "\x00" in value:
            break
    else:
        return values
    return [
        (name.replace("\x00", "\\x00"), value.replace("\x00", "\\x00")) for name, value in values
    ]


def event_problem(event: ParsedEvent) -> str | None:
    """Why the store cannot hold `event` as it is, or None."""
    for name in _TEXT_COLUMNS:
        value = getattr(event, name)
        if value is None:
            continue
        if not isinstance(value, str):
            return f"{name} is not text"
        if (problem := text_problem(value, MAX_KEY_BYTES)) is not None:
            return f"{name} {problem}"
    for name in _INT_COLUMNS:
        value = getattr(event, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{name} is not an integer"
        if not INT64_MIN <= value <= INT64_MAX:
            return f"{name} {_quoted(value)} is beyond what the store can hold"
    if event.occurred_at is not None and (problem := _time_problem(event.occurred_at)):
        return f"occurred_at {problem}"
    return data_problem(event.data)


def data_problem(data: Mapping[str, Any]) -> str | None:
    """Why `data` cannot be stored as JSON (and written out again), or None."""
    for key, value in data.items():
        where = f"data.{key}" if isinstance(key, str) and _KEY_NAME.fullmatch(key) else "data"
        if isinstance(key, str) and (problem := text_problem(key)) is not None:
            return f"data has a key that {problem}"
        if (problem := _value_problem(value)) is not None:
            return f"{where} {problem}"
    return None


def _value_problem(root: Any) -> str | None:
    # Iterative (a stack of (value, depth)): a body nested as deep as the JSON parser
    # allows must not make this check itself fail with RecursionError.
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        kind = type(value)
        if kind is str:
            if (problem := text_problem(value)) is not None:
                return problem
        elif kind is int:
            if not INT64_MIN <= value <= INT64_MAX:
                return f"holds the number {_quoted(value)}, beyond what the store can hold"
        elif kind is float:
            if not math.isfinite(value):
                return "holds NaN or an infinity, which JSON cannot carry"
        elif isinstance(value, Mapping | list | tuple):
            if depth >= MAX_DATA_DEPTH:
                return f"is nested deeper than {MAX_DATA_DEPTH} levels"
            if isinstance(value, Mapping):
                for key in value:
                    if isinstance(key, str) and (problem := text_problem(key)) is not None:
                        return f"has a key that {problem}"
                stack.extend((item, depth + 1) for item in value.values())
            else:
                stack.extend((item, depth + 1) for item in value)
        # A StrEnum, say: its text is what gets stored.
        elif isinstance(value, str) and (problem := text_problem(str(value))) is not None:
            return problem
    return None


def _time_problem(value: datetime) -> str | None:
    if value.utcoffset() is None:
        return "has no UTC offset"
    if 1 < value.year < 9999:  # an offset moves it by less than a day: always holdable
        return None
    try:
        value.astimezone(UTC)
    except (OverflowError, ValueError):
        return "is beyond the years the store can hold (1 to 9999 UTC)"
    return None


def _quoted(number: int) -> str:
    digits = str(abs(number))
    if len(digits) > _QUOTED_DIGITS:
        return f"of {len(digits)} digits"
    return str(number)


def storable_events(events: Sequence[ParsedEvent]) -> Sequence[ParsedEvent]:
    """`events` with each one the store cannot hold replaced by a dead event saying why;
    `events` itself (no copy) when all of them are fine, the usual case."""
    for event in events:
        if event_problem(event) is not None or _bad_reason(event):
            break
    else:
        return events
    return [_storable(event, index) for index, event in enumerate(events)]


def _bad_reason(event: ParsedEvent) -> bool:
    return event.error is not None and text_problem(event.error) is not None


def _storable(event: ParsedEvent, index: int) -> ParsedEvent:
    problem = event_problem(event)
    if problem is not None:
        return unstorable(event, index, problem)
    if _bad_reason(event):  # an adapter's own dead event quoting a NUL: escape the reason
        return replace(event, error=text(event.error or ""))
    return event


def unstorable(event: ParsedEvent, index: int, problem: str) -> ParsedEvent:
    """The dead event standing for `event`, which the store cannot hold: keyed by its
    content (a gateway's retry of the same bytes is a duplicate), none of its values kept
    (they are what the store refuses; the delivery's raw bytes still have them)."""
    where = event.type if isinstance(event.type, str) and _KEY_NAME.fullmatch(event.type) else ""
    where = where or f"event[{index}]"
    item = {
        "dedup_key": event.dedup_key,
        "type": event.type,
        "object_id": event.object_id,
        "reference": event.reference,
        "amount": event.amount,
        "currency": event.currency,
        "occurred_at": event.occurred_at,
        "refunded_total": event.refunded_total,
        "data": event.data,
    }
    try:
        return unreadable(item, where=where, error=problem)
    except (TypeError, ValueError, RecursionError):  # data too odd to hash: key without it
        del item["data"]
        return unreadable(item, where=where, error=problem)
