"""What the store takes and gives back: the records of its verbs (store/base.py), kept
apart from the Store class so the verbs' modules it is made of can import them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Generic, TypeVar

from porteiro.model import UNPARSEABLE_TYPE as UNPARSEABLE_TYPE
from porteiro.model import EventStatus, Kind, Outcome, ParsedEvent, Payment, StoredEvent
from porteiro.store.apply import Handle

if TYPE_CHECKING:
    from porteiro.store.outbox import OutboxRow

T = TypeVar("T")

# The statuses an operator watches: waiting, in work, waiting to retry, dead-lettered.
# Few by design, so counting them walks the status index over just those rows; `done`
# and `ignored` grow with every event ever stored, and counting them scans the table.
OPEN_STATUSES = (
    EventStatus.PENDING,
    EventStatus.PROCESSING,
    EventStatus.RETRYING,
    EventStatus.DEAD,
)


# A parse failure is kept as one dead placeholder event per delivery, keyed like this, so
# an operator sees it in the DLQ and `replay` can re-parse the raw body later (and one per
# unreadable item of a delivery whose other items parsed: ParsedEvent.error).
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
