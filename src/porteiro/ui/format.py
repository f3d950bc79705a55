"""How the console writes amounts, times and ages for people (pure).

Amounts are stored in minor units (centavos); a currency without minor units (JPY, CLP,
...) is written whole. Portuguese writes `R$ 1.234,56`, English `R$1,234.56`. Times are
stored in UTC and shown in the operator's time zone (`[ui] timezone`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

# ISO 4217 currencies with no minor unit that gateways here may report.
_ZERO_DECIMAL = frozenset({"BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG",
                           "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF"})  # fmt: skip
_SYMBOLS = {"BRL": "R$", "USD": "US$", "EUR": "€", "GBP": "£"}


def money(amount: int | None, currency: str | None, language: str) -> str:
    if amount is None:
        return "—"
    code = (currency or "BRL").upper()
    digits = 0 if code in _ZERO_DECIMAL else 2
    sign = "-" if amount < 0 else ""
    whole, cents = divmod(abs(amount), 10**digits)
    grouped = f"{whole:,}"
    if language == "pt":
        grouped = grouped.replace(",", ".")
        number = grouped if digits == 0 else f"{grouped},{cents:0{digits}d}"
    else:
        number = grouped if digits == 0 else f"{grouped}.{cents:0{digits}d}"
    symbol = _SYMBOLS.get(code)
    if symbol is None:
        return f"{sign}{code} {number}"
    return f"{sign}{symbol} {number}" if language == "pt" else f"{sign}{symbol}{number}"


def local_time(value: datetime | None, zone: ZoneInfo) -> str:
    """`2026-12-03 14:05:09` in the zone; the zone's abbreviation is in the page's footer."""
    if value is None:
        return "—"
    return value.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S")


def iso(value: datetime | None) -> str:
    """The machine-readable form for <time datetime=...>."""
    return "" if value is None else value.isoformat()


def age(seconds: float) -> str:
    """`45 s`, `12 min`, `3 h 20 min`, `2 d 4 h`: an age read at a glance."""
    if seconds < 0:
        seconds = 0
    if seconds < 90:
        return f"{int(seconds)} s"
    minutes = int(seconds // 60)
    if minutes < 90:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def age_since(then: datetime | None, now: datetime) -> str:
    return "—" if then is None else age((now - then) / timedelta(seconds=1))


def percent(ratio: float | None, language: str) -> str:
    if ratio is None:
        return "—"
    text = f"{ratio * 100:.1f} %"
    return text.replace(".", ",") if language == "pt" else text


def milliseconds(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.0f} ms"
