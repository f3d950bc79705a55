"""storable: which parsed values the stores cannot hold, and the dead event standing in."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from porteiro import jsontext
from porteiro.model import UNPARSEABLE_TYPE, Kind, ParsedEvent
from porteiro.storable import (
    INT64_MAX,
    INT64_MIN,
    data_problem,
    event_problem,
    storable_events,
    text,
    text_problem,
)


def event(**fields: object) -> ParsedEvent:
    base: dict[str, object] = {
        "dedup_key": "evt_1",
        "kind": Kind.PAYMENT_PAID,
        "type": "payment.paid",
        "object_id": "pay_1",
        "amount": 1000,
        "currency": "BRL",
        "occurred_at": datetime(2026, 12, 1, tzinfo=UTC),
        "data": {"status": "paid", "n": [1, 2.5, None, True]},
    }
    base.update(fields)
    return ParsedEvent(**base)  # type: ignore[arg-type]


def test_ordinary_events_pass_as_the_same_sequence() -> None:
    events = [event(), event(dedup_key="evt_2", object_id="pagó", reference="ação ✓")]
    assert storable_events(events) is events


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("plain", None),
        ("ação", None),
        ("\U0001f600", None),
        ("a\x00b", "holds a NUL character"),
        ("a\ud800", "holds a lone surrogate"),
        ("\udfff", "holds a lone surrogate"),
        ("", None),
    ],
)
def test_text_problem(value: str, problem: str | None) -> None:
    assert text_problem(value) == problem


@pytest.mark.parametrize("column", ["dedup_key", "type", "object_id", "reference", "currency"])
@pytest.mark.parametrize("bad", ["x\x00", "x\ud800"])
def test_every_text_column_is_checked(column: str, bad: str) -> None:
    problem = event_problem(event(**{column: bad}))
    assert problem is not None and problem.startswith(f"{column} holds")


@pytest.mark.parametrize("column", ["amount", "refunded_total"])
def test_integer_columns_hold_signed_64_bits(column: str) -> None:
    assert event_problem(event(**{column: INT64_MAX})) is None
    assert event_problem(event(**{column: INT64_MIN})) is None
    assert event_problem(event(**{column: INT64_MAX + 1})) == (
        f"{column} 9223372036854775808 is beyond what the store can hold"
    )
    assert event_problem(event(**{column: INT64_MIN - 1})) is not None
    assert event_problem(event(**{column: 10**100})) == (
        f"{column} of 101 digits is beyond what the store can hold"
    )


def test_occurred_at_must_stay_within_years_1_to_9999_in_utc() -> None:
    west, east = timezone(-timedelta(hours=5)), timezone(timedelta(hours=5))
    assert event_problem(event(occurred_at=datetime(9999, 12, 31, 18, tzinfo=west))) is None
    late = event_problem(event(occurred_at=datetime(9999, 12, 31, 23, tzinfo=west)))
    early = event_problem(event(occurred_at=datetime(1, 1, 1, 1, tzinfo=east)))
    assert late is not None and late.startswith("occurred_at is beyond the years")
    assert early is not None and early.startswith("occurred_at is beyond the years")
    assert event_problem(event(occurred_at=datetime(2026, 1, 1))) == (
        "occurred_at has no UTC offset"
    )


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"note": "a\x00"}, "data.note holds a NUL character"),
        ({"deep": {"deeper": ["\ud800"]}}, "data.deep holds a lone surrogate"),
        ({"k": {"\x00": 1}}, "data.k has a key that holds a NUL character"),
        ({"a\x00": 1}, "data has a key that holds a NUL character"),
        ({"n": 2**64}, "data.n holds the number 18446744073709551616, beyond what the store"),
        ({"n": [float("nan")]}, "data.n holds NaN or an infinity"),
        ({"n": float("-inf")}, "data.n holds NaN or an infinity"),
        # A key that does not read as a field name is not quoted: it came from the body.
        ({"ana@example.com": "\x00"}, "data holds a NUL character"),
    ],
)
def test_data_problems_name_where_not_what(data: dict[str, object], problem: str) -> None:
    found = data_problem(data)
    assert found is not None and found.startswith(problem), found


def test_data_nesting_is_bounded_without_recursing() -> None:
    deep: object = "leaf"
    for _ in range(5000):  # past Python's recursion limit: the check is iterative
        deep = [deep]
    assert data_problem({"d": deep}) == "data.d is nested deeper than 128 levels"
    shallow: object = 1
    for _ in range(100):
        shallow = {"x": shallow}
    assert data_problem({"d": shallow}) is None


def test_an_unstorable_event_becomes_a_dead_event_keeping_none_of_its_values() -> None:
    good = event(dedup_key="evt_good")
    bad = event(object_id="ana@example.com\x00", amount=2**70, data={"cpf": "123.456.789-09"})
    [kept, dead] = storable_events([good, bad])
    assert kept is good
    assert dead.type == UNPARSEABLE_TYPE
    assert dead.kind is Kind.OTHER
    assert dead.error == "payment.paid: object_id holds a NUL character"
    assert dead.object_id is None and dead.amount is None
    assert dead.dedup_key.startswith("porteiro:unparseable-item:")
    # The stand-in itself is storable and writable as JSON, and says nothing of the body.
    assert event_problem(dead) is None
    encoded = jsontext.dumps(dict(dead.data)).decode() + dead.dedup_key + (dead.error or "")
    assert "ana@example.com" not in encoded and "123.456.789-09" not in encoded
    # The same content gives the same key (a gateway's retry is a duplicate), other content
    # another key.
    assert storable_events([bad])[0].dedup_key == dead.dedup_key
    other = event(object_id="ana@example.com\x00", amount=2**71)
    assert storable_events([other])[0].dedup_key != dead.dedup_key


def test_an_odd_type_is_not_quoted_in_the_stand_in() -> None:
    [dead] = storable_events([event(type="payment.paid\x00", dedup_key="x")])
    assert dead.error == "event[0]: type holds a NUL character"
    assert dict(dead.data) == {"item": "event[0]"}


def test_a_stand_in_for_data_too_odd_to_hash_still_has_a_stable_key() -> None:
    deep: object = 1
    for _ in range(5000):
        deep = [deep]
    [dead] = storable_events([event(data={"d": deep})])
    assert dead.error == "payment.paid: data.d is nested deeper than 128 levels"
    assert storable_events([event(data={"d": deep})])[0].dedup_key == dead.dedup_key


def test_an_adapters_own_dead_event_gets_its_reason_escaped() -> None:
    own = ParsedEvent("k", Kind.OTHER, UNPARSEABLE_TYPE, None, error="pix[0]: 'a\x00\ud800'")
    [fixed] = storable_events([own])
    assert fixed.error == "pix[0]: 'a\\x00\\ud800'"
    assert fixed.dedup_key == "k"


def test_text_escapes_only_what_a_store_refuses() -> None:
    assert text("ação: ok") == "ação: ok"
    assert text("a\x00b\udc80c") == "a\\x00b\\udc80c"
    json.dumps(text("\ud800")).encode("utf-8")
