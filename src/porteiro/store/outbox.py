"""The outbox's storage verbs (merchant delivery), part of the Store (store/base.py).

The ledger transaction inserts rows (store/sqlite/outbox.insert_outbox_sqlite,
store/postgres/outbox.insert_outbox_pg); relays (porteiro.sinks) claim, settle and redrive
them. Everything but the insert and the claim's statement is written once here, for both
stores, over the connection port (store/port.py). Settling is fenced by the claim token;
redrive and the destination states are an operator's (admin API, CLI) and a breaker's.

Claims follow the event worker: a lease plus a token that fences every later write, so a
relay that died (or stalled past its lease) loses its rows to another relay and its late
writes are refused. One more rule, per-payment order: a row is claimable only when every
earlier row (lower id) of the same (destination, source, object_id) is `done`.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from porteiro.store import rows
from porteiro.store.port import Params, Port, Queries
from porteiro.store.read_verbs import newest_first_page
from porteiro.store.records import Page
from porteiro.store.rows import Row

# Rows per redrive transaction: a long redrive commits (and reports progress) per batch.
REDRIVE_BATCH = 500


class OutboxStatus(StrEnum):
    PENDING = "pending"
    DELIVERING = "delivering"  # claimed by a relay, under a lease
    DONE = "done"  # the destination confirmed
    DEAD = "dead"  # out of retries: this destination's dead letters


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One event for one destination, as the ledger transaction enqueues it."""

    destination: str
    event_id: int
    message_id: str  # what the destination de-duplicates on: sent as stored, forever
    source: str
    object_id: str
    kind: str
    payload: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class StoredOutboxRow:
    id: int
    destination: str
    event_id: int
    message_id: str
    source: str
    object_id: str
    kind: str
    payload: Mapping[str, Any]
    status: OutboxStatus
    attempts: int
    next_attempt_at: datetime
    last_error: str | None
    last_status: str | None
    created_at: datetime
    updated_at: datetime
    delivered_at: datetime | None


@dataclass(frozen=True, slots=True)
class OutboxClaim:
    row: StoredOutboxRow
    token: str
    lease_until: datetime


@dataclass(frozen=True, slots=True)
class DestinationState:
    """Operator and breaker state of one destination (defaults: active, closed)."""

    name: str
    paused: bool = False
    disabled_reason: str | None = None
    circuit_open_until: datetime | None = None
    updated_at: datetime | None = None

    @property
    def active(self) -> bool:
        return not self.paused and self.disabled_reason is None


# Every write under a claim matches its token: a lost claim matches no row.
SETTLE: Final = """
UPDATE outbox SET status = %(status)s, attempts = attempts + %(recount)s,
    next_attempt_at = COALESCE(%(at)s, next_attempt_at), last_error = %(error)s,
    last_status = COALESCE(%(result)s, last_status), delivered_at = %(delivered_at)s,
    claim_token = NULL, lease_until = NULL, updated_at = %(now)s
WHERE id = %(id)s AND claim_token = %(token)s AND status = 'delivering'"""


def redrive_query(chosen: str, lock: str) -> str:
    """Dead rows of a destination back to pending, oldest first; `chosen` narrows them
    (an IN-list of ids, or nothing), `lock` passes over rows a relay is settling."""
    return f"""
UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = %(now)s,
    updated_at = %(now)s
WHERE id IN (
    SELECT id FROM outbox WHERE destination = %(destination)s AND status = 'dead'{chosen}
    ORDER BY id LIMIT %(limit)s{lock})"""


def list_query(*, of_status: bool, before: bool) -> str:
    """A destination's rows, newest first; only of a status, only before an id."""
    where = "destination = %(destination)s"
    if of_status:
        where += " AND status = %(status)s"
    if before:
        where += " AND id < %(before)s"
    return f"SELECT * FROM outbox WHERE {where} ORDER BY id DESC LIMIT %(limit)s"


BACKLOG: Final = "SELECT destination, status, COUNT(*) AS n FROM outbox GROUP BY 1, 2"

STATES: Final = "SELECT * FROM destinations"

GET_STATE: Final = "SELECT * FROM destinations WHERE name = %(name)s"

