"""The outbox's SQL that differs on PostgreSQL: the claim's statement (PostgresStore runs
it) and `insert_outbox_pg`, which the ledger transaction calls on its own connection.
Claims lock with SKIP LOCKED, so any number of relays share a destination. The verbs are
written once in store/outbox.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from psycopg import AsyncConnection
from psycopg.rows import DictRow

from porteiro.store import rows as codec
from porteiro.store.outbox import OutboxRow

Connection = AsyncConnection[DictRow]

# One statement for any number of rows: one round trip inside the ledger transaction.
INSERT: Final = """
INSERT INTO outbox
    (destination, event_id, message_id, source, object_id, kind, payload, next_attempt_at,
     created_at, updated_at)
SELECT r.destination, r.event_id, r.message_id, r.source, r.object_id, r.kind,
       r.payload::jsonb, %(now)s, %(now)s, %(now)s
FROM unnest(%(destination)s::text[], %(event_id)s::bigint[], %(message_id)s::text[],
            %(source)s::text[], %(object_id)s::text[], %(kind)s::text[], %(payload)s::text[])
    AS r(destination, event_id, message_id, source, object_id, kind, payload)
ORDER BY r.event_id
ON CONFLICT (destination, event_id) DO NOTHING"""

# Due rows of an active destination, each the earliest not-done row of its payment.
CLAIM_OUTBOX: Final = """
UPDATE outbox SET status = 'delivering', attempts = attempts + 1,
    claim_token = %(token)s, lease_until = %(lease_until)s, updated_at = %(now)s
WHERE id IN (
    SELECT o.id FROM outbox AS o
    WHERE o.destination = %(destination)s
      AND ((o.status = 'pending' AND o.next_attempt_at <= %(now)s)
           OR (o.status = 'delivering' AND o.lease_until < %(now)s))
      AND NOT EXISTS (
          SELECT 1 FROM outbox AS e
          WHERE e.destination = o.destination AND e.source = o.source
            AND e.object_id = o.object_id AND e.id < o.id AND e.status <> 'done')
      AND NOT EXISTS (
          SELECT 1 FROM destinations AS d
          WHERE d.name = %(destination)s AND (d.paused OR d.disabled_reason IS NOT NULL))
    ORDER BY o.id
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED)
RETURNING *"""


async def insert_outbox_pg(conn: Connection, rows: Sequence[OutboxRow], now: datetime) -> int:
    """Enqueue `rows` on `conn` inside the caller's transaction, in one statement; returns
    how many were new (an event already enqueued for a destination is skipped: replays
    never enqueue twice). In pipeline mode the count is not known yet: -1."""
    if not rows:
        return 0
    params = {
        "now": now,
        "destination": [row.destination for row in rows],
        "event_id": [row.event_id for row in rows],
        "message_id": [row.message_id for row in rows],
        "source": [row.source for row in rows],
        "object_id": [row.object_id for row in rows],
        "kind": [row.kind for row in rows],
        "payload": [codec.dump_json(row.payload) for row in rows],
    }
    cursor = await conn.execute(INSERT, params)
    return cursor.rowcount
