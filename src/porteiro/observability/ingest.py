"""The receiver's per-ack metrics as plain numbers, exposed in prometheus_client's format.

`porteiro_deliveries`, `porteiro_events_recorded` and `porteiro_ack_seconds` change on
every acknowledgement. A prometheus_client child takes a lock and four Python calls per
update (~0.6 us a counter increment, ~1.7 us a histogram observation on a 2-core VM),
three updates per ack; here they are a dict or list update each. Only the event loop's
thread writes them (the receiver); a scrape reads them through `collect`, which writes
the same families, samples and labels as prometheus_client's Counter and Histogram would
(`_total`, `_created`, `_bucket` with `le`, `_count`, `_sum`).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

INF = float("inf")
K = TypeVar("K")
V = TypeVar("V")


class _Series:
    """One labelled counter: its value and when it was created."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()


class _Histogram:
    """One labelled histogram: per-bucket (not cumulative) counts and the sum."""

    __slots__ = ("_bounds", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        # A bucket counts the values <= its bound: the first bound >= value.
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.total += value


class IngestMetrics(Collector):
    """Counts of deliveries per (source, outcome) and of events per (source, result), and
    the ack-time histogram per source. `declare` creates series at 0 up front, as a
    prometheus_client child made with `.labels()` would."""

    def __init__(self, ack_buckets: Sequence[float]) -> None:
        self._bounds = tuple(sorted(float(bound) for bound in ack_buckets if bound != INF))
        self._deliveries: dict[tuple[str, str], _Series] = {}
        self._events: dict[tuple[str, str], _Series] = {}
        self._acks: dict[str, _Histogram] = {}

    def declare(self, sources: Iterable[str], outcomes: Iterable[str]) -> None:
        for source in sources:
            for outcome in outcomes:
                _entry(self._deliveries, (source, outcome), _Series)
            for result in ("new", "duplicate"):
                _entry(self._events, (source, result), _Series)
            _entry(self._acks, source, self._new_histogram)

    def delivery(self, source: str, outcome: str) -> None:
        _entry(self._deliveries, (source, outcome), _Series).value += 1

    def events(self, source: str, new: int, duplicates: int) -> None:
        if new:
            _entry(self._events, (source, "new"), _Series).value += new
        if duplicates:
            _entry(self._events, (source, "duplicate"), _Series).value += duplicates

    def ack(self, source: str, seconds: float) -> None:
        _entry(self._acks, source, self._new_histogram).observe(seconds)

    def _new_histogram(self) -> _Histogram:
        return _Histogram(self._bounds)

    def collect(self) -> Iterator[Metric]:
        yield _counters(
            "porteiro_deliveries",
            "Webhook deliveries received",
            ["source", "outcome"],
            list(self._deliveries.items()),
        )
        yield _counters(
            "porteiro_events_recorded",
            "Events stored from deliveries",
            ["source", "result"],
            list(self._events.items()),
        )
        family = HistogramMetricFamily(
            "porteiro_ack_seconds", "Time from request start to acknowledgement", labels=["source"]
        )
        les = [_go_float(bound) for bound in self._bounds] + ["+Inf"]
        for source, histogram in list(self._acks.items()):
            cumulative, buckets = 0, []
            for le, count in zip(les, list(histogram.counts), strict=True):
                cumulative += count
                buckets.append((le, float(cumulative)))
            family.add_metric([source], buckets, histogram.total)
            family.add_sample("porteiro_ack_seconds_created", {"source": source}, histogram.created)
        yield family


def _entry(table: dict[K, V], key: K, make: Callable[[], V]) -> V:
    """`table[key]`, made first if absent (as `.labels()` makes a child)."""
    found = table.get(key)
    if found is None:
        found = table[key] = make()
    return found


def _go_float(value: float) -> str:
    """The `le` label as prometheus_client writes it (its helper is untyped)."""
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


def _counters(
    name: str, documentation: str, labels: list[str], series: list[tuple[tuple[str, str], _Series]]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=labels)
    for values, counter in series:
        family.add_metric(list(values), counter.value, created=counter.created)
    return family
