"""OutboxStore for the PostgreSQL store: a mixin over PostgresStore's `_connection` /
`_fetch`, plus `insert_outbox_pg`, which the ledger transaction calls on its own
connection. Claims lock with SKIP LOCKED, so any number of relays share a destination."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from psycopg import AsyncConnection, sql
from psycopg.rows import DictRow

from porteiro.store import rows as codec
from porteiro.store.base import Page
from porteiro.store.outbox import (
    REDRIVE_BATCH,
    DestinationState,
    OutboxClaim,
    OutboxRow,
    OutboxSettlement,
    OutboxStatus,
    StoredOutboxRow,
    changed_state,
    empty_counts,
    row_from_db,
    state_from_db,
)

Connection = AsyncConnection[DictRow]

# One statement for any number of rows: one round trip inside the ledger transaction.
INSERT: Final = """
INSERT INTO outbox
    (destination, event_id, source, object_id, kind, payload, next_attempt_at,
     created_at, updated_at)
SELECT r.destination, r.event_id, r.source, r.object_id, r.kind, r.payload::jsonb,
       %(now)s, %(now)s, %(now)s
FROM unnest(%(destination)s::text[], %(event_id)s::bigint[], %(source)s::text[],
            %(object_id)s::text[], %(kind)s::text[], %(payload)s::text[])
    AS r(destination, event_id, source, object_id, kind, payload)
ORDER BY r.event_id
ON CONFLICT (destination, event_id) DO NOTHING"""

# Due rows of an active destination, each the earliest not-done row of its payment.
CLAIM: Final = """
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

# Every write under a claim matches its token: a lost claim matches no row.
SETTLE: Final = """
UPDATE outbox SET status = %(status)s, attempts = attempts + %(recount)s,
    next_attempt_at = COALESCE(%(at)s, next_attempt_at), last_error = %(error)s,
    last_status = COALESCE(%(result)s, last_status), delivered_at = %(delivered_at)s,
    claim_token = NULL, lease_until = NULL, updated_at = %(now)s
WHERE id = %(id)s AND claim_token = %(token)s AND status = 'delivering'"""

REDRIVE: Final = """
UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = %(now)s,
    updated_at = %(now)s
WHERE id IN (
    SELECT id FROM outbox
    WHERE destination = %(destination)s AND status = 'dead'
      AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
    ORDER BY id LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)"""

BACKLOG: Final = "SELECT destination, status, COUNT(*) AS n FROM outbox GROUP BY 1, 2"

STATES: Final = "SELECT * FROM destinations"

LOCK_STATE: Final = "SELECT * FROM destinations WHERE name = %s FOR UPDATE"

UPSERT_STATE: Final = """
INSERT INTO destinations (name, paused, disabled_reason, circuit_open_until, updated_at)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused,
    disabled_reason = EXCLUDED.disabled_reason,
    circuit_open_until = EXCLUDED.circuit_open_until, updated_at = EXCLUDED.updated_at"""


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
        "source": [row.source for row in rows],
        "object_id": [row.object_id for row in rows],
        "kind": [row.kind for row in rows],
        "payload": [codec.dump_json(row.payload) for row in rows],
    }
    cursor = await conn.execute(INSERT, params)
    return cursor.rowcount


class OutboxPostgresMixin(OutboxSettlement):
    if TYPE_CHECKING:

        def _connection(self) -> AbstractAsyncContextManager[Connection]: ...

        async def _fetch(
            self, query: str | sql.Composed, params: Sequence[Any] | dict[str, Any]
        ) -> list[DictRow]: ...

    async def enqueue_outbox(self, rows: Sequence[OutboxRow], now: datetime) -> int:
        if not rows:
            return 0
        async with self._connection() as conn:
            return await insert_outbox_pg(conn, rows, now)

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
            "lease_until": lease_until,
            "now": now,
            "limit": limit,
        }
        found = await self._fetch(CLAIM, params)
        claimed = sorted((row_from_db(row) for row in found), key=lambda row: row.id)
        return [OutboxClaim(row, token, lease_until) for row in claimed]

    async def _settle(
        self,
        claim: OutboxClaim,
        status: OutboxStatus,
        now: datetime,
        error: str | None = None,
        result: str | None = None,
        at: datetime | None = None,
        *,
        delivered: bool = False,
        recount: int = 0,
    ) -> bool:
        params = {
            "status": status.value,
            "recount": recount,
            "at": at,
            "error": error,
            "result": result,
            "delivered_at": now if delivered else None,
            "now": now,
            "id": claim.row.id,
            "token": claim.token,
        }
        async with self._connection() as conn:
            cursor = await conn.execute(SETTLE, params)
        return cursor.rowcount > 0

    async def redrive_outbox(
        self, destination: str, now: datetime, *, ids: Sequence[int] | None = None
    ) -> int:
        if ids is not None and not ids:
            return 0
        params = {
            "destination": destination,
            "now": now,
            "ids": None if ids is None else sorted(set(ids)),
            "limit": REDRIVE_BATCH,
        }
        async with self._connection() as conn:
            cursor = await conn.execute(REDRIVE, params)
        return cursor.rowcount

    async def list_outbox(
        self, destination: str, status: OutboxStatus | None, cursor: str | None, limit: int
    ) -> Page[StoredOutboxRow]:
        where = [sql.SQL("destination = %(destination)s")]
        params: dict[str, Any] = {"destination": destination, "limit": max(limit, 0) + 1}
        if status is not None:
            where.append(sql.SQL("status = %(status)s"))
            params["status"] = status.value
        before = codec.parse_cursor(cursor)
        if before is not None:
            where.append(sql.SQL("id < %(before)s"))
            params["before"] = before
        query = sql.SQL("SELECT * FROM outbox WHERE {} ORDER BY id DESC LIMIT %(limit)s")
        found = await self._fetch(query.format(sql.SQL(" AND ").join(where)), params)
        items = [row_from_db(row) for row in found]
        if len(items) > limit:
            items = items[:limit]
            return Page(items, str(items[-1].id) if items else None)
        return Page(items, None)

    async def outbox_backlog(self) -> dict[str, dict[str, int]]:
        backlog: dict[str, dict[str, int]] = {}
        for row in await self._fetch(BACKLOG, ()):
            backlog.setdefault(row["destination"], empty_counts())[row["status"]] = int(row["n"])
        return backlog

    async def destination_states(self) -> dict[str, DestinationState]:
        return {row["name"]: state_from_db(row) for row in await self._fetch(STATES, ())}

    async def set_destination_state(
        self,
        name: str,
        now: datetime,
        *,
        paused: bool | None = None,
        disabled_reason: str | None = None,
        enable: bool = False,
        circuit_open_until: datetime | None = None,
        close_circuit: bool = False,
    ) -> DestinationState:
        async with self._connection() as conn, conn.transaction():
            found = await (await conn.execute(LOCK_STATE, (name,))).fetchone()
            state = changed_state(
                DestinationState(name) if found is None else state_from_db(found),
                now, paused=paused, disabled_reason=disabled_reason, enable=enable,
                circuit_open_until=circuit_open_until, close_circuit=close_circuit,
            )  # fmt: skip
            await conn.execute(
                UPSERT_STATE,
                (name, state.paused, state.disabled_reason, state.circuit_open_until, now),
            )
        return state
