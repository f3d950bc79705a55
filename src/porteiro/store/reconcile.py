"""The reconciler's storage verbs ("malha fina"), beside the core Store protocol.

Expected payments (registered by the outgoing client with their expiry), the stale
pending payments to ask the gateway about, synthetic events that enter the SAME inbox
and worker path as webhooks (origin `reconcile`, no delivery), and saved reports.
Implemented once for both stores, over their connection port, by store/reconcile_verbs.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from porteiro.model import ParsedEvent, Payment, PaymentState
from porteiro.store.base import RecordResult

# Payment states the stale cycle asks the gateway about: nothing final happened yet.
OPEN_STATES: tuple[PaymentState, ...] = (PaymentState.PENDING, PaymentState.AUTHORIZED)
# record_synthetic's batches: bounded statements, one transaction each.
SYNTHETIC_BATCH = 500


@dataclass(frozen=True, slots=True)
class Expectation:
    """A payment Porteiro expects to hear about (created through porteiro.client)."""

    source: str
    object_id: str
    reference: str | None
    amount: int | None
    currency: str | None
    expires_at: datetime | None
    created_at: datetime
    origin: str = "client"


@dataclass(frozen=True, slots=True)
class StaleItem:
    """An open payment (or an expectation never heard of) due for a status read.

    `state` is None for an expectation with no payment yet; `since` is when Porteiro
    first knew of it (the payment row, or the expectation); `checks` how often it was
    asked about already."""

    source: str
    object_id: str
    state: PaymentState | None
    expires_at: datetime | None
    since: datetime
    checks: int


@dataclass(frozen=True, slots=True)
class WindowPayment:
    """A stored payment whose first event happened in an audit window."""

    payment: Payment
    first_event_at: datetime


@dataclass(frozen=True, slots=True)
class StoredReport:
    id: int
    source: str
    kind: str  # "audit" | "stale"
    created_at: datetime
    since: datetime | None
    until: datetime | None
    summary: Mapping[str, Any]
    body: Mapping[str, Any]


@runtime_checkable
class ReconcileStore(Protocol):
    async def expect_payment(
        self,
        source: str,
        object_id: str,
        *,
        reference: str | None,
        amount: int | None,
        currency: str | None,
        expires_at: datetime | None,
        now: datetime,
        origin: str = "client",
    ) -> None:
        """Idempotent upsert of an expected payment (the latest call's fields win;
        `created_at` stays the first one's)."""

    async def get_expectation(self, source: str, object_id: str) -> Expectation | None: ...

    async def stale_pending(
        self,
        source: str,
        now: datetime,
        max_age: timedelta,
        limit: int,
        *,
        grace: timedelta = timedelta(0),
    ) -> Sequence[StaleItem]:
        """Open payments (OPEN_STATES) and expectations with no payment yet whose
        `expires_at + grace < now` or first known more than `max_age` ago, skipping those
        whose next check (`mark_checked`) is still in the future. Oldest first."""

    async def mark_checked(
        self,
        source: str,
        object_ids: Sequence[str],
        now: datetime,
        next_check_at: datetime,
        error: str | None = None,
    ) -> None:
        """Record a status read: checks + 1, not due again before `next_check_at`."""

    async def record_synthetic(
        self, source: str, events: Sequence[ParsedEvent], *, origin: str, now: datetime
    ) -> RecordResult:
        """Insert events learnt by asking the gateway, WITHOUT a delivery, de-duplicated
        exactly like `record_delivery` (a duplicate is counted, revives a dead or
        retrying event, and is never applied twice). `origin` is stored on new events;
        `delivery_id` of the result is 0. Wakes the workers."""

    async def known_keys(self, source: str, keys: Sequence[str]) -> set[str]:
        """Which of these dedup keys the store already holds for `source`."""

    async def payments_by_id(self, source: str, object_ids: Sequence[str]) -> dict[str, Payment]:
        """The stored payments among `object_ids` (absent ones are left out)."""

    async def payments_in_window(
        self, source: str, since: datetime, until: datetime
    ) -> Sequence[WindowPayment]:
        """Payments whose earliest event (occurred_at) is in [since, until)."""

    async def save_report(
        self,
        source: str,
        kind: str,
        body: Mapping[str, Any],
        summary: Mapping[str, Any],
        *,
        since: datetime | None,
        until: datetime | None,
        now: datetime,
    ) -> int:
        """Store a report; returns its id."""

    async def latest_reports(self, source: str | None, limit: int) -> Sequence[StoredReport]:
        """Newest first (bodies included)."""

    async def get_report(self, report_id: int) -> StoredReport | None: ...


def reconcile_store(store: object) -> ReconcileStore:
    """`store` as a ReconcileStore (both built-in stores are), or TypeError."""
    if not isinstance(store, ReconcileStore):
        raise TypeError(f"{type(store).__name__} does not implement ReconcileStore")
    return store
