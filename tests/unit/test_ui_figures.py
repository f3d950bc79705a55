"""The overview's ack latency quantiles and duplicate ratio, read from a metrics registry:
quantile() against values worked out by hand, and ingest_figures() against registries
holding prometheus_client's own Histogram and Counter and Porteiro's IngestMetrics."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from porteiro.observability.ingest import IngestMetrics
from porteiro.ui.figures import (
    ACK_SECONDS,
    EVENTS_RECORDED,
    IngestFigures,
    ingest_figures,
    quantile,
)

INF = math.inf
BOUNDS = (0.1, 0.5, 1.0)
# 10 acks at or under 0.1 s, 20 in (0.1, 0.5], 10 in (0.5, 1.0], none past 1 s.
CUMULATIVE = [(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (INF, 40.0)]


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.1, 0.04),  # rank 4 of the first bucket's 10, from 0: 0.1 * 4/10
        (0.25, 0.1),  # rank 10: the first bucket's top
        (0.5, 0.3),  # rank 20: 0.1 + 0.4 * (20-10)/(30-10)
        (0.75, 0.5),  # rank 30: the second bucket's top
        (0.99, 0.98),  # rank 39.6: 0.5 + 0.5 * (39.6-30)/(40-30)
        (1.0, 1.0),
    ],
)
def test_quantile_interpolates_inside_its_bucket(q: float, expected: float) -> None:
    assert quantile(q, CUMULATIVE) == pytest.approx(expected)


def test_a_quantile_in_the_inf_bucket_is_the_largest_finite_bound() -> None:
    everything_slow = [(0.1, 0.0), (0.5, 0.0), (1.0, 0.0), (INF, 5.0)]
    assert quantile(0.5, everything_slow) == 1.0
    assert quantile(0.99, everything_slow) == 1.0
    # Only the tail past the last bound: p50 is inside, p99 is "over 1 s".
    some_slow = [(0.1, 0.0), (0.5, 90.0), (1.0, 90.0), (INF, 100.0)]
    assert quantile(0.5, some_slow) == pytest.approx(0.1 + 0.4 * 50 / 90)
    assert quantile(0.99, some_slow) == 1.0


def test_a_quantile_on_an_empty_bucket_is_its_bound() -> None:
    # Rank 0 falls in a bucket holding nothing: nothing to interpolate over.
    assert quantile(0.0, [(0.1, 0.0), (0.5, 4.0), (INF, 4.0)]) == 0.1


def test_no_observations_have_no_quantile() -> None:
    assert quantile(0.5, []) is None
    assert quantile(0.5, [(0.1, 0.0), (0.5, 0.0), (INF, 0.0)]) is None


def test_ingest_figures_from_prometheus_client_metrics() -> None:
    registry = CollectorRegistry()
    acks = Histogram(ACK_SECONDS, "ack time", ["source"], buckets=BOUNDS, registry=registry)
    events = Counter(EVENTS_RECORDED, "events", ["source", "result"], registry=registry)
    # Two sources' series add up, bucket by bucket: the CUMULATIVE above.
    for _ in range(10):
        acks.labels("stripe").observe(0.05)
        acks.labels("adyen").observe(0.7)
    for _ in range(20):
        acks.labels("adyen").observe(0.3)
    events.labels("stripe", "new").inc(30)
    events.labels("stripe", "duplicate").inc(5)
    events.labels("adyen", "new").inc(60)
    events.labels("adyen", "duplicate").inc(5)
    events.labels("adyen", "unexpected").inc(1000)  # a result the figures do not count
    # Other families (and _created samples) are read past.
    Counter("porteiro_deliveries", "deliveries", ["source"], registry=registry).labels("x").inc()

    figures = ingest_figures(registry)
    assert figures.acks == 40
    assert figures.ack_p50 == pytest.approx(0.3)
    assert figures.ack_p99 == pytest.approx(0.98)
    assert (figures.events_new, figures.events_duplicate) == (90, 10)
    assert figures.duplicate_ratio == pytest.approx(0.1)


def test_an_ack_on_a_bound_counts_in_that_bucket() -> None:
    registry = CollectorRegistry()
    acks = Histogram(ACK_SECONDS, "ack time", ["source"], buckets=BOUNDS, registry=registry)
    for _ in range(4):
        acks.labels("stripe").observe(0.5)
    figures = ingest_figures(registry)
    # All four in (0.1, 0.5]: p50 is halfway through that bucket, not past 0.5.
    assert figures.ack_p50 == pytest.approx(0.3)
    assert figures.ack_p99 == pytest.approx(0.1 + 0.4 * 0.99)


def test_ingest_figures_from_porteiros_own_collector() -> None:
    metrics = IngestMetrics(BOUNDS)
    metrics.declare(["stripe", "adyen"], ["accepted", "duplicate"])
    for _ in range(10):
        metrics.ack("stripe", 0.05)
        metrics.ack("adyen", 0.7)
    for _ in range(20):
        metrics.ack("adyen", 0.3)
    metrics.events("stripe", new=30, duplicates=5)
    metrics.events("adyen", new=60, duplicates=5)
    registry = CollectorRegistry()
    registry.register(metrics)

    figures = ingest_figures(registry)
    assert figures.acks == 40
    assert figures.ack_p50 == pytest.approx(0.3)
    assert figures.ack_p99 == pytest.approx(0.98)
    assert figures.duplicate_ratio == pytest.approx(0.1)
    # The collector alone answers the same as through a registry.
    assert ingest_figures(metrics) == figures


def test_a_registry_with_nothing_recorded() -> None:
    registry = CollectorRegistry()
    empty = IngestFigures(acks=0, ack_p50=None, ack_p99=None, events_new=0, events_duplicate=0)
    assert ingest_figures(registry) == empty
    assert empty.duplicate_ratio is None
    # Declared series at 0: still nothing to take a quantile or a ratio of.
    metrics = IngestMetrics(BOUNDS)
    metrics.declare(["stripe"], ["accepted"])
    assert ingest_figures(metrics) == empty


def test_the_duplicate_ratio() -> None:
    def ratio(new: int, duplicate: int) -> float | None:
        return IngestFigures(0, None, None, new, duplicate).duplicate_ratio

    assert ratio(3, 1) == 0.25
    assert ratio(0, 4) == 1.0
    assert ratio(4, 0) == 0.0
    assert ratio(0, 0) is None
