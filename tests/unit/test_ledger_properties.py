"""The ledger's convergence property, proven with hypothesis (docs/architecture.md,
"The ledger: order does not matter").

For any valid history, every permutation with any number of duplicates yields the same
final payment, and applies each distinct event exactly once. The same holds for any set
of facts at all, valid or not, because the payment is a pure function of the set.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from porteiro.ledger import apply
from porteiro.model import Kind, ParsedEvent, Payment, PaymentState, Transition, Verdict

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
NOW = datetime(2024, 6, 1, tzinfo=UTC)
SETTINGS = settings(max_examples=250, deadline=None)

Event = tuple[int, ParsedEvent]


@dataclass(frozen=True)
class History:
    events: list[Event]  # distinct event ids, in the order things happened
    state: PaymentState
    refunded: int


def event(
    kind: Kind, amount: int | None = None, total: int | None = None, **kw: Any
) -> ParsedEvent:
    return ParsedEvent(
        dedup_key="",
        kind=kind,
        type=kind.value,
        object_id="pay_1",
        amount=amount,
        refunded_total=total,
        **kw,
    )


@st.composite
def refunds(draw: st.DrawFn, amount: int) -> tuple[list[ParsedEvent], int]:
    """Partial refunds whose sum stays within the amount, maybe a final full one."""
    style = draw(st.sampled_from(["increments", "totals", "both"]))
    increments = draw(st.lists(st.integers(1, max(amount // 3, 1)), max_size=3))
    events: list[ParsedEvent] = []
    total = 0
    for increment in increments:
        if total + increment >= amount:
            break
        total += increment
        events.append(_refund(Kind.PAYMENT_PARTIALLY_REFUNDED, style, increment, total))
    if draw(st.booleans()):
        bare = draw(st.booleans())
        kind = Kind.PAYMENT_REFUNDED
        full = event(kind) if bare else _refund(kind, style, amount - total, amount)
        events.append(full)
        total = amount
    return events, total


def _refund(kind: Kind, style: str, increment: int, total: int) -> ParsedEvent:
    return event(
        kind,
        amount=None if style == "totals" else increment,
        total=None if style == "increments" else total,
    )


# How a dispute ends the history (None: no dispute, or won: back to the money state).
DISPUTE_ENDS: dict[Kind | None, PaymentState] = {
    Kind.DISPUTE_OPENED: PaymentState.DISPUTED,
    Kind.DISPUTE_LOST: PaymentState.CHARGED_BACK,
}


@st.composite
def happy(draw: st.DrawFn) -> tuple[list[ParsedEvent], PaymentState, int]:
    amount = draw(st.integers(1, 100_000))
    money: dict[str, Any] = {"currency": draw(st.sampled_from(["BRL", "USD"])), "amount": amount}
    steps: list[ParsedEvent] = []
    if draw(st.booleans()):
        steps.append(
            event(Kind.PAYMENT_CREATED, reference=draw(st.sampled_from([None, "o-1"])), **money)
        )
    if draw(st.booleans()):
        steps.append(event(Kind.PAYMENT_FAILED))  # a declined attempt, then a retry
    if draw(st.booleans()):
        steps.append(event(Kind.PAYMENT_AUTHORIZED, **money))
    steps.append(event(Kind.PAYMENT_PAID, **money))
    refund_events, refunded = draw(refunds(amount))
    steps += refund_events
    dispute = draw(st.sampled_from([None, *DISPUTE_ENDS, Kind.DISPUTE_WON]))
    if dispute is not None:
        steps.append(event(Kind.DISPUTE_OPENED))
    if dispute in (Kind.DISPUTE_WON, Kind.DISPUTE_LOST):
        steps.append(event(dispute))
    return steps, DISPUTE_ENDS.get(dispute, _money_state(refunded, amount)), refunded


def _money_state(refunded: int, amount: int) -> PaymentState:
    if refunded == 0:
        return PaymentState.PAID
    return PaymentState.REFUNDED if refunded == amount else PaymentState.PARTIALLY_REFUNDED


@st.composite
def unhappy(draw: st.DrawFn) -> tuple[list[ParsedEvent], PaymentState, int]:
    steps = [event(Kind.PAYMENT_CREATED, amount=draw(st.integers(1, 10_000)), currency="BRL")]
    if draw(st.booleans()):
        steps.append(event(Kind.PAYMENT_AUTHORIZED))
    end, state = draw(
        st.sampled_from(
            [
                (Kind.PAYMENT_FAILED, PaymentState.FAILED),
                (Kind.PAYMENT_CANCELED, PaymentState.CANCELED),
                (Kind.PAYMENT_EXPIRED, PaymentState.EXPIRED),
            ]
        )
    )
    return [*steps, event(end)], state, 0


@st.composite
def undone(draw: st.DrawFn) -> tuple[list[ParsedEvent], PaymentState, int]:
    """Adyen's facts that undo others: refunds reversed (REFUND_FAILED, REFUNDED_REVERSED),
    a capture that failed (maybe re-captured), an authorisation that expired."""
    amount = draw(st.integers(3, 100_000))
    money: dict[str, Any] = {"currency": "EUR", "amount": amount}
    steps: list[ParsedEvent] = []
    manual = draw(st.booleans())
    if manual:
        steps.append(event(Kind.PAYMENT_AUTHORIZED, **money))
    story = draw(st.sampled_from(["refunds", "capture_failed", "recaptured", "expired"]))
    if story == "expired":
        paid = not manual or draw(st.booleans())
        if paid:
            steps.append(event(Kind.PAYMENT_PAID, **money))
        steps.append(event(Kind.PAYMENT_AUTHORIZATION_EXPIRED, **money))
        return steps, PaymentState.PAID if paid else PaymentState.EXPIRED, 0
    steps.append(event(Kind.PAYMENT_PAID, **money))
    if story != "refunds":
        steps.append(event(Kind.PAYMENT_CAPTURE_FAILED, **money))
        if story == "capture_failed":
            return steps, PaymentState.FAILED, 0
        steps.append(event(Kind.PAYMENT_PAID, **money))
        return steps, PaymentState.PAID, 0
    parts = draw(st.lists(st.integers(1, amount // 3), min_size=1, max_size=3))
    refunded = 0
    for n, part in enumerate(parts):
        refund = {"settlement_id": f"refund-{n}"}
        steps.append(event(Kind.PAYMENT_PARTIALLY_REFUNDED, amount=part, data=refund))
        if draw(st.booleans()):  # failed or reversed since: all of it, maybe named
            back = draw(st.sampled_from([None, part]))
            steps.append(event(Kind.PAYMENT_REFUND_REVERSED, amount=back, data=refund))
        else:
            refunded += part
    return steps, _money_state(refunded, amount), refunded


@st.composite
def valid_histories(draw: st.DrawFn) -> History:
    steps, state, refunded = draw(st.one_of(happy(), unhappy(), undone()))
    # Event ids are the store's: distinct, but in no relation to the order of events.
    ids = draw(
        st.lists(st.integers(1, 10**9), min_size=len(steps), max_size=len(steps), unique=True)
    )
    gaps = draw(st.lists(st.integers(1, 10**6), min_size=len(steps), max_size=len(steps)))
    times = [T0 + timedelta(seconds=sum(gaps[: i + 1])) for i in range(len(steps))]
    events = [(i, replace(e, occurred_at=t)) for i, e, t in zip(ids, steps, times, strict=True)]
    return History(events, state, refunded)


ANY_KIND = st.sampled_from([k for k in Kind if k is not Kind.OTHER])
ANY_TIME = st.none() | st.integers(0, 5).map(lambda m: T0 + timedelta(minutes=m))
ANY_AMOUNT = st.none() | st.integers(0, 2000)
ANY_EVENT = st.builds(
    event,
    ANY_KIND,
    amount=ANY_AMOUNT,
    total=ANY_AMOUNT,
    occurred_at=ANY_TIME,
    currency=st.sampled_from([None, "BRL", "USD"]),
    reference=st.sampled_from([None, "a", "b"]),
    # Settlement ids tie refunds to their reversals (and tell payments apart).
    data=st.sampled_from([{}, {"settlement_id": "s1"}, {"settlement_id": "s2"}]),
)


@st.composite
def arbitrary_events(draw: st.DrawFn) -> list[Event]:
    """Any facts at all: contradictory, timeless, tied in time."""
    found = draw(st.lists(ANY_EVENT, min_size=1, max_size=8))
    ids = draw(
        st.lists(st.integers(-50, 50), min_size=len(found), max_size=len(found), unique=True)
    )
    return list(zip(ids, found, strict=True))


def fold(events: Sequence[Event], store_json: bool) -> tuple[Payment, list[Transition]]:
    current: Payment | None = None
    history: list[Transition] = []
    for event_id, parsed in events:
        if store_json and current is not None:  # what a store hands back
            current = replace(current, facts=json.loads(json.dumps(current.facts)))
        outcome = apply(current, source="shop", event_id=event_id, event=parsed, at=NOW)
        current = outcome.payment
        history.append(outcome.transition)
    if current is None:
        raise AssertionError("empty history")
    return current, history


def final(payment: Payment) -> tuple[Any, ...]:
    return (
        payment.state,
        payment.amount,
        payment.refunded_amount,
        payment.currency,
        payment.reference,
        payment.anomalies,
        payment.last_event_at,
        dict(payment.facts),
        payment.version,
    )


@st.composite
def shuffled_with_duplicates(draw: st.DrawFn, events: list[Event]) -> list[Event]:
    extra = draw(st.lists(st.sampled_from(events), max_size=2 * len(events)))
    return draw(st.permutations([*events, *extra]))


def check_converges(events: list[Event], delivered: list[Event], store_json: bool) -> None:
    expected, _ = fold(events, store_json=False)
    got, history = fold(delivered, store_json)
    assert final(got) == final(expected)
    # Every new fact changes the stored payment: the version counts distinct events.
    assert got.version == len(events)
    seen: set[int] = set()
    for (event_id, _), transition in zip(delivered, history, strict=True):
        assert transition.event_id == event_id
        assert (transition.verdict is Verdict.DUPLICATE) == (event_id in seen)
        seen.add(event_id)


@SETTINGS
@given(st.data(), valid_histories(), st.booleans())
def test_valid_histories_converge_under_permutation_and_duplication(
    data: st.DataObject, history: History, store_json: bool
) -> None:
    delivered = data.draw(shuffled_with_duplicates(history.events))
    check_converges(history.events, delivered, store_json)


@SETTINGS
@given(st.data(), arbitrary_events(), st.booleans())
def test_any_set_of_facts_converges(
    data: st.DataObject, events: list[Event], store_json: bool
) -> None:
    delivered = data.draw(shuffled_with_duplicates(events))
    check_converges(events, delivered, store_json)


@SETTINGS
@given(valid_histories())
def test_in_order_valid_history_reaches_the_expected_state(history: History) -> None:
    payment, transitions = fold(history.events, store_json=False)
    assert payment.state is history.state
    assert payment.refunded_amount == history.refunded
    assert payment.anomalies == 0
    assert payment.last_event_at == history.events[-1][1].occurred_at
    assert all(t.verdict in (Verdict.APPLIED, Verdict.NO_EFFECT) for t in transitions)
