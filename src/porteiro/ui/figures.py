"""The overview's figures that come from the metrics rather than the store: ack latency
quantiles and the duplicate ratio, read from the same registry /metrics exposes (every
process's series with `--receivers N`), so the console and Prometheus agree.

They count since the processes started, as the counters do; the alert rules take rates
over a window from the same series (deploy/prometheus/alerts.yml).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client.registry import Collector

ACK_SECONDS = "porteiro_ack_seconds"
EVENTS_RECORDED = "porteiro_events_recorded"


@dataclass(frozen=True, slots=True)
class IngestFigures:
    acks: int  # acknowledged deliveries the latency figures cover
    ack_p50: float | None  # seconds
    ack_p99: float | None
    events_new: int
    events_duplicate: int

    @property
    def duplicate_ratio(self) -> float | None:
        total = self.events_new + self.events_duplicate
        return None if total == 0 else self.events_duplicate / total


def ingest_figures(registry: Collector) -> IngestFigures:
    buckets: dict[float, float] = {}
    recorded = {"new": 0.0, "duplicate": 0.0}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == f"{ACK_SECONDS}_bucket":
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
            elif sample.name == f"{EVENTS_RECORDED}_total":
                result = sample.labels.get("result", "")
                if result in recorded:
                    recorded[result] += sample.value
    cumulative = sorted(buckets.items())
    count = cumulative[-1][1] if cumulative else 0.0
    return IngestFigures(
        acks=int(count),
        ack_p50=quantile(0.5, cumulative),
        ack_p99=quantile(0.99, cumulative),
        events_new=int(recorded["new"]),
        events_duplicate=int(recorded["duplicate"]),
    )


def quantile(q: float, cumulative: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile of a histogram from its cumulative (upper bound, count) buckets,
    interpolated inside the bucket it falls in, as PromQL's histogram_quantile does. A
    quantile in the +Inf bucket is the largest finite bound (all one can say)."""
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    rank = q * cumulative[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in cumulative:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound
