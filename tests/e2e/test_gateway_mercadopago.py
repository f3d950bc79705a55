"""Mercado Pago end to end: the real app on uvicorn with a background worker, deliveries
signed by the adapter and sent by `simulate`, and enrichment against a real local server
playing the payments API (tests/fakes/mercadopago.py).

Notifications carry no state, so the "gateway" moves each payment along in the fake API
before the notifications of that step are sent (approved, then partially refunded, then
refunded); every delivery is sent four times, shuffled across payments.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from porteiro.config import Config, SourceConfig, WorkerConfig
from porteiro.fakes.simulate import Plan, build_plan, send
from porteiro.http.app import create_app
from porteiro.model import EventStatus, PaymentState, StoredEvent
from porteiro.providers.base import SamplePayment
from porteiro.replay import matching_events
from porteiro.retry import RetryPolicy
from porteiro.runtime import Runtime, utc_now
from porteiro.store.base import EventFilter
from porteiro.worker import Worker
from tests.fakes.mercadopago import FakeMercadoPago, payment
from tests.support.servers import live_server
from tests.support.stored import stored_events_once

SECRET = "mp-e2e-secret-signature"
TOKEN = "APP_USR-e2e-access-token"
SOURCE = "mp"
T0 = datetime(2025, 3, 20, 12, 0, tzinfo=UTC)


@dataclass
class Served:
    url: str
    runtime: Runtime
    fake: FakeMercadoPago

    async def events(self) -> list[StoredEvent]:
        return await matching_events(self.runtime.store, EventFilter(source=SOURCE))

    async def wait(self, done: Callable[[list[StoredEvent]], bool], what: str) -> None:
        await stored_events_once(self.runtime.store, SOURCE, done, what)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    fake = FakeMercadoPago(token=TOKEN)
    async with live_server(fake.app(), lifespan="off") as api_url:
        mp = SourceConfig(
            name=SOURCE, provider="mercadopago", secrets=("old-secret", SECRET),
            api_base_url=api_url, api_key=TOKEN,
        )  # fmt: skip
        retry = RetryPolicy(base_delay_seconds=0.5, multiplier=1.0, jitter=0.0)
        config = Config(
            store_url=f"sqlite:///{tmp_path / 'porteiro.db'}",
            sources={SOURCE: mp},
            worker=WorkerConfig(poll_interval_seconds=0.05, retry=retry),
        )
        runtime = Runtime.build(config)
        app = create_app(runtime, background=[Worker(runtime).run], migrate=True)
        async with live_server(app) as url:
            yield Served(url, runtime, fake)


def all_settled(events: list[StoredEvent]) -> bool:
    return bool(events) and all(e.status is EventStatus.DONE for e in events)


def step_of(plan: Plan) -> Callable[[bytes], int]:
    """Position of a notification in its payment's lifecycle (by its date_created)."""
    bodies: dict[int, set[bytes]] = {}
    for delivery in plan.deliveries:
        bodies.setdefault(delivery.payment, set()).add(delivery.body)
    steps = {
        body: index
        for group in bodies.values()
        for index, body in enumerate(sorted(group, key=lambda b: json.loads(b)["date_created"]))
    }
    return steps.__getitem__


def major(minor: int) -> Decimal:
    return Decimal(minor).scaleb(-2)


def stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def run_phase(
    served: Served, plan: Plan, steps: Sequence[int], step: Callable[[bytes], int]
) -> None:
    part = Plan([d for d in plan.deliveries if step(d.body) in steps], plan.payments)
    provider = served.runtime.providers[SOURCE]
    report = await send(part, provider, url=served.url, source=SOURCE, concurrency=8,
                        clock=utc_now)  # fmt: skip
    assert report.statuses == {200: report.sent} and report.sent > 0
    await served.wait(all_settled, f"steps {steps}")


