"""A singleton job under a lease: any number of processes run a LeasedJob for the same
job name, and only the one holding the job's lease (store/leases.py) runs its work.

The holder renews the lease every third of its length. Its work stops when the lease
is lost (another process took it after it expired) or could not be renewed before it
expired (the store unreachable: another process may take it), and on a stop request,
when the lease is released so another process takes the job at once. A holder that
dies renews nothing: its lease expires and the next process to ask takes the job.

A stalled holder (frozen past its lease) may overlap a new one for a moment before it
notices; the jobs tolerate that by construction (the outbox claim is fenced by its own
token and SKIP LOCKED, and the stale cycle's answers are de-duplicated events).

`until_stopped` is the wait a stop request cuts short: the lease loop's idle waits, and
the worker's and the relays' (their loops run as a process's jobs, if not leased ones).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timedelta

from porteiro.errors import StoreUnavailable
from porteiro.observability import logger
from porteiro.store.leases import LeaseStore

DEFAULT_LEASE_SECONDS = 15.0
# How long work that was asked to stop may take to finish before it is cancelled.
STOP_GRACE_SECONDS = 10.0
RELEASE_TIMEOUT_SECONDS = 2.0

# The job's work: runs until the event is set (or it is cancelled).
Work = Callable[[asyncio.Event], Coroutine[object, object, None]]


async def until_stopped(work: Awaitable[object], stop: asyncio.Event) -> None:
    """Await `work` unless `stop` is set first (then `work` is cancelled); an error of
    `work` propagates. Both are finished before this returns, so nothing is left pending."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, stopper):
            pending.cancel()
        await asyncio.gather(task, stopper, return_exceptions=True)
    error = task.exception() if task.done() and not task.cancelled() else None
    if error is not None:
        raise error


def new_holder_id() -> str:
    """A new holder id, host:pid:random, as the leases table shows it (a process's, or
    one worker's or relay's: its claims carry it too)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class LeasedJob:
    """Runs `work` only while this process holds the lease on `name`."""

    def __init__(
        self,
        name: str,
        work: Work,
        store: LeaseStore,
        clock: Callable[[], datetime],
        *,
        holder: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.name = name
        self._work = work
        self._store = store
        self._clock = clock
        self._holder = holder
        self._lease = timedelta(seconds=lease_seconds)
        self._every = lease_seconds / 3
        self._log = logger().bind(job=name, holder=holder)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Ask for the lease until it is free, run the work while it is held, and again,
        until `stop` is set or the task is cancelled."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            expires = await self._take()
            if expires is not None:
                await self._hold(expires, stop)
            await until_stopped(asyncio.sleep(self._every), stop)

    async def _take(self) -> float | None:
        """Take or renew the lease: when it expires (monotonic), or None when not held."""
        asked = time.monotonic()
        now = self._clock()
        try:
            taken = await self._store.take_lease(self.name, self._holder, now, now + self._lease)
        except StoreUnavailable as exc:
            self._log.warning("store unavailable", action="job.store_unavailable", error=str(exc))
            return None
        return asked + self._lease.total_seconds() if taken else None

    async def _hold(self, expires: float, stop: asyncio.Event) -> None:
        self._log.info("job lease taken", action="job.acquired")
        done = asyncio.Event()
        task = asyncio.create_task(self._work(done), name=f"porteiro:job:{self.name}")
        reason = "stopped"
        try:
            while True:
                await until_stopped(asyncio.wait({task}, timeout=self._every), stop)
                if stop.is_set():
                    break
                if task.done():
                    reason = "ended"
                    break
                renewed = await self._take()
                if renewed is not None:
                    expires = renewed
                elif await self._lost():
                    reason = "lost"
                    break
                elif time.monotonic() >= expires - self._every:
                    reason = "unrenewed"  # it may expire before the next try: stop now
                    break
        except asyncio.CancelledError:
            reason = "cancelled"  # the process is shutting down: no grace
            raise
        finally:
            await self._finish(task, done, reason)

    async def _lost(self) -> bool:
        """Whether another process holds the job now (False when the store cannot say)."""
        try:
            leases = await self._store.job_leases()
        except StoreUnavailable:
            return False
        return any(lease.job == self.name and lease.holder != self._holder for lease in leases)

    async def _finish(self, task: asyncio.Task[None], done: asyncio.Event, reason: str) -> None:
        done.set()
        if not task.done() and reason != "cancelled":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), STOP_GRACE_SECONDS)
        task.cancel()
        results = await asyncio.gather(task, return_exceptions=True)
        error = next((r for r in results if isinstance(r, Exception)), None)
        if error is not None:
            self._log.error(
                "job failed", action="job.failed",
                error=f"{type(error).__name__}: {error}", exc_info=error,
            )  # fmt: skip
        if reason != "lost":
            with contextlib.suppress(StoreUnavailable, TimeoutError):
                async with asyncio.timeout(RELEASE_TIMEOUT_SECONDS):
                    await self._store.release_lease(self.name, self._holder)
        log = self._log.warning if reason in ("lost", "unrenewed") else self._log.info
        log("job lease given up", action="job.released", reason=reason)
