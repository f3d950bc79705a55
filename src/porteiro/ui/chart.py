"""The overview's deliveries-per-minute chart as SVG geometry (pure): stacked bars, one
column per minute of the window, one colour per source. Drawn by the server, so the page
needs no chart library and no script, and works under a strict CSP."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo

from porteiro.store.console_verbs import MinuteCount

WIDTH, HEIGHT = 600, 160
# Colour classes in porteiro.css (.s0 ... .s5); more sources reuse them in turn.
PALETTE = 6


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    shade: int  # the source's colour class
    title: str  # "source hh:mm: n"


@dataclass(frozen=True, slots=True)
class Chart:
    bars: Sequence[Bar]
    sources: Sequence[tuple[str, int, int]]  # (source, shade, total in the window)
    peak: int  # the tallest minute: the scale's top
    minutes: int


def minute_chart(counts: Sequence[MinuteCount], now: datetime, minutes: int, zone: tzinfo) -> Chart:
    """`counts` of the last `minutes` minutes up to `now`; bar titles in `zone`."""
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
    names = sorted({count.source for count in counts})
    shade = {name: index % PALETTE for index, name in enumerate(names)}
    per_minute: dict[int, list[MinuteCount]] = {}
    totals = dict.fromkeys(names, 0)
    for count in counts:
        slot = int((count.minute - start) / timedelta(minutes=1))
        if 0 <= slot < minutes:
            per_minute.setdefault(slot, []).append(count)
            totals[count.source] += count.count
    peak = max((sum(c.count for c in column) for column in per_minute.values()), default=0)
    column_width = WIDTH / minutes
    bars: list[Bar] = []
    for slot, column in sorted(per_minute.items()):
        bottom = float(HEIGHT)
        for count in sorted(column, key=lambda c: c.source):
            height = HEIGHT * count.count / peak if peak else 0.0
            bottom -= height
            bars.append(
                Bar(
                    x=round(slot * column_width + 0.5, 2),
                    y=round(bottom, 2),
                    width=round(max(column_width - 1, 1), 2),
                    height=round(height, 2),
                    shade=shade[count.source],
                    title=f"{count.source} {count.minute.astimezone(zone):%H:%M}: {count.count}",
                )
            )
    sources = [(name, shade[name], totals[name]) for name in names]
    return Chart(bars, sources, peak, minutes)
