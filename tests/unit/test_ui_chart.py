"""The deliveries-per-minute chart's geometry: one column per minute of the window, the
sources stacked in it, the tallest column the chart's full height, minutes outside the
window left out and bar titles in the operator's time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from porteiro.store.console_verbs import MinuteCount
from porteiro.ui.chart import HEIGHT, PALETTE, WIDTH, Bar, minute_chart

SAO_PAULO = ZoneInfo("America/Sao_Paulo")  # UTC-3
NOW = datetime(2026, 7, 15, 14, 5, 30, tzinfo=UTC)
MINUTES = 5  # 14:01 ... 14:05 UTC


def at(minute: int) -> datetime:
    return datetime(2026, 7, 15, 14, minute, tzinfo=UTC)


COUNTS = [
    MinuteCount("stripe", at(2), 4),
    MinuteCount("adyen", at(2), 4),
    MinuteCount("stripe", at(4), 2),
    MinuteCount("stripe", at(0), 100),  # a minute before the window
    MinuteCount("adyen", at(6), 50),  # a minute after now
]


def column(bars: list[Bar], x: float) -> list[Bar]:
    return [bar for bar in bars if bar.x == x]


def test_sources_stack_in_their_minutes_column() -> None:
    chart = minute_chart(COUNTS, NOW, MINUTES, SAO_PAULO)
    width = WIDTH / MINUTES
    assert list(chart.bars) == [
        # 14:02, the tallest: adyen at the bottom, stripe on top of it, sources by name.
        Bar(x=width + 0.5, y=80.0, width=width - 1, height=80.0, shade=0, title="adyen 11:02: 4"),
        Bar(x=width + 0.5, y=0.0, width=width - 1, height=80.0, shade=1, title="stripe 11:02: 4"),
        # 14:04: a quarter of the peak.
        Bar(x=3 * width + 0.5, y=120.0, width=width - 1, height=40.0, shade=1,
            title="stripe 11:04: 2"),
    ]  # fmt: skip
    assert chart.peak == 8
    assert chart.minutes == MINUTES


def test_the_tallest_column_is_the_charts_height() -> None:
    chart = minute_chart(COUNTS, NOW, MINUTES, SAO_PAULO)
    tallest = column(list(chart.bars), WIDTH / MINUTES + 0.5)
    assert sum(bar.height for bar in tallest) == HEIGHT
    assert min(bar.y for bar in tallest) == 0
    for bar in chart.bars:
        assert bar.y + bar.height <= HEIGHT
        assert 0 <= bar.x < WIDTH


def test_minutes_outside_the_window_are_dropped() -> None:
    chart = minute_chart(COUNTS, NOW, MINUTES, SAO_PAULO)
    assert all("11:00" not in bar.title and "11:06" not in bar.title for bar in chart.bars)
    # Nor do they count in the totals or the scale.
    totals = {name: total for name, _, total in chart.sources}
    assert totals == {"adyen": 4, "stripe": 6}
    assert chart.peak == 8


def test_the_windows_first_and_last_minutes_are_in_it() -> None:
    counts = [MinuteCount("stripe", at(1), 1), MinuteCount("stripe", at(5), 1)]
    chart = minute_chart(counts, NOW, MINUTES, SAO_PAULO)
    width = WIDTH / MINUTES
    assert [bar.x for bar in chart.bars] == [0.5, 4 * width + 0.5]
    assert [bar.title for bar in chart.bars] == ["stripe 11:01: 1", "stripe 11:05: 1"]


def test_titles_are_in_the_zone() -> None:
    counts = [MinuteCount("stripe", at(3), 7)]
    assert minute_chart(counts, NOW, MINUTES, UTC).bars[0].title == "stripe 14:03: 7"
    assert minute_chart(counts, NOW, MINUTES, SAO_PAULO).bars[0].title == "stripe 11:03: 7"


def test_sources_take_the_palette_in_turn() -> None:
    names = [f"source{index}" for index in range(PALETTE + 1)]
    counts = [MinuteCount(name, at(3), 1) for name in names]
    chart = minute_chart(counts, NOW, MINUTES, SAO_PAULO)
    assert [shade for _, shade, _ in chart.sources] == [*range(PALETTE), 0]
    # Seven one-delivery bars stacked to the full height (each rounded to 0.01).
    assert sum(bar.height for bar in chart.bars) == pytest.approx(HEIGHT, abs=0.05)
    assert min(bar.y for bar in chart.bars) == pytest.approx(0, abs=0.01)


def test_a_quiet_window_has_no_bars() -> None:
    chart = minute_chart([], NOW, MINUTES, SAO_PAULO)
    assert list(chart.bars) == []
    assert chart.peak == 0
    assert list(chart.sources) == []


def test_a_long_window_keeps_bars_at_least_a_pixel_wide() -> None:
    counts = [MinuteCount("stripe", NOW.replace(second=0) - timedelta(minutes=9), 3)]
    chart = minute_chart(counts, NOW, 1440, SAO_PAULO)
    (bar,) = chart.bars
    assert bar.width == 1
    assert bar.height == HEIGHT
