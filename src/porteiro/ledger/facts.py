"""A ledger fact: the kind tables, and how a fact is recorded in `Payment.facts` and read
back in its total order (see porteiro.ledger for why facts make the ledger converge)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple, NoReturn

from porteiro.model import Kind, ParsedEvent, PaymentState

# Fixed order of kinds, used to break ties between facts of equal time (the later rank
# wins): a terminal fact beats a progress fact, a dispute outcome beats its opening and
# "lost" beats "won".
_RANK: dict[Kind, int] = {
    kind: rank
    for rank, kind in enumerate(
        (
            Kind.PAYMENT_CREATED,
            Kind.PAYMENT_AUTHORIZED,
            Kind.PAYMENT_PAID,
            Kind.PAYMENT_CAPTURE_FAILED,
            Kind.PAYMENT_FAILED,
            Kind.PAYMENT_CANCELED,
            Kind.PAYMENT_AUTHORIZATION_EXPIRED,
            Kind.PAYMENT_EXPIRED,
            Kind.PAYMENT_PARTIALLY_REFUNDED,
            Kind.PAYMENT_REFUNDED,
            Kind.PAYMENT_REFUND_REVERSED,
            Kind.DISPUTE_OPENED,
            Kind.DISPUTE_WON,
            Kind.DISPUTE_LOST,
            Kind.OTHER,
        )
    )
}


_REFUNDS = frozenset({Kind.PAYMENT_REFUNDED, Kind.PAYMENT_PARTIALLY_REFUNDED})


_DISPUTES = frozenset({Kind.DISPUTE_OPENED, Kind.DISPUTE_WON, Kind.DISPUTE_LOST})


# Facts that prove the money moved: a refund (even one reversed since) or a dispute implies
# an earlier payment.
_MONEY = _REFUNDS | _DISPUTES | {Kind.PAYMENT_PAID, Kind.PAYMENT_REFUND_REVERSED}


# Non-money facts: the latest one gives the state of a payment that was never paid.
_PROGRESS: dict[Kind, PaymentState] = {
    Kind.PAYMENT_CREATED: PaymentState.PENDING,
    Kind.PAYMENT_AUTHORIZED: PaymentState.AUTHORIZED,
    Kind.PAYMENT_FAILED: PaymentState.FAILED,
    Kind.PAYMENT_CANCELED: PaymentState.CANCELED,
    Kind.PAYMENT_EXPIRED: PaymentState.EXPIRED,
    Kind.PAYMENT_CAPTURE_FAILED: PaymentState.FAILED,
    Kind.PAYMENT_AUTHORIZATION_EXPIRED: PaymentState.EXPIRED,
}


# Where the payment's amount, currency and reference are read first.
_PREFERRED = (Kind.PAYMENT_PAID, Kind.PAYMENT_AUTHORIZED, Kind.PAYMENT_CREATED)


_PREFERENCE = {kind: rank for rank, kind in enumerate(_PREFERRED)}


# Cancellations that money facts contradict.
_UNDONE_BY_MONEY = frozenset({Kind.PAYMENT_CANCELED, Kind.PAYMENT_EXPIRED})


_KINDS = {kind.value: kind for kind in Kind}


# Module constants for the members compared in loops (an Enum class attribute is slow).
_PAID, _FAILED, _REFUNDED = Kind.PAYMENT_PAID, Kind.PAYMENT_FAILED, Kind.PAYMENT_REFUNDED


_DISPUTE_OPENED, _DISPUTE_LOST, _OTHER = Kind.DISPUTE_OPENED, Kind.DISPUTE_LOST, Kind.OTHER


_CAPTURE_FAILED, _REFUND_REVERSED = Kind.PAYMENT_CAPTURE_FAILED, Kind.PAYMENT_REFUND_REVERSED


class _Fact(NamedTuple):
    """One fact as the ledger reads it. `order` comes first so that facts sort by it alone:
    a total order on content, oldest first, unique because it ends with the event id."""

    order: tuple[Any, ...]
    event_id: str
    kind: Kind
    occurred_at: datetime | None
    amount: int | None
    refunded_total: int | None
    currency: str | None
    reference: str | None
    settlement: str | None
    anomaly: str | None
    payment_amount: int | None


class _Facts(dict[str, Any]):
    """`Payment.facts` as the ledger builds them: the JSON-serialisable mapping, carrying
    the same facts read and in order, so that the next event applied to this payment
    (within one worker batch) reads none of them again. Read-only, so the two never
    disagree; a copy is a plain dict."""

    __slots__ = ("ordered",)

    def __init__(self, raw: Mapping[str, Any], ordered: tuple[_Fact, ...]) -> None:
        super().__init__(raw)
        self.ordered = ordered

    def __reduce__(self) -> tuple[type[dict[str, Any]], tuple[dict[str, Any]]]:
        return dict, (dict(self),)

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a payment's facts are read-only")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only


def _loaded(facts: Mapping[str, Mapping[str, Any]], skip: str | None = None) -> list[_Fact]:
    """The facts read and in order, without the one keyed `skip`."""
    if isinstance(facts, _Facts):
        return [fact for fact in facts.ordered if fact.event_id != skip]
    return sorted(_load(key, raw) for key, raw in facts.items() if key != skip)


def _kind(value: str) -> Kind:
    # A dict lookup: `Kind(value)`, an Enum call, is slow for something done per fact.
    return _KINDS.get(value) or Kind(value)


def _record(kind: Kind, event: ParsedEvent, occurred: datetime | None) -> dict[str, Any]:
    """The JSON-serialisable fact one event contributes (`occurred`: its time in UTC).
    Absent fields are left out, not stored as null: a payment's facts are rewritten, and
    parsed by PostgreSQL and by the next worker, at every event applied to it, and most
    facts have half their fields empty. Readers take a missing field as None."""
    return _present(
        {
            "kind": kind.value,
            "occurred_at": None if occurred is None else occurred.isoformat(),
            "amount": event.amount,
            "refunded_total": event.refunded_total,
            "currency": event.currency,
            "reference": event.reference,
            "settlement": _settlement(event),
            "anomaly": event.anomaly,
            "payment_amount": _payment_amount(event),
        }
    )


def _present(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A fact's fields that have a value (facts stored by earlier versions keep nulls)."""
    return {name: value for name, value in raw.items() if value is not None}


