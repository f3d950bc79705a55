"""The outbox's storage verbs (merchant delivery), beside the core Store protocol.

The ledger transaction inserts rows (store/sqlite/outbox.insert_outbox_sqlite,
store/postgres/outbox.insert_outbox_pg); relays (porteiro.sinks) claim, settle and redrive them.
Settled and operated by store/outbox_verbs.py, written once for both stores; claimed
by store/sqlite/outbox.py and store/postgres/outbox.py.

Claims follow the event worker: a lease plus a token that fences every later write, so a
relay that died (or stalled past its lease) loses its rows to another relay and its late
writes are refused. One more rule, per-payment order: a row is claimable only when every
earlier row (lower id) of the same (destination, source, object_id) is `done`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from porteiro.store import rows
from porteiro.store.base import Page

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


@runtime_checkable
class OutboxStore(Protocol):
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

    async def complete_outbox(self, claim: OutboxClaim, result: str, now: datetime) -> bool:
        """Done (the destination confirmed). False: the claim was lost."""

    async def retry_outbox(
        self, claim: OutboxClaim, error: str, result: str | None, at: datetime, now: datetime
    ) -> bool:
        """Back to pending, due at `at`, with the error and result of this try."""

    async def dead_outbox(
        self, claim: OutboxClaim, error: str, result: str | None, now: datetime
    ) -> bool:
        """Out of retries: dead (blocks its payment's later rows until redriven)."""

    async def release_outbox(self, claim: OutboxClaim, now: datetime) -> bool:
        """Back to pending, due now, the attempt not counted (nothing was sent)."""

    async def redrive_outbox(
        self, destination: str, now: datetime, *, ids: Sequence[int] | None = None
    ) -> int:
        """Dead rows (all of the destination, or these ids) back to pending with attempts
        reset: at most REDRIVE_BATCH per call (call again until it returns 0)."""

    async def list_outbox(
        self, destination: str, status: OutboxStatus | None, cursor: str | None, limit: int
    ) -> Page[StoredOutboxRow]:
        """Newest first; `cursor` is the previous page's `next`."""

    async def outbox_backlog(self) -> dict[str, dict[str, int]]:
        """Row counts per destination and status (every status present, zeros included)."""

    async def destination_states(self) -> dict[str, DestinationState]:
        """The stored states (destinations never touched are absent: active)."""

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
