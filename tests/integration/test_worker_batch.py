"""Batch processing over both stores: `apply_many` (one transaction per claimed batch, each
event fenced and isolated) and the worker that uses it (enrichment outside the
transaction, prefetch, fallback to one transaction per event).

Real stores, the real `standard` adapter and ledger; the clock is controlled.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from datetime import datetime, timedelta

import httpx
import pytest

from porteiro.config import Config, SourceConfig, WorkerConfig
from porteiro.config.load import parse_config
from porteiro.errors import ConfigError
from porteiro.jobs.lease import until_stopped
from porteiro.model import EventStatus, PaymentState
from porteiro.providers import build_provider
from porteiro.providers.base import Provider
from porteiro.runtime import Runtime
from porteiro.store import open_store
from porteiro.store.base import Application, Applied, Claim, Store
from porteiro.worker import Worker
from porteiro.worker import loop as worker_loop
from tests.integration.test_store_contract import LEASE, T0, boom, event, paid, request
from tests.integration.test_worker import (
    RETRY,
    SECRET,
    Clock,
    FailingProvider,
    body,
    counted,
    deliver,
)
from tests.support.faults import fail_batches

# -- the store verb --------------------------------------------------------------------


async def test_apply_many_fences_and_isolates_each_event(store: Store) -> None:
    keys = ["evt_1", "evt_2", "evt_3", "evt_4", "evt_5"]
    objects = ["pi_1", "pi_1", "pi_1", "pi_2", "pi_3"]
    for key, object_id in zip(keys, objects, strict=True):
        await store.record_delivery(request(), [event(key, object_id=object_id)])
    claims = {c.event.dedup_key: c for c in await store.claim("w1", 10, LEASE, T0)}
    assert sorted(claims) == keys
    c1, c2, c3, c4, c5 = (claims[key] for key in keys)
    stale = Claim(c4.event, "0" * 32, c4.lease_until)
    at = T0 + timedelta(seconds=1)
    e1, e3 = event("evt_1", object_id="pi_1", amount=1500), event("evt_3", object_id="pi_1")
    batch = [
        Application(c1, e1, paid(c1, e1, at, "first")),
        Application(c2, event("evt_2", object_id="pi_1"), boom),  # the ledger raises
        Application(c3, e3, paid(c3, e3, at)),  # sees evt_1's result, not evt_2's
        Application(stale, event("evt_4", object_id="pi_2"), paid(stale, e1, at)),
        Application(c5, event("evt_5", object_id=None), boom),
    ]

    results = await store.apply_many(batch, at)

    assert results[0] is True and results[2] is True and results[3] is False
    assert isinstance(results[1], RuntimeError) and "ledger bug" in str(results[1])
    assert isinstance(results[4], ValueError)
    payment = await store.get_payment("stripe", "pi_1")
    assert payment is not None and payment.version == 2
    assert payment.facts["events"] == [c1.event.id, c3.event.id]
    history = await store.payment_history("stripe", "pi_1")
    assert [(t.event_id, t.note) for t in history] == [(c1.event.id, "first"), (c3.event.id, None)]
    done = await store.get_event(c1.event.id)
    assert done is not None and (done.status, done.amount) == (EventStatus.DONE, 1500)
    assert done.updated_at == at
    for claim in (c2, c4, c5):  # untouched, still held by their (real) claims
        kept = await store.get_event(claim.event.id)
        assert kept is not None and kept.status is EventStatus.PROCESSING
    assert await store.get_payment("stripe", "pi_2") is None
    assert await store.get_payment("stripe", "pi_3") is None
    assert await store.retry_later(c2, "ledger bug", at + timedelta(minutes=1), at)
    assert await store.apply_many([], at) == []


async def test_apply_many_lost_claims_change_nothing(store: Store) -> None:
    await store.record_delivery(request(), [event("evt_1")])
    (first,) = await store.claim("w1", 10, LEASE, T0)
    later = T0 + LEASE + timedelta(seconds=1)
    (second,) = await store.claim("w2", 10, LEASE, later)  # the lease expired
    late = event("evt_1", amount=7)
    assert await store.apply_many([Application(first, late, paid(first, late, later))], later) == [
        False
    ]
    assert await store.get_payment("stripe", "pi_1") is None
    ok = event("evt_1")
    assert await store.apply_many([Application(second, ok, paid(second, ok, later))], later) == [
        True
    ]
    assert [t.event_id for t in await store.payment_history("stripe", "pi_1")] == [second.event.id]


# -- the worker ------------------------------------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_runtime(
    store: Store,
    http: httpx.AsyncClient,
    clock: Clock,
    batch_size: int = 256,
    gather_ms: float = 10.0,
) -> Runtime:
    sources = {
        "std": SourceConfig(name="std", provider="standard", secrets=(SECRET,)),
        "flaky": SourceConfig(name="flaky", provider="failing-test"),
    }
    worker = WorkerConfig(
        concurrency=4, batch_size=batch_size, lease_seconds=30, retry=RETRY, gather_ms=gather_ms
    )
    providers: dict[str, Provider] = {
        "std": build_provider(sources["std"]),
        "flaky": FailingProvider(sources["flaky"]),  # test-only: not a registered provider
    }
    return Runtime(Config(sources=sources, worker=worker), store, providers, http, clock=clock)


@pytest.fixture
async def runtime(store: Store, clock: Clock) -> AsyncIterator[Runtime]:
    async with httpx.AsyncClient() as http:
        yield make_runtime(store, http, clock)


LIFECYCLE = [
    ("payment.created", {}),
    ("payment.paid", {}),
    ("payment.partially_refunded", {"amount": 300, "refunded_total": 300}),
]


async def deliver_lifecycles(runtime: Runtime, payments: int) -> int:
    """Interleaved lifecycles (event i of every payment, then i + 1...); returns the count."""
    sent = 0
    for index, (kind, extra) in enumerate(LIFECYCLE):
        for p in range(payments):
            raw = body(f"evt_{p}_{index}", kind, f"pay_{p}", second=index, **extra)
            await deliver(runtime, "std", raw)
            sent += 1
    return sent


async def test_one_batch_applies_good_events_and_retries_failed_enrichment(
    runtime: Runtime,
) -> None:
    sent = await deliver_lifecycles(runtime, 4)
    (flaky,) = (await deliver(runtime, "flaky", b'{"id": "hook_1"}')).event_ids
    assert await Worker(runtime).run_once() == sent + 1
    for p in range(4):
        payment = await runtime.store.get_payment("std", f"pay_{p}")
        assert payment is not None and payment.state is PaymentState.PARTIALLY_REFUNDED
        assert len(await runtime.store.payment_history("std", f"pay_{p}")) == 3
    failed = await runtime.store.get_event(flaky)
    assert failed is not None and failed.status is EventStatus.RETRYING
    assert counted(runtime, "std", "applied") == sent
    assert counted(runtime, "flaky", "retry") == 1


async def test_a_failing_batch_falls_back_to_one_transaction_per_event(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = await deliver_lifecycles(runtime, 2)

    fail_batches(runtime, monkeypatch)  # on the real store: batches of one go through
    assert await Worker(runtime).run_once() == sent
    assert counted(runtime, "std", "applied") == sent
    counts = await runtime.store.status_counts()
    assert counts["done"] == sent and counts["processing"] == 0


async def test_run_drains_several_batches_and_leaves_no_claim(store: Store, clock: Clock) -> None:
    async with httpx.AsyncClient() as http:
        runtime = make_runtime(store, http, clock, batch_size=4)
        sent = await deliver_lifecycles(runtime, 5)  # 15 events: four batches, three full
        stop = asyncio.Event()
        running = asyncio.create_task(Worker(runtime).run(stop))
        for _ in range(200):
            if (await store.status_counts())["done"] == sent:
                break
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(running, timeout=5)
    counts = await store.status_counts()
    assert counts["done"] == sent and counts["processing"] == 0
    for p in range(5):
        assert len(await store.payment_history("std", f"pay_{p}")) == 3


async def test_after_a_partial_batch_the_worker_gathers_before_claiming_again(
    store: Store, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events that arrive while the worker waits out `gather_ms` after a partial batch are
    applied together, in one transaction; a stop ends the wait at once."""
    applied: list[int] = []
    apply_many = store.apply_many

    async def counting(batch: Sequence[Application], now: datetime) -> Sequence[Applied]:
        applied.append(len(batch))
        return await apply_many(batch, now)

    monkeypatch.setattr(store, "apply_many", counting)  # a spy: the real verb runs
    waits: list[str] = []  # how each of the worker's idle waits ended

    async def noting(work: Awaitable[object], stop: asyncio.Event) -> None:
        task = asyncio.ensure_future(work)
        await until_stopped(task, stop)
        waits.append("cut short" if task.cancelled() else "waited out")

    monkeypatch.setattr(worker_loop, "until_stopped", noting)  # a spy too

    async def done() -> int:
        for _ in range(400):
            if (count := (await store.status_counts())["done"]) == sent:
                return count
            await asyncio.sleep(0.01)
        return (await store.status_counts())["done"]

    async with httpx.AsyncClient() as http:
        runtime = make_runtime(store, http, clock, gather_ms=1000)
        stop = asyncio.Event()
        running = asyncio.create_task(Worker(runtime).run(stop))
        sent = 1
        await deliver(runtime, "std", body("evt_a", "payment.created", "pay_a"))
        assert await done() == 1  # woken by the delivery: no wait before a first batch
        for name in ("b", "c", "d"):  # within the second that follows that partial batch
            await deliver(runtime, "std", body(f"evt_{name}", "payment.created", f"pay_{name}"))
        sent = 4
        assert await done() == 4
        assert applied == [1, 3]
        stop.set()  # the worker is waiting out its gather again
        await asyncio.wait_for(running, timeout=5)  # a hang guard
        assert waits[-1] == "cut short"  # the stop ended the gather, not its 1 s
        assert "waited out" in waits  # the first gather, that batched b, c and d


