"""What an operator types into the console's search forms, read as the store's filters
(pure). Bad input is a BadRequest (a 400 page that says what was wrong), as on the API.

Dates are days in the operator's time zone (`<input type="date">`): `since` is the day's
first instant, `until` includes the whole day. Amounts are written as people write them
(`150`, `150,00`, `1.234,56`, `1,234.56`) and searched in minor units.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Any

from porteiro.http.admin import event_filter
from porteiro.http.admin_console import payment_filter as api_payment_filter
from porteiro.http.params import BadRequest, optional_text
from porteiro.model import EventStatus
from porteiro.store.base import EventFilter
from porteiro.store.console_verbs import PaymentFilter

# ASCII digits only (`\d` would take any script's digits).
_AMOUNT = re.compile(r"^[0-9]{1,3}([.,][0-9]{3})*([.,][0-9]{1,2})?$|^[0-9]+([.,][0-9]{1,2})?$")


def parse_amount(value: str) -> int:
    """Minor units from `150`, `150,5`, `1.234,56` or `1,234.56`."""
    text = value.strip().replace(" ", "").removeprefix("R$")
    if not _AMOUNT.fullmatch(text) or len(text) > 20:
        raise BadRequest(f"invalid amount {value[:30]!r}: write it as 150,00 or 150.00")
    decimals = ""
    separators = [i for i, char in enumerate(text) if char in ".,"]
    if separators and len(text) - separators[-1] - 1 in (1, 2):
        decimals = text[separators[-1] + 1 :]
        text = text[: separators[-1]]
    whole = text.replace(".", "").replace(",", "")
    return int(whole) * 100 + int(decimals.ljust(2, "0") or 0)


def parse_day(value: str, name: str, zone: tzinfo, *, end: bool = False) -> datetime:
    """The first instant of the day `value` (YYYY-MM-DD) in `zone`, or with `end`, of the
    day after: an `until` day is included whole."""
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise BadRequest(f"invalid {name} {value[:30]!r}: expected a date, 2026-12-03") from None
    if end:
        day += timedelta(days=1)
    return datetime.combine(day, time(0), tzinfo=zone)


def payment_filter(params: Mapping[str, Any], zone: tzinfo) -> PaymentFilter:
    """The API's payment filter (porteiro.http.admin_console.payment_filter), its amount
    and dates as people write them, its ids with the spaces of a paste taken off."""
    found = api_payment_filter(_without(params, ("amount", "anomalous", *_DAYS)))
    amount = optional_text(params, "amount")
    since, until = _days(params, zone)
    return replace(
        found,
        reference=_stripped(found.reference),
        object_id=_stripped(found.object_id),
        amount=None if amount is None else parse_amount(amount),
        anomalous=optional_text(params, "anomalous") == "1",
        since=since,
        until=until,
    )


def events_filter(params: Mapping[str, Any], zone: tzinfo) -> EventFilter:
    """The API's event filter (porteiro.http.admin.event_filter), its dates as days."""
    since, until = _days(params, zone)
    return replace(event_filter(_without(params, _DAYS)), since=since, until=until)


_DAYS = ("since", "until")


def _days(params: Mapping[str, Any], zone: tzinfo) -> tuple[datetime | None, datetime | None]:
    """(`since`, `until`) read as days in `zone` (`until` takes its day whole)."""
    since, until = (optional_text(params, key) for key in _DAYS)
    return (
        None if since is None else parse_day(since, "since", zone),
        None if until is None else parse_day(until, "until", zone, end=True),
    )


def _without(params: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: value for key, value in params.items() if key not in keys}


# The dead-letter queue's filter keys (as /api/dlq/replay's, beside `ids`).
DLQ_FILTER_KEYS = ("source", "kind", "since", "until")


def dead_filter(params: Mapping[str, Any], zone: tzinfo) -> EventFilter:
    """The dead events the DLQ's filter keys select (every other key ignored)."""
    given = {key: params.get(key) for key in DLQ_FILTER_KEYS if params.get(key)}
    return replace(events_filter(given, zone), status=EventStatus.DEAD)


def _stripped(value: str | None) -> str | None:
    """An id pasted with spaces around it is the id."""
    return None if value is None else value.strip() or None
