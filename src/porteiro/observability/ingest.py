"""The receiver's per-ack metrics as plain numbers, exposed in prometheus_client's format.

`porteiro_deliveries`, `porteiro_events_recorded` and `porteiro_ack_seconds` change on
every acknowledgement. A prometheus_client child takes a lock and four Python calls per
update (~0.6 us a counter increment, ~1.7 us a histogram observation on a 2-core VM),
three updates per ack; here they are an attribute update each. Only the event loop's
thread writes them (the receiver); a scrape reads them through `collect`, which writes
the same families, samples and labels as prometheus_client's Counter and Histogram would
(`_total`, `_bucket` with `le`, `_count`, `_sum`; no `_created`, see observability).

With several receiver processes (observability.multiprocess) each value is also written
through to this process's file in the multiprocess directory, in the layout
prometheus_client's MultiProcessCollector reads: one store of two doubles into a shared
memory map per update, still no lock and no system call.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol, TypeVar

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

INF = float("inf")
K = TypeVar("K")
V = TypeVar("V")

_DELIVERIES = ("porteiro_deliveries", "Webhook deliveries received", ("source", "outcome"))
_EVENTS = ("porteiro_events_recorded", "Events stored from deliveries", ("source", "result"))
_ACKS = ("porteiro_ack_seconds", "Time from request start to acknowledgement", ("source",))


class _Cell:
    """One number of one series (a counter, a histogram's bucket or sum)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def add(self, amount: float) -> None:
        self.value += amount


class _SharedCell(_Cell):
    """A cell also written through to a multiprocess file, for the scraping process."""

    __slots__ = ("_file", "_key")

    def __init__(self, file: MmapedDict, key: str) -> None:
        super().__init__()
        self._file, self._key = file, key
        file.write_value(key, 0.0, 0.0)  # type: ignore[no-untyped-call]  # at 0 up front

    def add(self, amount: float) -> None:
        self.value += amount
        self._file.write_value(self._key, self.value, 0.0)  # type: ignore[no-untyped-call]


class _Cells(Protocol):
    def __call__(
        self, family: str, sample: str, labels: Sequence[str], values: Sequence[str], help: str
    ) -> _Cell: ...


def _local_cell(
    family: str, sample: str, labels: Sequence[str], values: Sequence[str], help: str
) -> _Cell:
    return _Cell()


class SharedCells:
    """Cells written through to `{counter,histogram}_{pid}-ingest.db` in `directory`: a
    file of their own, since prometheus_client's metric objects of this process (the
    worker's) hold `counter_{pid}.db` and two writers of one map would overwrite each
    other's entries."""

    def __init__(self, directory: str) -> None:
        pid = os.getpid()
        self._files = {
            kind: MmapedDict(os.path.join(directory, f"{kind}_{pid}-ingest.db"))  # type: ignore[no-untyped-call]
            for kind in ("counter", "histogram")
        }

    def __call__(
        self, family: str, sample: str, labels: Sequence[str], values: Sequence[str], help: str
    ) -> _Cell:
        kind = "histogram" if family == _ACKS[0] else "counter"
        key = mmap_key(family, sample, list(labels), list(values), help)
        return _SharedCell(self._files[kind], key)


class _Histogram:
    """One labelled histogram: per-bucket (not cumulative) counts and the sum."""

    __slots__ = ("_bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...], source: str, cells: _Cells) -> None:
        self._bounds = bounds
        family, help, labels = _ACKS[0], _ACKS[1], ("source", "le")
        les = [_go_float(bound) for bound in bounds] + ["+Inf"]  # the last one is +Inf
        self.counts = [cells(family, f"{family}_bucket", labels, (source, le), help) for le in les]
        self.total = cells(family, f"{family}_sum", ("source",), (source,), help)

    def observe(self, value: float) -> None:
        # A bucket counts the values <= its bound: the first bound >= value.
        self.counts[bisect.bisect_left(self._bounds, value)].add(1)
        self.total.add(value)


class IngestMetrics(Collector):
    """Counts of deliveries per (source, outcome) and of events per (source, result), and
    the ack-time histogram per source. `declare` creates series at 0 up front, as a
    prometheus_client child made with `.labels()` would. `cells` makes each number
    (SharedCells with several processes)."""

    def __init__(self, ack_buckets: Sequence[float], cells: _Cells = _local_cell) -> None:
        self._bounds = tuple(sorted(float(bound) for bound in ack_buckets if bound != INF))
        self._cells = cells
        self._deliveries: dict[tuple[str, str], _Cell] = {}
        self._events: dict[tuple[str, str], _Cell] = {}
        self._acks: dict[str, _Histogram] = {}

    def declare(self, sources: Iterable[str], outcomes: Iterable[str]) -> None:
        for source in sources:
            for outcome in outcomes:
                self._delivery_cell((source, outcome))
            for result in ("new", "duplicate"):
                self._event_cell((source, result))
            self._histogram(source)

    def delivery(self, source: str, outcome: str) -> None:
        key = (source, outcome)
        (self._deliveries.get(key) or self._delivery_cell(key)).add(1)

    def events(self, source: str, new: int, duplicates: int) -> None:
        if new:
            key = (source, "new")
            (self._events.get(key) or self._event_cell(key)).add(new)
        if duplicates:
            key = (source, "duplicate")
            (self._events.get(key) or self._event_cell(key)).add(duplicates)

    def ack(self, source: str, seconds: float) -> None:
        (self._acks.get(source) or self._histogram(source)).observe(seconds)

    def _delivery_cell(self, key: tuple[str, str]) -> _Cell:
        return _entry(self._deliveries, key, lambda: self._counter_cell(_DELIVERIES, key))

    def _event_cell(self, key: tuple[str, str]) -> _Cell:
        return _entry(self._events, key, lambda: self._counter_cell(_EVENTS, key))

    def _counter_cell(
        self, family: tuple[str, str, tuple[str, str]], key: tuple[str, str]
    ) -> _Cell:
        name, help, labels = family
        return self._cells(name, f"{name}_total", labels, key, help)

    def _histogram(self, source: str) -> _Histogram:
        return _entry(self._acks, source, lambda: _Histogram(self._bounds, source, self._cells))

    def collect(self) -> Iterator[Metric]:
        yield _counters(_DELIVERIES, list(self._deliveries.items()))
        yield _counters(_EVENTS, list(self._events.items()))
        name, help, labels = _ACKS
        family = HistogramMetricFamily(name, help, labels=list(labels))
        les = [_go_float(bound) for bound in self._bounds] + ["+Inf"]
        for source, histogram in list(self._acks.items()):
            cumulative, buckets = 0.0, []
            for le, count in zip(les, list(histogram.counts), strict=True):
                cumulative += count.value
                buckets.append((le, cumulative))
            family.add_metric([source], buckets, histogram.total.value)
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
    family: tuple[str, str, tuple[str, str]], series: list[tuple[tuple[str, str], _Cell]]
) -> CounterMetricFamily:
    name, help, labels = family
    metrics = CounterMetricFamily(name, help, labels=list(labels))
    for values, cell in series:
        metrics.add_metric(list(values), cell.value)
    return metrics