async def test_concurrent_workers_batches_on_shared_payments_apply_once(
    pg_url: str, clock: Clock
) -> None:
    """Two workers, each with its own pool, claim small interleaved batches touching the
    same payments: sorted payment locks keep them from deadlocking, fencing from
    double-applying."""
    stores = [open_store(pg_url), open_store(pg_url)]
    for store in stores:
        await store.open()
    try:
        await stores[0].upgrade()
        async with httpx.AsyncClient() as http:
            runtimes = [make_runtime(store, http, clock, batch_size=5) for store in stores]
            sent = await deliver_lifecycles(runtimes[0], 12)

            async def drain(runtime: Runtime, name: str) -> None:
                worker = Worker(runtime, worker_id=name)
                while await worker.run_once():
                    pass

            await asyncio.wait_for(
                asyncio.gather(drain(runtimes[0], "a"), drain(runtimes[1], "b")), 60
            )
        counts = await stores[0].status_counts()
        assert counts["done"] == sent
        total = 0
        for p in range(12):
            history = await stores[0].payment_history("std", f"pay_{p}")
            assert len({t.event_id for t in history}) == len(history) == 3
            total += len(history)
            payment = await stores[0].get_payment("std", f"pay_{p}")
            assert payment is not None and payment.state is PaymentState.PARTIALLY_REFUNDED
        assert total == sent
    finally:
        for store in stores:
            await store.close()


# -- configuration ---------------------------------------------------------------------


def test_worker_batch_settings() -> None:
    defaults = parse_config({}, {}).worker
    assert (defaults.batch_size, defaults.prefetch) == (256, True)
    assert parse_config({"worker": {"prefetch": False}}, {}).worker.prefetch is False
    with pytest.raises(ConfigError, match="prefetch"):
        parse_config({"worker": {"prefetch": "no"}}, {})
    assert defaults.gather_ms == 10.0
    assert parse_config({"worker": {"gather_ms": 0}}, {}).worker.gather_ms == 0.0
    assert parse_config({"worker": {"gather_ms": 2.5}}, {}).worker.gather_ms == 2.5
    assert parse_config({"worker": {"gather_ms": "10"}}, {}).worker.gather_ms == 10.0
    for bad in (-1, 1001, "ten", True):
        with pytest.raises(ConfigError, match="gather_ms"):
            parse_config({"worker": {"gather_ms": bad}}, {})
