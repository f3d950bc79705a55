"""A payment's timeline from the rows the store keeps apart: in time order, a tie told in
the order of the story, the first delivery of an event apart from its repeats, and an
event not applied yet shown as pending."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from porteiro.model import (
    EventStatus,
    Kind,
    PaymentState,
    StoredDelivery,
    StoredEvent,
    Transition,
    Verdict,
)
from porteiro.store.console_verbs import Forward, ReconcileCheck
from porteiro.store.reconcile import Expectation
from porteiro.ui.timeline import (
    CHECKED,
    DELIVERY,
    EXPECTED,
    FORWARD,
    PENDING,
    REPEAT,
    TRANSITION,
    Entry,
    build,
)

T0 = datetime(2026, 7, 15, 14, 0, tzinfo=UTC)


def later(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def event(
    id: int,
    kind: Kind,
    status: EventStatus = EventStatus.DONE,
    *,
    received: datetime = T0,
    updated: datetime = T0,
    attempts: int = 1,
    last_error: str | None = None,
) -> StoredEvent:
    return StoredEvent(
        id=id, source="stripe", dedup_key=f"evt_{id}", kind=kind, type=f"type.{id}",
        object_id="pi_1", reference="order-1", amount=15000, currency="BRL", occurred_at=None,
        refunded_total=None, thin=False, data={}, status=status, attempts=attempts,
        next_attempt_at=None, last_error=last_error, duplicates=0, received_at=received,
        updated_at=updated,
    )  # fmt: skip


def delivery(id: int, at: datetime, parse_error: str | None = None) -> StoredDelivery:
    return StoredDelivery(
        id=id, source="stripe", received_at=at, path="/webhooks/stripe", query="",
        headers=(), body=b"{}", peer="203.0.113.9", parse_error=parse_error,
    )  # fmt: skip


def transition(
    event_id: int,
    to: PaymentState,
    at: datetime,
    verdict: Verdict = Verdict.APPLIED,
    before: PaymentState | None = None,
) -> Transition:
    return Transition(event_id, before, to, verdict, at)


def forward(event_id: int, at: datetime) -> Forward:
    return Forward(
        id=7, destination="erp", event_id=event_id, status="done", attempts=1, last_error=None,
        last_status="200", created_at=at, delivered_at=at + timedelta(seconds=1),
    )  # fmt: skip


def story(entries: list[Entry]) -> list[tuple[str, int | None]]:
    return [(entry.kind, entry.event_id) for entry in entries]


def test_entries_are_in_time_order_whatever_order_the_rows_came_in() -> None:
    created = event(1, Kind.PAYMENT_CREATED, received=T0)
    paid = event(2, Kind.PAYMENT_PAID, received=later(60))
    entries = build(
        [paid, created],  # newest first, as a store lists them
        {2: [delivery(20, later(60))], 1: [delivery(10, T0)]},
        [
            transition(2, PaymentState.PAID, later(61), before=PaymentState.PENDING),
            transition(1, PaymentState.PENDING, later(1)),
        ],
        [],
        None,
        None,
    )
    assert story(entries) == [
        (DELIVERY, 1),
        (TRANSITION, 1),
        (DELIVERY, 2),
        (TRANSITION, 2),
    ]
    assert [entry.at for entry in entries] == sorted(entry.at for entry in entries)


def test_a_tie_keeps_the_order_of_the_story() -> None:
    # The expectation, the delivery, its transition and its forward at one instant.
    paid = event(1, Kind.PAYMENT_PAID)
    expectation = Expectation("stripe", "pi_1", "order-1", 15000, "BRL", None, T0)
    check = ReconcileCheck(checks=1, checked_at=T0, next_check_at=later(600), last_error=None)
    entries = build(
        [paid],
        {1: [delivery(10, T0)]},
        [transition(1, PaymentState.PAID, T0)],
        [forward(1, T0)],
        expectation,
        check,
    )
    assert story(entries) == [
        (EXPECTED, None),
        (DELIVERY, 1),
        (TRANSITION, 1),
        (FORWARD, 1),
        (CHECKED, None),
    ]


def test_the_first_delivery_of_an_event_is_the_delivery_and_the_others_repeats() -> None:
    paid = event(1, Kind.PAYMENT_PAID)
    entries = build(
        [paid],
        {1: [delivery(10, T0), delivery(11, later(5)), delivery(12, later(9))]},
        [transition(1, PaymentState.PAID, later(1))],
        [],
        None,
        None,
    )
    assert story(entries) == [(DELIVERY, 1), (TRANSITION, 1), (REPEAT, 1), (REPEAT, 1)]
    assert [entry.detail["delivery_id"] for entry in entries if entry.kind != TRANSITION] == [
        10,
        11,
        12,
    ]


def test_a_delivery_entry_names_its_event_and_any_parse_error() -> None:
    (entry,) = build(
        [event(1, Kind.OTHER, EventStatus.IGNORED)],
        {1: [delivery(10, T0, parse_error="no object id")]},
        [],
        [],
        None,
        None,
    )
    assert entry == Entry(T0, DELIVERY, 1, {
        "delivery_id": 10, "type": "type.1", "kind": "other", "parse_error": "no object id",
    })  # fmt: skip


def test_an_event_not_done_is_pending_at_its_last_update() -> None:
    done = event(1, Kind.PAYMENT_CREATED)
    failing = event(
        2,
        Kind.PAYMENT_PAID,
        EventStatus.RETRYING,
        received=later(10),
        updated=later(40),
        attempts=3,
        last_error="handler erp: timeout",
    )
    entries = build(
        [done, failing],
        {1: [delivery(10, T0)], 2: [delivery(20, later(10))]},
        [transition(1, PaymentState.PENDING, later(1))],
        [],
        None,
        None,
    )
    assert story(entries) == [(DELIVERY, 1), (TRANSITION, 1), (DELIVERY, 2), (PENDING, 2)]
    assert entries[-1] == Entry(later(40), PENDING, 2, {
        "status": "retrying", "attempts": 3, "last_error": "handler erp: timeout",
        "type": "type.2",
    })  # fmt: skip


def test_every_status_but_done_and_ignored_is_pending() -> None:
    for status in EventStatus:
        entries = build([event(1, Kind.PAYMENT_PAID, status)], {}, [], [], None, None)
        kinds = [entry.kind for entry in entries]
        if status in (EventStatus.DONE, EventStatus.IGNORED):
            assert kinds == [], status
        else:
            assert kinds == [PENDING], status
            assert entries[0].detail["status"] == status.value


def test_a_pending_event_ties_after_its_delivery() -> None:
    waiting = event(1, Kind.PAYMENT_PAID, EventStatus.PENDING, received=T0, updated=T0)
    entries = build([waiting], {1: [delivery(10, T0)]}, [], [], None, None)
    assert story(entries) == [(DELIVERY, 1), (PENDING, 1)]


def test_a_transition_tells_what_its_event_did() -> None:
    refund = event(1, Kind.PAYMENT_REFUNDED)
    entries = build(
        [refund],
        {},
        [
            transition(1, PaymentState.REFUNDED, T0, before=PaymentState.PAID),
            Transition(9, None, PaymentState.PAID, Verdict.NO_EFFECT, later(1), "second paid"),
        ],
        [],
        None,
        None,
    )
    assert entries[0].detail == {
        "from": "paid", "to": "refunded", "verdict": "applied", "note": None,
        "type": "type.1", "amount": 15000, "currency": "BRL",
    }  # fmt: skip
    # An event not among those given (not shown on this page): no type, no amount.
    assert entries[1].detail == {
        "from": None, "to": "paid", "verdict": "no_effect", "note": "second paid",
        "type": None, "amount": None, "currency": None,
    }  # fmt: skip


def test_nothing_recorded_is_an_empty_timeline() -> None:
    assert build([], {}, [], [], None, None) == []
