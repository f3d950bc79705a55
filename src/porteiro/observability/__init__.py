"""Structured logs and Prometheus metrics.

Metrics live in a registry owned by the runtime (no module-level singletons), so two apps
in one test process never share counters. With several processes (observability.
multiprocess) each writes its values to its own files and a scrape sums them; the store
gauges (observability.readings) are read by the scraped process alone. No `_created`
series: every counter and histogram would carry a twin of timestamps nobody alerts on.

Log lines carry a stable `action` name (`delivery.accepted`, `event.dead_lettered`, ...)
and never personal data or bodies.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import structlog
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from porteiro.observability import multiprocess
from porteiro.observability.ingest import IngestMetrics, SharedCells
from porteiro.observability.readings import ReadingsCollector

# A process-wide switch of prometheus_client, set before any metric is made.
disable_created_metrics()  # type: ignore[no-untyped-call]

_ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# From receipt to done: seconds normally, minutes with a backlog, hours after an outage.
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        # porteiro_deliveries{source, outcome}, porteiro_events_recorded{source, result}
        # and porteiro_ack_seconds{source}: updated on every ack, so not prometheus_client
        # children (ingest_metrics says why). outcome: accepted | duplicate |
        # unauthorized | too_large | unparseable | unavailable | saturated |
        # unknown_source; result: new | duplicate.
        shared = multiprocess.directory()
        if shared is None:
            self.ingest = IngestMetrics(_ACK_BUCKETS)
        else:
            self.ingest = IngestMetrics(_ACK_BUCKETS, SharedCells(shared))
        r.register(self.ingest)
        # outcome: a ledger verdict (applied, no_effect, duplicate, stale, anomalous) or
        # ignored | retry | dead | claim_lost; kind: the event's normalised kind.
        self.processed = Counter(
            "porteiro_events_processed",
            "Worker outcomes per event",
            ["source", "kind", "outcome"],
            registry=r,
        )
        self.latency = Histogram(
            "porteiro_event_latency_seconds",
            "Time from an event's receipt to its processing (done, ignored or dead)",
            ["source"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.processing_seconds = Histogram(
            "porteiro_event_processing_seconds", "Worker time per event", ["source"], registry=r
        )
        # Rare by design (a gateway's deviation from its own documented shape), so a
        # prometheus_client child is cheap enough on the ack path. rule: the adapter's
        # stable code (docs/gateways: the rules per gateway).
        self.event_warnings = Counter(
            "porteiro_event_warnings",
            "Deviations an adapter read past in the events it parsed (by rule)",
            ["source", "rule"],
            registry=r,
        )
        # outcome: delivered | retry | dead | claim_lost (a relay's attempts).
        self.outbox_deliveries = Counter(
            "porteiro_outbox_deliveries",
            "Delivery attempts to destinations, by outcome",
            ["destination", "outcome"],
            registry=r,
        )
        # finding: missing (a payment the gateway has and Porteiro did not hear of) |
        # divergent (the gateway's state differs from Porteiro's).
        self.reconcile_findings = Counter(
            "porteiro_reconcile_findings",
            "Reconciliation findings, by source and kind of finding",
            ["source", "finding"],
            registry=r,
        )
        # livesum: the processes alive now (a dead one's file is dropped on its exit).
        self.workers_running = Gauge(
            "porteiro_workers_running",
            "Event worker loops running",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.relays_running = Gauge(
            "porteiro_relays_running",
            "Outbox relay loops running, by destination",
            ["destination"],
            registry=r,
            multiprocess_mode="livesum",
        )
        # Read from the store at scrape time (observability.readings).
        self.readings = ReadingsCollector()
        self._exposed: CollectorRegistry | None = None

    def declare(self, sources: tuple[str, ...], destinations: tuple[str, ...]) -> None:
        """The configured sources and destinations, so their store gauges exist at 0."""
        self.readings = ReadingsCollector(sources, destinations)
        self._exposed = None

    def exposed(self) -> CollectorRegistry:
        """What /metrics exposes: this registry in one process; with several, every
        process's series from the multiprocess directory, and the store readings."""
        if self._exposed is None:
            shared = multiprocess.directory()
            if shared is None:
                self._exposed = CollectorRegistry()
                self._exposed.register(_Both(self.registry, self.readings))
            else:
                self._exposed = multiprocess.scrape_registry(shared, self.readings)
        return self._exposed


class _Both(Collector):
    """A registry's metrics and the readings', as one collector."""

    def __init__(self, registry: CollectorRegistry, readings: ReadingsCollector) -> None:
        self._registry, self._readings = registry, readings

    def collect(self) -> Iterator[Metric]:
        yield from self._registry.collect()
        yield from self._readings.collect()


# Libraries whose lower levels are noise on every request, or carry what must not be
# logged: httpx/httpcore log each request's URL at INFO (a gateway API call, a query
# token) and headers at DEBUG; aiosqlite logs each call with its SQL parameters (bodies)
# at DEBUG.
_LIBRARY_FLOORS = {"httpx": logging.WARNING, "httpcore": logging.WARNING, "aiosqlite": logging.INFO}


def configure_logging(level: str = "INFO", json: bool = True) -> None:
    """Called once by entry points (CLI), never at import.

    One renderer for everything: Porteiro's structlog lines and every stdlib logger
    (uvicorn, asyncio, psycopg, warnings...) through the root handler, so each line is
    one JSON object and a traceback is a field of it (`exception`), never extra lines.
    """
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    # A traceback as one string field; the console renderer prints it as it is, below.
    exceptions = [structlog.processors.format_exc_info] if json else []
    stamped: list[structlog.types.Processor] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *stamped],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *exceptions,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    for name, floor in _LIBRARY_FLOORS.items():
        logging.getLogger(name).setLevel(max(floor, logging.getLevelName(level)))
    logging.captureWarnings(True)  # warnings.warn(...) as log lines, not stderr text
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *stamped,
            *exceptions,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        # stderr: stdout is reserved for command output (`--json`).
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def logger() -> structlog.stdlib.BoundLogger:
    return structlog.get_logger("porteiro")  # type: ignore[no-any-return]