UPSERT_STATE: Final = """
INSERT INTO destinations (name, paused, disabled_reason, circuit_open_until, updated_at)
VALUES (%(name)s, %(paused)s, %(disabled_reason)s, %(circuit_open_until)s, %(updated_at)s)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused,
    disabled_reason = excluded.disabled_reason,
    circuit_open_until = excluded.circuit_open_until, updated_at = excluded.updated_at"""


class OutboxStore(ABC):
    _port: Port

    @abstractmethod
    async def enqueue_outbox(self, rows: Sequence[OutboxRow], now: datetime) -> int:
        """Insert rows in their own transaction (ON CONFLICT (destination, event_id) DO
        NOTHING); returns how many were new. The ledger uses the insert functions instead,
        inside its own transaction."""

    async def claim_outbox(
        self, destination: str, relay_id: str, limit: int, lease: timedelta, now: datetime
    ) -> Sequence[OutboxClaim]:
        """Lease up to `limit` due rows (pending and due, or delivering with an expired
        lease) of an active destination, oldest first, each the earliest not-done row of
        its payment. attempts + 1 per claim."""
        if limit < 1:
            return []
        token = f"{relay_id}:{uuid.uuid4().hex}"
        lease_until = now + lease
        params = self._port.dialect.claim_params(token, now, lease_until, limit)
        params["destination"] = destination
        found = await self._claim_outbox_rows(params)
        claimed = sorted((row_from_db(row) for row in found), key=lambda row: row.id)
        return [OutboxClaim(row, token, lease_until) for row in claimed]

    @abstractmethod
    async def _claim_outbox_rows(self, params: Params) -> Sequence[Row]:
        """The claim's statement (destination, token, lease_until, now, limit bound as the
        dialect binds them): the rows it leased, in any order."""

    async def complete_outbox(self, claim: OutboxClaim, result: str, now: datetime) -> bool:
        """Done (the destination confirmed). False: the claim was lost."""
        return await self._settle(claim, OutboxStatus.DONE, now, result=result, delivered=True)

    async def retry_outbox(
        self, claim: OutboxClaim, error: str, result: str | None, at: datetime, now: datetime
    ) -> bool:
        """Back to pending, due at `at`, with the error and result of this try."""
        return await self._settle(claim, OutboxStatus.PENDING, now, error, result, at)

    async def dead_outbox(
        self, claim: OutboxClaim, error: str, result: str | None, now: datetime
    ) -> bool:
        """Out of retries: dead (blocks its payment's later rows until redriven)."""
        return await self._settle(claim, OutboxStatus.DEAD, now, error, result)

    async def release_outbox(self, claim: OutboxClaim, now: datetime) -> bool:
        """Back to pending, due now, the attempt not counted (nothing was sent)."""
        return await self._settle(
            claim, OutboxStatus.PENDING, now, claim.row.last_error, at=now, recount=-1
        )

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
        """Fenced by the claim token: set status, error, result, next attempt."""
        d = self._port.dialect
        stamp = d.time(now)
        params = {
            "status": status.value, "recount": recount, "at": d.optional_time(at),
            "error": error, "result": result, "delivered_at": stamp if delivered else None,
            "now": stamp, "id": claim.row.id, "token": claim.token,
        }  # fmt: skip
        return await self._port.execute(SETTLE, params) > 0

    async def redrive_outbox(
        self, destination: str, now: datetime, *, ids: Sequence[int] | None = None
    ) -> int:
        """Dead rows (all of the destination, or these ids) back to pending with attempts
        reset: at most REDRIVE_BATCH per call (call again until it returns 0)."""
        d = self._port.dialect
        stamp = d.time(now)
        # Every dead row of the destination, or these ids a chunk (one IN-list) at a time.
        chunks: list[Sequence[int] | None] = (
            [None] if ids is None else [*d.chunks(sorted(set(ids)))]
        )
        redriven = 0
        for chunk in chunks:
            params = {"destination": destination, "now": stamp, "limit": REDRIVE_BATCH - redriven}
            chosen = ""
            if chunk is not None:
                condition, chosen_ids = d.in_list("id", "ids", chunk)
                chosen, params = f" AND {condition}", {**params, **chosen_ids}
            query = redrive_query(chosen, d.lock(skip_locked=True))
            redriven += await self._port.execute(query, params)
            if redriven >= REDRIVE_BATCH:
                break
        return redriven

    async def list_outbox(
        self, destination: str, status: OutboxStatus | None, cursor: str | None, limit: int
    ) -> Page[StoredOutboxRow]:
        """Newest first; `cursor` is the previous page's `next`."""
        before = rows.parse_cursor(cursor)
        query = list_query(of_status=status is not None, before=before is not None)
        params = {
            "destination": destination,
            "status": None if status is None else status.value,
            "before": before,
            "limit": max(limit, 0) + 1,
        }
        found = await self._port.fetch(query, params)
        return newest_first_page([row_from_db(row) for row in found], limit)

    async def outbox_backlog(self) -> dict[str, dict[str, int]]:
        """Row counts per destination and status (every status present, zeros included)."""
        backlog: dict[str, dict[str, int]] = {}
        for row in await self._port.fetch(BACKLOG, {}):
            backlog.setdefault(row["destination"], empty_counts())[row["status"]] = int(row["n"])
        return backlog

    async def destination_states(self) -> dict[str, DestinationState]:
        """The stored states (destinations never touched are absent: active)."""
        return {row["name"]: state_from_db(row) for row in await self._port.fetch(STATES, {})}

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
        """Upsert: set what is given (`enable` clears disabled_reason, `close_circuit`
        clears circuit_open_until); returns the new state."""
        d = self._port.dialect

        async def change(tx: Queries) -> DestinationState:
            found = await tx.fetch_one(GET_STATE + d.lock(), {"name": name})
            state = changed_state(
                DestinationState(name) if found is None else state_from_db(found),
                now, paused=paused, disabled_reason=disabled_reason, enable=enable,
                circuit_open_until=circuit_open_until, close_circuit=close_circuit,
            )  # fmt: skip
            await tx.execute(
                UPSERT_STATE,
                {
                    "name": name,
                    "paused": state.paused,
                    "disabled_reason": state.disabled_reason,
                    "circuit_open_until": d.optional_time(state.circuit_open_until),
                    "updated_at": d.time(now),
                },
            )
            return state

        return await self._port.transaction(change)


