"""A running Worker's presence lease, on SQLite and PostgreSQL (the `store` fixture):
held under `worker:<its id>` and renewed while it runs, released when it stops or is
cancelled, and the expired presences of dead workers forgotten by the next to start."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import httpx
import pytest

from porteiro.config import Config
from porteiro.jobs.presence import presence_job
from porteiro.runtime import Runtime, utc_now
from porteiro.store.base import Store
from porteiro.store.leases import lease_store
from porteiro.worker import Worker
from tests.support.waiting import wait_until_async

PRESENCE_SECONDS = 0.6  # renewed every 0.2 s


@pytest.fixture
async def runtime(store: Store) -> AsyncIterator[Runtime]:
    async with httpx.AsyncClient() as http:
        yield Runtime(Config(), store, {}, http)


async def presences(store: Store) -> dict[str, str]:
    leases = await lease_store(store).job_leases()
    return {lease.job: lease.holder for lease in leases if lease.live(utc_now())}


async def test_a_running_worker_is_present_until_it_stops(runtime: Runtime) -> None:
    worker = Worker(runtime, worker_id="host:1:aa", presence_seconds=PRESENCE_SECONDS)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    job = presence_job("host:1:aa")

    async def present() -> bool:
        return (await presences(runtime.store)).get(job) == "host:1:aa"

    await wait_until_async(present, "the worker's presence taken")
    [before] = await lease_store(runtime.store).job_leases()
    # Renewed by its own timer, past the length of one lease.
    await wait_until_async(
        lambda: _renewed_after(runtime.store, before.lease_until), "the presence renewed"
    )
    stop.set()
    await running
    assert await lease_store(runtime.store).job_leases() == []


async def test_a_cancelled_worker_releases_its_presence(runtime: Runtime) -> None:
    running = asyncio.create_task(Worker(runtime, worker_id="host:2:bb").run())
    await wait_until_async(
        lambda: _has(runtime.store, presence_job("host:2:bb")), "the worker's presence taken"
    )
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert await lease_store(runtime.store).job_leases() == []


async def test_a_starting_worker_forgets_the_dead_ones(runtime: Runtime) -> None:
    leases = lease_store(runtime.store)
    long_ago = utc_now() - timedelta(hours=1)
    await leases.take_lease(presence_job("host:3:dead"), "host:3:dead", long_ago, long_ago)
    await leases.take_lease("reconcile", "host:3:dead", long_ago, long_ago)
    stop = asyncio.Event()
    running = asyncio.create_task(Worker(runtime, worker_id="host:4:cc").run(stop))

    async def forgotten() -> bool:
        jobs = [lease.job for lease in await leases.job_leases()]
        return jobs == ["reconcile", presence_job("host:4:cc")]

    await wait_until_async(forgotten, "the dead worker's presence forgotten, its job kept")
    stop.set()
    await running


async def _has(store: Store, job: str) -> bool:
    return job in await presences(store)


async def _renewed_after(store: Store, until: datetime) -> bool:
    return any(lease.lease_until > until for lease in await lease_store(store).job_leases())
