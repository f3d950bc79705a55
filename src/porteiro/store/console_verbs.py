"""The reads the operator's console (/ui) and the admin API share, written once for both
stores over the connection port (store/port.py): payment search and the anomalous list,
dead letters and refused requests grouped by reason, deliveries per minute, and what a
payment's timeline adds to its history (forwards to destinations, reconciliation checks).

Every list is keyset-paginated over an index (migration 0010): a page costs the same
with a million rows stored as with ten.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson

from porteiro.model import Payment, PaymentState
from porteiro.store import conditions, rows
from porteiro.store.dialect import Dialect
from porteiro.store.port import Params, Port
from porteiro.store.records import Page


@dataclass(frozen=True, slots=True)
class PaymentFilter:
    """A payment search: every given field must match (`amount` in minor units,
    `since`/`until` on when Porteiro first heard of the payment)."""

    source: str | None = None
    state: PaymentState | None = None
    reference: str | None = None
    object_id: str | None = None
    amount: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    anomalous: bool = False


@dataclass(frozen=True, slots=True)
class ListedPayment:
    payment: Payment
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ReasonCount:
    """Rows sharing one reason: how many, for which source, the newest when."""

    source: str
    reason: str
    count: int
    newest: datetime


@dataclass(frozen=True, slots=True)
class MinuteCount:
    source: str
    minute: datetime  # UTC, the minute's start
    count: int


@dataclass(frozen=True, slots=True)
class Forward:
    """One event of a payment forwarded (or to be) to one destination."""

    id: int
    destination: str
    event_id: int
    status: str
    attempts: int
    last_error: str | None
    last_status: str | None
    created_at: datetime
    delivered_at: datetime | None


@dataclass(frozen=True, slots=True)
class ReconcileCheck:
    """The reconciler's reads of one payment at its gateway."""

    checks: int
    checked_at: datetime
    next_check_at: datetime
    last_error: str | None


# Newest first: the index payments_created walked backwards; (source, object_id) breaks
# ties between payments created in the same microsecond.
_PAYMENT_ORDER: Final = "ORDER BY created_at DESC, source DESC, object_id DESC"

_PAYMENT_AFTER: Final = """(created_at < %(c_at)s
 OR (created_at = %(c_at)s AND (source < %(c_source)s
     OR (source = %(c_source)s AND object_id < %(c_object)s))))"""

# A dead event's reason is its last error; its first line is enough to group on (a long
# traceback-like text would make every row its own group).
_REASON_CUT: Final = 200

DEAD_REASONS: Final = f"""
SELECT source, SUBSTR(COALESCE(last_error, ''), 1, {_REASON_CUT}) AS reason,
       COUNT(*) AS n, MAX(updated_at) AS newest
FROM events WHERE status = 'dead'
GROUP BY source, SUBSTR(COALESCE(last_error, ''), 1, {_REASON_CUT})
ORDER BY n DESC, newest DESC"""

# The quarantine holds the newest [quarantine] limit rows only: grouping reads all of it.
QUARANTINE_REASONS: Final = """
SELECT source, reason, COUNT(*) AS n, MAX(received_at) AS newest FROM quarantine
GROUP BY source, reason ORDER BY n DESC, newest DESC"""


def payment_outbox_query(destinations: str) -> str:
    """A payment's outbox rows; `destinations` the IN-list condition on `destination`,
    so the lookup walks the outbox_order index (destination, source, object_id, id)."""
    return f"""
SELECT id, destination, event_id, status, attempts, last_error, last_status, created_at,
       delivered_at
FROM outbox WHERE {destinations} AND source = %(source)s AND object_id = %(object_id)s
ORDER BY id"""


RECONCILE_CHECK: Final = """
SELECT checks, checked_at, next_check_at, last_error FROM reconcile_checks
WHERE source = %(source)s AND object_id = %(object_id)s"""

# The minute a delivery arrived, as text both stores compare and group alike (SQLite
# keeps times as fixed-width ISO-8601 UTC text, rows.encode_time).
_MINUTE: Final = {
    "sqlite": "SUBSTR(received_at, 1, 16)",
    "postgres": """TO_CHAR(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI')""",
}


def delivery_rate_query(d: Dialect) -> str:
    minute = _MINUTE[d.name]
    return f"""
SELECT source, {minute} AS minute, COUNT(*) AS n FROM deliveries
WHERE received_at >= %(since)s GROUP BY source, {minute} ORDER BY 2, 1"""