def outbox_store(store: object) -> OutboxStore:
    """`store` as an OutboxStore (both built-in stores are), or TypeError."""
    if not isinstance(store, OutboxStore):
        raise TypeError(f"{type(store).__name__} does not implement OutboxStore")
    return store


def row_from_db(row: Any) -> StoredOutboxRow:
    """A StoredOutboxRow from a sqlite3.Row or a psycopg dict row."""
    return StoredOutboxRow(
        id=int(row["id"]),
        destination=row["destination"],
        event_id=int(row["event_id"]),
        message_id=row["message_id"],
        source=row["source"],
        object_id=row["object_id"],
        kind=row["kind"],
        payload=rows.load_json(row["payload"]),
        status=OutboxStatus(row["status"]),
        attempts=int(row["attempts"]),
        next_attempt_at=rows.decode_time(row["next_attempt_at"]),
        last_error=row["last_error"],
        last_status=row["last_status"],
        created_at=rows.decode_time(row["created_at"]),
        updated_at=rows.decode_time(row["updated_at"]),
        delivered_at=rows.decode_optional_time(row["delivered_at"]),
    )


def state_from_db(row: Any) -> DestinationState:
    return DestinationState(
        name=row["name"],
        paused=bool(row["paused"]),
        disabled_reason=row["disabled_reason"],
        circuit_open_until=rows.decode_optional_time(row["circuit_open_until"]),
        updated_at=rows.decode_optional_time(row["updated_at"]),
    )


def empty_counts() -> dict[str, int]:
    return {status.value: 0 for status in OutboxStatus}


def changed_state(
    current: DestinationState,
    now: datetime,
    *,
    paused: bool | None,
    disabled_reason: str | None,
    enable: bool,
    circuit_open_until: datetime | None,
    close_circuit: bool,
) -> DestinationState:
    """`current` with set_destination_state's changes applied (pure: both stores use it)."""
    reason = None if enable else (disabled_reason or current.disabled_reason)
    circuit = None if close_circuit else (circuit_open_until or current.circuit_open_until)
    return DestinationState(
        name=current.name,
        paused=current.paused if paused is None else paused,
        disabled_reason=reason,
        circuit_open_until=circuit,
        updated_at=now,
    )
