"""A worker frozen inside its apply transaction (issue 22, finding 5), on PostgreSQL.

The transaction is held open by a merchant handler that waits, as a worker stopped
between its round trips would: ingest must not wait on it, PostgreSQL must end it once
its lease is gone, and other workers must not queue behind its payment locks. Real
stores (each with its own pool, as separate processes); the clock is controlled.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import httpx
import psycopg
import pytest

from porteiro.errors import PaymentBusy, StoreUnavailable
from porteiro.handlers import Executor
from porteiro.model import EventStatus, Outcome
from porteiro.store.base import Application, Claim
from porteiro.store.postgres import apply as pg_apply
from porteiro.store.postgres.store import PostgresStore
from porteiro.worker import Worker
from tests.integration.pg_locks import lock_payment, try_lock_payment
from tests.integration.test_postgres_store import LEASE, T0, bump, opened, paid, request
from tests.integration.test_worker import Clock, body, counted, deliver
from tests.integration.test_worker_batch import make_runtime

pytestmark = pytest.mark.postgres


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


def held_open(
    inside: asyncio.Event, release: asyncio.Event
) -> Callable[[Outcome, Executor], Awaitable[None]]:
    """A handler that keeps its apply transaction open until `release` is set."""

    async def handle(outcome: Outcome, ctx: Executor) -> None:
        inside.set()
        await release.wait()

    return handle


@contextlib.asynccontextmanager
async def frozen_apply(store: PostgresStore, claim: Claim) -> AsyncIterator[asyncio.Task[object]]:
    """`claim` being applied by `store`, its transaction held open between its round
    trips for as long as the block runs."""
    inside, release = asyncio.Event(), asyncio.Event()
    item = Application(
        claim, claim.event.parsed(), bump(claim, T0), handle=held_open(inside, release)
    )
    applying: asyncio.Task[object] = asyncio.create_task(store.apply_many([item], T0))
    await asyncio.wait_for(inside.wait(), 5)
    try:
        yield applying
    finally:
        release.set()
        with contextlib.suppress(Exception):
            await applying


async def test_a_duplicate_of_an_event_being_applied_is_acked_at_once(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    """A gateway re-sending the event a frozen worker holds: its ingest (duplicates + 1 on
    the event's row, a link row to it) does not wait for that worker's transaction."""
    worker, receiver = two
    [event_id] = (await receiver.record_delivery(request(), [paid("evt_1")])).event_ids
    [claim] = await worker.claim("w", 10, LEASE, T0)
    async with frozen_apply(worker, claim) as applying:
        # Well within the ingest batch's own 5 s limit: it does not wait on any lock.
        again = await asyncio.wait_for(receiver.record_delivery(request(), [paid("evt_1")]), 3)
        assert (again.event_ids, again.duplicates) == ([event_id], 1)
        assert not applying.done()  # the worker's transaction was open all along
    assert await applying == [True]
    stored = await receiver.get_event(event_id)
    assert stored is not None and (stored.status, stored.duplicates) == (EventStatus.DONE, 1)
    assert len(await receiver.event_deliveries(event_id)) == 2


async def _lock_free(pg_url: str, object_id: str) -> bool:
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        return await try_lock_payment(conn, "stripe", object_id)


async def test_postgresql_ends_a_frozen_apply_once_its_lease_is_gone(
    pg_url: str, two: tuple[PostgresStore, PostgresStore]
) -> None:
    """The transaction's idle limit is its lease (here 1 s): PostgreSQL ends it and frees
    its payment's lock while the worker is still frozen; the worker, resumed, finds its
    apply refused (the store unavailable to it) and nothing written."""
    worker, _ = two
    await worker.record_delivery(request(), [paid("evt_1")])
    [claim] = await worker.claim("w", 10, timedelta(seconds=1), T0)
    async with frozen_apply(worker, claim) as applying:
        assert not await _lock_free(pg_url, "pi_1")  # held by the frozen transaction
        deadline = time.monotonic() + 10
        while not await _lock_free(pg_url, "pi_1"):
            assert time.monotonic() < deadline, "the frozen transaction was never ended"
            await asyncio.sleep(0.1)
        assert not applying.done()  # still frozen when PostgreSQL ended it
    with pytest.raises(StoreUnavailable):
        await applying
    assert await worker.get_payment("stripe", "pi_1") is None
    assert await worker.payment_history("stripe", "pi_1") == []


async def test_a_payment_held_by_a_frozen_worker_is_handed_back_not_waited_for(
    pg_url: str, two: tuple[PostgresStore, PostgresStore]
) -> None:
    """Another worker's batch with an event of the frozen worker's payment: its other
    payments apply, that event is handed back unattempted (PaymentBusy: pending again,
    its attempt not counted, due shortly) instead of the batch queueing on the lock."""
    frozen, other = two
    await frozen.record_delivery(request(), [paid("evt_1", "pi_1")])
    [held] = await frozen.claim("frozen", 10, LEASE, T0)
    await other.record_delivery(request(), [paid("evt_2", "pi_1"), paid("evt_3", "pi_2")])
    claims = await other.claim("other", 10, LEASE, T0)
    assert len(claims) == 2
    async with frozen_apply(frozen, held):
        batch = [Application(c, c.event.parsed(), bump(c, T0)) for c in claims]
        results = await asyncio.wait_for(other.apply_many(batch, T0), 10)
    by_key = dict(zip((c.event.dedup_key for c in claims), results, strict=True))
    assert by_key["evt_3"] is True
    assert isinstance(by_key["evt_2"], PaymentBusy)
    [busy] = [c for c in claims if c.event.dedup_key == "evt_2"]
    back = await other.get_event(busy.event.id)
    assert back is not None
    assert (back.status, back.attempts) == (EventStatus.PENDING, 0)
    assert back.next_attempt_at == T0 + timedelta(seconds=pg_apply.HELD_RETRY_SECONDS)
    assert await other.claim("other", 10, LEASE, T0) == []  # not due yet
    later = T0 + timedelta(seconds=pg_apply.HELD_RETRY_SECONDS)
    [again] = await other.claim("other", 10, LEASE, later)
    assert (again.event.id, again.event.attempts) == (busy.event.id, 1)
    assert await other.apply_many(
        [Application(again, again.event.parsed(), bump(again, later))], later
    ) == [True]
    payment = await other.get_payment("stripe", "pi_1")
    assert payment is not None and payment.facts["keys"] == ["evt_1", "evt_2"]


async def test_a_claim_lost_between_the_round_trips_writes_nothing_of_it(
    two: tuple[PostgresStore, PostgresStore],
) -> None:
    """The event rows are not locked while the ledger runs, so a claim can be taken over
    then (its lease gone, another worker's claim): the batch's write fails as a whole
    and is done again without it; the other events of the batch still apply once."""
    worker, taker = two
    await worker.record_delivery(request(), [paid("evt_1", "pi_1")])
    [lost] = await worker.claim("w", 10, timedelta(seconds=5), T0)
    await worker.record_delivery(request(), [paid("evt_2", "pi_2")])
    [kept] = await worker.claim("w", 10, LEASE, T0)
    claims = [lost, kept]
    inside, release = asyncio.Event(), asyncio.Event()
    batch = [
        Application(
            c,
            c.event.parsed(),
            bump(c, T0),
            handle=held_open(inside, release) if c is lost else None,
        )
        for c in claims
    ]
    applying = asyncio.create_task(worker.apply_many(batch, T0))
    await asyncio.wait_for(inside.wait(), 5)
    later = T0 + timedelta(seconds=6)
    [taken] = await taker.claim("taker", 10, LEASE, later)  # evt_1's lease is gone
    assert taken.event.id == lost.event.id
    release.set()
    by_key = dict(zip((c.event.dedup_key for c in claims), await applying, strict=True))
    assert by_key == {"evt_1": False, "evt_2": True}
    assert await worker.get_payment("stripe", "pi_1") is None
    assert [t.event_id for t in await worker.payment_history("stripe", "pi_2")] == [kept.event.id]
    stored = await worker.get_event(lost.event.id)
    assert stored is not None and stored.status is EventStatus.PROCESSING


async def test_the_worker_defers_an_event_whose_payment_is_held_without_a_retry(
    pg_url: str, two: tuple[PostgresStore, PostgresStore]
) -> None:
    """Held by another session (as by a frozen worker): the worker's batch applies its
    other payment and counts the held one's event `deferred`, pending again with its
    attempt not counted and no error: no retry burnt, no dead letter near."""
    store, _ = two
    async with httpx.AsyncClient() as http:
        runtime = make_runtime(store, http, Clock())
        held = await deliver(runtime, "std", body("evt_1", "payment.paid", "pay_1"))
        free = await deliver(runtime, "std", body("evt_2", "payment.paid", "pay_2"))
        async with await psycopg.AsyncConnection.connect(pg_url) as holder:
            await lock_payment(holder, "std", "pay_1")
            assert await Worker(runtime).run_once() == 2
            await holder.rollback()
    assert counted(runtime, "std", "deferred") == 1
    assert counted(runtime, "std", "applied") == 1
    assert counted(runtime, "std", "retry") == 0
    back = await store.get_event(held.event_ids[0])
    assert back is not None
    assert (back.status, back.attempts, back.last_error) == (EventStatus.PENDING, 0, None)
    done = await store.get_event(free.event_ids[0])
    assert done is not None and done.status is EventStatus.DONE
