"""Delivers a fake gateway's webhooks at least once, with the faults a real one has.

The emitter applies the planned steps in time order (a step dated in the future waits for
its moment), so the API truth is always ahead of (or equal to) what a webhook announces.
Each webhook of a step is then, by one seeded RNG in a fixed order: dropped (never sent,
recorded), or queued once plus, with the duplicate rate, once more a little later; its
first attempt waits the configured delay. Workers send what is due; a non-2xx answer or a
network failure is retried on the gateway's schedule divided by the time factor, until
the schedule is exhausted (then the webhook counts as given up, and is listed with the
dropped ones: it never reached the receiver).

Without `reorder`, one payment's webhooks leave in the order they happened (the next waits
for the previous one's first attempt); with it, the send order is a seeded shuffle.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from porteiro.fakes.core import FakeGateway, Step, Webhook
from porteiro.fakes.scenario import Scenario
from porteiro.observability import logger

# Longest a step dated in the future is waited for (bounded runs).
MAX_STEP_WAIT_SECONDS = 24 * 3600.0


@dataclass(eq=False)
class Delivery:
    webhook: Webhook
    duplicate: bool
    due: float = 0.0
    attempts: int = 0
    after: asyncio.Event | None = None  # the previous webhook of the payment, first attempt
    first_attempt: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Stats:
    sent: int = 0  # HTTP attempts
    delivered: set[str] = field(default_factory=set)  # event ids that got a 2xx
    dropped: list[dict[str, str]] = field(default_factory=list)
    duplicated: int = 0
    retried: int = 0
    failed_attempts: int = 0
    gave_up: dict[str, Webhook] = field(default_factory=dict)


def join_url(base: str, suffix: str, query: str) -> str:
    """`base` + the gateway's path suffix, its query merged with the signed one."""
    parts = urlsplit(base)
    merged = "&".join(part for part in (parts.query, query) if part)
    return urlunsplit((parts.scheme, parts.netloc, parts.path + suffix, merged, ""))


