"""The ledger's rules, one explicit scenario at a time.

A payment is a pure function of the set of facts its distinct events contributed, with
"money facts win" precedence (chargeback > dispute > refunds > paid > the latest of
pending, authorized, failed, canceled, expired); each application gets a verdict
(applied, no_effect, duplicate, stale, anomalous). docs/architecture.md, "The ledger:
order does not matter", says why.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from itertools import permutations

import pytest

from porteiro.ledger import apply, replay_history
from porteiro.model import Kind, ParsedEvent, Payment, PaymentState, Transition, Verdict

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
NOW = datetime(2024, 6, 1, 9, 30, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def ev(
    kind: Kind,
    minute: int | None = None,
    *,
    amount: int | None = None,
    refunded_total: int | None = None,
    currency: str | None = "BRL",
    reference: str | None = None,
    object_id: str = "pay_1",
    settlement: str | None = None,
) -> ParsedEvent:
    return ParsedEvent(
        dedup_key=f"{kind.value}-{minute}-{amount}-{refunded_total}",
        kind=kind,
        type=kind.value,
        object_id=object_id,
        reference=reference,
        amount=amount,
        currency=currency,
        occurred_at=None if minute is None else at(minute),
        refunded_total=refunded_total,
        data={} if settlement is None else {"settlement_id": settlement},
    )


def fold(
    events: Sequence[tuple[int, ParsedEvent]], current: Payment | None = None
) -> tuple[Payment, list[Transition]]:
    transitions: list[Transition] = []
    for event_id, event in events:
        outcome = apply(current, source="shop", event_id=event_id, event=event, at=NOW)
        current = outcome.payment
        transitions.append(outcome.transition)
    if current is None:
        raise AssertionError("fold needs at least one event")
    return current, transitions


def states(transitions: Sequence[Transition]) -> list[PaymentState]:
    return [t.to_state for t in transitions]


def verdicts(transitions: Sequence[Transition]) -> list[Verdict]:
    return [t.verdict for t in transitions]


PAID_1000 = ev(Kind.PAYMENT_PAID, 2, amount=1000, reference="order-1")


def test_happy_path_created_authorized_paid() -> None:
    payment, history = fold(
        [
            (1, ev(Kind.PAYMENT_CREATED, 0, amount=1000, reference="order-1")),
            (2, ev(Kind.PAYMENT_AUTHORIZED, 1, amount=1000)),
            (3, PAID_1000),
        ]
    )
    assert states(history) == [PaymentState.PENDING, PaymentState.AUTHORIZED, PaymentState.PAID]
    assert verdicts(history) == [Verdict.APPLIED] * 3
    assert [t.from_state for t in history] == [None, PaymentState.PENDING, PaymentState.AUTHORIZED]
    assert [t.event_id for t in history] == [1, 2, 3]
    assert all(t.at == NOW for t in history)
    assert (payment.source, payment.object_id) == ("shop", "pay_1")
    assert (payment.amount, payment.currency, payment.reference) == (1000, "BRL", "order-1")
    assert payment.refunded_amount == 0
    assert payment.version == 3
    assert payment.last_event_at == at(2)
    assert payment.anomalies == 0


def test_late_pending_after_paid_is_stale_and_keeps_paid() -> None:
    payment, history = fold([(1, PAID_1000), (2, ev(Kind.PAYMENT_CREATED, 0, amount=1000))])
    assert payment.state is PaymentState.PAID
    assert history[1].verdict is Verdict.STALE
    assert history[1].from_state is history[1].to_state is PaymentState.PAID
    # The fact is still recorded (the stored payment changed), so the version moves.
    assert payment.version == 2
    assert set(payment.facts) == {"1", "2"}


def test_late_failure_without_time_after_paid_changes_nothing() -> None:
    payment, history = fold([(1, PAID_1000), (2, ev(Kind.PAYMENT_EXPIRED, None))])
    # A terminal fact with no time can't be ordered after the money: surfaced anyway.
    assert payment.state is PaymentState.PAID
    assert history[1].verdict is Verdict.ANOMALOUS


def test_failed_attempt_before_paid_is_normal() -> None:
    in_order, _ = fold([(1, ev(Kind.PAYMENT_FAILED, 1)), (2, PAID_1000)])
    reversed_, history = fold([(2, PAID_1000), (1, ev(Kind.PAYMENT_FAILED, 1))])
    assert in_order.state is reversed_.state is PaymentState.PAID
    assert in_order.anomalies == reversed_.anomalies == 0
    assert history[1].verdict is Verdict.STALE


def test_refund_before_paid_converges_to_in_order_result() -> None:
    refund = ev(Kind.PAYMENT_REFUNDED, 5)
    early, history = fold([(2, refund), (1, PAID_1000)])
    in_order, _ = fold([(1, PAID_1000), (2, refund)])
    # Alone, a full refund implies the payment had been paid.
    assert history[0].to_state is PaymentState.REFUNDED
    assert early.state is in_order.state is PaymentState.REFUNDED
    assert early.refunded_amount == in_order.refunded_amount == 1000
    assert early.facts == in_order.facts


def test_partial_then_full_refund() -> None:
    payment, history = fold(
        [
            (1, PAID_1000),
            (2, ev(Kind.PAYMENT_PARTIALLY_REFUNDED, 3, amount=300, refunded_total=300)),
            (3, ev(Kind.PAYMENT_REFUNDED, 4, amount=700, refunded_total=1000)),
        ]
    )
    assert states(history)[1:] == [PaymentState.PARTIALLY_REFUNDED, PaymentState.REFUNDED]
    assert payment.refunded_amount == 1000
    assert payment.amount == 1000


def test_two_partial_refunds_summing_to_the_amount_are_a_full_refund() -> None:
    payment, history = fold(
        [
            (1, PAID_1000),
            (2, ev(Kind.PAYMENT_PARTIALLY_REFUNDED, 3, amount=400)),
            (3, ev(Kind.PAYMENT_PARTIALLY_REFUNDED, 4, amount=600)),
        ]
    )
    assert history[1].to_state is PaymentState.PARTIALLY_REFUNDED
    assert payment.state is PaymentState.REFUNDED
    assert payment.refunded_amount == 1000


def test_refunded_kind_with_a_smaller_amount_is_partial() -> None:
    payment, _ = fold([(1, PAID_1000), (2, ev(Kind.PAYMENT_REFUNDED, 3, amount=250))])
    assert payment.state is PaymentState.PARTIALLY_REFUNDED
    assert payment.refunded_amount == 250


def test_cumulative_refunded_totals_out_of_order() -> None:
    later = ev(Kind.PAYMENT_PARTIALLY_REFUNDED, 4, refunded_total=700)
    earlier = ev(Kind.PAYMENT_PARTIALLY_REFUNDED, 3, refunded_total=300)
    payment, history = fold([(1, PAID_1000), (3, later), (2, earlier)])
    assert payment.state is PaymentState.PARTIALLY_REFUNDED
    assert payment.refunded_amount == 700
    assert history[2].verdict is Verdict.STALE
    in_order, _ = fold([(1, PAID_1000), (2, earlier), (3, later)])
    assert in_order.refunded_amount == 700
    assert in_order.facts == payment.facts


def test_incremental_and_cumulative_reports_do_not_double_count() -> None:
    payment, _ = fold(
        [
            (1, PAID_1000),
            (3, ev(Kind.PAYMENT_PARTIALLY_REFUNDED, 4, amount=400, refunded_total=700)),
            (2, ev(Kind.PAYMENT_PARTIALLY_REFUNDED, 3, amount=300, refunded_total=300)),
        ]
    )
    assert payment.refunded_amount == 700
    assert payment.anomalies == 0


def test_dispute_opened_then_won_returns_to_paid() -> None:
    payment, history = fold(
        [(1, PAID_1000), (2, ev(Kind.DISPUTE_OPENED, 5)), (3, ev(Kind.DISPUTE_WON, 9))]
    )
    assert states(history) == [PaymentState.PAID, PaymentState.DISPUTED, PaymentState.PAID]
    assert payment.state is PaymentState.PAID


def test_dispute_opened_then_lost_is_charged_back() -> None:
    payment, _ = fold(
        [(1, PAID_1000), (2, ev(Kind.DISPUTE_OPENED, 5)), (3, ev(Kind.DISPUTE_LOST, 9))]
    )
    assert payment.state is PaymentState.CHARGED_BACK


def test_dispute_outcome_before_its_opening_still_wins() -> None:
    payment, history = fold(
        [(3, ev(Kind.DISPUTE_LOST, 9)), (2, ev(Kind.DISPUTE_OPENED, 5)), (1, PAID_1000)]
    )
    assert payment.state is PaymentState.CHARGED_BACK
    assert verdicts(history)[1:] == [Verdict.STALE, Verdict.APPLIED]  # paid brings the amount


def test_dispute_without_payment_is_disputed() -> None:
    payment, _ = fold([(1, ev(Kind.DISPUTE_OPENED, 5))])
    assert payment.state is PaymentState.DISPUTED


@pytest.mark.parametrize(
    ("won_at", "lost_at", "expected"),
    [
        (9, 8, PaymentState.PAID),
        (8, 9, PaymentState.CHARGED_BACK),
        (9, 9, PaymentState.CHARGED_BACK),
    ],
)
def test_won_and_lost_latest_wins_ties_go_to_lost(
    won_at: int, lost_at: int, expected: PaymentState
) -> None:
    won, lost = ev(Kind.DISPUTE_WON, won_at), ev(Kind.DISPUTE_LOST, lost_at)
    one, _ = fold([(1, PAID_1000), (2, won), (3, lost)])
    other, _ = fold([(3, lost), (2, won), (1, PAID_1000)])
    assert one.state is other.state is expected


def test_paid_after_expired_is_anomalous_but_money_wins() -> None:
    payment, history = fold(
        [
            (1, ev(Kind.PAYMENT_CREATED, 0, amount=1000)),
            (2, ev(Kind.PAYMENT_EXPIRED, 1)),
            (3, PAID_1000),
        ]
    )
    assert history[1].to_state is PaymentState.EXPIRED
    assert history[2].verdict is Verdict.ANOMALOUS
    assert history[2].note == "payment.expired but paid"
    assert payment.state is PaymentState.PAID
    assert payment.anomalies == 1


def test_failed_after_paid_is_anomalous_and_never_moves_it_back() -> None:
    payment, history = fold([(1, PAID_1000), (2, ev(Kind.PAYMENT_FAILED, 7))])
    assert history[1].verdict is Verdict.ANOMALOUS
    assert history[1].to_state is PaymentState.PAID
    assert payment.anomalies == 1


def test_pix_cob_paid_twice_is_flagged() -> None:
    first = ev(Kind.PAYMENT_PAID, 5, amount=1000, settlement="E1")
    second = ev(Kind.PAYMENT_PAID, 6, amount=1000, settlement="E2")
    payment, history = fold([(1, first), (2, second)])
    assert history[1].verdict is Verdict.ANOMALOUS
    assert history[1].note == "paid twice"
    assert payment.state is PaymentState.PAID
    assert payment.anomalies == 1
    swapped, _ = fold([(2, second), (1, first)])
    assert swapped.anomalies == 1
    assert swapped.amount == payment.amount == 1000


def test_same_payment_reported_by_two_events_is_no_effect() -> None:
    # e.g. two event types of one gateway announcing the same payment
    payment, history = fold([(1, PAID_1000), (2, PAID_1000)])
    assert history[1].verdict is Verdict.NO_EFFECT
    assert payment.anomalies == 0
    assert payment.version == 2


def test_two_paid_events_of_one_settlement_are_not_an_anomaly() -> None:
    # charge.paid then order.paid: two event types, one money movement, different times
    charge_paid = ev(Kind.PAYMENT_PAID, 5, amount=1000, settlement="ch_1")
    order_paid = ev(Kind.PAYMENT_PAID, 6, amount=1000)
    payment, history = fold([(1, charge_paid), (2, order_paid)])
    assert payment.anomalies == 0
    assert history[1].verdict is Verdict.NO_EFFECT


def test_an_anomaly_reported_by_the_gateway_is_recorded_without_moving_state() -> None:
    underpaid = ParsedEvent(
        dedup_key="hook_under",
        kind=Kind.OTHER,
        type="charge.underpaid",
        object_id="pay_1",
        occurred_at=at(3),
        data={"anomaly": "underpaid: 900 of 1000"},
    )
    payment, history = fold([(1, ev(Kind.PAYMENT_CREATED, 1, amount=1000)), (2, underpaid)])
    assert payment.state is PaymentState.PENDING
    assert payment.anomalies == 1
    assert history[1].verdict is Verdict.ANOMALOUS
    assert history[1].note == "underpaid: 900 of 1000"
    swapped, _ = fold([(2, underpaid), (1, ev(Kind.PAYMENT_CREATED, 1, amount=1000))])
    assert swapped.anomalies == 1 and swapped.state is PaymentState.PENDING


def test_a_refund_that_knows_the_payment_amount_supplies_it() -> None:
    refund = ParsedEvent(
        dedup_key="mp-1",
        kind=Kind.PAYMENT_REFUNDED,
        type="payment.refunded",
        object_id="pay_1",
        occurred_at=at(4),
        refunded_total=1000,
        data={"payment_amount": 1000},
    )
    payment, _ = fold([(1, refund)])
    assert (payment.state, payment.amount, payment.refunded_amount) == (
        PaymentState.REFUNDED,
        1000,
        1000,
    )
    later, _ = fold([(1, refund), (2, PAID_1000)])
    assert later.amount == 1000 and later.anomalies == 0


def test_refund_beyond_the_amount_is_flagged() -> None:
    payment, _ = fold([(1, PAID_1000), (2, ev(Kind.PAYMENT_REFUNDED, 3, amount=1500))])
    assert payment.state is PaymentState.REFUNDED
    assert payment.anomalies == 1


def test_duplicate_changes_nothing() -> None:
    first, _ = fold([(1, ev(Kind.PAYMENT_CREATED, 0, amount=1000)), (2, PAID_1000)])
    outcome = apply(first, source="shop", event_id=2, event=PAID_1000, at=NOW)
    assert outcome.transition.verdict is Verdict.DUPLICATE
    assert outcome.payment == first
    assert outcome.payment.version == 2
    assert outcome.transition.from_state is outcome.transition.to_state is PaymentState.PAID


def test_revised_fact_replaces_the_old_one() -> None:
    first, _ = fold([(1, ev(Kind.PAYMENT_PAID, 2, amount=990))])
    fixed = ev(Kind.PAYMENT_PAID, 2, amount=1000)
    outcome = apply(first, source="shop", event_id=1, event=fixed, at=NOW)
    assert outcome.transition.verdict is Verdict.APPLIED
    assert outcome.transition.note == "revised"
    assert outcome.payment.amount == 1000
    assert outcome.payment.version == first.version + 1
    assert list(outcome.payment.facts) == ["1"]


def test_revised_fact_that_changes_nothing_visible_is_no_effect() -> None:
    first, _ = fold([(1, PAID_1000)])
    fixed = replace(PAID_1000, refunded_total=0)
    outcome = apply(first, source="shop", event_id=1, event=fixed, at=NOW)
    assert outcome.transition.verdict is Verdict.NO_EFFECT
    assert outcome.transition.note == "revised"
    assert outcome.payment.version == 2


def test_revision_into_a_different_kind_recomputes_the_state() -> None:
    first, _ = fold([(1, PAID_1000), (2, ev(Kind.PAYMENT_REFUNDED, 3))])
    fixed = ev(Kind.PAYMENT_PARTIALLY_REFUNDED, 3, amount=100)
    outcome = apply(first, source="shop", event_id=2, event=fixed, at=NOW)
    assert outcome.payment.state is PaymentState.PARTIALLY_REFUNDED
    assert outcome.payment.refunded_amount == 100


def test_unhappy_paths_end_in_the_latest_progress_state() -> None:
    for kind, state in [
        (Kind.PAYMENT_FAILED, PaymentState.FAILED),
        (Kind.PAYMENT_CANCELED, PaymentState.CANCELED),
        (Kind.PAYMENT_EXPIRED, PaymentState.EXPIRED),
    ]:
        forward, _ = fold([(1, ev(Kind.PAYMENT_CREATED, 0)), (2, ev(kind, 1))])
        backward, history = fold([(2, ev(kind, 1)), (1, ev(Kind.PAYMENT_CREATED, 0))])
        assert forward.state is backward.state is state
        assert history[1].verdict is Verdict.STALE


def test_retry_after_failure_authorizes() -> None:
    payment, _ = fold([(1, ev(Kind.PAYMENT_FAILED, 1)), (2, ev(Kind.PAYMENT_AUTHORIZED, 2))])
    assert payment.state is PaymentState.AUTHORIZED


def test_equal_times_break_ties_on_kind_not_arrival() -> None:
    created, canceled = ev(Kind.PAYMENT_CREATED, 1), ev(Kind.PAYMENT_CANCELED, 1)
    one, _ = fold([(1, created), (2, canceled)])
    other, _ = fold([(2, canceled), (1, created)])
    assert one.state is other.state is PaymentState.CANCELED


def test_amount_prefers_paid_then_authorized_then_created() -> None:
    payment, _ = fold(
        [
            (1, ev(Kind.PAYMENT_CREATED, 0, amount=1200, reference="order-9", currency=None)),
            (2, ev(Kind.PAYMENT_AUTHORIZED, 1, amount=1100, currency="USD")),
        ]
    )
    assert (payment.amount, payment.currency, payment.reference) == (1100, "USD", "order-9")
    paid, _ = fold([(3, ev(Kind.PAYMENT_PAID, 2, amount=1000))], current=payment)
    assert paid.amount == 1000


def test_kind_other_is_not_recorded() -> None:
    first, _ = fold([(1, PAID_1000)])
    outcome = apply(first, source="shop", event_id=2, event=ev(Kind.OTHER, 5), at=NOW)
    assert outcome.transition.verdict is Verdict.NO_EFFECT
    assert outcome.payment == first
    fresh = apply(None, source="shop", event_id=3, event=ev(Kind.OTHER, 5), at=NOW)
    assert fresh.payment.facts == {}
    assert fresh.payment.version == 0
    assert fresh.transition.from_state is None


def test_an_event_without_object_id_is_refused() -> None:
    event = replace(PAID_1000, object_id=None)
    with pytest.raises(ValueError, match="object_id"):
        apply(None, source="shop", event_id=1, event=event, at=NOW)


def test_times_are_normalised_to_utc() -> None:
    brt = timezone(timedelta(hours=-3))
    local = replace(PAID_1000, occurred_at=at(2).astimezone(brt))
    naive = replace(PAID_1000, occurred_at=at(2).replace(tzinfo=None))
    first, _ = fold([(1, PAID_1000)])
    for same_instant in (local, naive):
        outcome = apply(first, source="shop", event_id=1, event=same_instant, at=NOW)
        assert outcome.transition.verdict is Verdict.DUPLICATE
    assert first.last_event_at == at(2)


def test_facts_survive_a_json_round_trip() -> None:
    payment, _ = fold(
        [
            (1, ev(Kind.PAYMENT_CREATED, 0, amount=1000, reference="order-1")),
            (2, PAID_1000),
            (3, ev(Kind.PAYMENT_PARTIALLY_REFUNDED, None, amount=100, refunded_total=100)),
            (4, ev(Kind.DISPUTE_OPENED, 7, currency=None)),
        ]
    )
    stored = json.loads(json.dumps(payment.facts))
    assert stored == payment.facts
    # Fields without a value are left out: facts are rewritten at every event applied.
    assert stored["2"] == {
        "kind": "payment.paid",
        "occurred_at": "2024-05-01T12:02:00+00:00",
        "amount": 1000,
        "currency": "BRL",
        "reference": "order-1",
    }
    reloaded = replace(payment, facts=stored)
    again = apply(reloaded, source="shop", event_id=2, event=PAID_1000, at=NOW)
    assert again.transition.verdict is Verdict.DUPLICATE
    assert again.payment == reloaded


def test_facts_stored_with_nulls_read_the_same() -> None:
    """Facts written by earlier versions keep their empty fields as null: they derive the
    same payment, and the same event again is still a duplicate, not a revision."""
    steps = [
        (1, ev(Kind.PAYMENT_CREATED, 0, amount=1000, reference="order-1")),
        (2, PAID_1000),
        (3, ev(Kind.PAYMENT_PARTIALLY_REFUNDED, None, amount=100, refunded_total=100)),
    ]
    payment, _ = fold(steps)
    nulls = dict.fromkeys(
        (
            "occurred_at",
            "amount",
            "refunded_total",
            "currency",
            "reference",
            "settlement",
            "anomaly",
            "payment_amount",
        )
    )
    old = replace(payment, facts={key: {**nulls, **raw} for key, raw in payment.facts.items()})
    assert old.facts["3"]["occurred_at"] is None and old.facts != payment.facts
    for event_id, event in steps:
        again = apply(old, source="shop", event_id=event_id, event=event, at=NOW)
        assert again.transition.verdict is Verdict.DUPLICATE
        assert again.payment == old
    later = ev(Kind.PAYMENT_REFUNDED, 9, amount=1000, refunded_total=1000)
    assert (
        apply(old, source="shop", event_id=4, event=later, at=NOW).payment.state
        == apply(payment, source="shop", event_id=4, event=later, at=NOW).payment.state
        == PaymentState.REFUNDED
    )


def test_replay_history_folds_from_nothing() -> None:
    events = [(2, PAID_1000), (1, ev(Kind.PAYMENT_CREATED, 0, amount=1000)), (2, PAID_1000)]
    payment = replay_history("shop", "pay_1", events, NOW)
    assert payment.state is PaymentState.PAID
    assert payment.version == 2
    empty = replay_history("shop", "pay_9", [], NOW)
    assert (empty.state, empty.version, empty.facts, empty.object_id) == (
        PaymentState.PENDING,
        0,
        {},
        "pay_9",
    )


# -- facts that undo others (Adyen CAPTURE_FAILED, REFUND_FAILED, REFUNDED_REVERSED, EXPIRE)


def final_of(events: Sequence[ParsedEvent]) -> tuple[PaymentState, int | None, int, int]:
    payment, _ = fold(list(enumerate(events, 1)))
    return payment.state, payment.amount, payment.refunded_amount, payment.anomalies


def every_order(events: Sequence[ParsedEvent]) -> set[tuple[PaymentState, int | None, int, int]]:
    return {final_of(order) for order in permutations(events)}


REFUND_300 = ev(Kind.PAYMENT_PARTIALLY_REFUNDED, 3, amount=300, settlement="refund-1")


@pytest.mark.parametrize("undo", [None, 1000, 300])
def test_a_reversed_refund_goes_back_to_paid_in_any_order(undo: int | None) -> None:
    reversal = ev(Kind.PAYMENT_REFUND_REVERSED, 4, amount=undo, settlement="refund-1")
    assert every_order([PAID_1000, REFUND_300, reversal]) == {(PaymentState.PAID, 1000, 0, 0)}


def test_a_partial_reversal_of_a_refund_leaves_the_rest() -> None:
    reversal = ev(Kind.PAYMENT_REFUND_REVERSED, 4, amount=100, settlement="refund-1")
    assert every_order([PAID_1000, REFUND_300, reversal]) == {
        (PaymentState.PARTIALLY_REFUNDED, 1000, 200, 0)
    }


def test_a_reversal_takes_back_only_its_own_refund() -> None:
    other = ev(Kind.PAYMENT_PARTIALLY_REFUNDED, 5, amount=700, settlement="refund-2")
    reversal = ev(Kind.PAYMENT_REFUND_REVERSED, 6, amount=700, settlement="refund-2")
    assert every_order([PAID_1000, REFUND_300, other, reversal]) == {
        (PaymentState.PARTIALLY_REFUNDED, 1000, 300, 0)
    }
    # Without the reversal, the two refunds are the whole payment.
    assert final_of([PAID_1000, REFUND_300, other]) == (PaymentState.REFUNDED, 1000, 1000, 0)


def test_a_reversed_full_refund_is_paid_again() -> None:
    full = ev(Kind.PAYMENT_REFUNDED, 3, amount=1000, settlement="refund-1")
    reversal = ev(Kind.PAYMENT_REFUND_REVERSED, 4, amount=1000, settlement="refund-1")
    assert every_order([PAID_1000, full, reversal]) == {(PaymentState.PAID, 1000, 0, 0)}


def test_a_reversal_before_its_refund_waits_for_it() -> None:
    reversal = ev(Kind.PAYMENT_REFUND_REVERSED, 4, amount=300, settlement="refund-1")
    payment, transitions = fold([(1, PAID_1000), (2, reversal), (3, REFUND_300)])
    assert (payment.state, payment.refunded_amount) == (PaymentState.PAID, 0)
    # The refund, older than the reversal already applied, changes nothing: stale.
    assert verdicts(transitions) == [Verdict.APPLIED, Verdict.NO_EFFECT, Verdict.STALE]


def test_a_reversal_without_a_settlement_reverses_nothing() -> None:
    reversal = ev(Kind.PAYMENT_REFUND_REVERSED, 4, amount=300)
    assert final_of([PAID_1000, REFUND_300, reversal]) == (
        PaymentState.PARTIALLY_REFUNDED,
        1000,
        300,
        0,
    )


def test_a_failed_capture_undoes_the_payment_before_it() -> None:
    failed = ev(Kind.PAYMENT_CAPTURE_FAILED, 5, amount=1000)
    assert every_order([PAID_1000, failed]) == {(PaymentState.FAILED, 1000, 0, 0)}
    authorized = ev(Kind.PAYMENT_AUTHORIZED, 1, amount=1000)
    assert every_order([authorized, PAID_1000, failed]) == {(PaymentState.FAILED, 1000, 0, 0)}


def test_a_recapture_after_a_failed_capture_is_paid() -> None:
    failed = ev(Kind.PAYMENT_CAPTURE_FAILED, 5, amount=1000)
    recaptured = ev(Kind.PAYMENT_PAID, 9, amount=1000)
    assert every_order([PAID_1000, failed, recaptured]) == {(PaymentState.PAID, 1000, 0, 0)}


def test_a_failed_capture_at_the_same_time_as_the_payment_wins_the_tie() -> None:
    failed = ev(Kind.PAYMENT_CAPTURE_FAILED, 2, amount=1000)
    assert every_order([PAID_1000, failed]) == {(PaymentState.FAILED, 1000, 0, 0)}


def test_an_expired_authorization_expires_only_what_was_not_captured() -> None:
    authorized = ev(Kind.PAYMENT_AUTHORIZED, 1, amount=1000)
    expired = ev(Kind.PAYMENT_AUTHORIZATION_EXPIRED, 8, amount=1000)
    assert every_order([authorized, expired]) == {(PaymentState.EXPIRED, 1000, 0, 0)}
    # Captured first: the payment stays paid, and that is no contradiction.
    assert every_order([authorized, PAID_1000, expired]) == {(PaymentState.PAID, 1000, 0, 0)}
    # Unlike an expired payment (an offer that closed) that was paid after all.
    offer_closed = ev(Kind.PAYMENT_EXPIRED, 8)
    assert final_of([PAID_1000, offer_closed]) == (PaymentState.PAID, 1000, 0, 1)
