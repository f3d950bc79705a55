"""A worker's presence: a lease of its own (`worker:<worker id>`, so not exclusive: every
worker holds one) that says a worker runs, for the role watch (jobs/watch.py) to tell a
backlog that waits for a worker from one that no worker will ever take.

The heartbeat renews it on its own timer, every third of its length like the job
leases (jobs/lease.py), so the worker's claim-and-apply loop makes no extra store round
trip. A clean stop releases it; a dead worker's presence expires, and the next worker to
start deletes it (each process has a new id: nothing else would ever reuse the row).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta

from porteiro.errors import StoreUnavailable
from porteiro.jobs.lease import DEFAULT_LEASE_SECONDS, RELEASE_TIMEOUT_SECONDS
from porteiro.observability import logger
from porteiro.store.leases import LeaseStore

WORKER_PRESENCE = "worker:"


def presence_job(worker_id: str) -> str:
    return f"{WORKER_PRESENCE}{worker_id}"


def is_presence(job: str) -> bool:
    return job.startswith(WORKER_PRESENCE)


class Presence:
    """Keeps `worker:<worker_id>` alive while `kept()` is entered."""

    def __init__(
        self,
        worker_id: str,
        store: LeaseStore,
        clock: Callable[[], datetime],
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.job = presence_job(worker_id)
        self._holder = worker_id
        self._store = store
        self._clock = clock
        self._lease = timedelta(seconds=lease_seconds)
        self._every = lease_seconds / 3
        self._log = logger().bind(worker=worker_id)

    @contextlib.asynccontextmanager
    async def kept(self) -> AsyncIterator[None]:
        """The heartbeat runs as a task beside the body; on the way out (a stop, an error
        or a cancellation) it is cancelled, even mid-renewal, and the presence released."""
        beating = asyncio.create_task(self._beat(), name=f"porteiro:{self.job}")
        try:
            yield
        finally:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)
            with contextlib.suppress(StoreUnavailable, TimeoutError):
                async with asyncio.timeout(RELEASE_TIMEOUT_SECONDS):
                    await self._store.release_lease(self.job, self._holder)

    async def _beat(self) -> None:
        forgotten = False
        while True:
            now = self._clock()
            try:
                await self._store.take_lease(self.job, self._holder, now, now + self._lease)
                if not forgotten:
                    # The dead workers' presences: expired, so no one reads them as live.
                    await self._store.forget_leases(WORKER_PRESENCE, now)
                    forgotten = True
            except StoreUnavailable:
                pass  # the worker's own loop logs the outage; the next beat tries again
            except Exception as exc:  # a heartbeat bug must not end the heartbeat
                self._log.error(
                    "worker presence not renewed", action="worker.presence_failed",
                    error=f"{type(exc).__name__}: {exc}", exc_info=exc,
                )  # fmt: skip
            await asyncio.sleep(self._every)