async def test_shuffled_duplicated_notifications_converge_to_the_api_state(
    served: Served,
) -> None:
    provider = served.runtime.providers[SOURCE]
    plan = build_plan(provider, count=6, duplicates=3, shuffle=True, refunds=0.5, now=utc_now(),
                      rng=random.Random(20250320))  # fmt: skip
    refunded = [p for p in plan.payments if p.refund]
    assert 0 < len(refunded) < len(plan.payments)
    step = step_of(plan)

    def seed(sample: SamplePayment, status: str, detail: str, refunded: int, at: datetime) -> None:
        served.fake.payments[sample.object_id] = payment(
            sample.object_id, status=status, status_detail=detail, amount=major(sample.amount),
            refunded=major(refunded), reference=sample.reference, date_approved=stamp(T0),
            date_last_updated=stamp(at),
        )  # fmt: skip

    for sample in plan.payments:
        seed(sample, "approved", "accredited", 0, T0)
    await run_phase(served, plan, [0, 1], step)  # payment.created, payment.updated (approved)
    for sample in refunded:
        seed(sample, "approved", "partially_refunded", sample.amount // 3, T0 + timedelta(hours=1))
    await run_phase(served, plan, [2], step)
    middle = await served.runtime.store.get_payment(SOURCE, refunded[0].object_id)
    assert middle is not None and middle.state is PaymentState.PARTIALLY_REFUNDED
    assert middle.refunded_amount == refunded[0].amount // 3
    for sample in refunded:
        seed(sample, "refunded", "refunded", sample.amount, T0 + timedelta(hours=2))
    await run_phase(served, plan, [3], step)

    events = await served.events()
    assert len(events) == len({d.body for d in plan.deliveries})
    assert all(e.duplicates == 3 and not e.thin for e in events), "each body was sent 4 times"
    store = served.runtime.store
    for sample in plan.payments:
        found = await store.get_payment(SOURCE, sample.object_id)
        assert found is not None
        assert (found.amount, found.currency, found.reference) == (
            sample.amount, "BRL", sample.reference,
        )  # fmt: skip
        if sample.refund:
            assert found.state is PaymentState.REFUNDED
            assert found.refunded_amount == sample.amount
        else:
            assert found.state is PaymentState.PAID and found.refunded_amount == 0
        assert found.anomalies == 0
        mine = {e.id for e in events if e.object_id == sample.object_id}
        history = await store.payment_history(SOURCE, sample.object_id)
        assert sorted(t.event_id for t in history) == sorted(mine), "each event applied once"
        # Duplicates never reached the API: one read per distinct notification.
        assert served.fake.requests_for(sample.object_id) == [200] * len(mine)


async def test_a_payment_not_yet_visible_is_retried_until_it_is(served: Served) -> None:
    provider = served.runtime.providers[SOURCE]
    sample = SamplePayment("1320991821", "order-404", 12_345)
    body = provider.sample_lifecycle(sample, utc_now(), random.Random(4))[0]
    signed = provider.sign(body, utc_now())
    target = f"{served.url}/webhooks/{SOURCE}?{signed.query}"
    async with httpx.AsyncClient() as client:
        response = await client.post(target, content=signed.body, headers=signed.headers)
    assert (response.status_code, response.content) == (200, b"")

    def retrying(events: list[StoredEvent]) -> bool:
        return len(events) == 1 and events[0].status is EventStatus.RETRYING

    await served.wait(retrying, "a retry after the 404")
    [event] = await served.events()
    assert event.attempts >= 1 and "404" in (event.last_error or "")
    assert await served.runtime.store.get_payment(SOURCE, sample.object_id) is None

    served.fake.payments[sample.object_id] = payment(
        sample.object_id, status="approved", status_detail="accredited", amount="123.45",
        reference=sample.reference, date_approved=stamp(T0),
    )  # fmt: skip
    await served.wait(all_settled, "the retry to succeed")
    found = await served.runtime.store.get_payment(SOURCE, sample.object_id)
    assert found is not None and found.state is PaymentState.PAID
    assert (found.amount, found.reference) == (12_345, "order-404")
    assert served.fake.requests_for(sample.object_id)[0] == 404
    assert served.fake.requests_for(sample.object_id)[-1] == 200


async def test_forged_and_unsigned_notifications_are_refused(served: Served) -> None:
    provider = served.runtime.providers[SOURCE]
    sample = SamplePayment("555", "order-555", 1_000)
    body = provider.sample_lifecycle(sample, utc_now(), random.Random(5))[0]
    signed = provider.sign(body, utc_now())
    forged_query = signed.query.replace("data.id=555", "data.id=556")
    async with httpx.AsyncClient() as client:
        post = client.post
        base = f"{served.url}/webhooks/{SOURCE}"
        forged = await post(f"{base}?{forged_query}", content=body, headers=signed.headers)
        unsigned = await post(f"{base}?{signed.query}", content=body)
    assert (forged.status_code, unsigned.status_code) == (401, 401)
    assert await served.events() == []
    assert served.fake.log == []


async def test_a_flood_of_one_unsigned_ipn_is_one_event_and_one_api_read(served: Served) -> None:
    served.fake.payments["1320000777"] = payment(
        "1320000777", status="approved", status_detail="accredited", amount="77.70",
        reference="order-777", date_approved=stamp(T0),
    )  # fmt: skip
    target = f"{served.url}/webhooks/{SOURCE}?topic=payment&id=1320000777"
    async with httpx.AsyncClient() as client:
        answers = [await client.post(target, content=b"") for _ in range(20)]
    assert {a.status_code for a in answers} == {200}
    await served.wait(all_settled, "the IPN hint")
    events = await served.events()
    # One event per minute of arrival (the hint's window): one here, two if the flood
    # happened to straddle a minute boundary; every other request was a duplicate.
    assert len(events) <= 2 and {e.type for e in events} == {"ipn.payment"}
    assert sum(e.duplicates for e in events) == 20 - len(events)
    assert served.fake.requests_for("1320000777") == [200] * len(events)
    found = await served.runtime.store.get_payment(SOURCE, "1320000777")
    assert found is not None and found.state is PaymentState.PAID and found.amount == 7770


async def test_a_forged_ipn_for_an_unknown_id_costs_one_read_and_makes_no_payment(
    served: Served,
) -> None:
    target = f"{served.url}/webhooks/{SOURCE}"
    body = json.dumps({"resource": "1329999999", "topic": "payment"}).encode()
    async with httpx.AsyncClient() as client:
        answer = await client.post(target, content=body)
    assert answer.status_code == 200

    def dead(events: list[StoredEvent]) -> bool:
        return len(events) == 1 and events[0].status is EventStatus.DEAD

    await served.wait(dead, "the unverified hint to be dead-lettered")
    [event] = await served.events()
    assert event.attempts == 1 and "not retried" in (event.last_error or "")
    assert served.fake.requests_for("1329999999") == [404]
    assert await served.runtime.store.get_payment(SOURCE, "1329999999") is None
