"""Gauges read from the store when /metrics is scraped, by the one process answering it.

Backlogs, oldest-pending ages, dead letters, payments past their expiry and destination
states are facts of the shared store, not of a process: each scrape reads them once (a
few grouped queries, `Store.metric_readings`), and with several receiver processes only
the scraped one reports them, so they are never summed across processes. The store
builds `Readings`; `ReadingsCollector` turns the last one into metric families (pure).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


@dataclass(frozen=True, slots=True)
class Backlog:
    """Open rows of one source (events) or destination (outbox): how many, the oldest."""

    count: int = 0
    oldest: datetime | None = None


@dataclass(frozen=True, slots=True)
class Readings:
    taken_at: datetime
    # Event status (pending, processing, retrying, dead) -> count, every source together.
    events_by_status: Mapping[str, int] = field(default_factory=dict)
    # Source -> its events waiting to be processed (pending or retrying).
    pending: Mapping[str, Backlog] = field(default_factory=dict)
    # Source -> its dead-lettered events (the DLQ).
    dead: Mapping[str, int] = field(default_factory=dict)
    # Source -> expected payments still open (or never heard of) past their expiry.
    past_expiry: Mapping[str, int] = field(default_factory=dict)
    # Destination -> outbox rows not yet delivered (pending or being delivered).
    outbox: Mapping[str, Backlog] = field(default_factory=dict)
    # Destination -> outbox rows dead-lettered.
    outbox_dead: Mapping[str, int] = field(default_factory=dict)
    # Destination -> its circuit breaker is open now.
    circuit_open: Mapping[str, bool] = field(default_factory=dict)


class ReadingsCollector(Collector):
    """The families of the last readings; none before the first (a store down since the
    process started exports no store gauges rather than zeros that look healthy).
    `sources` and `destinations` (the configured ones) get a series each, at 0 when
    the store has no row for them, so an alert on a series sees it go back to 0."""

    def __init__(self, sources: tuple[str, ...] = (), destinations: tuple[str, ...] = ()) -> None:
        self._sources = sources
        self._destinations = destinations
        self.last: Readings | None = None

    def collect(self) -> Iterator[Metric]:
        if self.last is not None:
            yield from families(self.last, self._sources, self._destinations)


def families(
    readings: Readings, sources: tuple[str, ...] = (), destinations: tuple[str, ...] = ()
) -> Iterator[Metric]:
    now = readings.taken_at
    by_status = GaugeMetricFamily(
        "porteiro_events_by_status",
        "Stored events per open status (pending, processing, retrying, dead)",
        labels=["status"],
    )
    for status, count in sorted(readings.events_by_status.items()):
        by_status.add_metric([status], count)
    yield by_status

    every_source = sorted({*sources, *readings.pending, *readings.dead, *readings.past_expiry})
    yield _per(
        "porteiro_events_pending",
        "Events waiting to be processed (pending or retrying)",
        "source",
        {s: readings.pending.get(s, Backlog()).count for s in every_source},
    )
    yield _per(
        "porteiro_events_oldest_pending_age_seconds",
        "Age of the oldest event waiting to be processed (0: none waiting)",
        "source",
        {s: _age(now, readings.pending.get(s, Backlog()).oldest) for s in every_source},
    )
    yield _per(
        "porteiro_dead_letters",
        "Dead-lettered events (the DLQ: `porteiro dlq list`)",
        "source",
        {s: readings.dead.get(s, 0) for s in every_source},
    )
    yield _per(
        "porteiro_payments_past_expiry",
        "Expected payments still open, or never heard of, past their expiry",
        "source",
        {s: readings.past_expiry.get(s, 0) for s in every_source},
    )

    every_destination = sorted(
        {*destinations, *readings.outbox, *readings.outbox_dead, *readings.circuit_open}
    )
    yield _per(
        "porteiro_outbox_backlog",
        "Outbox rows not yet delivered (pending or being delivered)",
        "destination",
        {d: readings.outbox.get(d, Backlog()).count for d in every_destination},
    )
    yield _per(
        "porteiro_outbox_oldest_pending_age_seconds",
        "Age of the oldest outbox row not yet delivered (0: none)",
        "destination",
        {d: _age(now, readings.outbox.get(d, Backlog()).oldest) for d in every_destination},
    )
    yield _per(
        "porteiro_outbox_dead",
        "Outbox rows dead-lettered",
        "destination",
        {d: readings.outbox_dead.get(d, 0) for d in every_destination},
    )
    yield _per(
        "porteiro_destination_circuit_open",
        "1 while the destination's circuit breaker is open",
        "destination",
        {d: float(readings.circuit_open.get(d, False)) for d in every_destination},
    )


def _per(name: str, help: str, label: str, values: Mapping[str, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help, labels=[label])
    for key, value in values.items():
        family.add_metric([key], value)
    return family


def _age(now: datetime, oldest: datetime | None) -> float:
    return 0.0 if oldest is None else max((now - oldest).total_seconds(), 0.0)
