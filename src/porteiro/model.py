"""The nouns Porteiro works with: deliveries, events, payments, kinds and states.

Plain frozen dataclasses with no I/O, shared by the receiver, the store, the ledger and
the worker. Money is always an integer amount in minor units (cents, centavos).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """Canonical event kinds every gateway's events are mapped onto."""

    PAYMENT_CREATED = "payment.created"
    PAYMENT_AUTHORIZED = "payment.authorized"
    PAYMENT_PAID = "payment.paid"
    PAYMENT_FAILED = "payment.failed"
    PAYMENT_CANCELED = "payment.canceled"
    PAYMENT_EXPIRED = "payment.expired"
    PAYMENT_REFUNDED = "payment.refunded"
    PAYMENT_PARTIALLY_REFUNDED = "payment.partially_refunded"
    # The capture did not happen after all (Adyen CAPTURE_FAILED): the paid facts before it
    # are undone; a later paid fact (a re-capture) counts again.
    PAYMENT_CAPTURE_FAILED = "payment.capture_failed"
    # A refund that did not happen or was returned (Adyen REFUND_FAILED, REFUNDED_REVERSED):
    # it names the refund it undoes by `data["settlement_id"]`, the refund's own.
    PAYMENT_REFUND_REVERSED = "payment.refund_reversed"
    # The uncaptured remainder of an authorisation lapsed (Adyen EXPIRE): an authorized
    # payment expires; a captured one stays paid (no anomaly, unlike payment.expired).
    PAYMENT_AUTHORIZATION_EXPIRED = "payment.authorization_expired"
    DISPUTE_OPENED = "dispute.opened"
    DISPUTE_WON = "dispute.won"
    DISPUTE_LOST = "dispute.lost"
    OTHER = "other"


# The event type of what could not be read: a whole delivery's placeholder, or one item of
# a delivery (a Pix, an Adyen notification) whose money-deciding fields are unreadable.
# Stored `dead` with the reason; only a re-parse (`porteiro replay`) settles it.
UNPARSEABLE_TYPE = "porteiro.unparseable"
# Where an event keeps the deviations its adapter read past (`ParsedEvent.warnings`).
WARNINGS_KEY = "warnings"

# Enum attribute and `.value` lookups are Python-level descriptors in 3.11 (~0.2 us each):
# the few that every ack reads are read once, here.
_OTHER = Kind.OTHER


class PaymentState(StrEnum):
    """Canonical state of one gateway payment object."""

    PENDING = "pending"
    AUTHORIZED = "authorized"
    PAID = "paid"
    PARTIALLY_REFUNDED = "partially_refunded"
    REFUNDED = "refunded"
    FAILED = "failed"
    CANCELED = "canceled"
    EXPIRED = "expired"
    DISPUTED = "disputed"
    CHARGED_BACK = "charged_back"


class EventStatus(StrEnum):
    """Processing status of a stored event (not the payment's state)."""

    PENDING = "pending"
    PROCESSING = "processing"
    DONE = "done"
    RETRYING = "retrying"
    DEAD = "dead"
    IGNORED = "ignored"


class Verdict(StrEnum):
    """What the ledger made of one event."""

    APPLIED = "applied"  # changed the payment's state or amounts
    NO_EFFECT = "no_effect"  # a valid fact that changed nothing (e.g. a second "paid")
    DUPLICATE = "duplicate"  # this very event was already applied
    STALE = "stale"  # older than the last applied event and changed nothing
    ANOMALOUS = "anomalous"  # newer but contradicts the state: surfaced for review


@dataclass(frozen=True, slots=True)
class InboundRequest:
    """One HTTP request as received, before anything is parsed.

    `headers` keeps every header in arrival order with lower-cased names; `header()`
    returns the first value. `client_cert_subject` is the verified TLS client certificate
    subject when Porteiro (or a trusted proxy) checked one; `client_cert_der` is that
    certificate itself (DER) when Porteiro terminated TLS, so an adapter can re-verify it
    against its own CA bundle (Pix mTLS).
    """

    source: str
    method: str
    path: str
    query: str
    headers: Sequence[tuple[str, str]]
    body: bytes
    peer: str | None
    received_at: datetime
    client_cert_subject: str | None = None
    client_cert_der: bytes | None = None

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        for key, value in self.headers:
            if key == lowered:
                return value
        return None