class Emitter:
    def __init__(
        self,
        gateway: FakeGateway,
        scenario: Scenario,
        *,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gateway = gateway
        self.scenario = scenario
        self.stats = Stats()
        self._wall = wall
        self._clock = clock
        self._faults = random.Random(f"faults:{scenario.seed}")
        self._heap: list[tuple[float, float, int, Delivery]] = []
        self._seq = 0
        self._inflight = 0
        self._planning_done = False
        self._started = asyncio.Event()
        self._finished = asyncio.Event()
        self._cond = asyncio.Condition()
        self._last_of: dict[str, Delivery] = {}

    # -- state --------------------------------------------------------------------------

    def start(self) -> None:
        self._started.set()

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    @property
    def pending(self) -> int:
        return len(self._heap) + self._inflight

    def state(self) -> dict[str, Any]:
        stats = self.stats
        gave_up = [
            _entry(webhook, "gave_up")
            for event_id, webhook in stats.gave_up.items()
            if event_id not in stats.delivered
        ]
        return {
            "sent": stats.sent,
            "delivered": len(stats.delivered),
            "dropped": [*stats.dropped, *gave_up],
            "duplicated": stats.duplicated,
            "retried": stats.retried,
            "pending": self.pending,
            "failed_attempts": stats.failed_attempts,
        }

    async def wait_done(self) -> None:
        await self._finished.wait()

    # -- the run ------------------------------------------------------------------------

    async def run(self, steps: Sequence[Step]) -> None:
        await self._started.wait()
        timeout = httpx.Timeout(self.scenario.timeout_seconds, connect=3.0)
        async with httpx.AsyncClient(timeout=timeout) as http:
            workers = [
                asyncio.create_task(self._worker(http)) for _ in range(self.scenario.concurrency)
            ]
            try:
                await self._advance(steps)
                await asyncio.gather(*workers)
            finally:
                for task in workers:
                    task.cancel()
                self._finished.set()

    async def _advance(self, steps: Sequence[Step]) -> None:
        ordered = sorted(steps, key=lambda step: step.at)
        for step in ordered:
            wait = (step.at - self._wall()).total_seconds()
            if wait > 0:
                await asyncio.sleep(min(wait, MAX_STEP_WAIT_SECONDS))
            async with self.gateway.lock:
                step.payment.exists = True
                webhooks = step.apply()
            async with self._cond:
                for webhook in webhooks:
                    self._plan(webhook)
                self._cond.notify_all()
        async with self._cond:
            self._planning_done = True
            self._cond.notify_all()

    def _plan(self, webhook: Webhook) -> None:
        """Decide this webhook's faults (seeded, in step order) and queue its copies."""
        scenario, rng = self.scenario, self._faults
        dropped = rng.random() < scenario.drop_rate
        duplicate = rng.random() < scenario.duplicate_rate
        low, high = scenario.delay_ms
        delay = rng.uniform(low, high) / 1000.0
        dup_delay = delay + rng.uniform(0.0, max(high / 1000.0, 0.05))
        order_key = rng.random() if scenario.reorder else 0.0
        if dropped:
            self.stats.dropped.append(_entry(webhook, "dropped"))
            return
        now = self._clock()
        original = Delivery(webhook, duplicate=False)
        due = now + delay
        previous = self._last_of.get(webhook.object_id)
        if not scenario.reorder and previous is not None:
            original.after = previous.first_attempt
            due = max(due, previous.due)  # popped after it: never waits on a queued one
        self._last_of[webhook.object_id] = original
        self._push(due, order_key, original)
        if duplicate:
            self.stats.duplicated += 1
            self._push(now + dup_delay, rng.random() if scenario.reorder else 0.0,
                       Delivery(webhook, duplicate=True))  # fmt: skip

    def _push(self, due: float, order_key: float, delivery: Delivery) -> None:
        delivery.due = due
        self._seq += 1
        heapq.heappush(self._heap, (due, order_key, self._seq, delivery))

    async def _worker(self, http: httpx.AsyncClient) -> None:
        while True:
            async with self._cond:
                delivery = await self._next()
                if delivery is None:
                    return
                self._inflight += 1
            retry_at: float | None = None
            try:
                if delivery.after is not None:
                    await delivery.after.wait()
                retry_at = await self._attempt(delivery, http)
            finally:
                delivery.first_attempt.set()
                async with self._cond:
                    self._inflight -= 1
                    if retry_at is not None:
                        self._push(retry_at, 0.0, delivery)
                    self._cond.notify_all()

    async def _next(self) -> Delivery | None:
        """The next due delivery (called holding the condition), or None when finished."""
        while True:
            if self._heap:
                wait = self._heap[0][0] - self._clock()
                if wait <= 0:
                    return heapq.heappop(self._heap)[3]
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._cond.wait(), timeout=wait)
            elif self._planning_done and self._inflight == 0:
                self._cond.notify_all()
                return None
            else:
                await self._cond.wait()

    async def _attempt(self, delivery: Delivery, http: httpx.AsyncClient) -> float | None:
        """POST once; the monotonic time of the next attempt, or None when finished."""
        webhook = delivery.webhook
        signed = self.gateway.sign(webhook, self._wall())
        url = join_url(self.gateway.settings.webhook_url, signed.path_suffix, signed.query)
        delivery.attempts += 1
        self.stats.sent += 1
        if delivery.attempts > 1:
            self.stats.retried += 1
        try:
            response = await http.post(url, content=signed.body, headers=dict(signed.headers))
            status: int | str = response.status_code
            ok = response.is_success
        except httpx.HTTPError as exc:
            status, ok = type(exc).__name__, False
        if ok:
            self.stats.delivered.add(webhook.event_id)
            return None
        self.stats.failed_attempts += 1
        schedule = self.gateway.retry_schedule
        if delivery.attempts > len(schedule):
            logger().warning("fake webhook given up", event_id=webhook.event_id, status=status)
            self.stats.gave_up.setdefault(webhook.event_id, webhook)
            return None
        return self._clock() + schedule[delivery.attempts - 1] / self.scenario.time_factor


def _entry(webhook: Webhook, reason: str) -> dict[str, str]:
    return {"object_id": webhook.object_id, "event_id": webhook.event_id,
            "type": webhook.type, "reason": reason}  # fmt: skip
