"""Group commit: concurrent ingests share one durable transaction.

A commit costs a disk flush (SQLite fsync, PostgreSQL WAL flush) whatever it carries, so
under load the stores commit everything that is already waiting in one transaction
instead of one flush per request. No artificial wait by default: a batch is whatever
queued while the previous one was committing (plus an optional tiny linger), so a lone
request commits at once and a busy receiver commits in larger batches.

Each caller gets its own result, and only after the commit that contains its item
returned. A batch failure fails every caller in it (they answer 503; the gateway retries)
— except a failure that is not an outage (a bug, a value the database refuses): then
each item is committed on its own, so one poison delivery cannot fail its neighbours.
A caller that gave up (timeout) before its batch started is left out of it.

Timeouts are deadlines checked by ONE timer per group, not a timer per caller: the
receiver submits every delivery with the same store timeout, and a per-request
`asyncio.timeout` cost about a tenth of the ack's CPU. A caller past its deadline gets
TimeoutError at once, whether its item still waits or its batch is stuck in the database;
a batch that commits later is stored all the same (the gateway's retry is a duplicate).
The watchdog's deadline is kept here, not asked of its handle: only asyncio's TimerHandle
has `when()`, and uvloop returns a plain Handle for a timer due within half a millisecond.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from porteiro.errors import StoreUnavailable

T = TypeVar("T")
R = TypeVar("R")

# Commits a batch in ONE transaction; returns one result per item, in order.
CommitBatch = Callable[[Sequence[T]], Awaitable[Sequence[R]]]


class GroupCommit(Generic[T, R]):
    """Queue + committer tasks. `submit` resolves once the item's batch committed.

    `concurrency` committers may each have a batch in flight (PostgreSQL: one pooled
    connection each); SQLite has a single writer, so 1. Only the first `active` of them
    take batches until `activate` lets more in (PostgreSQL's commit probe decides once
    connected: a second batch in flight pays where a commit waits, costs where it
    does not).
    """

    def __init__(
        self,
        commit: CommitBatch[T, R],
        *,
        max_batch: int = 256,
        linger_seconds: float = 0.0,
        concurrency: int = 1,
        active: int | None = None,
    ) -> None:
        active = concurrency if active is None else active
        if max_batch < 1 or not 1 <= active <= concurrency or linger_seconds < 0:
            raise ValueError(
                "max_batch and concurrency must be >= 1, active within 1..concurrency,"
                " linger_seconds >= 0"
            )
        self._commit = commit
        self._max_batch = max_batch
        self._linger = linger_seconds
        self._concurrency = concurrency
        self._active = active
        self._widened = asyncio.Event()  # set when `active` grows: parked committers look
        self._queue: deque[tuple[T, asyncio.Future[R]]] = deque()
        self._ready = asyncio.Event()
        self._committers: list[asyncio.Task[None]] = []
        self._running = 0  # committers not yet ended (checked on every submit: a counter)
        self._closed = False
        # Per timeout value, (deadline, future) in submission order: so each deque is
        # ordered by deadline, and the earliest deadline is at the head of one of them.
        self._deadlines: defaultdict[float, deque[tuple[float, asyncio.Future[R]]]]
        self._deadlines = defaultdict(deque)
        self._watchdog: asyncio.Handle | None = None
        self._watchdog_at: float | None = None  # the deadline it is set for (see above)
        self._loop: asyncio.AbstractEventLoop  # set by _start, with the committers

    async def submit(self, item: T, give_up_after: float | None = None) -> R:
        """The item's result once its batch committed; TimeoutError past `give_up_after`
        seconds (the item may still be committed: the caller just stops waiting)."""
        if self._closed:
            raise StoreUnavailable("the store is closed")
        loop = self._start()
        future: asyncio.Future[R] = loop.create_future()
        self._queue.append((item, future))
        if give_up_after is not None:
            deadline = loop.time() + give_up_after
            self._deadlines[give_up_after].append((deadline, future))
            if self._watchdog_at is None or deadline < self._watchdog_at:
                self._arm()  # the first deadline, or one shorter than any waiting
        self._ready.set()
        return await future

    def _arm(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        heads = [waiting[0][0] for waiting in self._deadlines.values() if waiting]
        self._watchdog_at = min(heads) if heads else None
        if self._watchdog_at is None:
            self._watchdog = None
        else:
            self._watchdog = self._loop.call_at(self._watchdog_at, self._expire)

    def _expire(self) -> None:
        """Fail the callers past their deadline; forget those already answered."""
        self._watchdog = self._watchdog_at = None
        now = self._loop.time()
        for waiting in self._deadlines.values():
            while waiting and (waiting[0][1].done() or waiting[0][0] <= now):
                _, future = waiting.popleft()
                _set_exception(future, TimeoutError())
        self._arm()

    def _start(self) -> asyncio.AbstractEventLoop:
        """The committers' loop, starting them if none runs. Kept rather than asked per
        submit: in Python 3.11 `asyncio.get_running_loop()` makes a getpid system call
        (a fork check), ~2 % of an ack's CPU on a virtual machine."""
        if self._running:
            return self._loop
        # Started lazily, on the loop of the first caller (a store may be opened elsewhere).
        self._loop = asyncio.get_running_loop()
        self._committers = [
            asyncio.create_task(self._run(n), name=f"porteiro:group-commit:{n}")
            for n in range(self._concurrency)
        ]
        self._running = len(self._committers)
        for task in self._committers:
            task.add_done_callback(self._committer_ended)
        return self._loop

    @property
    def active(self) -> int:
        """How many committers take batches now."""
        return self._active

    def activate(self, count: int) -> None:
        """Let `count` committers (at most `concurrency`) take batches from now on."""
        self._active = max(1, min(count, self._concurrency))
        self._widened.set()

    def _committer_ended(self, _: asyncio.Task[None]) -> None:
        # Once all have ended (closed, or their loop is gone), the next submit restarts them.
        self._running -= 1

    async def close(self) -> None:
        """Stop the committers after the batches in flight; fail whatever still waits."""
        self._closed = True
        self._ready.set()
        self._widened.set()
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = self._watchdog_at = None
        self._deadlines.clear()
        await asyncio.gather(*self._committers, return_exceptions=True)
        self._committers = []
        while self._queue:
            _, future = self._queue.popleft()
            if not future.done():
                future.set_exception(StoreUnavailable("the store is closing"))

    async def _run(self, number: int) -> None:
        while not self._closed:
            if number >= self._active:  # parked until `activate` lets it in
                self._widened.clear()
                await self._widened.wait()
                continue
            if not self._queue:
                self._ready.clear()
                await self._ready.wait()
                continue
            if self._linger and len(self._queue) < self._max_batch:
                await asyncio.sleep(self._linger)
            batch = self._take()
            if batch:
                await self._commit_batch(batch)

    def _take(self) -> list[tuple[T, asyncio.Future[R]]]:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        while self._queue and len(batch) < self._max_batch:
            entry = self._queue.popleft()
            if not entry[1].done():  # done here means the caller was cancelled (timeout)
                batch.append(entry)
        return batch

    async def _commit_batch(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._commit([item for item, _ in batch])
        except StoreUnavailable as exc:
            _fail(batch, exc)
        except asyncio.CancelledError:
            _fail(batch, StoreUnavailable("the store is closing"))
            raise
        except Exception as exc:
            if len(batch) == 1:
                _fail(batch, exc)
                return
            for entry in batch:  # isolate the item the database refused
                await self._commit_batch([entry])
        else:
            if len(results) != len(batch):
                _fail(batch, RuntimeError("group commit returned the wrong number of results"))
                return
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)


def _fail(batch: Sequence[tuple[object, asyncio.Future[R]]], exc: BaseException) -> None:
    for _, future in batch:
        _set_exception(future, exc)


def _set_exception(future: asyncio.Future[R], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
        # Marked retrieved: a caller that no longer awaits it must not leave a "Future
        # exception was never retrieved" line; one that awaits it still gets the exception.
        with contextlib.suppress(BaseException):
            future.exception()
