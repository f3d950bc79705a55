"""How the console writes amounts, times, ages and ratios for people, in Portuguese and
in English."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from porteiro.ui.format import age, age_since, iso, local_time, milliseconds, money, percent

SAO_PAULO = ZoneInfo("America/Sao_Paulo")


@pytest.mark.parametrize(
    ("amount", "currency", "pt", "en"),
    [
        (123456, "BRL", "R$ 1.234,56", "R$1,234.56"),
        (5, "BRL", "R$ 0,05", "R$0.05"),
        (0, "BRL", "R$ 0,00", "R$0.00"),
        (100, "BRL", "R$ 1,00", "R$1.00"),
        (123456789012, "BRL", "R$ 1.234.567.890,12", "R$1,234,567,890.12"),
        (-123456, "BRL", "-R$ 1.234,56", "-R$1,234.56"),
        (-5, "BRL", "-R$ 0,05", "-R$0.05"),
        (150000, "USD", "US$ 1.500,00", "US$1,500.00"),
        (999, "EUR", "€ 9,99", "€9.99"),
        (999, "GBP", "£ 9,99", "£9.99"),
        (150000, "brl", "R$ 1.500,00", "R$1,500.00"),  # a code in lower case
        (150000, None, "R$ 1.500,00", "R$1,500.00"),  # no currency: the gateways' BRL
    ],
)
def test_money_in_both_languages(amount: int, currency: str | None, pt: str, en: str) -> None:
    assert money(amount, currency, "pt") == pt
    assert money(amount, currency, "en") == en


@pytest.mark.parametrize(
    ("amount", "currency", "pt", "en"),
    [
        (1234567, "JPY", "JPY 1.234.567", "JPY 1,234,567"),  # no minor unit: written whole
        (1500, "CLP", "CLP 1.500", "CLP 1,500"),
        (-1500, "KRW", "-KRW 1.500", "-KRW 1,500"),
        (0, "JPY", "JPY 0", "JPY 0"),
    ],
)
def test_a_currency_without_minor_units_is_written_whole(
    amount: int, currency: str, pt: str, en: str
) -> None:
    assert money(amount, currency, "pt") == pt
    assert money(amount, currency, "en") == en


def test_an_unknown_currency_is_written_by_its_code() -> None:
    assert money(123456, "XYZ", "pt") == "XYZ 1.234,56"
    assert money(123456, "XYZ", "en") == "XYZ 1,234.56"
    assert money(-50, "ARS", "en") == "-ARS 0.50"


def test_no_amount_is_a_dash() -> None:
    assert money(None, "BRL", "pt") == "—"
    assert money(None, None, "en") == "—"


def test_local_time_is_written_in_the_zone() -> None:
    # America/Sao_Paulo is UTC-3 all year (no daylight saving since 2019).
    summer = datetime(2026, 1, 15, 2, 30, 5, tzinfo=UTC)
    winter = datetime(2026, 7, 15, 14, 5, 9, tzinfo=UTC)
    assert local_time(summer, SAO_PAULO) == "2026-01-14 23:30:05"
    assert local_time(winter, SAO_PAULO) == "2026-07-15 11:05:09"
    assert local_time(winter, ZoneInfo("UTC")) == "2026-07-15 14:05:09"
    # A time from another zone is the same instant.
    tokyo = datetime(2026, 7, 15, 23, 5, 9, tzinfo=ZoneInfo("Asia/Tokyo"))
    assert local_time(tokyo, SAO_PAULO) == "2026-07-15 11:05:09"


def test_local_time_drops_fractions_of_a_second() -> None:
    value = datetime(2026, 7, 15, 14, 5, 9, 999999, tzinfo=UTC)
    assert local_time(value, SAO_PAULO) == "2026-07-15 11:05:09"


def test_no_time_is_a_dash() -> None:
    assert local_time(None, SAO_PAULO) == "—"
    assert iso(None) == ""


def test_iso_is_the_machine_readable_instant() -> None:
    value = datetime(2026, 7, 15, 14, 5, 9, tzinfo=UTC)
    assert iso(value) == "2026-07-15T14:05:09+00:00"


@pytest.mark.parametrize(
    ("seconds", "written"),
    [
        (-5, "0 s"),  # a clock a little behind: not a negative age
        (0, "0 s"),
        (45.9, "45 s"),
        (89, "89 s"),
        (90, "1 min"),
        (12 * 60 + 59, "12 min"),
        (89 * 60 + 59, "89 min"),
        (90 * 60, "1 h 30 min"),
        (3 * 3600, "3 h"),
        (3 * 3600 + 20 * 60, "3 h 20 min"),
        (47 * 3600 + 59 * 60, "47 h 59 min"),
        (48 * 3600, "2 d"),
        (2 * 86400 + 4 * 3600, "2 d 4 h"),
        (2 * 86400 + 4 * 3600 + 59 * 60, "2 d 4 h"),
        (400 * 86400, "400 d"),
    ],
)
def test_age_buckets(seconds: float, written: str) -> None:
    assert age(seconds) == written


def test_age_since() -> None:
    now = datetime(2026, 7, 15, 14, 0, tzinfo=UTC)
    assert age_since(now - timedelta(minutes=12, seconds=3), now) == "12 min"
    assert age_since(now - timedelta(seconds=30), now) == "30 s"
    assert age_since(None, now) == "—"


def test_percent_uses_a_comma_in_portuguese() -> None:
    assert percent(0.1234, "pt") == "12,3 %"
    assert percent(0.1234, "en") == "12.3 %"
    assert percent(0.0, "pt") == "0,0 %"
    assert percent(1.0, "en") == "100.0 %"
    assert percent(None, "pt") == "—"


def test_milliseconds() -> None:
    assert milliseconds(0.0123) == "12 ms"
    assert milliseconds(1.5) == "1500 ms"
    assert milliseconds(None) == "—"
