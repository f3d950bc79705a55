"""The ledger reads a payment's facts once per worker batch: the facts of a payment it
returns carry their parsed, ordered form, and the next `apply` starts from that instead of
reading every fact again. That shortcut must be invisible: applying to a payment the
ledger returned gives exactly what applying to the same payment as a store hands it back
(plain JSON, every fact read again from scratch) gives, transition by transition.
"""

from __future__ import annotations

import copy
import json
import pickle
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from porteiro.ledger import apply
from porteiro.model import Kind, ParsedEvent, Payment
from tests.unit.test_ledger_properties import event as parsed_event

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
NOW = datetime(2024, 6, 1, tzinfo=UTC)


def moment(minutes: int, micros: int, zone: timezone | None) -> datetime:
    when = T0 + timedelta(minutes=minutes, microseconds=micros)
    return when.replace(tzinfo=None) if zone is None else when.astimezone(zone)


TIMES = st.none() | st.builds(
    moment,
    st.integers(0, 4),
    st.sampled_from([0, 500_000]),
    st.sampled_from([UTC, timezone(timedelta(hours=-3)), None]),
)
AMOUNTS = st.none() | st.integers(0, 2000)
# What adapters may put in `data`: gateway-reported anomalies, settlement ids and the
# whole payment's amount, well-formed or not.
DATA = st.fixed_dictionaries(
    {},
    optional={
        "anomaly": st.sampled_from(["underpaid", ""]),
        "settlement_id": st.sampled_from(["e2e-1", "e2e-2", ""]),
        "payment_amount": st.none() | st.integers(0, 3000),
    },
)


EVENTS = st.builds(
    parsed_event,
    st.sampled_from(list(Kind)),
    AMOUNTS,
    AMOUNTS,
    occurred_at=TIMES,
    currency=st.sampled_from([None, "BRL", "USD"]),
    reference=st.sampled_from([None, "a", "b"]),
    data=DATA,
)
# Few ids: the same id comes back as a duplicate or with other content (a revision).
STEPS = st.lists(st.tuples(st.integers(1, 6), EVENTS), min_size=1, max_size=12)


def as_stored(payment: Payment) -> Payment:
    """The payment as a store hands it back: its facts plain JSON."""
    return replace(payment, facts=json.loads(json.dumps(payment.facts)))


@settings(max_examples=500, deadline=None)
@given(STEPS)
def test_a_payment_from_the_ledger_applies_like_one_from_the_store(
    steps: list[tuple[int, ParsedEvent]],
) -> None:
    current: Payment | None = None
    for event_id, event in steps:
        stored = None if current is None else as_stored(current)
        fast = apply(current, source="shop", event_id=event_id, event=event, at=NOW)
        slow = apply(stored, source="shop", event_id=event_id, event=event, at=NOW)
        assert fast.transition == slow.transition
        assert fast.payment == slow.payment
        current = fast.payment


def test_facts_are_read_only_and_copy_as_plain_dicts() -> None:
    event = parsed_event(Kind.PAYMENT_PAID, 1000, occurred_at=T0, currency="BRL", reference="o1")
    facts: Any = apply(None, source="shop", event_id=1, event=event, at=NOW).payment.facts
    with pytest.raises(TypeError):
        facts["2"] = {}
    with pytest.raises(TypeError):
        facts.update({"2": {}})
    for copied in (copy.copy(facts), copy.deepcopy(facts), pickle.loads(pickle.dumps(facts))):
        assert type(copied) is dict
        assert copied == facts
