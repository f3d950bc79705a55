"""What an operator types into the console's search forms, read as the store's filters:
amounts as people write them, days in the operator's zone, and a 400 for the rest."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from porteiro.http.params import BadRequest
from porteiro.model import EventStatus, Kind, PaymentState
from porteiro.store.base import EventFilter
from porteiro.store.console_verbs import PaymentFilter
from porteiro.ui.params import events_filter, parse_amount, parse_day, payment_filter

SAO_PAULO = ZoneInfo("America/Sao_Paulo")  # UTC-3, no daylight saving in 2026


@pytest.mark.parametrize(
    ("written", "minor"),
    [
        ("150", 15000),
        ("150,5", 15050),
        ("150.5", 15050),
        ("150,50", 15050),
        ("150.50", 15050),
        ("0,05", 5),
        ("0", 0),
        ("1.234,56", 123456),
        ("1,234.56", 123456),
        ("150,505", 15050500),  # a group of three: thousands, not decimals
        ("1.234", 123400),  # three digits after the only separator: thousands
        ("1,234", 123400),
        ("1.234.567", 123456700),
        ("1.234.567,89", 123456789),
        ("1,234,567.89", 123456789),
        ("1234,56", 123456),
        ("R$ 10,00", 1000),
        ("R$10", 1000),
        ("  150,00  ", 15000),
        ("1 234,56", 123456),  # spaces between groups are read past
    ],
)
def test_parse_amount(written: str, minor: int) -> None:
    assert parse_amount(written) == minor


@pytest.mark.parametrize(
    "written",
    [
        "",
        "   ",
        "R$",
        "abc",
        "10 reais",
        "-10",
        "+10",
        "1e3",
        "150,",
        ",50",
        "1.2345",
        "1.23.456",
        "1,,0",
        "12.34.56",
        "1" * 21,  # too long to be an amount
        "US$ 10",
    ],
)
def test_a_bad_amount_is_a_bad_request(written: str) -> None:
    with pytest.raises(BadRequest, match="invalid amount"):
        parse_amount(written)


def test_a_bad_amounts_message_quotes_it_cut_short() -> None:
    with pytest.raises(BadRequest) as raised:
        parse_amount("x" * 100)
    assert repr("x" * 30) in str(raised.value)
    assert "x" * 31 not in str(raised.value)


def test_since_is_the_days_local_midnight() -> None:
    since = parse_day("2026-12-03", "since", SAO_PAULO)
    assert since == datetime(2026, 12, 3, 3, 0, tzinfo=UTC)
    assert since.tzinfo is SAO_PAULO


def test_until_is_the_next_local_midnight() -> None:
    until = parse_day("2026-12-03", "until", SAO_PAULO, end=True)
    assert until == datetime(2026, 12, 4, 3, 0, tzinfo=UTC)
    # The year's last day ends at the next year's first local midnight.
    last = parse_day("2026-12-31", "until", SAO_PAULO, end=True)
    assert last == datetime(2027, 1, 1, 3, 0, tzinfo=UTC)


def test_a_day_in_utc() -> None:
    assert parse_day("2026-02-28", "since", UTC) == datetime(2026, 2, 28, tzinfo=UTC)
    assert parse_day("2026-02-28", "until", UTC, end=True) == datetime(2026, 3, 1, tzinfo=UTC)


@pytest.mark.parametrize("written", ["", "2026-13-01", "2026-02-30", "03/12/2026", "yesterday"])
def test_a_bad_day_is_a_bad_request_naming_the_field(written: str) -> None:
    with pytest.raises(BadRequest, match="invalid until"):
        parse_day(written, "until", SAO_PAULO)


def test_payment_filter_reads_every_field() -> None:
    params = {
        "source": "stripe",
        "state": "paid",
        "reference": "  order-1 ",
        "object_id": " pi_123\t",
        "amount": "1.234,56",
        "since": "2026-12-03",
        "until": "2026-12-03",
        "anomalous": "1",
    }
    assert payment_filter(params, SAO_PAULO) == PaymentFilter(
        source="stripe",
        state=PaymentState.PAID,
        reference="order-1",
        object_id="pi_123",
        amount=123456,
        since=datetime(2026, 12, 3, 3, 0, tzinfo=UTC),
        until=datetime(2026, 12, 4, 3, 0, tzinfo=UTC),
        anomalous=True,
    )


def test_an_empty_form_is_no_filter() -> None:
    assert payment_filter({}, SAO_PAULO) == PaymentFilter()
    blank = dict.fromkeys(
        ("source", "state", "reference", "object_id", "amount", "since", "until", "anomalous"),
        "",
    )
    assert payment_filter(blank, SAO_PAULO) == PaymentFilter()


def test_an_id_of_only_spaces_is_no_id() -> None:
    found = payment_filter({"reference": "   ", "object_id": " "}, SAO_PAULO)
    assert found.reference is None
    assert found.object_id is None


@pytest.mark.parametrize("value", ["0", "on", "true", "yes"])
def test_anomalous_is_only_the_forms_own_value(value: str) -> None:
    assert payment_filter({"anomalous": value}, SAO_PAULO).anomalous is False


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"state": "settled"}, "invalid state"),
        ({"amount": "lots"}, "invalid amount"),
        ({"since": "2026-12-32"}, "invalid since"),
        ({"until": "tomorrow"}, "invalid until"),
        ({"source": ["stripe", "adyen"]}, "source must be a string"),
        ({"reference": "a\x00b"}, "NUL"),
    ],
)
def test_a_bad_payment_search_is_a_bad_request(params: dict[str, Any], match: str) -> None:
    with pytest.raises(BadRequest, match=match):
        payment_filter(params, SAO_PAULO)


def test_events_filter_reads_its_dates_as_local_days() -> None:
    params = {
        "source": "adyen",
        "status": "dead",
        "kind": "payment.paid",
        "since": "2026-12-03",
        "until": "2026-12-04",
    }
    assert events_filter(params, SAO_PAULO) == EventFilter(
        source="adyen",
        status=EventStatus.DEAD,
        kind=Kind.PAYMENT_PAID,
        since=datetime(2026, 12, 3, 3, 0, tzinfo=UTC),
        until=datetime(2026, 12, 5, 3, 0, tzinfo=UTC),
    )


def test_events_filter_refuses_an_instant_where_a_day_is_expected() -> None:
    with pytest.raises(BadRequest, match="invalid since"):
        events_filter({"since": "2026-12-03T10:00:00Z"}, SAO_PAULO)
    with pytest.raises(BadRequest, match="invalid status"):
        events_filter({"status": "finished"}, SAO_PAULO)
