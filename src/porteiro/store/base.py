"""The storage seam: one protocol, implemented for SQLite and PostgreSQL.

Cut at the domain level (record a delivery, claim due events, apply, retry, dead-letter,
redrive, list) rather than at SQL: the hot paths (ingest, claim, batch apply, waking the
workers) differ too much between the two databases to share queries. The cold verbs
(reads, settles, requeue, quarantine, reconcile, idempotency keys, the outbox's operator
verbs) are written once (store/*_verbs.py) over a connection port each store offers
(store/port.py, store/dialect.py). Both implementations pass the same contract tests
(tests/integration).

Every method raises `StoreUnavailable` when the database cannot be reached or does not
answer in time; the receiver turns that into a fast 503.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from porteiro.model import UNPARSEABLE_TYPE as UNPARSEABLE_TYPE
from porteiro.model import (
    EventStatus,
    InboundRequest,
    Kind,
    Outcome,
    ParsedEvent,
    Payment,
    QuarantinedRequest,
    StoredDelivery,
    StoredEvent,
    Transition,
)
from porteiro.store.apply import Handle

if TYPE_CHECKING:
    from porteiro.observability.readings import Readings
    from porteiro.store.outbox import OutboxRow

T = TypeVar("T")

# A parse failure is kept as one dead placeholder event per delivery, keyed like this, so
# an operator sees it in the DLQ and `replay` can re-parse the raw body later (and one per
# unreadable item of a delivery whose other items parsed: ParsedEvent.error).

# The statuses an operator watches: waiting, in work, waiting to retry, dead-lettered.
# Few by design, so counting them walks the status index over just those rows; `done`
# and `ignored` grow with every event ever stored, and counting them scans the table.
OPEN_STATUSES = (
    EventStatus.PENDING,
    EventStatus.PROCESSING,
    EventStatus.RETRYING,
    EventStatus.DEAD,
)


def unparseable_dedup_key(delivery_id: int) -> str:
    return f"porteiro:unparseable:{delivery_id}"


@dataclass(frozen=True, slots=True)
class RecordResult:
    """What one `record_delivery` transaction stored."""

    delivery_id: int
    event_ids: Sequence[int]  # one per parsed event, in order (existing id for duplicates)
    new: int
    duplicates: int


@dataclass(frozen=True, slots=True)
class Claim:
    """An event leased to one worker. `token` fences every write made under the claim."""

    event: StoredEvent
    token: str
    lease_until: datetime


@dataclass(frozen=True, slots=True)
class EventFilter:
    source: str | None = None
    status: EventStatus | None = None
    kind: Kind | None = None
    object_id: str | None = None
    dedup_key: str | None = None
    reference: str | None = None  # the merchant's own reference, exact
    since: datetime | None = None  # received_at >= since
    until: datetime | None = None  # received_at < until


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """A page of results, newest first; `next` is an opaque cursor or None at the end."""

    items: Sequence[T]
    next: str | None


# Called by `apply_many` inside the transaction, with the payment locked: pure code that
# returns the new payment and its history entry (the ledger).
Decide = Callable[[Payment | None], Outcome]


@dataclass(frozen=True, slots=True)
class Application:
    """One claimed event for `apply_many`: the event as enriched, and its ledger call.

    Both effects run inside the event's part of the transaction, after `decide`: `outbox`
    gives the rows to enqueue (committed with the done mark), `handle` runs the merchant's
    in-process handlers on the store's connection. Either raising rolls the event back.
    """

    claim: Claim
    event: ParsedEvent
    decide: Decide
    outbox: Callable[[Outcome], Sequence[OutboxRow]] | None = None
    handle: Handle | None = None


# What `apply_many` did with one Application: True applied, False claim lost (nothing
# changed), or the exception its `decide` (or its own writes) raised (nothing of it kept).
Applied = bool | Exception


class Store(Protocol):
    async def open(self) -> None:
        """Connect (pools, pragmas). Does not migrate."""

    async def close(self) -> None: ...

    async def upgrade(self) -> Sequence[str]:
        """Apply pending migrations; return the versions applied now."""

    async def ping(self) -> None:
        """Raise StoreUnavailable unless the store answers a trivial query."""

    async def check_schema(self) -> None:
        """Raise SchemaMismatch (store.migrations) unless the applied migrations are
        exactly this code's, neither fewer nor any it does not know; StoreUnavailable
        when the store does not answer. One small query: /readyz runs it every time."""

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

    async def quarantine(self, request: InboundRequest, reason: str, detail: str | None) -> None:
        """Keep a refused request for forensics; the table is bounded (oldest dropped)."""

    async def claim(
        self, worker_id: str, limit: int, lease: timedelta, now: datetime
    ) -> Sequence[Claim]:
        """Lease up to `limit` due events: pending/retrying with next_attempt_at <= now,
        or processing whose lease expired. Sets status processing, attempts + 1, a fresh
        token. Oldest due first. Concurrent claimers never get the same event."""

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

    async def ignore(self, claim: Claim, reason: str, now: datetime) -> bool:
        """Fenced: mark the claimed event `ignored` with the reason."""

    async def retry_later(self, claim: Claim, error: str, at: datetime, now: datetime) -> bool:
        """Fenced: status retrying, next_attempt_at = at, last_error = error."""

    async def dead_letter(self, claim: Claim, error: str, now: datetime) -> bool:
        """Fenced: status dead, last_error = error."""

    async def requeue(self, event_ids: Sequence[int], now: datetime) -> int:
        """Replay: make these events pending and due now with attempts reset, whatever
        their status. Returns how many exist."""

    async def reparsed(
        self, delivery_id: int, events: Sequence[ParsedEvent], now: datetime
    ) -> Sequence[int]:
        """Replay with current code: overwrite the parsed fields of each event (matched on
        source and dedup_key; inserted if new, linked to the delivery), make them pending
        and due now with attempts reset; clear the delivery's parse_error and mark its
        unparseable placeholder `ignored`. Returns the event ids."""

    async def list_events(
        self, filter: EventFilter, cursor: str | None, limit: int
    ) -> Page[StoredEvent]: ...

    async def get_event(self, event_id: int) -> StoredEvent | None: ...

    async def event_deliveries(self, event_id: int) -> Sequence[StoredDelivery]:
        """Every delivery that carried this event, oldest first."""

    async def get_delivery(self, delivery_id: int) -> StoredDelivery | None: ...

    async def event_delivery_ids(self, filter: EventFilter) -> Sequence[int]:
        """Distinct ids of deliveries that carried events matching the filter, ascending
        (used by replay-by-filter, which re-parses them)."""

    async def get_payment(self, source: str, object_id: str) -> Payment | None: ...

    async def payment_history(self, source: str, object_id: str) -> Sequence[Transition]:
        """Every transition of the payment, oldest first."""

    async def list_quarantine(self, limit: int) -> Sequence[QuarantinedRequest]: ...

    async def metric_readings(self, now: datetime) -> Readings:
        """What /metrics reports from the store: backlogs, dead letters, payments past
        expiry, destination circuits (observability.readings)."""

    async def status_counts(self, statuses: Sequence[EventStatus] | None = None) -> dict[str, int]:
        """Number of events per status, zero included: of every status, or of `statuses`
        only (through the status index: cheap for the OPEN_STATUSES however many events
        are stored; every status reads the whole table)."""
