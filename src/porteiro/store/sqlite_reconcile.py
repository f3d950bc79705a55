"""ReconcileStore for the SQLite store: a mixin over SqliteStore's `_write` / `_fetch`.

Synthetic events go in through the same upsert as deliveries' events (same conflict
rules), without a delivery row, on the store's single writer thread.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar

from porteiro.errors import StoreUnavailable
from porteiro.model import ParsedEvent, Payment, PaymentState
from porteiro.store import rows
from porteiro.store import sqlite_sql as q
from porteiro.store.base import RecordResult
from porteiro.store.reconcile import (
    KEYS_BATCH,
    OPEN_STATES,
    Expectation,
    StaleItem,
    StoredReport,
    WindowPayment,
)

T = TypeVar("T")

UPSERT_EXPECTATION: Final = """
INSERT INTO expectations
    (source, object_id, reference, amount, currency, expires_at, created_at, origin)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (source, object_id) DO UPDATE SET
    reference = excluded.reference, amount = excluded.amount,
    currency = excluded.currency, expires_at = excluded.expires_at, origin = excluded.origin"""

GET_EXPECTATION: Final = "SELECT * FROM expectations WHERE source = ? AND object_id = ?"

# Open payments (with their expectation, if any) and expectations never heard of, minus
# those whose next check is not due; `{open}` is a list of bound placeholders.
STALE: Final = """
SELECT c.*, COALESCE(k.checks, 0) AS checks FROM (
    SELECT p.source, p.object_id, p.state, e.expires_at,
           COALESCE(e.created_at, p.created_at) AS since
    FROM payments AS p
    LEFT JOIN expectations AS e ON e.source = p.source AND e.object_id = p.object_id
    WHERE p.source = :source AND p.state IN ({open})
    UNION ALL
    SELECT e.source, e.object_id, NULL AS state, e.expires_at, e.created_at AS since
    FROM expectations AS e
    WHERE e.source = :source AND NOT EXISTS (
        SELECT 1 FROM payments AS p WHERE p.source = e.source AND p.object_id = e.object_id)
) AS c
LEFT JOIN reconcile_checks AS k ON k.source = c.source AND k.object_id = c.object_id
WHERE (k.next_check_at IS NULL OR k.next_check_at <= :now)
  AND ((c.expires_at IS NOT NULL AND c.expires_at < :expired_before)
       OR c.since < :born_before)
ORDER BY COALESCE(c.expires_at, c.since), c.object_id
LIMIT :limit"""

MARK_CHECKED: Final = """
INSERT INTO reconcile_checks (source, object_id, checks, checked_at, next_check_at, last_error)
VALUES (?, ?, 1, ?, ?, ?)
ON CONFLICT (source, object_id) DO UPDATE SET
    checks = reconcile_checks.checks + 1, checked_at = excluded.checked_at,
    next_check_at = excluded.next_check_at, last_error = excluded.last_error"""

# As sqlite_sql.INSERT_EVENT + COUNT_DUPLICATE in one upsert (not on the ack path), with
# the origin and no delivery: a duplicate counts and revives a failed event, and keeps
# the last delivery it had.
UPSERT_SYNTHETIC: Final = """
INSERT INTO events
    (source, dedup_key, kind, type, object_id, reference, amount, currency, occurred_at,
     refunded_total, thin, data, status, next_attempt_at, last_error, received_at,
     updated_at, origin)
VALUES (:source, :dedup_key, :kind, :type, :object_id, :reference, :amount, :currency,
        :occurred_at, :refunded_total, :thin, :data, :status, :next_attempt_at, :last_error,
        :now, :now, :origin)
ON CONFLICT (source, dedup_key) DO UPDATE SET
    duplicates = events.duplicates + 1,
    status = CASE WHEN events.status IN ('dead', 'retrying') AND events.type != :placeholder
                  THEN 'pending' ELSE events.status END,
    next_attempt_at = CASE WHEN events.status IN ('dead', 'retrying')
                                AND events.type != :placeholder
                           THEN :now ELSE events.next_attempt_at END,
    updated_at = :now
