"""LeaseStore contract, on SQLite and PostgreSQL (the `store` fixture): one holder per
job, renewal by the holder only, takeover once a lease expired, release, the listing,
the due-outbox and due-events reads the unattended-role check uses, and forgetting
expired worker presences."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from porteiro.config import DestinationConfig
from porteiro.model import Kind, ParsedEvent, Payment, PaymentState
from porteiro.sinks.fanout import outbox_rows
from porteiro.store import open_store
from porteiro.store.base import Store
from porteiro.store.leases import lease_store
from porteiro.store.outbox import OutboxRow, outbox_store
from tests.support.inbound import inbound

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
TTL = timedelta(seconds=10)


async def test_one_holder_until_the_lease_expires(store: Store) -> None:
    leases = lease_store(store)
    assert await leases.take_lease("reconcile", "a", T0, T0 + TTL)
    assert not await leases.take_lease("reconcile", "b", T0 + TTL / 2, T0 + TTL * 1.5)
    # The holder renews; the other still cannot take it before the renewed expiry.
    assert await leases.take_lease("reconcile", "a", T0 + TTL / 2, T0 + TTL * 1.5)
    assert not await leases.take_lease("reconcile", "b", T0 + TTL * 1.2, T0 + TTL * 2)
    assert await leases.take_lease("reconcile", "b", T0 + TTL * 2, T0 + TTL * 3)
    # The old holder's renewal is refused: it lost the job.
    assert not await leases.take_lease("reconcile", "a", T0 + TTL * 2, T0 + TTL * 3)
    [lease] = await leases.job_leases()
    assert (lease.job, lease.holder) == ("reconcile", "b")
    assert lease.acquired_at == lease.renewed_at == T0 + TTL * 2
    assert lease.lease_until == T0 + TTL * 3
    assert lease.live(T0 + TTL * 2) and not lease.live(T0 + TTL * 3)


async def test_renewal_keeps_the_acquisition_time(store: Store) -> None:
    leases = lease_store(store)
    await leases.take_lease("relay:erp", "a", T0, T0 + TTL)
    await leases.take_lease("relay:erp", "a", T0 + TTL / 2, T0 + TTL * 1.5)
    [lease] = await leases.job_leases()
    assert (lease.acquired_at, lease.renewed_at) == (T0, T0 + TTL / 2)


async def test_release_frees_the_job_at_once_for_its_holder_only(store: Store) -> None:
    leases = lease_store(store)
    await leases.take_lease("reconcile", "a", T0, T0 + TTL)
    await leases.release_lease("reconcile", "b")  # not b's: nothing happens
    assert not await leases.take_lease("reconcile", "b", T0, T0 + TTL)
    await leases.release_lease("reconcile", "a")
    assert await leases.take_lease("reconcile", "b", T0, T0 + TTL)


async def test_jobs_are_leased_independently(store: Store) -> None:
    leases = lease_store(store)
    assert await leases.take_lease("reconcile", "a", T0, T0 + TTL)
    assert await leases.take_lease("relay:erp", "b", T0, T0 + TTL)
    assert [(lease.job, lease.holder) for lease in await leases.job_leases()] == [
        ("reconcile", "a"),
        ("relay:erp", "b"),
    ]


async def test_racing_processes_get_one_lease(store_url: str) -> None:
    """Eight stores (eight pools, as eight processes would have) race for one free job."""
    stores = [open_store(store_url) for _ in range(8)]
    for each in stores:
        await each.open()
    try:
        await stores[0].upgrade()
        won = await asyncio.gather(
            *(
                lease_store(each).take_lease("reconcile", f"p{n}", T0, T0 + TTL)
                for n, each in enumerate(stores)
            )
        )
    finally:
        for each in stores:
            await each.close()
    assert sum(won) == 1


async def test_due_outbox_is_the_oldest_due_pending_row_per_destination(store: Store) -> None:
    outbox = outbox_store(store)

    def row(destination: str, event_id: int) -> list[OutboxRow]:
        object_id = f"pay_{event_id}"
        event = ParsedEvent(f"gw_{event_id}", Kind.PAYMENT_PAID, "paid", object_id)
        payment = Payment("std", object_id, PaymentState.PAID, 1000, "BRL", 0, None, 1, T0, {})
        to = {
            destination: DestinationConfig(
                destination, url="http://127.0.0.1:1/", secret="whsec_MTIz"
            )
        }
        return outbox_rows(event_id, "std", event, payment, to)

    await outbox.enqueue_outbox([*row("erp", 1), *row("bus", 2)], T0)
    await outbox.enqueue_outbox(row("erp", 3), T0 + TTL)
    await outbox.enqueue_outbox(row("bus", 4), T0 + TTL * 5)  # not due yet
    due = await lease_store(store).due_outbox_since(T0 + TTL * 2)
    assert due == {"erp": T0, "bus": T0}


async def test_forget_deletes_the_expired_leases_of_a_prefix_only(store: Store) -> None:
    leases = lease_store(store)
    await leases.take_lease("worker:host:1:dead", "host:1:dead", T0, T0 + TTL)
    await leases.take_lease("worker:host:2:live", "host:2:live", T0, T0 + TTL * 3)
    await leases.take_lease("reconcile", "host:1:dead", T0, T0 + TTL)
    assert await leases.forget_leases("worker:", T0 + TTL * 2) == 1
    assert [lease.job for lease in await leases.job_leases()] == [
        "reconcile",
        "worker:host:2:live",
    ]


async def test_due_events_are_the_oldest_a_claim_would_take(store: Store) -> None:
    leases = lease_store(store)
    assert await leases.due_events_since(T0) is None
    events = [ParsedEvent(f"gw_{n}", Kind.PAYMENT_PAID, "paid", f"pay_{n}") for n in range(3)]
    await store.record_delivery(inbound("std", b"{}", received_at=T0), events)
    assert await leases.due_events_since(T0 - TTL) is None  # not due yet
    assert await leases.due_events_since(T0 + TTL) == T0
    # Claimed: nothing waits while the claims' leases last; once they expired, they do.
    assert len(await store.claim("w", 3, TTL, T0 + TTL)) == 3
    assert await leases.due_events_since(T0 + TTL * 1.5) is None
    assert await leases.due_events_since(T0 + TTL * 3) == T0 + TTL * 2
    # Claimed again and put off: retrying, due when its retry is.
    [claim, *_] = await store.claim("w", 3, TTL * 10, T0 + TTL * 3)
    assert await store.retry_later(claim, "boom", T0 + TTL * 4, T0 + TTL * 3)
    assert await leases.due_events_since(T0 + TTL * 3.5) is None
    assert await leases.due_events_since(T0 + TTL * 5) == T0 + TTL * 4
