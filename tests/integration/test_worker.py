"""The worker over both stores: apply once, retry with backoff, dead-letter, fencing.

Deliveries are signed by the real `standard` adapter, parsed by it and recorded exactly as
the receiver does; the worker then runs against the real store with a controllable clock.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from porteiro import replay
from porteiro.config import Config, SourceConfig, WorkerConfig
from porteiro.errors import GatewayError, NonRetryable
from porteiro.model import (
    EventStatus,
    InboundRequest,
    Kind,
    ParsedEvent,
    PaymentState,
    StoredEvent,
    Verdict,
)
from porteiro.providers import build_provider
from porteiro.providers.base import (
    Ack,
    Provider,
    SamplePayment,
    SignedRequest,
)
from porteiro.retry import RetryPolicy
from porteiro.runtime import Runtime
from porteiro.store.base import Claim, EventFilter, RecordResult, Store
from porteiro.worker import Worker

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
RETRY = RetryPolicy(max_attempts=3, base_delay_seconds=10, multiplier=2, jitter=0.0)


class FailingProvider:
    """Test-only adapter: every event is thin and its enrichment always fails."""

    def __init__(self, source: SourceConfig) -> None:
        self.source = source

    def verify(self, request: InboundRequest, now: datetime) -> None:
        return None

    def parse(self, request: InboundRequest) -> Sequence[ParsedEvent]:
        body = json.loads(request.body)
        data = {"permanent": bool(body.get("permanent"))}
        event = ParsedEvent(body["id"], Kind.PAYMENT_PAID, "x", object_id="p", thin=True, data=data)
        return [event]

    def ack(self) -> Ack:
        return Ack()

    async def enrich(self, event: ParsedEvent, http: httpx.AsyncClient) -> ParsedEvent:
        if event.data.get("permanent"):
            raise NonRetryable("the PSP denies this payment")
        raise GatewayError("gateway down: 502 from /payments/p")

    async def fetch_status(self, object_id: str, http: httpx.AsyncClient) -> ParsedEvent | None:
        return None

    def sign(self, body: bytes, now: datetime) -> SignedRequest:
        return SignedRequest(body=body, headers={})

    def sample_lifecycle(
        self, payment: SamplePayment, now: datetime, rng: random.Random
    ) -> Sequence[bytes]:
        return []


@dataclass
class Clock:
    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def runtime(store: Store, clock: Clock) -> AsyncIterator[Runtime]:
    sources = {
        "std": SourceConfig(name="std", provider="standard", secrets=(SECRET,)),
        "flaky": SourceConfig(name="flaky", provider="failing-test"),
    }
    config = Config(
        sources=sources,
        worker=WorkerConfig(concurrency=4, batch_size=32, lease_seconds=30, retry=RETRY),
    )
    providers: dict[str, Provider] = {
        "std": build_provider(sources["std"]),
        "flaky": FailingProvider(sources["flaky"]),  # test-only: not a registered provider
    }
    async with httpx.AsyncClient() as http:
        yield Runtime(config, store, providers, http, clock=clock)


def body(
    event_id: str, kind: str, object_id: str = "pay_1", second: int = 0, **extra: Any
) -> bytes:
    occurred = (T0 - timedelta(minutes=10) + timedelta(seconds=second)).isoformat()
    fields = {"id": event_id, "type": kind, "object_id": object_id, "amount": 1000}
    fields |= {"currency": "BRL", "occurred_at": occurred, **extra}
    return json.dumps(fields).encode()


async def deliver(runtime: Runtime, source: str, raw: bytes) -> RecordResult:
    """What the receiver does: sign as the gateway would, verify, parse, record."""
    provider = runtime.providers[source]
    signed = provider.sign(raw, runtime.clock())
    request = InboundRequest(
        source=source,
        method="POST",
        path=f"/webhooks/{source}",
        query="",
        headers=tuple((name.lower(), value) for name, value in signed.headers.items()),
        body=signed.body,
        peer="127.0.0.1",
        received_at=runtime.clock(),
    )
    provider.verify(request, runtime.clock())
    return await runtime.store.record_delivery(request, provider.parse(request))


async def event(store: Store, event_id: int) -> StoredEvent:
    found = await store.get_event(event_id)
    assert found is not None
    return found


def counted(runtime: Runtime, source: str, outcome: str) -> float:
    """Events of `source` that ended with `outcome`, every kind together."""
    return sum(
        sample.value
        for family in runtime.metrics.registry.collect()
        for sample in family.samples
        if sample.name == "porteiro_events_processed_total"
        and sample.labels["source"] == source
        and sample.labels["outcome"] == outcome
    )


async def test_recorded_events_are_applied_once(runtime: Runtime) -> None:
    created = await deliver(runtime, "std", body("evt_c", "payment.created"))
    paid = await deliver(runtime, "std", body("evt_p", "payment.paid", second=5))
    assert await Worker(runtime).run_once() == 2
    for result in (created, paid):
        assert (await event(runtime.store, result.event_ids[0])).status is EventStatus.DONE
    payment = await runtime.store.get_payment("std", "pay_1")
    assert payment is not None and payment.state is PaymentState.PAID
    assert payment.amount == 1000
    history = await runtime.store.payment_history("std", "pay_1")
    assert [t.event_id for t in history] == [created.event_ids[0], paid.event_ids[0]]
    assert counted(runtime, "std", Verdict.APPLIED.value) == 2
    assert await Worker(runtime).run_once() == 0


async def test_duplicate_after_done_never_runs_again(runtime: Runtime) -> None:
    first = await deliver(runtime, "std", body("evt_p", "payment.paid"))
    assert await Worker(runtime).run_once() == 1
    again = await deliver(runtime, "std", body("evt_p", "payment.paid"))
    assert again.duplicates == 1 and again.event_ids == first.event_ids
    stored = await event(runtime.store, first.event_ids[0])
    assert stored.status is EventStatus.DONE and stored.duplicates == 1
    assert await Worker(runtime).run_once() == 0
    assert len(await runtime.store.payment_history("std", "pay_1")) == 1


async def test_failures_back_off_then_dead_letter(runtime: Runtime, clock: Clock) -> None:
    worker = Worker(runtime)
    (event_id,) = (await deliver(runtime, "flaky", b'{"id": "hook_1"}')).event_ids
    assert await worker.run_once() == 1
    failed = await event(runtime.store, event_id)
    assert failed.status is EventStatus.RETRYING and failed.attempts == 1
    assert failed.next_attempt_at == T0 + timedelta(seconds=10)
    assert failed.last_error == "GatewayError: gateway down: 502 from /payments/p"
    assert await worker.run_once() == 0  # not due yet
    clock.advance(10)
    assert await worker.run_once() == 1
    failed = await event(runtime.store, event_id)
    assert failed.status is EventStatus.RETRYING and failed.attempts == 2
    assert failed.next_attempt_at == clock.now + timedelta(seconds=20)
    clock.advance(20)
    assert await worker.run_once() == 1
    dead = await event(runtime.store, event_id)
    assert dead.status is EventStatus.DEAD and dead.attempts == 3
    assert dead.last_error is not None and "gateway down" in dead.last_error
    assert counted(runtime, "flaky", "retry") == 2
    assert counted(runtime, "flaky", "dead") == 1
    clock.advance(3600)
    assert await worker.run_once() == 0  # dead stays dead...

    # ...until the gateway sends it again: a duplicate never hides a failed event.
    again = await deliver(runtime, "flaky", b'{"id": "hook_1"}')
    assert again.event_ids == [event_id]
    due = await event(runtime.store, event_id)
    assert due.status in (EventStatus.PENDING, EventStatus.RETRYING)
    assert due.next_attempt_at is not None and due.next_attempt_at <= clock.now
    assert await worker.run_once() == 1


async def test_a_non_retryable_failure_is_dead_lettered_at_once(runtime: Runtime) -> None:
    worker = Worker(runtime)
    raw = b'{"id": "hook_2", "permanent": true}'
    (event_id,) = (await deliver(runtime, "flaky", raw)).event_ids
    assert await worker.run_once() == 1
    dead = await event(runtime.store, event_id)
    assert dead.status is EventStatus.DEAD and dead.attempts == 1
    assert dead.last_error == "NonRetryable: the PSP denies this payment"
    assert counted(runtime, "flaky", "dead") == 1


async def test_same_payment_events_in_one_batch_apply_in_order(runtime: Runtime) -> None:
    lifecycle = [
        ("payment.created", {}),
        ("payment.authorized", {}),
        ("payment.paid", {}),
        ("payment.partially_refunded", {"amount": 300, "refunded_total": 300}),
        ("payment.refunded", {"amount": 700, "refunded_total": 1000}),
    ]
    ids: dict[str, list[int]] = {}
    # Refund first, then the rest: arrival order differs from the payment's history.
    for object_id in ("pay_a", "pay_b", "pay_c"):
        for index in (4, 0, 3, 1, 2):
            kind, extra = lifecycle[index]
            raw = body(f"evt_{object_id}_{index}", kind, object_id, second=index, **extra)
            result = await deliver(runtime, "std", raw)
            ids.setdefault(object_id, []).extend(result.event_ids)
    assert await Worker(runtime).run_once() == 15
    for object_id, event_ids in ids.items():
        payment = await runtime.store.get_payment("std", object_id)
        assert payment is not None and payment.state is PaymentState.REFUNDED
        assert payment.refunded_amount == 1000
        history = await runtime.store.payment_history("std", object_id)
        # Each event applied once, one after the other in event id order.
        assert [t.event_id for t in history] == sorted(event_ids)
        for event_id in event_ids:
            assert (await event(runtime.store, event_id)).status is EventStatus.DONE


class _HeldAfterClaim(Worker):
    """A worker that stops between its claim and its apply until the test lets it go:
    a GC pause or a SIGSTOP at the worst moment, by events rather than by timing."""

    def __init__(self, runtime: Runtime, worker_id: str) -> None:
        super().__init__(runtime, worker_id=worker_id)
        self.claimed = asyncio.Event()
        self.release = asyncio.Event()

    async def process(self, claims: Sequence[Claim]) -> None:
        self.claimed.set()
        await self.release.wait()
        await super().process(claims)


async def test_paused_worker_loses_its_claim_and_applies_nothing(
    runtime: Runtime, clock: Clock
) -> None:
    (event_id,) = (await deliver(runtime, "std", body("evt_p", "payment.paid"))).event_ids
    stalled = _HeldAfterClaim(runtime, worker_id="stalled")
    stalled_run = asyncio.create_task(stalled.run_once())
    await asyncio.wait_for(stalled.claimed.wait(), timeout=10)  # it holds the claim, held
    clock.advance(60)  # past the 30 s lease
    assert await Worker(runtime, worker_id="rescuer").run_once() == 1
    stalled.release.set()
    assert await stalled_run == 1
    assert counted(runtime, "std", "claim_lost") == 1
    assert counted(runtime, "std", Verdict.APPLIED.value) == 1
    history = await runtime.store.payment_history("std", "pay_1")
    assert [t.event_id for t in history] == [event_id]
    assert (await event(runtime.store, event_id)).status is EventStatus.DONE


async def test_run_processes_new_work_and_stops_on_request(runtime: Runtime) -> None:
    stop = asyncio.Event()
    running = asyncio.create_task(Worker(runtime).run(stop))
    await asyncio.sleep(0.1)
    (event_id,) = (await deliver(runtime, "std", body("evt_p", "payment.paid"))).event_ids
    for _ in range(100):
        if (await event(runtime.store, event_id)).status is EventStatus.DONE:
            break
        await asyncio.sleep(0.05)
    assert (await event(runtime.store, event_id)).status is EventStatus.DONE
    stop.set()
    await asyncio.wait_for(running, timeout=2)


async def test_unknown_source_is_dead_lettered(runtime: Runtime, store: Store) -> None:
    # An event whose source was removed from the configuration since it was stored.
    orphan_runtime = Runtime(
        runtime.config, store, {"std": runtime.providers["std"]}, runtime.http, clock=runtime.clock
    )
    (event_id,) = (await deliver(runtime, "flaky", b'{"id": "hook_9"}')).event_ids
    assert await Worker(orphan_runtime).run_once() == 1
    dead = await event(store, event_id)
    assert dead.status is EventStatus.DEAD
    assert dead.last_error is not None and "unknown source 'flaky'" in dead.last_error


async def test_replay_reparses_a_delivery_the_old_code_could_not_parse(
    runtime: Runtime,
) -> None:
    # As if an older adapter had failed on this (valid, authenticated) body.
    raw = body("evt_late", "payment.paid", "pay_r")
    signed = runtime.providers["std"].sign(raw, runtime.clock())
    request = InboundRequest(
        "std",
        "POST",
        "/webhooks/std",
        "",
        tuple(signed.headers.items()),
        raw,
        None,
        runtime.clock(),
    )
    recorded = await runtime.store.record_delivery(request, [], parse_error="old adapter bug")
    (placeholder,) = recorded.event_ids
    assert (await event(runtime.store, placeholder)).status is EventStatus.DEAD

    dry = await replay.reparse(runtime, [placeholder], dry_run=True)
    assert [
        (p.event_id, p.dedup_key, p.from_state, p.to_state, p.verdict) for p in dry.planned
    ] == [(None, "evt_late", None, "paid", "applied")]
    assert (await event(runtime.store, placeholder)).status is EventStatus.DEAD  # untouched
    assert await runtime.store.get_payment("std", "pay_r") is None

    report = await replay.reparse(runtime, [placeholder], dry_run=False)
    assert report.deliveries == 1 and not report.failures and len(report.event_ids) == 1
    assert await Worker(runtime).run_once() == 1
    payment = await runtime.store.get_payment("std", "pay_r")
    assert payment is not None and payment.state is PaymentState.PAID
    assert (await event(runtime.store, placeholder)).status is EventStatus.IGNORED


async def test_dlq_redrive_and_requeue(runtime: Runtime, clock: Clock) -> None:
    (failing,) = (await deliver(runtime, "flaky", b'{"id": "hook_2"}')).event_ids
    (fine,) = (await deliver(runtime, "std", body("evt_ok", "payment.paid"))).event_ids
    worker = Worker(runtime)
    for _ in range(3):
        await worker.run_once()
        clock.advance(60)
    assert (await event(runtime.store, failing)).status is EventStatus.DEAD
    assert (await event(runtime.store, fine)).status is EventStatus.DONE

    redriven = await replay.redrive(runtime, EventFilter(status=EventStatus.DEAD))
    assert redriven.event_ids == [failing]
    revived = await event(runtime.store, failing)
    assert revived.status is EventStatus.PENDING and revived.attempts == 0
    skipped = await replay.redrive(runtime, EventFilter(), ids=[fine, 999_999])
    assert skipped.skipped == [fine] and skipped.missing == [999_999] and not skipped.event_ids

    # Requeue as stored (no re-parse): the done event runs again, the ledger sees a duplicate.
    requeued = await replay.requeue(runtime, [fine], dry_run=False)
    assert requeued.event_ids == [fine]
    assert await worker.run_once() == 2
    payment = await runtime.store.get_payment("std", "pay_1")
    assert payment is not None and payment.state is PaymentState.PAID and payment.version == 1
