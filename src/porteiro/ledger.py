"""The canonical payment ledger: pure code that folds events into a Payment.

Convergence by construction. Every applied event leaves one *fact* in `Payment.facts`,
keyed by the store's event id: its kind, time and amounts as the gateway reported them.
The set of facts only grows by union (a join-semilattice: idempotent, commutative,
associative), and everything else on the payment (state, amounts, reference, last event
time, anomalies) is a pure function of that set, ordered by content and never by
arrival. So any permutation of the same events, delivered any number of times, yields
the same payment. Only the verdict of one transition (applied, stale, anomalous...)
depends on arrival order, which is exactly what it is meant to report.

Facts that undo others (Adyen's CAPTURE_FAILED, REFUND_FAILED, REFUNDED_REVERSED) keep
that property: they never delete a fact, they change what the set *means*. A
`payment.refund_reversed` fact takes back the refund facts of the same settlement id (the
refund's own reference), whichever arrived first; a `payment.capture_failed` fact undoes
the paid facts that sort before it (a later re-capture counts again). Amount, currency and
reference are still read from every fact; state, refunded amount and anomalies from the
facts that stand (`_standing`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, NoReturn, TypeVar

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
_T = TypeVar("_T")


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


class _View(NamedTuple):
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
    before = current if current is not None else _new_payment(source, object_id)
    from_state = current.state if current is not None else None
    key = str(event_id)
    kind = _kind(event.kind)
    if kind is _OTHER and event.anomaly is None:
        ignored = "kind other is not a payment fact"
        return _outcome(before, event_id, from_state, Verdict.NO_EFFECT, at, ignored)
    occurred = None if event.occurred_at is None else _utc(event.occurred_at)
    record = _record(kind, event, occurred)
    previous = before.facts.get(key)
    if previous is not None and _present(previous) == record:
        return _outcome(before, event_id, from_state, Verdict.DUPLICATE, at, None)
    fact = _fact(key, record, occurred)
    # The new fact joins the others (or, revised, replaces its old self); the others are
    # already in order, so this sort is a merge.
    ordered = tuple(sorted([*_loaded(before.facts, skip=key), fact]))
    view = _derive(ordered)
    # Not a duplicate, so the set of facts changed: that is a new version.
    facts = _Facts({**before.facts, key: record}, ordered)
    after = _payment(view, before.source, object_id, facts, before.version + 1)
    verdict, note = _verdict(before, after, fact, view)
    if previous is not None:
        note = "revised" if note is None else f"revised; {note}"
    return _outcome(after, event_id, from_state, verdict, at, note)


def replay_history(
    source: str, object_id: str, events: Iterable[tuple[int, ParsedEvent]], at: datetime
) -> Payment:
    """Fold `apply` over (event id, event) pairs from nothing; an empty history gives a
    pending payment at version 0."""
    payment = _new_payment(source, object_id)
    for event_id, event in events:
        payment = apply(payment, source=source, event_id=event_id, event=event, at=at).payment
    return payment


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


def _verdict(
    before: Payment, after: Payment, fact: _Fact, view: _View
) -> tuple[Verdict, str | None]:
    """`view` is what `after` was derived from."""
    if after.anomalies > before.anomalies:
        earlier = _derive(_loaded(before.facts)).anomalies
        added = Counter(view.anomalies) - Counter(earlier)
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


def _new_payment(source: str, object_id: str) -> Payment:
    """A payment no fact is known of yet."""
    return _payment(_NOTHING, source, object_id, {}, 0)


def _payment(
    view: _View, source: str, object_id: str, facts: Mapping[str, Any], version: int
) -> Payment:
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


def _derive(ordered: Sequence[_Fact]) -> _View:
    """The view of a set of facts, given in order. Timed facts sort after untimed ones,
    oldest first, so the last fact holds the latest time if any has one."""
    amount, currency, reference = _preferred(ordered)
    if amount is None:
        amount = max(
            (f.payment_amount for f in ordered if f.payment_amount is not None), default=None
        )
    standing = _standing(ordered)
    total, full = _refunds(standing, amount)
    refunded = max(total, amount) if full and amount is not None else total
    return _View(
        state=_state(standing, refunded, full),
        amount=amount,
        currency=currency,
        refunded_amount=refunded,
        reference=reference,
        last_event_at=ordered[-1].occurred_at if ordered else None,
        anomalies=_anomalies(standing, amount, total),
    )


def _standing(ordered: Sequence[_Fact]) -> Sequence[_Fact]:
    """The facts that still stand, in order: without the refunds a `refund_reversed` fact
    takes back (by settlement id; a reversal of part of a refund leaves the rest) and the
    paid facts that sort before the latest `capture_failed` fact. A function of the set
    alone, as everything derived from it."""
    reversed_: dict[str, int | None] = {}  # settlement -> amount taken back (None: all)
    failed_capture: tuple[Any, ...] | None = None
    for f in ordered:
        if f.kind is _REFUND_REVERSED and f.settlement is not None:
            known = reversed_.get(f.settlement, 0)
            whole = known is None or f.amount is None
            reversed_[f.settlement] = None if whole else max(known or 0, f.amount or 0)
        elif f.kind is _CAPTURE_FAILED:
            failed_capture = f.order  # facts are in order: the last one is the latest
    if not reversed_ and failed_capture is None:
        return ordered
    kept: list[_Fact] = []
    for f in ordered:
        if f.kind in _REFUNDS and f.settlement is not None and f.settlement in reversed_:
            back = reversed_[f.settlement]
            if back is None or f.amount is None or back >= f.amount:
                continue
            f = f._replace(amount=f.amount - back)
        elif f.kind is _PAID and failed_capture is not None and f.order < failed_capture:
            continue
        kept.append(f)
    return kept


def _preferred(ordered: Sequence[_Fact]) -> tuple[int | None, str | None, str | None]:
    """Amount, currency and reference, each from the latest fact that has it among the
    paid facts, else the authorized, else the created, else (but the amount) the rest."""
    # Per group of _PREFERRED, then the rest: a later fact overwrites an earlier one.
    amounts: list[int | None] = [None] * len(_PREFERRED)
    currencies: list[str | None] = [None] * (len(_PREFERRED) + 1)
    references: list[str | None] = [None] * (len(_PREFERRED) + 1)
    for f in ordered:
        group = _PREFERENCE.get(f.kind, len(_PREFERRED))
        if f.amount is not None and group < len(_PREFERRED):
            amounts[group] = f.amount
        if f.currency is not None:
            currencies[group] = f.currency
        if f.reference is not None:
            references[group] = f.reference
    return _first(amounts), _first(currencies), _first(references)


def _first(values: list[_T | None]) -> _T | None:
    for value in values:
        if value is not None:
            return value
    return None


def _refunds(ordered: Sequence[_Fact], amount: int | None) -> tuple[int, bool]:
    """Total refunded (the larger of the gateway's cumulative reports and the sum of the
    refunds seen) and whether the payment is fully refunded."""
    refunds = [f for f in ordered if f.kind in _REFUNDS]
    reported = max((f.refunded_total or 0 for f in ordered), default=0)
    total = max(reported, sum(f.amount or 0 for f in refunds))
    if not refunds and total == 0:
        return 0, False
    full_kind = [f for f in refunds if f.kind is _REFUNDED]
    if amount is None:
        return total, bool(full_kind)
    # A "refunded" fact that names no amount at all means the whole payment.
    bare = any(f.amount is None and f.refunded_total is None for f in full_kind)
    return total, bare or total >= amount


def _state(ordered: Sequence[_Fact], refunded: int, full: bool) -> PaymentState:
    dispute = next((f.kind for f in reversed(ordered) if f.kind in _DISPUTES), None)
    if dispute is _DISPUTE_LOST:
        return PaymentState.CHARGED_BACK
    if dispute is _DISPUTE_OPENED:
        return PaymentState.DISPUTED
    if full:
        return PaymentState.REFUNDED
    if refunded > 0 or any(f.kind in _REFUNDS for f in ordered):
        return PaymentState.PARTIALLY_REFUNDED
    if any(f.kind in _MONEY for f in ordered):
        return PaymentState.PAID
    progress = next((f.kind for f in reversed(ordered) if f.kind in _PROGRESS), None)
    return PaymentState.PENDING if progress is None else _PROGRESS[progress]


def _anomalies(ordered: Sequence[_Fact], amount: int | None, refunded: int) -> tuple[str, ...]:
    """Contradictions in the set, listed in content order (never arrival order)."""
    found: list[str] = []
    # Several "paid" events for one object are normal (charge.paid + order.paid); only
    # distinct money movements (e.g. two Pix endToEndIds for one cob) mean paid twice.
    settlements = {f.settlement for f in ordered if f.kind is _PAID and f.settlement}
    found += ["paid twice"] * max(len(settlements) - 1, 0)
    money = [f.occurred_at for f in ordered if f.kind in _MONEY]
    if money:
        # In time order: the first time is the earliest.
        paid_at = next((t for t in money if t is not None), None)
        for f in ordered:
            late_failure = f.kind is _FAILED and _after(f.occurred_at, paid_at)
            if f.kind in _UNDONE_BY_MONEY or late_failure:
                found.append(f"{f.kind.value} but paid")
    if amount is not None and refunded > amount:
        found.append("refunded more than paid")
    # Contradictions the gateway itself reported (e.g. underpaid), one per fact.
    found += [f.anomaly for f in ordered if f.anomaly]
    return tuple(found)


def _after(when: datetime | None, reference: datetime | None) -> bool:
    return when is not None and reference is not None and when > reference


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


# The view of no facts at all, for a payment seen for the first time.
_NOTHING = _derive(())
