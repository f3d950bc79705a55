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
facts that stand (`derive._standing`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from porteiro.ledger.derive import _NOTHING, _derive, _View
from porteiro.ledger.facts import (
    _OTHER,
    _Fact,
    _fact,
    _Facts,
    _kind,
    _loaded,
    _present,
    _record,
    _utc,
)
from porteiro.model import Outcome, ParsedEvent, Payment, PaymentState, Transition, Verdict


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
