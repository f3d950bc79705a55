"""OutboxStore for the SQLite store: a mixin over SqliteStore's `_write` / `_fetch`, plus
`insert_outbox_sqlite`, which the ledger transaction calls on its own connection."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar

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

T = TypeVar("T")

INSERT: Final = """
INSERT INTO outbox
    (destination, event_id, source, object_id, kind, payload, next_attempt_at,
     created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
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

# Every write under a claim matches its token: a lost claim matches no row.
SETTLE: Final = """
UPDATE outbox SET status = :status, attempts = attempts + :recount,
    next_attempt_at = COALESCE(:at, next_attempt_at), last_error = :error,
    last_status = COALESCE(:result, last_status), delivered_at = :delivered_at,
    claim_token = NULL, lease_until = NULL, updated_at = :now
WHERE id = :id AND claim_token = :token AND status = 'delivering'"""

REDRIVE: Final = """
UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = ?, updated_at = ?
WHERE id IN (
    SELECT id FROM outbox WHERE destination = ? AND status = 'dead' {ids}
    ORDER BY id LIMIT ?)"""

LIST: Final = "SELECT * FROM outbox WHERE destination = ? {where} ORDER BY id DESC LIMIT ?"

BACKLOG: Final = "SELECT destination, status, COUNT(*) AS n FROM outbox GROUP BY 1, 2"

STATES: Final = "SELECT * FROM destinations"

GET_STATE: Final = "SELECT * FROM destinations WHERE name = ?"

UPSERT_STATE: Final = """
INSERT INTO destinations (name, paused, disabled_reason, circuit_open_until, updated_at)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused,
    disabled_reason = excluded.disabled_reason,
    circuit_open_until = excluded.circuit_open_until, updated_at = excluded.updated_at"""


def insert_outbox_sqlite(db: sqlite3.Connection, rows: Sequence[OutboxRow], now: datetime) -> int:
    """Enqueue `rows` on `db` inside the caller's transaction; returns how many were new
    (an event already enqueued for a destination is skipped: replays never enqueue twice)."""
    stamp = codec.encode_time(now)
    inserted = 0
    for row in rows:
        params = (
            row.destination, row.event_id, row.source, row.object_id, row.kind,
            codec.dump_json(row.payload), stamp, stamp, stamp,
        )  # fmt: skip
        inserted += db.execute(INSERT, params).rowcount
    return inserted


class OutboxSqliteMixin(OutboxSettlement):
    if TYPE_CHECKING:

        async def _write(self, fn: Callable[..., T], *args: Any) -> T: ...

        async def _lease(self, fn: Callable[..., T], *args: Any) -> T: ...

        async def _fetch(
            self, sql: str, params: Sequence[Any] | dict[str, Any] = ()
        ) -> list[Any]: ...

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
        stamp = codec.encode_time(now)
        params = {
            "status": status.value,
            "recount": recount,
            "at": codec.encode_optional_time(at),
            "error": error,
            "result": result,
            "delivered_at": stamp if delivered else None,
            "now": stamp,
            "id": claim.row.id,
            "token": claim.token,
        }
        return await self._write(_rowcount, SETTLE, params) > 0

    async def redrive_outbox(
        self, destination: str, now: datetime, *, ids: Sequence[int] | None = None
    ) -> int:
        chosen = sorted(set(ids)) if ids is not None else None
        if chosen is not None and not chosen:
            return 0
        where = "" if chosen is None else f"AND id IN ({', '.join('?' * len(chosen))})"
        stamp = codec.encode_time(now)
        params = (stamp, stamp, destination, *(chosen or ()), REDRIVE_BATCH)
        return await self._write(_rowcount, REDRIVE.format(ids=where), params)

    async def list_outbox(
        self, destination: str, status: OutboxStatus | None, cursor: str | None, limit: int
    ) -> Page[StoredOutboxRow]:
        where = ""
        params: list[Any] = [destination]
        if status is not None:
            where += " AND status = ?"
            params.append(status.value)
        before = codec.parse_cursor(cursor)
        if before is not None:
            where += " AND id < ?"
            params.append(before)
        found = await self._fetch(LIST.format(where=where), (*params, max(limit, 0) + 1))
        items = [row_from_db(row) for row in found]
        if len(items) > limit:
            items = items[:limit]
            return Page(items, str(items[-1].id) if items else None)
        return Page(items, None)

    async def outbox_backlog(self) -> dict[str, dict[str, int]]:
        backlog: dict[str, dict[str, int]] = {}
        for row in await self._fetch(BACKLOG):
            backlog.setdefault(row["destination"], empty_counts())[row["status"]] = int(row["n"])
        return backlog

    async def destination_states(self) -> dict[str, DestinationState]:
        return {row["name"]: state_from_db(row) for row in await self._fetch(STATES)}

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
        def change(current: DestinationState) -> DestinationState:
            return changed_state(
                current, now, paused=paused, disabled_reason=disabled_reason, enable=enable,
                circuit_open_until=circuit_open_until, close_circuit=close_circuit,
            )  # fmt: skip

        return await self._write(_change_state, name, change)


def _fetchall(db: sqlite3.Connection, sql: str, params: dict[str, Any]) -> list[Any]:
    return db.execute(sql, params).fetchall()


def _rowcount(db: sqlite3.Connection, sql: str, params: Sequence[Any] | dict[str, Any]) -> int:
    return db.execute(sql, params).rowcount


def _change_state(
    db: sqlite3.Connection, name: str, change: Callable[[DestinationState], DestinationState]
) -> DestinationState:
    found = db.execute(GET_STATE, (name,)).fetchone()
    state = change(DestinationState(name) if found is None else state_from_db(found))
    db.execute(
        UPSERT_STATE,
        (
            name,
            int(state.paused),
            state.disabled_reason,
            codec.encode_optional_time(state.circuit_open_until),
            codec.encode_optional_time(state.updated_at),
        ),
    )
    return state
