"""The storage seam: one Store class, made concrete for SQLite and PostgreSQL.

Cut at the domain level (record a delivery, claim due events, apply, retry, dead-letter,
redrive, list) rather than at SQL: the hot paths (ingest, claim, batch apply, waking the
workers) differ too much between the two databases to share queries, so they are this
class's abstract methods, each store's own. The cold verbs (reads, settles, requeue,
quarantine, reconcile, idempotency keys, the outbox's operator verbs, job leases, the
audit log) are written once, in the classes Store is made of (store/*_verbs.py and the
stores beside it: reconcile, client, outbox, leases, audit), over a connection port each
store offers (store/port.py, store/dialect.py). Both implementations pass the same
contract tests (tests/integration).

Every method raises `StoreUnavailable` when the database cannot be reached or does not
answer in time; the receiver turns that into a fast 503.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from porteiro.errors import StoreUnavailable
from porteiro.model import EventStatus, InboundRequest, ParsedEvent, StoredEvent
from porteiro.store.audit import AuditStore
from porteiro.store.client import IdempotencyStore
from porteiro.store.console_verbs import ConsoleVerbs
from porteiro.store.group_commit import GroupCommit
from porteiro.store.leases import LeaseStore
from porteiro.store.migrations import check_schema
from porteiro.store.outbox import OutboxStore
from porteiro.store.quarantine_verbs import QuarantineVerbs
from porteiro.store.read_verbs import ReadVerbs
from porteiro.store.reconcile import ReconcileStore
from porteiro.store.records import OPEN_STATUSES as OPEN_STATUSES
from porteiro.store.records import UNPARSEABLE_TYPE as UNPARSEABLE_TYPE
from porteiro.store.records import Application as Application
from porteiro.store.records import Applied as Applied
from porteiro.store.records import Claim as Claim
from porteiro.store.records import Decide as Decide
from porteiro.store.records import EventFilter as EventFilter
from porteiro.store.records import Page as Page
from porteiro.store.records import RecordResult as RecordResult
from porteiro.store.records import unparseable_dedup_key as unparseable_dedup_key
from porteiro.store.replay_verbs import ReplayVerbs
from porteiro.store.settle_verbs import SettleVerbs


class Store(
    ReadVerbs,
    SettleVerbs,
    ReplayVerbs,
    QuarantineVerbs,
    ReconcileStore,
    IdempotencyStore,
    OutboxStore,
    LeaseStore,
    AuditStore,
    ConsoleVerbs,
    ABC,
):
    # The group commit of ingest, built by `open` (None: not open); its items are the
    # store's own (_ingest_item).
    _ingest: GroupCommit[Any, RecordResult] | None

    @abstractmethod
    async def open(self) -> None:
        """Connect (pools, pragmas). Does not migrate."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def upgrade(self) -> Sequence[str]:
        """Apply pending migrations; return the versions applied now."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise StoreUnavailable unless the store answers a trivial query."""

    @abstractmethod
    async def schema_versions(self) -> frozenset[str]:
        """The migration versions recorded as applied (empty: never migrated)."""

    async def check_schema(self) -> None:
        """Raise SchemaMismatch (store.migrations) unless the applied migrations are
        exactly this code's, neither fewer nor any it does not know; StoreUnavailable
        when the store does not answer. One small query: /readyz runs it every time."""
        check_schema(await self.schema_versions(), self._port.dialect.name)

    async def record_delivery(
        self,
        request: InboundRequest,
        events: Sequence[ParsedEvent],
        *,
        parse_error: str | None = None,
        give_up_after: float | None = None,
    ) -> RecordResult:
        """ONE durable transaction: the raw delivery plus each event, de-duplicated.

        New events are inserted `pending` (`ignored` when kind is OTHER and not thin, or
        object_id is None and not thin). A duplicate (same source and dedup_key) increments
        `duplicates` and links the delivery; a duplicate of a `dead` or `retrying` event
        makes it due now (never hides a failure); a `done` event stays done.
        With `parse_error`, `events` is empty and one `dead` placeholder event
        (`unparseable_dedup_key`, type UNPARSEABLE_TYPE, kind OTHER) carries the reason.
        Returns only after the commit is durable. Wakes waiting workers. Raises
        TimeoutError after `give_up_after` seconds (the delivery may still commit later).
        """
        ingest = self._ingest
        if ingest is None:
            raise StoreUnavailable(f"the {self._port.dialect.name} store is not open")
        item = self._ingest_item(request, events, parse_error)
        result = await ingest.submit(item, give_up_after)
        self._ingested()
        return result

    @abstractmethod
    def _ingest_item(
        self, request: InboundRequest, events: Sequence[ParsedEvent], parse_error: str | None
    ) -> Any:
        """One record_delivery call as this store's group commit takes it (built by the
        caller: encoding errors stay the caller's)."""

    def _ingested(self) -> None:
        """After a delivery is stored: PostgreSQL's ingest statement notifies the workers
        itself; SQLite wakes its own."""

    async def claim(
        self, worker_id: str, limit: int, lease: timedelta, now: datetime
    ) -> Sequence[Claim]:
        """Lease up to `limit` due events: pending/retrying with next_attempt_at <= now,
        or processing whose lease expired. Sets status processing, attempts + 1, a fresh
        token. Oldest due first. Concurrent claimers never get the same event."""
        if limit < 1:
            return []
        token = uuid.uuid4().hex
        lease_until = now + lease
        params = self._port.dialect.claim_params(token, now, lease_until, limit)
        params["worker"] = worker_id
        events = sorted(
            await self._claim_events(params),
            key=lambda event: (event.next_attempt_at or lease_until, event.id),
        )
        return [Claim(event, token, lease_until.astimezone(UTC)) for event in events]

    @abstractmethod
    async def _claim_events(self, params: dict[str, Any]) -> Sequence[StoredEvent]:
        """The claim's statement (token, worker, lease_until, now, limit bound as the
        dialect binds them): the events it leased, in any order."""

    @abstractmethod
    async def wait_for_work(self, timeout: float) -> None:  # noqa: ASYNC109
        """Return when new events may be due (notification) or after `timeout` seconds."""

    async def apply_many(self, batch: Sequence[Application], now: datetime) -> Sequence[Applied]:
        """Apply claimed events (one or more) in ONE transaction: one commit, one fsync.

        Each event, fenced by its own claim token: its parsed fields are updated from
        `Application.event` (enrichment), the payment row of (source, event.object_id) is
        locked (or created), `decide` runs, the payment and the transition are persisted,
        the outbox rows enqueued, the handlers run and the event is marked done. An event
        whose claim was lost gets False and changes nothing. Payments are locked in
        (source, object_id) order, so concurrent batches never deadlock; events of one
        payment apply in batch order, each `decide` seeing the payment as the previous one
        left it. An event whose `decide` (or handler, or own write) raises, or that has no
        object_id, gets its exception back and leaves no trace; the others still commit.
        Raises, committing nothing, when the transaction fails. PostgreSQL may use a second
        transaction for the events of payments another batch holds (those it cannot lock
        in time get PaymentBusy back, handed back unattempted); if only that one fails,
        its events get the exception back."""
        if not batch:
            return []
        return await self._apply_many(batch, now)

    @abstractmethod
    async def _apply_many(self, batch: Sequence[Application], now: datetime) -> Sequence[Applied]:
        """`apply_many` of a batch of one or more."""

    @abstractmethod
    async def status_counts(self, statuses: Sequence[EventStatus] | None = None) -> dict[str, int]:
        """Number of events per status, zero included: of every status, or of `statuses`
        only (through the status index: cheap for the OPEN_STATUSES however many events
        are stored; every status reads the whole table)."""
