"""PostgreSQL-only behaviour: several processes (here: several stores, each with its own
pool) sharing one database, NOTIFY wake-ups, fencing, and failing (not hanging) during an
outage. No speed is asserted here: a time limit only fails a wait as hung."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from porteiro.errors import ConfigError, StoreUnavailable
from porteiro.model import (
    EventStatus,
    InboundRequest,
    Kind,
    Outcome,
    ParsedEvent,
    Payment,
    PaymentState,
    Transition,
    Verdict,
)
from porteiro.store.base import OPEN_STATUSES, Application, Applied, Claim, Decide
from porteiro.store.migrations import load_migrations
from porteiro.store.postgres import queries as q
from porteiro.store.postgres.store import PostgresStore
from tests.integration.pg_locks import lock_payment

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 11, 30, 6, 45, 33, 123456, tzinfo=UTC)
LEASE = timedelta(seconds=30)
# Past this, a wait is failed as hung (never as slow): far beyond any timeout the store
# has of its own (acquire 0.5 s, connect 1 s, an ingest batch 5 s).
HANG_GUARD_SECONDS = 30.0


def request(at: datetime = T0) -> InboundRequest:
    return InboundRequest(
        source="stripe",
        method="POST",
        path="/webhooks/stripe",
        query="",
        headers=(("content-type", "application/json"),),
        body=b"{}",
        peer="203.0.113.7",
        received_at=at,
    )


def paid(key: str, object_id: str = "pi_1") -> ParsedEvent:
    return ParsedEvent(
        dedup_key=key, kind=Kind.PAYMENT_PAID, type="payment_intent.succeeded", object_id=object_id
    )


def bump(claim: Claim, at: datetime) -> Decide:
    """A stand-in ledger: each applied event bumps the version and appends its key, so a
    lost update shows as a missing key or a wrong version."""

    def decide(current: Payment | None) -> Outcome:
        seen = [] if current is None else list(current.facts["keys"])
        payment = Payment(
            source=claim.event.source,
            object_id=claim.event.object_id or "",
            state=PaymentState.PAID,
            amount=1000,
            currency="brl",
            refunded_amount=0,
            reference=None,
            version=1 if current is None else current.version + 1,
            last_event_at=at,
            facts={"keys": [*seen, claim.event.dedup_key]},
        )
        transition = Transition(
            event_id=claim.event.id,
            from_state=None if current is None else current.state,
            to_state=PaymentState.PAID,
            verdict=Verdict.APPLIED,
            at=at,
        )
        return Outcome(payment, transition)

    return decide


async def opened(url: str) -> PostgresStore:
    store = PostgresStore.from_url(url)
    await store.open()
    return store


@pytest.fixture
async def two(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores with separate pools on one migrated database: two processes."""
    a, b = await opened(pg_url), await opened(pg_url)
    await a.upgrade()
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


async def drain(store: PostgresStore, worker: str) -> list[int]:
    got: list[int] = []
    while claims := await store.claim(worker, 7, LEASE, T0 + timedelta(seconds=1)):
        got.extend(claim.event.id for claim in claims)
        await asyncio.sleep(0)
    return got


