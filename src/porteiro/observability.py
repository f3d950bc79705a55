"""Structured logs and Prometheus metrics.

Metrics live in a registry owned by the runtime (no module-level singletons), so two apps
in one test process never share counters. Log lines carry a stable `action` name
(`delivery.accepted`, `event.dead_lettered`, ...) and never personal data or bodies.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from porteiro.ingest_metrics import IngestMetrics

_ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


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
        self.ingest = IngestMetrics(_ACK_BUCKETS)
        r.register(self.ingest)
        # outcome: a ledger verdict (applied, no_effect, duplicate, stale, anomalous) or
        # ignored | retry | dead | claim_lost
        self.processed = Counter(
            "porteiro_events_processed",
            "Worker outcomes per event",
            ["source", "outcome"],
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
        self.events_by_status = Gauge(
            "porteiro_events_by_status",
            "Stored events per open status (pending, processing, retrying, dead)",
            ["status"],
            registry=r,
        )


def configure_logging(level: str = "INFO", json: bool = True) -> None:
    """Called once by entry points (CLI), never at import."""
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=level)
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        # stderr: stdout is reserved for command output (`--json`).
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def logger() -> structlog.stdlib.BoundLogger:
    return structlog.get_logger("porteiro")  # type: ignore[no-any-return]
