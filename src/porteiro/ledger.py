"""The canonical payment ledger: pure code that folds events into a Payment.

Convergence by construction. Every applied event leaves one *fact* in `Payment.facts`,
keyed by the store's event id: its kind, time and amounts as the gateway reported them.
The set of facts only grows by union (a join-semilattice: idempotent, commutative,
associative), and everything else on the payment (state, amounts, reference, last event
time, anomalies) is a pure function of that set, ordered by content and never by
arrival. So any permutation of the same events, delivered any number of times, yields
the same payment. Only the verdict of one transition (applied, stale, anomalous...)
depends on arrival order, which is exactly what it is meant to report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from porteiro.model import Kind, Outcome, ParsedEvent, Payment, PaymentState, Transition, Verdict

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
            Kind.PAYMENT_FAILED,
            Kind.PAYMENT_CANCELED,
            Kind.PAYMENT_EXPIRED,
            Kind.PAYMENT_PARTIALLY_REFUNDED,
            Kind.PAYMENT_REFUNDED,
            Kind.DISPUTE_OPENED,
            Kind.DISPUTE_WON,
            Kind.DISPUTE_LOST,
            Kind.OTHER,
        )
    )
}
_REFUNDS = frozenset({Kind.PAYMENT_REFUNDED, Kind.PAYMENT_PARTIALLY_REFUNDED})
_DISPUTES = frozenset({Kind.DISPUTE_OPENED, Kind.DISPUTE_WON, Kind.DISPUTE_LOST})
# Facts that prove the money moved: a refund or a dispute implies an earlier payment.
_MONEY = _REFUNDS | _DISPUTES | {Kind.PAYMENT_PAID}
# Non-money facts: the latest one gives the state of a payment that was never paid.
_PROGRESS: dict[Kind, PaymentState] = {
    Kind.PAYMENT_CREATED: PaymentState.PENDING,
    Kind.PAYMENT_AUTHORIZED: PaymentState.AUTHORIZED,
    Kind.PAYMENT_FAILED: PaymentState.FAILED,
    Kind.PAYMENT_CANCELED: PaymentState.CANCELED,
    Kind.PAYMENT_EXPIRED: PaymentState.EXPIRED,
}
# Where the payment's amount, currency and reference are read first.
_PREFERRED = (Kind.PAYMENT_PAID, Kind.PAYMENT_AUTHORIZED, Kind.PAYMENT_CREATED)


@dataclass(frozen=True, slots=True)
class _Fact:
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

    def key(self) -> tuple[Any, ...]:
        """A total order on content, oldest first (no time sorts oldest)."""
        return (
            *_nullable(self.occurred_at),
            _RANK[self.kind],
            *_nullable(self.amount),
            *_nullable(self.refunded_total),
            *_nullable(self.currency),
            *_nullable(self.reference),
            *_nullable(self.settlement),
            *_nullable(self.anomaly),
            *_nullable(self.payment_amount),
            self.event_id,
        )


@dataclass(frozen=True, slots=True)
class _View:
    """Everything the ledger derives from a set of facts."""

    state: PaymentState
    amount: int | None
    currency: str | None
    refunded_amount: int
    reference: str | None
    last_event_at: datetime | None
    anomalies: tuple[str, ...]


def apply(
    current: Payment | None, *, source: str, event_id: int, event: ParsedEvent, at: datetime
) -> Outcome:
    """Apply one stored event to the payment it concerns; return the payment after it
    and the history entry. `current` is None for an object never seen before."""
    object_id = current.object_id if current is not None else event.object_id
    if object_id is None:
        raise ValueError("the ledger needs the event's object_id")
    before = current if current is not None else _payment(source, object_id, {}, 0)
    from_state = current.state if current is not None else None
    key = str(event_id)
    if Kind(event.kind) is Kind.OTHER and event.anomaly is None:
        ignored = "kind other is not a payment fact"
        return _outcome(before, event_id, from_state, Verdict.NO_EFFECT, at, ignored)
    record = _record(event)
    previous = before.facts.get(key)
    if previous is not None and dict(previous) == record:
        return _outcome(before, event_id, from_state, Verdict.DUPLICATE, at, None)
    facts = {**before.facts, key: record}
    after = _payment(before.source, object_id, facts, before.version)
    if after != before:
        after = replace(after, version=before.version + 1)
    verdict, note = _verdict(before, after, _load(key, record))
    if previous is not None:
        note = "revised" if note is None else f"revised; {note}"
    return _outcome(after, event_id, from_state, verdict, at, note)


def replay_history(
    source: str, object_id: str, events: Iterable[tuple[int, ParsedEvent]], at: datetime
) -> Payment:
    """Fold `apply` over (event id, event) pairs from nothing; an empty history gives a
    pending payment at version 0."""
    payment = _payment(source, object_id, {}, 0)
    for event_id, event in events:
        payment = apply(payment, source=source, event_id=event_id, event=event, at=at).payment
    return payment


def _outcome(
    payment: Payment,
    event_id: int,
    from_state: PaymentState | None,
    verdict: Verdict,
    at: datetime,
    note: str | None,
) -> Outcome:
    transition = Transition(event_id, from_state, payment.state, verdict, at, note)
    return Outcome(payment=payment, transition=transition)


def _verdict(before: Payment, after: Payment, fact: _Fact) -> tuple[Verdict, str | None]:
    if after.anomalies > before.anomalies:
        added = Counter(_derive(after.facts).anomalies) - Counter(_derive(before.facts).anomalies)
        return Verdict.ANOMALOUS, "; ".join(sorted(added.elements())) or None
    if _visible(after) != _visible(before):
        return Verdict.APPLIED, None
    last = before.last_event_at
    if fact.occurred_at is not None and last is not None and fact.occurred_at < last:
        return Verdict.STALE, None
    return Verdict.NO_EFFECT, None


def _visible(payment: Payment) -> tuple[Any, ...]:
    """What a merchant sees of a payment: a change here makes a verdict APPLIED."""
    return (
        payment.state,
        payment.amount,
        payment.currency,
        payment.refunded_amount,
        payment.reference,
        payment.anomalies,
    )


def _payment(
    source: str, object_id: str, facts: Mapping[str, Mapping[str, Any]], version: int
) -> Payment:
    view = _derive(facts)
    return Payment(
        source=source,
        object_id=object_id,
        state=view.state,
        amount=view.amount,
        currency=view.currency,
        refunded_amount=view.refunded_amount,
        reference=view.reference,
        version=version,
        last_event_at=view.last_event_at,
        facts=facts,
        anomalies=len(view.anomalies),
    )


def _derive(facts: Mapping[str, Mapping[str, Any]]) -> _View:
    ordered = sorted((_load(key, raw) for key, raw in facts.items()), key=_Fact.key)
    preferred = _preference(ordered)
    amount = next(
        (f.amount for f in preferred if f.kind in _PREFERRED and f.amount is not None),
        max((f.payment_amount for f in ordered if f.payment_amount is not None), default=None),
    )
    total, full = _refunds(ordered, amount)
    refunded = max(total, amount) if full and amount is not None else total
    times = [f.occurred_at for f in ordered if f.occurred_at is not None]
    return _View(
        state=_state(ordered, refunded, full),
        amount=amount,
        currency=next((f.currency for f in preferred if f.currency is not None), None),
        refunded_amount=refunded,
        reference=next((f.reference for f in preferred if f.reference is not None), None),
        last_event_at=max(times, default=None),
        anomalies=_anomalies(ordered, amount, total),
    )


def _preference(ordered: list[_Fact]) -> list[_Fact]:
    """Facts in the order fields are read from: paid, authorized, created, then the
    rest; latest first within each."""
    latest_first = ordered[::-1]
    ranked = [[f for f in latest_first if f.kind is kind] for kind in _PREFERRED]
    return [f for group in ranked for f in group] + [
        f for f in latest_first if f.kind not in _PREFERRED
    ]


def _refunds(ordered: list[_Fact], amount: int | None) -> tuple[int, bool]:
    """Total refunded (the larger of the gateway's cumulative reports and the sum of the
    refunds seen) and whether the payment is fully refunded."""
    refunds = [f for f in ordered if f.kind in _REFUNDS]
    reported = max((f.refunded_total or 0 for f in ordered), default=0)
    total = max(reported, sum(f.amount or 0 for f in refunds))
    if not refunds and total == 0:
        return 0, False
    full_kind = [f for f in refunds if f.kind is Kind.PAYMENT_REFUNDED]
    if amount is None:
        return total, bool(full_kind)
    # A "refunded" fact that names no amount at all means the whole payment.
    bare = any(f.amount is None and f.refunded_total is None for f in full_kind)
    return total, bare or total >= amount


def _state(ordered: list[_Fact], refunded: int, full: bool) -> PaymentState:
    disputes = [f.kind for f in ordered if f.kind in _DISPUTES]
    if disputes and disputes[-1] is Kind.DISPUTE_LOST:
        return PaymentState.CHARGED_BACK
    if disputes and disputes[-1] is Kind.DISPUTE_OPENED:
        return PaymentState.DISPUTED
    if full:
        return PaymentState.REFUNDED
    if refunded > 0 or any(f.kind in _REFUNDS for f in ordered):
        return PaymentState.PARTIALLY_REFUNDED
    if any(f.kind in _MONEY for f in ordered):
        return PaymentState.PAID
    progress = [f.kind for f in ordered if f.kind in _PROGRESS]
    return _PROGRESS[progress[-1]] if progress else PaymentState.PENDING


def _anomalies(ordered: list[_Fact], amount: int | None, refunded: int) -> tuple[str, ...]:
    """Contradictions in the set, listed in content order (never arrival order)."""
    found: list[str] = []
    # Several "paid" events for one object are normal (charge.paid + order.paid); only
    # distinct money movements (e.g. two Pix endToEndIds for one cob) mean paid twice.
    settlements = {f.settlement for f in ordered if f.kind is Kind.PAYMENT_PAID and f.settlement}
    found += ["paid twice"] * max(len(settlements) - 1, 0)
    money = [f.occurred_at for f in ordered if f.kind in _MONEY]
    if money:
        paid_at = min((t for t in money if t is not None), default=None)
        for f in ordered:
            late_failure = f.kind is Kind.PAYMENT_FAILED and _after(f.occurred_at, paid_at)
            if f.kind in (Kind.PAYMENT_CANCELED, Kind.PAYMENT_EXPIRED) or late_failure:
                found.append(f"{f.kind.value} but paid")
    if amount is not None and refunded > amount:
        found.append("refunded more than paid")
    # Contradictions the gateway itself reported (e.g. underpaid), one per fact.
    found += [f.anomaly for f in ordered if f.anomaly]
    return tuple(found)


def _after(when: datetime | None, reference: datetime | None) -> bool:
    return when is not None and reference is not None and when > reference


def _record(event: ParsedEvent) -> dict[str, Any]:
    """The JSON-serialisable fact one event contributes."""
    occurred = event.occurred_at
    return {
        "kind": Kind(event.kind).value,
        "occurred_at": None if occurred is None else _utc(occurred).isoformat(),
        "amount": event.amount,
        "refunded_total": event.refunded_total,
        "currency": event.currency,
        "reference": event.reference,
        "settlement": _settlement(event),
        "anomaly": event.anomaly,
        "payment_amount": _payment_amount(event),
    }


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
    return _Fact(
        event_id=event_id,
        kind=Kind(raw["kind"]),
        occurred_at=None if occurred is None else _utc(datetime.fromisoformat(occurred)),
        amount=raw.get("amount"),
        refunded_total=raw.get("refunded_total"),
        currency=raw.get("currency"),
        reference=raw.get("reference"),
        settlement=raw.get("settlement"),
        anomaly=raw.get("anomaly"),
        payment_amount=raw.get("payment_amount"),
    )


def _utc(moment: datetime) -> datetime:
    """Aware UTC; a naive time is taken as UTC so that every fact compares."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _nullable(value: Any) -> tuple[bool, Any]:
    """Sort key part where None comes first and never compares with a value."""
    return (value is not None, value if value is not None else 0)
