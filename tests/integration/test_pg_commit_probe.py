"""`batch_concurrency = auto` (the default): once connected, a PostgreSQL store times a few
commits and keeps a second ingest batch in flight only where a commit waits (a disk that
flushes, a distant server). Against the real server, directly and behind a relay that
delays every packet or is cut."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import psycopg
import pytest

from porteiro.errors import ConfigError
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.store.postgres import commit_probe as pg_commit_probe
from porteiro.store.postgres.store import PostgresStore
from tests.integration.test_postgres_store import HANG_GUARD_SECONDS, Outage
from tests.support.waiting import wait_until_async

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


async def probed(store: PostgresStore, within: float = 5.0) -> float:
    """The commit wait the store's probe measured, once it has."""
    deadline = time.monotonic() + within
    while (seconds := store.commit_wait_seconds) is None:
        assert time.monotonic() < deadline, "the commit probe did not finish"
        await asyncio.sleep(0.02)
    return seconds


def delivery(tag: str) -> tuple[InboundRequest, list[ParsedEvent]]:
    request = InboundRequest(
        source="stripe",
        method="POST",
        path="/webhooks/stripe",
        query="",
        headers=(("content-type", "application/json"),),
        body=f'{{"id": "{tag}"}}'.encode(),
        peer="203.0.113.9",
        received_at=T0,
    )
    event = ParsedEvent(dedup_key=tag, kind=Kind.PAYMENT_PAID, type="x", object_id=f"pi_{tag}")
    return request, [event]


def test_batches_in_flight_follow_the_commit_wait() -> None:
    assert pg_commit_probe.batches_in_flight(0.0003) == 1  # a write-back cache
    assert pg_commit_probe.batches_in_flight(0.0019) == 1
    assert pg_commit_probe.batches_in_flight(0.002) == 2
    assert pg_commit_probe.batches_in_flight(0.003) == 2  # a disk that flushes in 2 ms


def test_batch_concurrency_from_the_url() -> None:
    assert PostgresStore.from_url("postgresql://h/db")._batch_concurrency is None
    auto = PostgresStore.from_url("postgresql://h/db?batch_concurrency=auto&sslmode=disable")
    assert auto._batch_concurrency is None
    assert auto.conninfo == "postgresql://h/db?sslmode=disable"
    assert PostgresStore.from_url("postgresql://h/db?batch_concurrency=2")._batch_concurrency == 2
    for wrong in ("0", "1.5", "many"):
        with pytest.raises(ConfigError):
            PostgresStore.from_url(f"postgresql://h/db?batch_concurrency={wrong}")


async def test_the_probes_transaction_commits_as_an_ingest_does(pg_url: str) -> None:
    # PostgreSQL waits for the WAL flush at commit only when the transaction has an xid
    # AND wrote WAL before committing (txid_current() alone has the first, not the
    # second, and commits without waiting).
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cursor = await conn.execute("SELECT pg_current_wal_insert_lsn()")
        before = (await cursor.fetchone() or [None])[0]
        await conn.execute(pg_commit_probe.PROBE)
        cursor = await conn.execute(
            "SELECT pg_current_wal_insert_lsn(), pg_current_xact_id_if_assigned()"
        )
        after, xid = await cursor.fetchone() or (None, None)
        await conn.rollback()
    assert xid is not None
    assert after > before


async def test_the_probe_measures_this_servers_commits(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.open()
    try:
        seconds = await probed(store)
        assert 0 < seconds < 1
        assert store.batches_in_flight == pg_commit_probe.batches_in_flight(seconds)
    finally:
        await store.close()


async def test_a_distant_server_gets_a_second_batch_in_flight(pg_url: str) -> None:
    outage, url = Outage.before(pg_url, delay=0.002)  # each way: a commit waits >= 4 ms
    await outage.restore()
    store = PostgresStore(url)
    await store.open()
    try:
        assert store.batches_in_flight == 1  # until measured
        assert await probed(store) >= 0.004
        assert store.batches_in_flight == 2
        await store.upgrade()
        results = await asyncio.gather(
            *(store.record_delivery(*delivery(f"evt_far{n}")) for n in range(40))
        )
        assert sum(result.new for result in results) == 40
    finally:
        await store.close()
        await outage.cut()


async def test_a_fixed_batch_concurrency_is_not_probed(pg_url: str) -> None:
    store = PostgresStore(pg_url, batch_concurrency=2)
    await store.open()
    try:
        await asyncio.sleep(0.1)
        assert (store.batches_in_flight, store.commit_wait_seconds) == (2, None)
    finally:
        await store.close()


async def test_the_probe_waits_out_an_outage(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg_commit_probe, "RETRY_SECONDS", 0.05)
    outage, url = Outage.before(pg_url)  # not restored: the server is "down" at open
    store = PostgresStore(url, reconnect_timeout=1.0)
    await store.open()
    try:
        await asyncio.sleep(0.3)
        assert (store.batches_in_flight, store.commit_wait_seconds) == (1, None)
        await outage.restore()
        assert await probed(store, within=10) > 0
    finally:
        await store.close()
        await outage.cut()


async def test_closing_during_an_outage_stops_the_probe(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The probe's wait between tries outlasts the hang guard: a close that waited for the
    # probe to end, rather than stopping it, would hang.
    monkeypatch.setattr(pg_commit_probe, "RETRY_SECONDS", 10 * HANG_GUARD_SECONDS)
    _, url = Outage.before(pg_url)  # never restored: the server stays "down"
    store = PostgresStore(url)
    await store.open()
    # Closed once the probe's first try has failed (the pool gave up on a connection):
    # the probe is then waiting to try again.
    pool = store._pool
    assert pool is not None
    await wait_until_async(
        lambda: pool.get_stats().get("requests_errors"), "the probe's first try to fail"
    )
    await asyncio.wait_for(store.close(), HANG_GUARD_SECONDS)
    assert store.batches_in_flight is None and store.commit_wait_seconds is None
