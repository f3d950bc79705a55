"""ReconcileStore for the PostgreSQL store: a mixin over PostgresStore's `_connection` /
`_fetch`.

Synthetic events use the same conflict rules as ingest (store/pg_batch.py), without a
delivery row, in one transaction that also notifies idle workers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from psycopg import AsyncConnection, sql
from psycopg.rows import DictRow

from porteiro.model import ParsedEvent, Payment
from porteiro.store import pg_queries as q
from porteiro.store import rows
from porteiro.store.base import RecordResult
from porteiro.store.reconcile import (
    KEYS_BATCH,
    OPEN_STATES,
    SYNTHETIC_BATCH,
    Expectation,
    StaleItem,
    StoredReport,
    WindowPayment,
)
from porteiro.store.sqlite_reconcile import (
    expectation_from_row,
    report_from_row,
    stale_from_row,
)

UPSERT_EXPECTATION: Final = """
INSERT INTO expectations
    (source, object_id, reference, amount, currency, expires_at, created_at, origin)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (source, object_id) DO UPDATE SET
    reference = EXCLUDED.reference, amount = EXCLUDED.amount,
    currency = EXCLUDED.currency, expires_at = EXCLUDED.expires_at, origin = EXCLUDED.origin"""

GET_EXPECTATION: Final = "SELECT * FROM expectations WHERE source = %s AND object_id = %s"

STALE: Final = """
SELECT c.*, COALESCE(k.checks, 0) AS checks FROM (
    SELECT p.source, p.object_id, p.state, e.expires_at,
           COALESCE(e.created_at, p.created_at) AS since
    FROM payments AS p
    LEFT JOIN expectations AS e ON e.source = p.source AND e.object_id = p.object_id
    WHERE p.source = %(source)s AND p.state = ANY(%(open)s)
    UNION ALL
    SELECT e.source, e.object_id, NULL AS state, e.expires_at, e.created_at AS since
    FROM expectations AS e
    WHERE e.source = %(source)s AND NOT EXISTS (
        SELECT 1 FROM payments AS p WHERE p.source = e.source AND p.object_id = e.object_id)
) AS c
LEFT JOIN reconcile_checks AS k ON k.source = c.source AND k.object_id = c.object_id
WHERE (k.next_check_at IS NULL OR k.next_check_at <= %(now)s)
  AND ((c.expires_at IS NOT NULL AND c.expires_at < %(expired_before)s)
       OR c.since < %(born_before)s)
ORDER BY COALESCE(c.expires_at, c.since), c.object_id
LIMIT %(limit)s"""

MARK_CHECKED: Final = """
INSERT INTO reconcile_checks (source, object_id, checks, checked_at, next_check_at, last_error)
SELECT %(source)s, object_id, 1, %(now)s, %(due)s, %(error)s FROM unnest(%(ids)s::text[])
    AS t(object_id)
ON CONFLICT (source, object_id) DO UPDATE SET
    checks = reconcile_checks.checks + 1, checked_at = EXCLUDED.checked_at,
    next_check_at = EXCLUDED.next_check_at, last_error = EXCLUDED.last_error"""

# As the ingest upsert (pg_batch), with the origin and no delivery. `xmax = 0`: inserted.
UPSERT_SYNTHETIC: Final = """
INSERT INTO events
    (source, dedup_key, kind, type, object_id, reference, amount, currency, occurred_at,
     refunded_total, thin, data, status, next_attempt_at, last_error, received_at,
     updated_at, origin)
VALUES (%(source)s, %(dedup_key)s, %(kind)s, %(type)s, %(object_id)s, %(reference)s,
        %(amount)s, %(currency)s, %(occurred_at)s, %(refunded_total)s, %(thin)s, %(data)s,
        %(status)s, %(next_attempt_at)s, %(last_error)s, %(now)s, %(now)s, %(origin)s)
ON CONFLICT (source, dedup_key) DO UPDATE SET
    duplicates = events.duplicates + 1,
    status = CASE WHEN events.status IN ('dead', 'retrying')
                       AND events.type <> 'porteiro.unparseable'
                  THEN 'pending' ELSE events.status END,
    next_attempt_at = CASE WHEN events.status IN ('dead', 'retrying')
                                AND events.type <> 'porteiro.unparseable'
                           THEN EXCLUDED.updated_at ELSE events.next_attempt_at END,
    updated_at = EXCLUDED.updated_at
RETURNING id, (xmax = 0) AS inserted"""

KNOWN_KEYS: Final = """
SELECT dedup_key FROM events WHERE source = %s AND dedup_key = ANY(%s::text[])"""

PAYMENTS_BY_ID: Final = """
SELECT * FROM payments WHERE source = %s AND object_id = ANY(%s::text[])"""

PAYMENTS_IN_WINDOW: Final = """
SELECT p.*, w.first_at FROM payments AS p
JOIN (SELECT object_id, MIN(occurred_at) AS first_at FROM events
      WHERE source = %(source)s AND object_id IS NOT NULL AND occurred_at IS NOT NULL
      GROUP BY object_id) AS w ON w.object_id = p.object_id
