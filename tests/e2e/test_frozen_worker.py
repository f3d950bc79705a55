"""A frozen worker stalls neither ingest nor the other workers (issue 22, finding 5).

Real processes on one PostgreSQL: a receiver, a worker frozen (SIGSTOP) inside its apply
transaction for twice its lease, and a second worker. While it is stopped, a steady load of
signed deliveries, among them re-sends of the very events the frozen worker holds, keeps
being acknowledged (a 200 each: none waits on its locks); the other worker applies the
other payments, then the frozen one's events once its lease is gone; resumed, the frozen
worker's late writes are refused. Nothing is lost or applied twice.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.support.database import assert_applied_exactly_once, query, status_counts
from tests.support.events import lifecycles
from tests.support.processes import porteiro, post_all, run_porteiro, serving, write_config
from tests.support.servers import free_port
from tests.support.signing import standard_headers
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

LEASE = 2.0
BASE = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def locks_held(pg_url: str) -> int:
    """Advisory locks granted in the test's database: only a worker's apply takes them."""
    found = query(
        pg_url,
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    return int(found[0][0])


@dataclass
class Load:
    """What a steady load of deliveries got back: per request, its status."""

    statuses: list[int] = field(default_factory=list)
    repeats: list[int] = field(default_factory=list)  # statuses of the re-sent events


def steady_load(
    port: int, fresh: list[bytes], repeats: list[bytes], seconds: float, senders: int = 6
) -> Load:
    """`senders` clients posting one delivery after another for `seconds`: new events in
    order, every fourth request a re-send of one of `repeats`."""
    load = Load()
    news = iter(fresh)
    again = itertools.cycle(repeats)
    turn = itertools.count()

    async def sender(client: httpx.AsyncClient, deadline: float) -> None:
        while time.monotonic() < deadline:
            repeat = next(turn) % 4 == 3
            body = next(again) if repeat else next(news, None)
            if body is None:
                return
            response = await client.post(
                f"http://127.0.0.1:{port}/webhooks/std",
                content=body,
                headers=standard_headers(body),
            )
            load.statuses.append(response.status_code)
            if repeat:
                load.repeats.append(response.status_code)

    async def run() -> None:
        deadline = time.monotonic() + seconds
        async with httpx.AsyncClient(timeout=15) as client:
            await asyncio.gather(*(sender(client, deadline) for _ in range(senders)))

    asyncio.run(run())
    return load


def test_a_frozen_worker_stalls_neither_ingest_nor_the_other_worker(
    pg_url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, pg_url, lease_seconds=LEASE)
    run_porteiro(config, "db", "upgrade")
    port = free_port()
    held_bodies = lifecycles(range(10), BASE)  # 40 events: the frozen worker's batch and prefetch
    fresh = lifecycles(range(100, 300), BASE)  # more than the load sends
    with serving(config, port, tmp_path / "serve.log", "--no-worker"):
        assert set(post_all(port, held_bodies)) == {200}
        # Blocks 1 s inside each apply transaction, its payments' locks taken: stopped
        # then, it freezes there (a GC pause, a frozen VM, a partition).
        frozen = porteiro(
            config, "worker", "--debug-pause-in-apply", "1.0", log=tmp_path / "frozen.log"
        )
        other = None
        try:
            wait_until(lambda: locks_held(pg_url) > 0, "the frozen worker's apply", within=30)
            frozen.kill(signal.SIGSTOP)
            held = {
                key
                for (key,) in query(
                    pg_url, "SELECT dedup_key FROM events WHERE status = 'processing'"
                )
            }
            assert held, "the frozen worker holds no claim"
            repeats = [body for body in held_bodies if _key(body) in held]
            other = porteiro(config, "worker", log=tmp_path / "other.log")

            load = steady_load(port, fresh, repeats, seconds=2 * LEASE)

            # Acks kept coming, none waiting on the frozen worker's locks: a delivery
            # that waited past [server] store_timeout_seconds would have been a 503.
            assert load.repeats and set(load.repeats) == {200}, load.repeats
            assert set(load.statuses) == {200}, sorted(set(load.statuses))
            # The other worker applied the rest, then the frozen one's claims after its
            # lease: all of it while the frozen worker is still stopped.
            wait_until(
                lambda: set(status_counts(pg_url)) == {"done"}, "every event applied", within=30
            )
            assert _stopped(frozen.popen.pid), "the frozen worker ran again too early"
            frozen.kill(signal.SIGCONT)
            # Resumed, its late writes are refused: its transaction was ended by
            # PostgreSQL (the store is unavailable to that apply) and its prefetched
            # claims fail their token (claim lost).
            wait_until(
                lambda: (
                    "claim_lost" in frozen.output() or "worker.store_unavailable" in frozen.output()
                ),
                "the frozen worker's late writes refused",
                within=20,
            )
            time.sleep(LEASE)  # whatever it would still write, it had the time to
        finally:
            frozen.kill(signal.SIGCONT)
            frozen.kill(signal.SIGKILL)
            if other is not None:
                other.kill(signal.SIGTERM)

    ((events, repeated),) = query(pg_url, "SELECT count(*), sum(duplicates) FROM events")
    assert status_counts(pg_url) == {"done": events}
    assert repeated == len(load.repeats)  # every re-send counted, none lost
    assert_applied_exactly_once(pg_url, events)
    ((payments, objects),) = query(
        pg_url,
        "SELECT (SELECT count(*) FROM payments), count(DISTINCT object_id) FROM events",
    )
    assert payments == objects
    states = dict(query(pg_url, "SELECT state, count(*) FROM payments GROUP BY state"))
    assert states.get("partially_refunded", 0) >= 10  # the frozen worker's ten, at least


def _stopped(pid: int) -> bool:
    """Whether the process is stopped (by SIGSTOP): its state in /proc is T."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] == "T"


def _key(body: bytes) -> str:
    return str(json.loads(body)["id"])