def payment_conditions(d: Dialect, filter: PaymentFilter) -> tuple[str, Params]:
    equal = (
        ("source", filter.source),
        ("state", None if filter.state is None else filter.state.value),
        ("reference", filter.reference),
        ("object_id", filter.object_id),
        ("amount", filter.amount),
    )
    where, params = conditions.where(d, equal, "created_at", filter.since, filter.until)
    return (f"{where} AND anomalies > 0" if filter.anomalous else where), params


def payment_cursor(listed: ListedPayment) -> str:
    """Opaque to callers: the last row's sort key, base64url of a JSON array."""
    key = [rows.encode_time(listed.created_at), listed.payment.source, listed.payment.object_id]
    return base64.urlsafe_b64encode(orjson.dumps(key)).decode("ascii").rstrip("=")


def parse_payment_cursor(cursor: str) -> tuple[datetime, str, str]:
    """ValueError for anything `payment_cursor` did not write."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key: Any = orjson.loads(raw)
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise ValueError("invalid payment cursor") from None
    if not isinstance(key, list) or len(key) != 3 or not all(isinstance(part, str) for part in key):
        raise ValueError("invalid payment cursor")
    return rows.decode_time(key[0]), key[1], key[2]


class ConsoleVerbs:
    _port: Port

    async def list_payments(
        self, filter: PaymentFilter, cursor: str | None, limit: int
    ) -> Page[ListedPayment]:
        d = self._port.dialect
        where, params = payment_conditions(d, filter)
        if cursor is not None:
            created_at, source, object_id = parse_payment_cursor(cursor)
            where += f" AND {_PAYMENT_AFTER}"
            params.update(c_at=d.time(created_at), c_source=source, c_object=object_id)
        params["limit"] = max(limit, 0) + 1
        sql = f"SELECT * FROM payments WHERE {where} {_PAYMENT_ORDER} LIMIT %(limit)s"
        found = [
            ListedPayment(
                rows.payment_from_row(row),
                rows.decode_time(row["created_at"]),
                rows.decode_time(row["updated_at"]),
            )
            for row in await self._port.fetch(sql, params)
        ]
        if len(found) > limit:
            page = found[:limit]
            return Page(page, payment_cursor(page[-1]) if page else None)
        return Page(found, None)

    async def dead_reasons(self) -> Sequence[ReasonCount]:
        return [_reason(row) for row in await self._port.fetch(DEAD_REASONS, {})]

    async def quarantine_reasons(self) -> Sequence[ReasonCount]:
        return [_reason(row) for row in await self._port.fetch(QUARANTINE_REASONS, {})]

    async def delivery_rate(self, since: datetime) -> Sequence[MinuteCount]:
        d = self._port.dialect
        found = await self._port.fetch(delivery_rate_query(d), {"since": d.time(since)})
        return [
            MinuteCount(row["source"], rows.decode_time(f"{row['minute']}:00+00:00"), int(row["n"]))
            for row in found
        ]

    async def payment_forwards(
        self, source: str, object_id: str, destinations: Sequence[str]
    ) -> Sequence[Forward]:
        """The payment's rows in the outbox of each of `destinations` (the configured ones)."""
        if not destinations:
            return []
        condition, params = self._port.dialect.in_list("destination", "dest", destinations)
        params.update(source=source, object_id=object_id)
        return [
            Forward(
                id=int(row["id"]),
                destination=row["destination"],
                event_id=int(row["event_id"]),
                status=row["status"],
                attempts=int(row["attempts"]),
                last_error=row["last_error"],
                last_status=row["last_status"],
                created_at=rows.decode_time(row["created_at"]),
                delivered_at=rows.decode_optional_time(row["delivered_at"]),
            )
            for row in await self._port.fetch(payment_outbox_query(condition), params)
        ]

    async def reconcile_check(self, source: str, object_id: str) -> ReconcileCheck | None:
        params = {"source": source, "object_id": object_id}
        row = await self._port.fetch_one(RECONCILE_CHECK, params)
        if row is None:
            return None
        return ReconcileCheck(
            checks=int(row["checks"]),
            checked_at=rows.decode_time(row["checked_at"]),
            next_check_at=rows.decode_time(row["next_check_at"]),
            last_error=row["last_error"],
        )


def _reason(row: Any) -> ReasonCount:
    return ReasonCount(row["source"], row["reason"], int(row["n"]), rows.decode_time(row["newest"]))