WHERE p.source = %(source)s AND w.first_at >= %(since)s AND w.first_at < %(until)s
ORDER BY w.first_at, p.object_id"""

INSERT_REPORT: Final = """
INSERT INTO reconcile_reports (source, kind, created_at, since, until, summary, body)
VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id"""

LATEST_REPORTS: Final = """
SELECT * FROM reconcile_reports WHERE (%(source)s::text IS NULL OR source = %(source)s)
ORDER BY id DESC LIMIT %(limit)s"""

GET_REPORT: Final = "SELECT * FROM reconcile_reports WHERE id = %s"

Connection = AsyncConnection[DictRow]


class ReconcilePostgresMixin:
    if TYPE_CHECKING:

        def _connection(self) -> AbstractAsyncContextManager[Connection]: ...

        async def _fetch(
            self, query: str | sql.Composed, params: Sequence[Any] | dict[str, Any]
        ) -> list[DictRow]: ...

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
        params = (source, object_id, reference, amount, currency, expires_at, now, origin)
        async with self._connection() as conn:
            await conn.execute(UPSERT_EXPECTATION, params)

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
        params = {
            "source": source,
            "open": [state.value for state in OPEN_STATES],
            "now": now,
            "expired_before": now - grace,
            "born_before": now - max_age,
            "limit": max(limit, 0),
        }
        return [stale_from_row(row) for row in await self._fetch(STALE, params)]

    async def mark_checked(
        self,
        source: str,
        object_ids: Sequence[str],
        now: datetime,
        next_check_at: datetime,
        error: str | None = None,
    ) -> None:
        if not object_ids:
            return
        params = {
            "source": source,
            "ids": sorted(set(object_ids)),
            "now": now,
            "due": next_check_at,
            "error": error,
        }
        async with self._connection() as conn:
            await conn.execute(MARK_CHECKED, params)

    async def record_synthetic(
        self, source: str, events: Sequence[ParsedEvent], *, origin: str, now: datetime
    ) -> RecordResult:
        ids: list[int] = []
        new = 0
        for start in range(0, len(events), SYNTHETIC_BATCH):
            params = []
            for event in events[start : start + SYNTHETIC_BATCH]:
                one = q.event_params(event, source, 0, now)
                one["origin"] = origin
                params.append(one)
            async with self._connection() as conn, conn.transaction():
                async with conn.cursor() as cursor:
                    await cursor.executemany(UPSERT_SYNTHETIC, params, returning=True)
                    async for result in cursor.results():
                        row = await result.fetchone()
                        if row is None:  # RETURNING always yields one row
                            raise RuntimeError("synthetic upsert returned no row")
                        ids.append(int(row["id"]))
                        new += int(bool(row["inserted"]))
                if new:
                    await conn.execute(q.NOTIFY)
        return RecordResult(0, ids, new, len(ids) - new)

    async def known_keys(self, source: str, keys: Sequence[str]) -> set[str]:
        found: set[str] = set()
        unique = sorted(set(keys))
        for start in range(0, len(unique), KEYS_BATCH * 10):
            chunk = unique[start : start + KEYS_BATCH * 10]
            found.update(row["dedup_key"] for row in await self._fetch(KNOWN_KEYS, (source, chunk)))
        return found

    async def payments_by_id(self, source: str, object_ids: Sequence[str]) -> dict[str, Payment]:
        found: dict[str, Payment] = {}
        unique = sorted(set(object_ids))
        for start in range(0, len(unique), KEYS_BATCH * 10):
            chunk = unique[start : start + KEYS_BATCH * 10]
            for row in await self._fetch(PAYMENTS_BY_ID, (source, chunk)):
                payment = rows.payment_from_row(row)
                found[payment.object_id] = payment
        return found

    async def payments_in_window(
        self, source: str, since: datetime, until: datetime
    ) -> Sequence[WindowPayment]:
        params = {"source": source, "since": since, "until": until}
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
            source, kind, now, since, until, q.json_param(dict(summary)),
            q.json_param(dict(body)),
        )  # fmt: skip
        found = await self._fetch(INSERT_REPORT, params)
        return int(found[0]["id"])

    async def latest_reports(self, source: str | None, limit: int) -> Sequence[StoredReport]:
        found = await self._fetch(LATEST_REPORTS, {"source": source, "limit": max(limit, 0)})
        return [report_from_row(row) for row in found]

    async def get_report(self, report_id: int) -> StoredReport | None:
        found = await self._fetch(GET_REPORT, (report_id,))
        return report_from_row(found[0]) if found else None