RETURNING id, duplicates"""

KNOWN_KEYS: Final = "SELECT dedup_key FROM events WHERE source = ? AND dedup_key IN ({keys})"

PAYMENTS_BY_ID: Final = "SELECT * FROM payments WHERE source = ? AND object_id IN ({ids})"

PAYMENTS_IN_WINDOW: Final = """
SELECT p.*, w.first_at FROM payments AS p
JOIN (SELECT object_id, MIN(occurred_at) AS first_at FROM events
      WHERE source = :source AND object_id IS NOT NULL AND occurred_at IS NOT NULL
      GROUP BY object_id) AS w ON w.object_id = p.object_id
WHERE p.source = :source AND w.first_at >= :since AND w.first_at < :until
ORDER BY w.first_at, p.object_id"""

INSERT_REPORT: Final = """
INSERT INTO reconcile_reports (source, kind, created_at, since, until, summary, body)
VALUES (?, ?, ?, ?, ?, ?, ?)"""

LATEST_REPORTS: Final = """
SELECT * FROM reconcile_reports WHERE (:source IS NULL OR source = :source)
ORDER BY id DESC LIMIT :limit"""

GET_REPORT: Final = "SELECT * FROM reconcile_reports WHERE id = ?"


class ReconcileSqliteMixin:
    if TYPE_CHECKING:
        _work: asyncio.Event

        async def _write(self, fn: Callable[..., T], *args: Any) -> T: ...

        async def _fetch(
            self, sql: str, params: Sequence[Any] | dict[str, Any] = ()
        ) -> list[Any]: ...

    async def expect_payment(
        self,
        source: str,
        object_id: str,
        *,
        reference: str | None,
        amount: int | None,
        currency: str | None,
        expires_at: datetime | None,
        now: datetime,
        origin: str = "client",
    ) -> None:
        params = (
            source, object_id, reference, amount, currency,
            rows.encode_optional_time(expires_at), rows.encode_time(now), origin,
        )  # fmt: skip
        await self._write(_execute, UPSERT_EXPECTATION, params)

    async def get_expectation(self, source: str, object_id: str) -> Expectation | None:
        found = await self._fetch(GET_EXPECTATION, (source, object_id))
        return expectation_from_row(found[0]) if found else None

    async def stale_pending(
        self,
        source: str,
        now: datetime,
        max_age: timedelta,
        limit: int,
        *,
        grace: timedelta = timedelta(0),
    ) -> Sequence[StaleItem]:
        params: dict[str, Any] = {
            "source": source,
            "now": rows.encode_time(now),
            "expired_before": rows.encode_time(now - grace),
            "born_before": rows.encode_time(now - max_age),
            "limit": max(limit, 0),
        }
        params.update({f"open{n}": state.value for n, state in enumerate(OPEN_STATES)})
        placeholders = ", ".join(f":open{n}" for n in range(len(OPEN_STATES)))
        found = await self._fetch(STALE.format(open=placeholders), params)
        return [stale_from_row(row) for row in found]

    async def mark_checked(
        self,
        source: str,
        object_ids: Sequence[str],
        now: datetime,
        next_check_at: datetime,
        error: str | None = None,
    ) -> None:
        stamp, due = rows.encode_time(now), rows.encode_time(next_check_at)
        params = [(source, object_id, stamp, due, error) for object_id in object_ids]
        if params:
            await self._write(_execute_many, MARK_CHECKED, params)

    async def record_synthetic(
        self, source: str, events: Sequence[ParsedEvent], *, origin: str, now: datetime
    ) -> RecordResult:
        stamp = rows.encode_time(now)
        params = []
        for event in events:
            one = q.event_params(event, source, 0, stamp)
            one["origin"] = origin
            params.append(one)
        ids, new = await self._write(_upsert_synthetic, params) if params else ([], 0)
        if new:
            self._work.set()
        return RecordResult(0, ids, new, len(ids) - new)

    async def known_keys(self, source: str, keys: Sequence[str]) -> set[str]:
        found: set[str] = set()
        unique = sorted(set(keys))
        for start in range(0, len(unique), KEYS_BATCH):
            chunk = unique[start : start + KEYS_BATCH]
            sql = KNOWN_KEYS.format(keys=", ".join("?" * len(chunk)))
            found.update(row[0] for row in await self._fetch(sql, (source, *chunk)))
        return found

    async def payments_by_id(self, source: str, object_ids: Sequence[str]) -> dict[str, Payment]:
        found: dict[str, Payment] = {}
        unique = sorted(set(object_ids))
        for start in range(0, len(unique), KEYS_BATCH):
            chunk = unique[start : start + KEYS_BATCH]
            sql = PAYMENTS_BY_ID.format(ids=", ".join("?" * len(chunk)))
            for row in await self._fetch(sql, (source, *chunk)):
                payment = rows.payment_from_row(row)
                found[payment.object_id] = payment
        return found

    async def payments_in_window(
        self, source: str, since: datetime, until: datetime
    ) -> Sequence[WindowPayment]:
        params = {
            "source": source,
            "since": rows.encode_time(since),
            "until": rows.encode_time(until),
        }
        found = await self._fetch(PAYMENTS_IN_WINDOW, params)
        return [
            WindowPayment(rows.payment_from_row(row), rows.decode_time(row["first_at"]))
            for row in found
        ]

    async def save_report(
        self,
        source: str,
        kind: str,
        body: Mapping[str, Any],
        summary: Mapping[str, Any],
        *,
        since: datetime | None,
        until: datetime | None,
        now: datetime,
    ) -> int:
        params = (
            source, kind, rows.encode_time(now), rows.encode_optional_time(since),
            rows.encode_optional_time(until), rows.dump_json(dict(summary)),
            rows.dump_json(dict(body)),
        )  # fmt: skip
        return await self._write(_insert_id, INSERT_REPORT, params)

    async def latest_reports(self, source: str | None, limit: int) -> Sequence[StoredReport]:
        found = await self._fetch(LATEST_REPORTS, {"source": source, "limit": max(limit, 0)})
        return [report_from_row(row) for row in found]

    async def get_report(self, report_id: int) -> StoredReport | None:
        found = await self._fetch(GET_REPORT, (report_id,))
        return report_from_row(found[0]) if found else None


# -- on the store's thread, inside one transaction ---------------------------------------


def _execute(db: sqlite3.Connection, sql: str, params: Sequence[Any]) -> None:
    db.execute(sql, params)


def _execute_many(db: sqlite3.Connection, sql: str, params: Sequence[Sequence[Any]]) -> None:
    db.executemany(sql, params)


def _insert_id(db: sqlite3.Connection, sql: str, params: Sequence[Any]) -> int:
    row_id = db.execute(sql, params).lastrowid
    if row_id is None:
        raise StoreUnavailable("SQLite returned no row id")
    return row_id


def _upsert_synthetic(
    db: sqlite3.Connection, params: Sequence[dict[str, Any]]
) -> tuple[list[int], int]:
    ids: list[int] = []
    new = 0
    for one in params:
        row = db.execute(UPSERT_SYNTHETIC, one).fetchone()
        if row is None:
            raise StoreUnavailable("SQLite returned no row")
        ids.append(int(row["id"]))
        new += int(row["duplicates"] == 0)
    return ids, new


# -- rows (shared with the PostgreSQL mixin) ---------------------------------------------


def expectation_from_row(row: rows.Row) -> Expectation:
    return Expectation(
        source=row["source"],
        object_id=row["object_id"],
        reference=row["reference"],
        amount=None if row["amount"] is None else int(row["amount"]),
        currency=row["currency"],
        expires_at=rows.decode_optional_time(row["expires_at"]),
        created_at=rows.decode_time(row["created_at"]),
        origin=row["origin"],
    )


def stale_from_row(row: rows.Row) -> StaleItem:
    state = row["state"]
    return StaleItem(
        source=row["source"],
        object_id=row["object_id"],
        state=None if state is None else PaymentState(state),
        expires_at=rows.decode_optional_time(row["expires_at"]),
        since=rows.decode_time(row["since"]),
        checks=int(row["checks"]),
    )


def report_from_row(row: rows.Row) -> StoredReport:
    summary, body = rows.load_json(row["summary"]), rows.load_json(row["body"])
    return StoredReport(
        id=int(row["id"]),
        source=row["source"],
        kind=row["kind"],
        created_at=rows.decode_time(row["created_at"]),
        since=rows.decode_optional_time(row["since"]),
        until=rows.decode_optional_time(row["until"]),
        summary=summary if isinstance(summary, dict) else {},
        body=body if isinstance(body, dict) else {},
    )
