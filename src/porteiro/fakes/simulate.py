"""`porteiro simulate`: send correctly signed gateway webhooks to any Porteiro URL.

Two halves: `build_plan` is pure (bodies, duplicates, order, all from one seeded RNG) and
`send` does the HTTP. Bodies are signed at send time, not at planning time, so timestamps
are fresh even for a long run; a duplicate resends the very same body, which carries the
same gateway event id, so the receiver must count it as a duplicate.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import httpx

from porteiro.providers.base import Provider, SamplePayment


@dataclass(frozen=True, slots=True)
class PlannedDelivery:
    payment: int  # index of the payment in the plan
    body: bytes
    duplicate: bool


@dataclass(frozen=True, slots=True)
class Plan:
    deliveries: Sequence[PlannedDelivery]
    payments: Sequence[SamplePayment]

    @property
    def duplicates(self) -> int:
        return sum(1 for delivery in self.deliveries if delivery.duplicate)


def build_plan(
    provider: Provider,
    *,
    count: int,
    duplicates: float,
    shuffle: bool,
    refunds: float,
    now: datetime,
    rng: random.Random,
) -> Plan:
    """Lifecycles of `count` payments, each delivery resent `duplicates` extra times.

    The whole part of `duplicates` is how many copies every delivery gets on top of the
    original; the fractional part is the share of deliveries that get one more (0.3:
    30 % sent twice; 3: every delivery sent four times).
    """
    if count < 0:
        raise ValueError("count must be >= 0")
    if duplicates < 0.0 or not 0.0 <= refunds <= 1.0:
        raise ValueError("duplicates must be >= 0 and refunds a fraction between 0 and 1")
    copies, fraction = divmod(duplicates, 1.0)
    tag = f"{rng.getrandbits(32):08x}"  # keeps object ids of separate runs apart
    payments = [_sample_payment(tag, index, refunds, rng) for index in range(count)]
    originals = [
        PlannedDelivery(index, body, duplicate=False)
        for index, payment in enumerate(payments)
        for body in provider.sample_lifecycle(payment, now, rng)
    ]
    resent = set(rng.sample(range(len(originals)), round(fraction * len(originals))))
    deliveries: list[PlannedDelivery] = []
    for position, original in enumerate(originals):
        deliveries.append(original)
        extra = int(copies) + (1 if position in resent else 0)
        deliveries.extend(
            PlannedDelivery(original.payment, original.body, duplicate=True) for _ in range(extra)
        )
    if shuffle:
        rng.shuffle(deliveries)
    return Plan(deliveries=deliveries, payments=payments)


def _sample_payment(tag: str, index: int, refunds: float, rng: random.Random) -> SamplePayment:
    return SamplePayment(
        object_id=f"sim_{tag}_{index:05d}",
        reference=f"order-{tag}-{index:05d}",
        amount=rng.randrange(500, 100_000),
        refund=rng.random() < refunds,
    )


@dataclass(frozen=True, slots=True)
class SendReport:
    sent: int
    statuses: dict[int, int]  # HTTP status -> count; 0 for transport errors
    duplicates: int
    elapsed_seconds: float
    latencies: Sequence[float]  # seconds, sorted

    def count(self, low: int, high: int) -> int:
        return sum(n for status, n in self.statuses.items() if low <= status < high)

    @property
    def ok(self) -> int:
        return self.count(200, 300)

    @property
    def transport_errors(self) -> int:
        return self.statuses.get(0, 0)

    @property
    def all_ok(self) -> bool:
        return self.ok == self.sent

    def percentile(self, fraction: float) -> float:
        """Nearest-rank percentile of the request latencies, in seconds."""
        if not self.latencies:
            return 0.0
        rank = max(math.ceil(fraction * len(self.latencies)), 1)
        return self.latencies[rank - 1]

    def summary(self) -> str:
        rate = self.sent / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0
        return (
            f"sent {self.sent} (duplicates {self.duplicates}): "
            f"2xx {self.ok}, 4xx {self.count(400, 500)}, 5xx {self.count(500, 600)}, "
            f"errors {self.transport_errors}; {self.elapsed_seconds:.2f} s, {rate:.1f} req/s, "
            f"latency p50 {self.percentile(0.5) * 1000:.1f} ms, "
            f"p99 {self.percentile(0.99) * 1000:.1f} ms"
        )


async def send(
    plan: Plan,
    provider: Provider,
    *,
    url: str,
    source: str,
    concurrency: int,
    clock: Callable[[], datetime],
    on_sent: Callable[[int], None] | None = None,
    request_timeout: float = 10.0,
) -> SendReport:
    """POST every planned delivery with up to `concurrency` requests in flight."""
    base = url.rstrip("/")
    statuses: dict[int, int] = {}
    latencies: list[float] = []
    queue = iter(plan.deliveries)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def sender(client: httpx.AsyncClient) -> None:
        for delivery in queue:  # a shared iterator: each delivery is sent once
            signed = provider.sign(delivery.body, clock())
            target = f"{base}/webhooks/{source}{signed.path_suffix}"
            if signed.query:
                target += f"?{signed.query}"
            started = time.perf_counter()
            try:
                response = await client.post(target, content=signed.body, headers=signed.headers)
                status = response.status_code
            except httpx.HTTPError:
                status = 0
            latencies.append(time.perf_counter() - started)
            statuses[status] = statuses.get(status, 0) + 1
            if on_sent is not None:
                on_sent(status)

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=request_timeout, limits=limits) as client:
        await asyncio.gather(*(sender(client) for _ in range(max(concurrency, 1))))
    return SendReport(
        sent=len(plan.deliveries),
        statuses=statuses,
        duplicates=plan.duplicates,
        elapsed_seconds=time.perf_counter() - started,
        latencies=sorted(latencies),
    )
