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

from porteiro.observability.ingest import IngestMetrics

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
