"""Metrics of several processes, summed on every scrape (docs/operations.md, "Metrics").

`serve --receivers 2` on PostgreSQL: each scrape lands on either receiver, and every one
must read the sums of both; a `porteiro worker` started with the same
PROMETHEUS_MULTIPROC_DIR shows in those scrapes too.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.events import lifecycles
from tests.support.processes import (
    local_url,
    porteiro,
    post_all,
    run_porteiro,
    wait_healthy,
    write_config,
)
from tests.support.servers import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

BASE = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def scrape(url: str) -> dict[str, float]:
    """Each sample name with its labels (`name{k=v,...}`) -> value, from a fresh connection
    (so the kernel may hand it to either receiver)."""
    text = httpx.get(f"{url}/metrics", timeout=10, headers={"Connection": "close"}).text
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def total(samples: dict[str, float], name: str, **labels: str) -> float:
    wanted = [f"{k}={v}" for k, v in labels.items()]
    return sum(
        value
        for key, value in samples.items()
        if key.split("{", 1)[0] == name and all(part in key for part in wanted)
    )


def test_two_receivers_and_a_worker_sum_on_every_scrape(pg_url: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, pg_url)
    run_porteiro(config, "db", "upgrade")
    shared = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")}
    (tmp_path / "metrics").mkdir()
    port = free_port()
    url = local_url(port)
    bodies = lifecycles(range(10), BASE)
    serve = porteiro(
        config, "serve", "--port", str(port), "--receivers", "2", "--no-worker",
        log=tmp_path / "serve.log", env=shared,
    )  # fmt: skip
    try:
        wait_healthy(serve, url)
        assert set(post_all(port, bodies)) == {200}
        for _ in range(8):
            samples = scrape(url)
            accepted = total(samples, "porteiro_deliveries_total", outcome="accepted")
            assert accepted == len(bodies), samples
            assert total(samples, "porteiro_events_recorded_total", result="new") == len(bodies)
            assert total(samples, "porteiro_ack_seconds_count") == len(bodies)
            # Read from the store by the scraped process alone: never summed.
            assert total(samples, "porteiro_events_pending", source="std") == len(bodies)
            assert "porteiro_deliveries_created" not in str(samples)

        worker = porteiro(config, "worker", log=tmp_path / "worker.log", env=shared)
        try:
            wait_until(
                lambda: total(scrape(url), "porteiro_events_processed_total") == len(bodies),
                "the worker's events in the receivers' scrape",
                within=60,
            )
            samples = scrape(url)
            assert total(samples, "porteiro_workers_running") == 1
            assert total(samples, "porteiro_event_latency_seconds_count") == len(bodies)
            assert total(samples, "porteiro_events_pending", source="std") == 0
        finally:
            worker.kill(signal.SIGTERM)
        # Its live gauge left the sums; its counters stay.
        samples = scrape(url)
        assert total(samples, "porteiro_workers_running") == 0
        assert total(samples, "porteiro_events_processed_total") == len(bodies)
    finally:
        serve.kill(signal.SIGTERM)