@dataclass(frozen=True, slots=True)
class ParsedEvent:
    """One distinct event an adapter found in a delivery (or fetched from the gateway).

    `dedup_key` is unique per source: the gateway's own event identity. `amount` is the
    payment amount, or for refund kinds the amount of this one refund. `refunded_total`
    is a cumulative refunded amount when the gateway reports one (Stripe
    `amount_refunded`). `thin` marks a notification that carries no state and must be
    enriched from the gateway's API before the ledger sees it (Mercado Pago).

    `error` marks one item of a delivery that could not be read (its money-deciding fields
    are missing or malformed): it is stored `dead` with that reason, on its own, while the
    delivery's other items apply. `data["warnings"]` lists what the adapter read past
    (`warnings`).
    """

    dedup_key: str
    kind: Kind
    type: str
    object_id: str | None
    reference: str | None = None
    amount: int | None = None
    currency: str | None = None
    occurred_at: datetime | None = None
    refunded_total: int | None = None
    thin: bool = False
    data: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def warnings(self) -> Sequence[Mapping[str, str]]:
        return event_warnings(self.data)

    @property
    def anomaly(self) -> str | None:
        """A contradiction the adapter saw in the gateway's own data (Pagar.me
        `charge.underpaid`, say), carried as `data["anomaly"]`: the ledger records it on the
        payment for review, whatever the kind."""
        value = self.data.get("anomaly")
        return value if isinstance(value, str) and value else None

    @property
    def actionable(self) -> bool:
        """Whether the ledger has anything to do with it (once enriched, if thin)."""
        if self.thin:
            return True
        return self.object_id is not None and (self.kind != _OTHER or self.anomaly is not None)


def event_warnings(data: Mapping[str, Any]) -> Sequence[Mapping[str, str]]:
    """The `{"rule", "detail"}` warnings an event's data carries (none: empty)."""
    found = data.get(WARNINGS_KEY)
    if not isinstance(found, list):
        return ()
    return [w for w in found if isinstance(w, dict) and isinstance(w.get("rule"), str)]


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event row as the store keeps it."""

    id: int
    source: str
    dedup_key: str
    kind: Kind
    type: str
    object_id: str | None
    reference: str | None
    amount: int | None
    currency: str | None
    occurred_at: datetime | None
    refunded_total: int | None
    thin: bool
    data: Mapping[str, Any]
    status: EventStatus
    attempts: int
    next_attempt_at: datetime | None
    last_error: str | None
    duplicates: int
    received_at: datetime
    updated_at: datetime
    origin: str = "webhook"

    @property
    def warnings(self) -> Sequence[Mapping[str, str]]:
        return event_warnings(self.data)

    def parsed(self) -> ParsedEvent:
        return ParsedEvent(
            dedup_key=self.dedup_key,
            kind=self.kind,
            type=self.type,
            object_id=self.object_id,
            reference=self.reference,
            amount=self.amount,
            currency=self.currency,
            occurred_at=self.occurred_at,
            refunded_total=self.refunded_total,
            thin=self.thin,
            data=self.data,
        )


@dataclass(frozen=True, slots=True)
class StoredDelivery:
    """A delivery row: the raw request exactly as received."""

    id: int
    source: str
    received_at: datetime
    path: str
    query: str
    headers: Sequence[tuple[str, str]]
    body: bytes
    peer: str | None
    parse_error: str | None


@dataclass(frozen=True, slots=True)
class Transition:
    """One entry of a payment's history: what an event did to it."""

    event_id: int
    from_state: PaymentState | None
    to_state: PaymentState
    verdict: Verdict
    at: datetime
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Payment:
    """Canonical state of one gateway object, as the ledger derives it.

    `facts` is the ledger's own JSON-serialisable record of every event applied so far;
    the state is a pure function of it, which is what makes the order of delivery
    irrelevant. Only the ledger reads or writes it; the store persists it verbatim.
    """

    source: str
    object_id: str
    state: PaymentState
    amount: int | None
    currency: str | None
    refunded_amount: int
    reference: str | None
    version: int
    last_event_at: datetime | None
    facts: Mapping[str, Any]
    anomalies: int = 0


@dataclass(frozen=True, slots=True)
class Outcome:
    """What applying one event did: the payment after it and the history entry."""

    payment: Payment
    transition: Transition


@dataclass(frozen=True, slots=True)
class QuarantinedRequest:
    """A request refused at authentication, kept (bounded) for forensics."""

    id: int
    source: str
    received_at: datetime
    reason: str
    detail: str | None
    headers: Sequence[tuple[str, str]]
    body: bytes
    peer: str | None
