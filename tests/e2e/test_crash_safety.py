"""Crash safety with real processes: SIGKILL, SIGSTOP/SIGCONT, several receivers/workers.

What must hold (issue 2, item 9): a killed worker's claims come back and every event is
applied exactly once; every request that got a 2xx survives a killed receiver; two
receivers and two workers on one PostgreSQL never double-apply; a worker frozen past its
lease has its late commit refused (fencing).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.support.database import assert_applied_exactly_once, query, status_counts
from tests.support.events import lifecycles
from tests.support.processes import (
    local_url,
    porteiro,
    post_all,
    run_porteiro,
    serving,
    wait_healthy,
    write_config,
)
from tests.support.servers import free_port
from tests.support.signing import standard_headers
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


BASE = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def test_killed_worker_claims_come_back_and_apply_once(pg_url: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, pg_url, lease_seconds=2)
    run_porteiro(config, "db", "upgrade")
    port = free_port()
    bodies = lifecycles(range(250), BASE)  # 1,000 events
    with serving(config, port, tmp_path / "serve.log", "--no-worker"):
        assert set(post_all(port, bodies)) == {200}
    assert status_counts(pg_url) == {"pending": 1000}

    # Batches of 20 with a short pause after each claim: the run lasts long enough (at
    # least 2.5 s) for the kill to land in the middle, however fast the worker is.
    worker = porteiro(
        config, "worker", "--debug-pause-after-claim", "0.05", log=tmp_path / "worker1.log"
    )
    wait_until(lambda: status_counts(pg_url).get("done", 0) >= 200, "200 events done", within=60)
    worker.kill(signal.SIGKILL)
    counts = status_counts(pg_url)
    assert counts.get("done", 0) < 1000, "the worker finished before it could be killed"

    restarted = porteiro(config, "worker", log=tmp_path / "worker2.log")
    try:
        wait_until(lambda: status_counts(pg_url) == {"done": 1000}, "all 1,000 done", within=90)
    finally:
        restarted.kill(signal.SIGTERM)
    assert_applied_exactly_once(pg_url, 1000)
    states = dict(query(pg_url, "SELECT state, count(*) FROM payments GROUP BY state"))
    assert states == {"partially_refunded": 250}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_every_acknowledged_delivery_survives_a_killed_receiver(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store_url = (
        f"sqlite:///{tmp_path / 'porteiro.db'}"
        if kind == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    config = write_config(tmp_path, store_url)
    run_porteiro(config, "db", "upgrade")
    port = free_port()
    bodies = lifecycles(range(1500), BASE)
    acked: list[str] = []
    receiver = porteiro(config, "serve", "--port", str(port), log=tmp_path / "serve.log")
    wait_healthy(receiver, local_url(port))

    async def burst() -> None:
        semaphore = asyncio.Semaphore(32)
        async with httpx.AsyncClient(timeout=5) as client:

            async def one(body: bytes) -> None:
                async with semaphore:
                    headers = standard_headers(body)
                    try:
                        response = await client.post(
                            f"http://127.0.0.1:{port}/webhooks/std", content=body, headers=headers
                        )
                    except httpx.HTTPError:
                        return
                    if 200 <= response.status_code < 300:
                        acked.append(headers["webhook-id"])

            await asyncio.gather(*(one(body) for body in bodies))

    def kill_when_busy() -> None:
        wait_until(lambda: len(acked) >= 300, "300 acknowledgements", within=60)
        receiver.kill(signal.SIGKILL)

    killer = threading.Thread(target=kill_when_busy)
    killer.start()
    asyncio.run(burst())
    killer.join()
    assert 300 <= len(acked) < len(bodies), "the kill did not land mid-burst"
    stored = {row[0] for row in query(store_url, "SELECT dedup_key FROM events")}
    missing = set(acked) - stored
    assert not missing, f"{len(missing)} acknowledged events were lost, e.g. {sorted(missing)[:3]}"


def test_two_receivers_two_workers_never_double_apply(pg_url: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, pg_url, lease_seconds=5)
    run_porteiro(config, "db", "upgrade")
    ports = [free_port(), free_port()]
    bodies = lifecycles(range(100), BASE)  # 400 distinct events
    workers = [porteiro(config, "worker", log=tmp_path / f"worker{i}.log") for i in range(2)]
    try:
        with (
            serving(config, ports[0], tmp_path / "serve0.log", "--no-worker"),
            serving(config, ports[1], tmp_path / "serve1.log", "--no-worker"),
        ):
            # Every event goes to both receivers at once: 800 deliveries, 400 duplicates.
            results: list[list[int]] = []
            threads = [
                threading.Thread(target=lambda p=port: results.append(post_all(p, bodies)))
                for port in ports
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert all(set(statuses) == {200} for statuses in results)
            wait_until(lambda: status_counts(pg_url) == {"done": 400}, "400 events done", within=60)
    finally:
        for worker in workers:
            worker.kill(signal.SIGTERM)
    assert_applied_exactly_once(pg_url, 400)
    duplicates = query(pg_url, "SELECT sum(duplicates) FROM events")[0][0]
    assert duplicates == 400
    states = dict(query(pg_url, "SELECT state, count(*) FROM payments GROUP BY state"))
    assert states == {"partially_refunded": 100}


def test_frozen_worker_late_commit_is_refused(pg_url: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, pg_url, lease_seconds=1.5)
    run_porteiro(config, "db", "upgrade")
    port = free_port()
    bodies = lifecycles(range(30), BASE)  # 120 events
    with serving(config, port, tmp_path / "serve.log", "--no-worker"):
        assert set(post_all(port, bodies)) == {200}

    # The first worker claims a batch, then holds it (as a GC pause or a frozen VM would).
    frozen = porteiro(
        config, "worker", "--debug-pause-after-claim", "1.0", log=tmp_path / "frozen.log"
    )
    wait_until(
        lambda: status_counts(pg_url).get("processing", 0) > 0,
        "the first worker's claims",
        within=30,
    )
    frozen.kill(signal.SIGSTOP)
    time.sleep(2.5)  # past the 1.5 s lease
    taker = porteiro(config, "worker", log=tmp_path / "taker.log")
    try:
        wait_until(lambda: status_counts(pg_url) == {"done": 120}, "all events done", within=60)
        frozen.kill(signal.SIGCONT)
        wait_until(lambda: "claim_lost" in frozen.output(), "the late commit refused", within=20)
    finally:
        frozen.kill(signal.SIGKILL)
        taker.kill(signal.SIGTERM)
    assert_applied_exactly_once(pg_url, 120)
