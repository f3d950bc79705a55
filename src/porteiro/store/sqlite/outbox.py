"""The outbox verbs that differ on SQLite: the claim (a mixin over SqliteStore's `_write` /
`_lease`), and `insert_outbox_sqlite`, which the ledger transaction calls on its own
connection. The others are written once in store/outbox_verbs.py."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar

from porteiro.store import rows as codec
from porteiro.store.outbox import OutboxClaim, OutboxRow, row_from_db

T = TypeVar("T")

INSERT: Final = """
INSERT INTO outbox
    (destination, event_id, message_id, source, object_id, kind, payload, next_attempt_at,
     created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (destination, event_id) DO NOTHING"""

# Due rows of an active destination, each the earliest not-done row of its payment.
CLAIM: Final = """
UPDATE outbox SET status = 'delivering', attempts = attempts + 1, claim_token = :token,
    lease_until = :lease_until, updated_at = :now
WHERE id IN (
    SELECT o.id FROM outbox AS o
    WHERE o.destination = :destination
      AND ((o.status = 'pending' AND o.next_attempt_at <= :now)
           OR (o.status = 'delivering' AND o.lease_until < :now))
      AND NOT EXISTS (
          SELECT 1 FROM outbox AS e
          WHERE e.destination = o.destination AND e.source = o.source
            AND e.object_id = o.object_id AND e.id < o.id AND e.status != 'done')
      AND NOT EXISTS (
          SELECT 1 FROM destinations AS d
          WHERE d.name = :destination AND (d.paused OR d.disabled_reason IS NOT NULL))
    ORDER BY o.id
    LIMIT :limit)
RETURNING *"""


def insert_outbox_sqlite(db: sqlite3.Connection, rows: Sequence[OutboxRow], now: datetime) -> int:
    """Enqueue `rows` on `db` inside the caller's transaction; returns how many were new
    (an event already enqueued for a destination is skipped: replays never enqueue twice)."""
    stamp = codec.encode_time(now)
    inserted = 0
    for row in rows:
        params = (
            row.destination, row.event_id, row.message_id, row.source, row.object_id, row.kind,
            codec.dump_json(row.payload), stamp, stamp, stamp,
        )  # fmt: skip
        inserted += db.execute(INSERT, params).rowcount
    return inserted


class OutboxSqliteMixin:
    if TYPE_CHECKING:

        async def _write(self, fn: Callable[..., T], *args: Any) -> T: ...

        async def _lease(self, fn: Callable[..., T], *args: Any) -> T: ...

    async def enqueue_outbox(self, rows: Sequence[OutboxRow], now: datetime) -> int:
        return await self._write(insert_outbox_sqlite, rows, now) if rows else 0

    async def claim_outbox(
        self, destination: str, relay_id: str, limit: int, lease: timedelta, now: datetime
    ) -> Sequence[OutboxClaim]:
        if limit < 1:
            return []
        token = f"{relay_id}:{uuid.uuid4().hex}"
        lease_until = now + lease
        params = {
            "destination": destination,
            "token": token,
            "lease_until": codec.encode_time(lease_until),
            "now": codec.encode_time(now),
            "limit": limit,
        }
        found = await self._lease(_fetchall, CLAIM, params)  # a lease: no fsync
        claimed = sorted((row_from_db(row) for row in found), key=lambda row: row.id)
        return [OutboxClaim(row, token, lease_until) for row in claimed]


def _fetchall(db: sqlite3.Connection, sql: str, params: dict[str, Any]) -> list[Any]:
    return db.execute(sql, params).fetchall()