async def test_concurrent_claimers_split_the_work_without_overlap(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    recorded = await a.record_delivery(request(), [paid(f"evt_{n}", f"pi_{n}") for n in range(200)])
    got_a, got_b = await asyncio.gather(drain(a, "a"), drain(b, "b"))
    assert not set(got_a) & set(got_b)
    assert len(got_a) + len(got_b) == 200
    assert sorted(got_a + got_b) == sorted(recorded.event_ids)
    assert got_a and got_b  # both really took part
    counts = await a.status_counts()
    assert counts[EventStatus.PROCESSING] == 200


async def test_notify_wakes_a_waiting_store_before_its_timeout(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    await b.wait_for_work(0.01)  # the listener connects lazily
    # A wait far longer than the hang guard: if it ends, the notification ended it.
    waiter = asyncio.create_task(b.wait_for_work(10 * HANG_GUARD_SECONDS))
    await asyncio.sleep(0.1)
    assert not waiter.done()  # nothing to wake it yet
    await a.record_delivery(request(), [paid("evt_1")])
    await asyncio.wait_for(waiter, HANG_GUARD_SECONDS)


async def _other_sessions(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        row = await cursor.fetchone()
        return int(row[0]) if row else 0


async def test_a_wait_cancelled_while_its_listener_connects_leaves_no_session(
    pg_url: str,
) -> None:
    """A worker told to stop while the listener connects and LISTENs: the half-made
    connection is closed, not left open until the garbage collector finds it."""
    store = await opened(pg_url)
    await store.close()  # the pool's own sessions are gone
    for step in range(60):
        store = await opened(pg_url)
        try:
            waiting = asyncio.create_task(store.wait_for_work(5))
            await asyncio.sleep(step / 2000)  # 0 to 30 ms: before, during, after LISTEN
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
        finally:
            await store.close()
        gc.collect()  # a leaked connection warns here (an error in this suite)
        deadline = time.monotonic() + 3  # a closed session's backend exits soon after
        while await _other_sessions(pg_url):
            assert time.monotonic() < deadline, f"a session left open at {step / 2} ms"
            await asyncio.sleep(0.01)


async def test_late_commit_of_an_expired_claim_is_refused(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two
    [event_id] = (await a.record_delivery(request(), [paid("evt_1")])).event_ids
    [first] = await a.claim("a", 1, LEASE, T0)
    later = T0 + LEASE + timedelta(seconds=1)
    [second] = await b.claim("b", 1, LEASE, later)
    assert second.event.id == first.event.id == event_id
    assert second.token != first.token
    assert second.event.attempts == 2

    parsed = first.event.parsed()
    assert await a.apply_many([Application(first, parsed, bump(first, later))], later) == [False]
    assert await b.apply_many([Application(second, parsed, bump(second, later))], later) == [True]
    assert await a.dead_letter(first, "late", later) is False

    payment = await a.get_payment("stripe", "pi_1")
    assert payment is not None
    assert payment.version == 1
    assert payment.facts == {"keys": ["evt_1"]}
    assert len(await a.payment_history("stripe", "pi_1")) == 1
    stored = await a.get_event(event_id)
    assert stored is not None
    assert stored.status is EventStatus.DONE


async def _lock_waiters(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        )
        row = await cursor.fetchone()
        return int(row[0]) if row else 0


async def test_concurrent_apply_to_one_new_payment_serialises(
    pg_url: str, two: tuple[PostgresStore, PostgresStore]
) -> None:
    a, b = two
    await a.record_delivery(request(), [paid("evt_1"), paid("evt_2")])
    [claim_a] = await a.claim("a", 1, LEASE, T0)
    [claim_b] = await b.claim("b", 1, LEASE, T0)
    assert claim_a.event.id != claim_b.event.id

    # Hold the payment's lock so both applies are provably in flight at the same time.
    async with await psycopg.AsyncConnection.connect(pg_url) as holder:
        await lock_payment(holder, "stripe", "pi_1")
        applies = [
            asyncio.create_task(
                store.apply_many([Application(claim, claim.event.parsed(), bump(claim, T0))], T0)
            )
            for store, claim in ((a, claim_a), (b, claim_b))
        ]
        deadline = time.monotonic() + 5
        while await _lock_waiters(pg_url) < 2:
            assert time.monotonic() < deadline, "applies never queued on the payment lock"
            await asyncio.sleep(0.02)
        await holder.rollback()
    assert await asyncio.gather(*applies) == [[True], [True]]

    payment = await a.get_payment("stripe", "pi_1")
    assert payment is not None
    assert payment.version == 2
    assert sorted(payment.facts["keys"]) == ["evt_1", "evt_2"]
    history = await a.payment_history("stripe", "pi_1")
    assert len(history) == 2
    assert history[0].from_state is None
    assert history[1].from_state is PaymentState.PAID


@contextlib.asynccontextmanager
async def _second_pass_waiting(
    pg_url: str, store: PostgresStore, batch: list[Application], object_id: str
) -> AsyncIterator[tuple[asyncio.Task[Sequence[Applied]], psycopg.AsyncConnection[Any]]]:
    """`apply_many(batch)` while another session holds `object_id`'s lock: yields the
    apply, its second pass queued on that lock, and the holder, whose transaction the
    caller ends."""
    async with await psycopg.AsyncConnection.connect(pg_url) as holder:
        await lock_payment(holder, "stripe", object_id)
        applying = asyncio.create_task(store.apply_many(batch, T0))
        deadline = time.monotonic() + 5
        while await _lock_waiters(pg_url) < 1:
            assert time.monotonic() < deadline, f"the second pass never queued on {object_id}"
            await asyncio.sleep(0.02)
        yield applying, holder


async def test_a_batch_applies_the_free_payments_while_another_holds_one(
    pg_url: str, two: tuple[PostgresStore, PostgresStore]
) -> None:
    """Another worker's batch holding pi_2: this batch's pi_1 and pi_3 events commit at
    once, pi_2's wait for it (a second transaction) and then apply on top of its work."""
    a, _ = two
    keys = {"evt_1": "pi_1", "evt_2": "pi_2", "evt_3": "pi_2", "evt_4": "pi_3"}
    await a.record_delivery(request(), [paid(key, obj) for key, obj in keys.items()])
    claims = await a.claim("a", 10, LEASE, T0)
    batch = [Application(c, c.event.parsed(), bump(c, T0)) for c in claims]

    async with _second_pass_waiting(pg_url, a, batch, "pi_2") as (applying, holder):
        # The first pass has committed: pi_1 and pi_3 are done while pi_2 is still held.
        for object_id in ("pi_1", "pi_3"):
            assert await a.get_payment("stripe", object_id) is not None
        assert await a.get_payment("stripe", "pi_2") is None
        statuses = {c.event.dedup_key: await a.get_event(c.event.id) for c in claims}
        assert {k: e.status for k, e in statuses.items() if e is not None} == {
            "evt_1": EventStatus.DONE,
            "evt_2": EventStatus.PROCESSING,
            "evt_3": EventStatus.PROCESSING,
            "evt_4": EventStatus.DONE,
        }
        await holder.execute(
            "INSERT INTO payments (source, object_id, state, version, facts, created_at,"
            " updated_at) VALUES ('stripe', 'pi_2', 'paid', 1, '{\"keys\": [\"other\"]}',"
            " now(), now())"
        )
        await holder.commit()
    assert await applying == [True] * 4

    held = await a.get_payment("stripe", "pi_2")
    assert held is not None
    assert (held.version, held.facts["keys"]) == (3, ["other", "evt_2", "evt_3"])
    for claim in claims:
        stored = await a.get_event(claim.event.id)
        assert stored is not None and stored.status is EventStatus.DONE


async def test_a_failed_second_pass_fails_its_own_events_only(
    pg_url: str, two: tuple[PostgresStore, PostgresStore]
) -> None:
    """The second transaction (the held payment's events) fails in the database: those
    events get the error back, to be retried; the first pass's stay done."""
    a, _ = two
    await a.record_delivery(request(), [paid("evt_1", "pi_1"), paid("evt_2", "pi_2")])
    claims = await a.claim("a", 10, LEASE, T0)
    batch = [Application(c, c.event.parsed(), bump(c, T0)) for c in claims]

    async with _second_pass_waiting(pg_url, a, batch, "pi_2") as (applying, holder):
        # What the second pass will write now fails in the database.
        await holder.execute(
            "CREATE FUNCTION refuse_pi_2() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN IF NEW.object_id = 'pi_2' THEN RAISE EXCEPTION 'pi_2 refused'; END IF;"
            " RETURN NEW; END $$"
        )
        await holder.execute(
            "CREATE TRIGGER refuse_pi_2 BEFORE INSERT ON payments"
            " FOR EACH ROW EXECUTE FUNCTION refuse_pi_2()"
        )
        await holder.commit()
    by_key = dict(zip((c.event.dedup_key for c in claims), await applying, strict=True))

    assert by_key["evt_1"] is True
    assert isinstance(by_key["evt_2"], psycopg.errors.RaiseException)
    assert "pi_2 refused" in str(by_key["evt_2"])
    assert await a.get_payment("stripe", "pi_1") is not None
    assert await a.get_payment("stripe", "pi_2") is None
    statuses = {c.event.dedup_key: await a.get_event(c.event.id) for c in claims}
    assert {k: e.status for k, e in statuses.items() if e is not None} == {
        "evt_1": EventStatus.DONE,
        "evt_2": EventStatus.PROCESSING,  # still claimed: the worker schedules its retry
    }


async def test_concurrent_upgrades_apply_each_migration_once(pg_url: str) -> None:
    a, b = await opened(pg_url), await opened(pg_url)
    try:
        results: Sequence[Sequence[str]] = await asyncio.gather(a.upgrade(), b.upgrade())
        applied = sorted(version for result in results for version in result)
        shipped = [migration.version for migration in load_migrations("postgres")]
        assert applied == shipped  # each applied once, by one of the two
        assert await a.upgrade() == []
    finally:
        await a.close()
        await b.close()
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cursor = await conn.execute("SELECT version FROM schema_migrations ORDER BY version")
        assert await cursor.fetchall() == [(version,) for version in shipped]


async def test_outage_fails_as_unavailable_and_never_hangs() -> None:
    """No server ever answers on port 1: whatever returns here returned without one."""
    store = PostgresStore.from_url("postgresql://postgres@127.0.0.1:1/test")
    await asyncio.wait_for(store.open(), HANG_GUARD_SECONDS)  # opened with no connection
    try:
        # "unavailable": the pool gave up on a connection (acquire_timeout), rather than
        # an ingest batch running out its own, longer, time limit ("did not commit").
        for attempt in (store.ping(), store.record_delivery(request(), [paid("evt_1")])):
            with pytest.raises(StoreUnavailable, match="PostgreSQL unavailable"):
                await asyncio.wait_for(attempt, HANG_GUARD_SECONDS)
        started = time.monotonic()
        # Degrades to a sleep (at least its timeout: no busy loop), never raises.
        await asyncio.wait_for(store.wait_for_work(0.2), HANG_GUARD_SECONDS)
        assert time.monotonic() - started >= 0.19
    finally:
        await store.close()


class Outage:
    """A TCP relay in front of the real server that can be cut and restored, standing in
    for a PostgreSQL restart or a network partition; with `delay`, every chunk it relays
    waits that long first (a distant server)."""

    def __init__(self, target: tuple[str, int], delay: float = 0.0) -> None:
        self.target = target
        self.delay = delay
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def before(cls, pg_url: str, delay: float = 0.0) -> tuple[Outage, str]:
        """A relay in front of the server of `pg_url`, and the URL that goes through it."""
        real = urlsplit(pg_url)
        relay = cls((real.hostname or "127.0.0.1", real.port or 5432), delay=delay)
        url = real._replace(netloc=f"{real.username}@127.0.0.1:{relay.port}").geturl()
        return relay, url

    async def restore(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        self._writers |= {writer, upstream_writer}
        try:
            await asyncio.gather(
                self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer)
            )
        finally:
            for each in (writer, upstream_writer):
                each.transport.abort()
                self._writers.discard(each)
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if self.delay:
                    await asyncio.sleep(self.delay)
                writer.write(data)
                await writer.drain()
        writer.transport.abort()


async def eventually_pings(store: PostgresStore, within: float) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            await store.ping()
            return
        except StoreUnavailable:
            assert time.monotonic() < deadline, "store did not recover"
            await asyncio.sleep(0.1)


async def test_store_rides_out_a_server_outage(pg_url: str) -> None:
    outage, url = Outage.before(pg_url)
    store = PostgresStore(url, reconnect_timeout=1.0)
    await store.open()  # the server is "down": opening must not wait for it
    try:
        with pytest.raises(StoreUnavailable):
            await store.ping()
        await asyncio.sleep(1.5)  # longer than the pool's reconnect_timeout
        await outage.restore()
        await eventually_pings(store, within=5)
        await store.upgrade()

        await outage.cut()  # a restart: pooled connections die under the store
        for _ in range(3):
            # Refused while the server is still down (restored only below), by the
            # connection, not by an ingest batch's time limit ("did not commit in time").
            with pytest.raises(StoreUnavailable, match="PostgreSQL unavailable"):
                await asyncio.wait_for(
                    store.record_delivery(request(), [paid("evt_1")]), HANG_GUARD_SECONDS
                )
        await outage.restore()
        await eventually_pings(store, within=5)
        result = await store.record_delivery(request(), [paid("evt_1")])
        assert result.new == 1
    finally:
        await store.close()
        await outage.cut()


async def test_durable_commits_stay_on(two: tuple[PostgresStore, PostgresStore]) -> None:
    a, _ = two
    async with a._connection() as conn:
        cursor = await conn.execute("SHOW synchronous_commit")
        row = await cursor.fetchone()
    assert row is not None
    assert row["synchronous_commit"] == "on"


async def test_counting_the_open_statuses_reads_the_status_index_not_the_table(
    pg_url: str,
) -> None:
    """/metrics counts them on every scrape: with 5 M events stored, counting every
    status took 0.7-1 s (a parallel scan of the whole table), these ~1 ms."""
    store = await opened(pg_url)
    try:
        await store.upgrade()
        async with store._connection() as conn:
            await conn.execute(
                "INSERT INTO events (source, dedup_key, kind, type, status, received_at,"
                " updated_at) SELECT 'stripe', 'evt_' || i, 'payment.succeeded', 't',"
                " CASE WHEN i % 1000 = 0 THEN 'pending' ELSE 'done' END, now(), now()"
                " FROM generate_series(1, 50000) AS i"
            )
            await conn.execute("VACUUM ANALYZE events")
            cursor = await conn.execute(
                "EXPLAIN " + q.STATUS_COUNTS_OF, ([s.value for s in OPEN_STATUSES],)
            )
            plan = "\n".join(row["QUERY PLAN"] for row in await cursor.fetchall())
        assert "events_status" in plan and "Seq Scan" not in plan, plan
        counts = await store.status_counts(OPEN_STATUSES)
        assert counts == {"pending": 50, "processing": 0, "retrying": 0, "dead": 0}
    finally:
        await store.close()


def test_from_url_takes_quarantine_limit_out_of_the_connection_url() -> None:
    store = PostgresStore.from_url(
        "postgresql://u@db.example:5432/porteiro?sslmode=disable&quarantine_limit=5"
    )
    assert store.quarantine_limit == 5
    assert store.conninfo == "postgresql://u@db.example:5432/porteiro?sslmode=disable"
    assert PostgresStore.from_url("postgresql://u@h/db").quarantine_limit == 10_000
    spaced = PostgresStore.from_url("postgresql://h/db?options=-c%20a%3Db&quarantine_limit=0")
    assert spaced.conninfo == "postgresql://h/db?options=-c%20a%3Db"
    assert spaced.quarantine_limit == 0
    with pytest.raises(ConfigError):
        PostgresStore.from_url("postgresql://u@h/db?quarantine_limit=lots")
