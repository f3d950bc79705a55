"""IngestMetrics exposes what prometheus_client's own Counter and Histogram would, for the
same updates: the families, samples, labels, bucket bounds and values (only the
`_created` timestamps differ, being taken at different moments)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from porteiro.observability import _ACK_BUCKETS, Metrics
from porteiro.observability.ingest import IngestMetrics

SOURCES = ("stripe", "_unknown")
OUTCOMES = ("accepted", "duplicate", "unauthorized")

# (source, outcome, new events, duplicate events, ack seconds)
updates = st.lists(
    st.tuples(
        st.sampled_from(SOURCES),
        st.sampled_from(OUTCOMES),
        st.integers(0, 3),
        st.integers(0, 3),
        st.one_of(
            st.sampled_from([0.0, *_ACK_BUCKETS]),  # on a bound: that bucket counts it
            st.floats(0, 10, allow_nan=False),
        ),
    ),
    max_size=30,
)


def reference(updates: list[tuple[str, str, int, int, float]]) -> bytes:
    """The same metrics kept by prometheus_client, as Porteiro kept them before."""
    registry = CollectorRegistry()
    deliveries = Counter(
        "porteiro_deliveries", "Webhook deliveries received", ["source", "outcome"],
        registry=registry,
    )  # fmt: skip
    events = Counter(
        "porteiro_events_recorded", "Events stored from deliveries", ["source", "result"],
        registry=registry,
    )  # fmt: skip
    acks = Histogram(
        "porteiro_ack_seconds", "Time from request start to acknowledgement", ["source"],
        buckets=_ACK_BUCKETS, registry=registry,
    )  # fmt: skip
    for source in SOURCES:
        for outcome in OUTCOMES:
            deliveries.labels(source, outcome)
        events.labels(source, "new")
        events.labels(source, "duplicate")
        acks.labels(source)
    for source, outcome, new, duplicates, seconds in updates:
        deliveries.labels(source, outcome).inc()
        events.labels(source, "new").inc(new)
        events.labels(source, "duplicate").inc(duplicates)
        acks.labels(source).observe(seconds)
    return generate_latest(registry)


def exposed(updates: list[tuple[str, str, int, int, float]]) -> bytes:
    registry = CollectorRegistry()
    metrics = IngestMetrics(_ACK_BUCKETS)
    registry.register(metrics)
    metrics.declare(SOURCES, OUTCOMES)
    for source, outcome, new, duplicates, seconds in updates:
        metrics.delivery(source, outcome)
        metrics.events(source, new, duplicates)
        metrics.ack(source, seconds)
    return generate_latest(registry)


def without_created_times(text: bytes) -> str:
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", text.decode())


@given(updates)
def test_the_exposition_is_prometheus_clients_own(
    updates: list[tuple[str, str, int, int, float]],
) -> None:
    assert without_created_times(exposed(updates)) == without_created_times(reference(updates))


def test_series_declared_exist_at_zero_and_others_appear_when_counted() -> None:
    metrics = Metrics()
    metrics.ingest.declare(["stripe"], ["accepted"])
    value = metrics.registry.get_sample_value
    assert value("porteiro_deliveries_total", {"source": "stripe", "outcome": "accepted"}) == 0
    assert value("porteiro_ack_seconds_count", {"source": "stripe"}) == 0
    metrics.ingest.delivery("pix", "too_large")
    metrics.ingest.ack("pix", 0.003)
    assert value("porteiro_deliveries_total", {"source": "pix", "outcome": "too_large"}) == 1
    assert value("porteiro_ack_seconds_bucket", {"source": "pix", "le": "0.0025"}) == 0
    assert value("porteiro_ack_seconds_bucket", {"source": "pix", "le": "0.005"}) == 1
    assert value("porteiro_ack_seconds_sum", {"source": "pix"}) == 0.003
