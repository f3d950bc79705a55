"""The outbox's SQL that differs on SQLite: the claim's statement (SqliteStore runs it)
and `insert_outbox_sqlite`, which the ledger transaction calls on its own connection.
The verbs are written once in store/outbox.py."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Final

from porteiro.store import rows as codec
from porteiro.store.outbox import OutboxRow

INSERT: Final = """
INSERT INTO outbox
    (destination, event_id, message_id, source, object_id, kind, payload, next_attempt_at,
     created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (destination, event_id) DO NOTHING"""

# Due rows of an active destination, each the earliest not-done row of its payment.
CLAIM_OUTBOX: Final = """
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