def _payment_amount(event: ParsedEvent) -> int | None:
    """The whole payment's amount when an event of another kind knows it (a refund read
    from the gateway's API carries it in `data["payment_amount"]`)."""
    value = event.data.get("payment_amount")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _settlement(event: ParsedEvent) -> str | None:
    """Identity of the money movement, when the adapter gives one in
    `data["settlement_id"]` (Pix endToEndId, card charge id)."""
    value = event.data.get("settlement_id")
    return value if isinstance(value, str) and value else None


def _load(event_id: str, raw: Mapping[str, Any]) -> _Fact:
    occurred = raw.get("occurred_at")
    return _fact(
        event_id, raw, None if occurred is None else _utc(datetime.fromisoformat(occurred))
    )


def _fact(event_id: str, raw: Mapping[str, Any], occurred_at: datetime | None) -> _Fact:
    """The fact recorded as `raw`, its time already read as `occurred_at`."""
    kind = _kind(raw["kind"])
    amount = raw.get("amount")
    refunded_total = raw.get("refunded_total")
    currency = raw.get("currency")
    reference = raw.get("reference")
    settlement = raw.get("settlement")
    anomaly = raw.get("anomaly")
    payment_amount = raw.get("payment_amount")
    # Content order, oldest first: each nullable field gives (present, value or 0), so that
    # None sorts first and never compares with a value. Spelt out, flat: it is hot.
    order = (
        occurred_at is not None,
        0 if occurred_at is None else occurred_at,
        _RANK[kind],
        amount is not None,
        0 if amount is None else amount,
        refunded_total is not None,
        0 if refunded_total is None else refunded_total,
        currency is not None,
        0 if currency is None else currency,
        reference is not None,
        0 if reference is None else reference,
        settlement is not None,
        0 if settlement is None else settlement,
        anomaly is not None,
        0 if anomaly is None else anomaly,
        payment_amount is not None,
        0 if payment_amount is None else payment_amount,
        event_id,
    )
    return _Fact(
        order,
        event_id,
        kind,
        occurred_at,
        amount,
        refunded_total,
        currency,
        reference,
        settlement,
        anomaly,
        payment_amount,
    )


def _utc(moment: datetime) -> datetime:
    """Aware UTC; a naive time is taken as UTC so that every fact compares."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
