"""The admin API's parameters, parsed and bounded before a store is asked: pure, no I/O.

Each check here stands for a 500 an attack run found: PostgreSQL refuses text holding
NUL, SQLite refuses integers past 64 bits, `int()` refuses more than 4300 digits, a
datetime near year 1 or 9999 overflows when taken to UTC, and `str.isdigit()` says yes
to digits `int()` cannot read ("²"). A bad value is a 400 (BadRequest); an id no row can
have is "no such row" (None), the same 404 as any unknown id.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from porteiro.errors import PorteiroError

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# Row ids are 64-bit signed integers in both stores.
MAX_ID = 2**63 - 1

_DIGITS = re.compile(r"[0-9]+")
E = TypeVar("E", bound=StrEnum)
T = TypeVar("T")


class BadRequest(PorteiroError):
    """The caller's input is invalid: 400 with this message."""


async def page_at(read: Callable[[str | None], Awaitable[T]], cursor: str | None) -> T:
    """`read` of the page at `cursor` ("" or None: the first), a cursor the store cannot
    decode (it raises ValueError) answered as a 400 rather than a 500. Every paged list
    of the admin API and the console reads through here."""
    try:
        return await read(cursor or None)
    except ValueError as exc:
        raise BadRequest(f"invalid cursor: {exc}") from exc


def parse_id(value: str) -> int | None:
    """A path id: None (answered as unknown) unless a decimal integer a row can have."""
    if _DIGITS.fullmatch(value) is None:
        return None
    significant = value.lstrip("0") or "0"
    if len(significant) > len(str(MAX_ID)):  # before int(): it refuses > 4300 digits
        return None
    number = int(significant)
    return number if number <= MAX_ID else None


def parse_limit(value: str | None) -> int:
    if value is None or value == "":
        return DEFAULT_LIMIT
    if _DIGITS.fullmatch(value) is None or len(value) > 6 or not 1 <= int(value) <= MAX_LIMIT:
        raise BadRequest(f"invalid limit {value[:20]!r}: expected an integer from 1 to {MAX_LIMIT}")
    return int(value)


def text(value: str, name: str) -> str:
    """A text parameter as given; NUL refused (PostgreSQL text cannot hold it, so no
    stored row can match it)."""
    if "\x00" in value:
        raise BadRequest(f"invalid {name}: NUL characters are not allowed")
    return value


def optional_text(params: Mapping[str, Any], key: str) -> str | None:
    """`params[key]` as text, None when absent or empty; 400 if not a string."""
    value = params.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{key} must be a string")
    return text(value, key)


def parse_enum(enum: type[E], value: str, name: str) -> E:
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(member.value for member in enum)
        raise BadRequest(f"invalid {name} {value[:40]!r}: expected one of {allowed}") from None


def parse_datetime(value: str, name: str) -> datetime:
    """ISO 8601; a value without an offset is taken as UTC. Refused when it has no UTC
    equivalent (the stores compare in UTC)."""
    problem = f"invalid {name} {value[:40]!r}: expected ISO 8601, e.g. 2024-05-01T12:00:00Z"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise BadRequest(problem) from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        parsed.astimezone(UTC)
    except OverflowError:
        raise BadRequest(f"{problem} (out of range in UTC)") from None
    return parsed


def parse_ids(value: object, name: str = "ids") -> list[int]:
    """A JSON list of row ids (64-bit signed integers; bools are not integers)."""
    if not isinstance(value, list) or not all(
        isinstance(item, int) and not isinstance(item, bool) and -MAX_ID - 1 <= item <= MAX_ID
        for item in value
    ):
        raise BadRequest(f"{name} must be a list of integers (64-bit)")
    return value


def parse_flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be true or false")
    return value
