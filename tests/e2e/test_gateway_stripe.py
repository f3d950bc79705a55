"""Stripe end to end: simulated Stripe lifecycles (refunds, every delivery sent four
times, shuffled) over real HTTP into a real Porteiro (uvicorn, receiver, background worker,
SQLite and PostgreSQL); the payments converge and their history is recorded. Refused
deliveries are 401, quarantined, and leave no event. Thin v2 events are fetched from a
local fake Stripe API (retried through an outage, with their Stripe-Context), or ignored
without a call when they are not about a payment."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import httpx
import pytest
import stripe

from porteiro.config import Config, SourceConfig, WorkerConfig
from porteiro.fakes.simulate import build_plan, send
from porteiro.http.app import create_app
from porteiro.model import EventStatus, PaymentState, StoredEvent, Verdict
from porteiro.providers import build_provider
from porteiro.providers.base import Provider, SamplePayment
from porteiro.replay import matching_events
from porteiro.retry import RetryPolicy
from porteiro.runtime import Runtime, utc_now
from porteiro.store.base import EventFilter
from porteiro.worker import Worker
from tests.fakes.stripe import FakeStripe
from tests.support.servers import live_server
from tests.support.stored import stored_events_once

SOURCE = "stripe"
SECRET = "whsec_e2eNewSecret0123456789abcdefABCD"
OLD_SECRET = "whsec_e2eOldSecret0123456789abcdefABCD"


def stripe_source(*secrets: str) -> SourceConfig:
    return SourceConfig(name=SOURCE, provider="stripe", secrets=secrets or (SECRET, OLD_SECRET))


@dataclass
class Served:
    url: str
    runtime: Runtime
    provider: Provider


@pytest.fixture
async def served(store_url: str) -> AsyncIterator[Served]:
    config = Config(
        store_url=store_url,
        sources={SOURCE: stripe_source()},
        worker=WorkerConfig(poll_interval_seconds=0.1),
    )
    runtime = Runtime.build(config)
    app = create_app(runtime, background=[Worker(runtime).run], migrate=True)
    async with live_server(app) as url:
        yield Served(url, runtime, build_provider(stripe_source()))


async def settled(served: Served, distinct: int) -> list[StoredEvent]:
    """The `distinct` events once the worker has applied each."""
    return await stored_events_once(
        served.runtime.store,
        SOURCE,
        lambda events: (
            len(events) == distinct and all(e.status is EventStatus.DONE for e in events)
        ),
        f"{distinct} events done",
    )


async def test_lifecycles_with_refunds_duplicates_and_shuffle_converge(served: Served) -> None:
    provider = served.provider
    plan = build_plan(
        provider, count=10, duplicates=3.0, shuffle=True, refunds=0.5, now=utc_now(),
        rng=random.Random(20260301),
    )  # fmt: skip
    refunded = [p for p in plan.payments if p.refund]
    assert 0 < len(refunded) < len(plan.payments)  # both endings are exercised
    report = await send(plan, provider, url=served.url, source=SOURCE, concurrency=8, clock=utc_now)
    assert report.statuses == {200: len(plan.deliveries)}
    distinct = {json.loads(d.body)["id"] for d in plan.deliveries}
    assert report.duplicates == plan.duplicates == 3 * len(distinct)  # each sent 4 times

    events = await settled(served, len(distinct))
    assert {e.duplicates for e in events} == {3}

    store = served.runtime.store
    for payment in plan.payments:
        stored = await store.get_payment(SOURCE, payment.object_id)
        assert stored is not None
        expected = PaymentState.REFUNDED if payment.refund else PaymentState.PAID
        assert stored.state is expected, payment
        assert (stored.amount, stored.currency) == (payment.amount, payment.currency)
        assert stored.reference == payment.reference
        assert stored.refunded_amount == (payment.amount if payment.refund else 0)
        assert stored.anomalies == 0
        history = await store.payment_history(SOURCE, payment.object_id)
        # One entry per distinct Stripe event: created, PI succeeded, charge succeeded
        # (+ two refund.created and two charge.refunded).
        assert len(history) == (7 if payment.refund else 3)
        assert history[-1].to_state is expected
        assert all(t.verdict is not Verdict.ANOMALOUS for t in history)
        assert {t.verdict for t in history} & {Verdict.APPLIED}


async def test_only_the_partial_refund_delivered_leaves_it_partially_refunded(
    served: Served,
) -> None:
    provider = served.provider
    rng = random.Random(7)
    payment = SamplePayment("pi_e2e_partial", "order-partial", 9_000, currency="USD", refund=True)
    bodies = list(provider.sample_lifecycle(payment, utc_now(), rng))[:5]  # up to 1st refund
    deliveries = bodies * 3
    rng.shuffle(deliveries)
    async with httpx.AsyncClient(base_url=served.url) as client:
        for body in deliveries:
            signed = provider.sign(body, utc_now())
            response = await client.post(
                f"/webhooks/{SOURCE}", content=signed.body, headers=dict(signed.headers)
            )
            assert response.status_code == 200
    await settled(served, 5)
    stored = await served.runtime.store.get_payment(SOURCE, "pi_e2e_partial")
    assert stored is not None
    assert (stored.state, stored.refunded_amount) == (PaymentState.PARTIALLY_REFUNDED, 3_000)
    assert (stored.amount, stored.currency, stored.reference) == (9_000, "USD", "order-partial")


async def test_sdk_signed_delivery_with_rotated_signatures_is_accepted(served: Served) -> None:
    payment = SamplePayment("pi_e2e_sdk", "order-sdk", 1_234)
    [body] = list(served.provider.sample_lifecycle(payment, utc_now(), random.Random(1)))[:1]
    t = int(utc_now().timestamp())
    old = stripe.WebhookSignature.generate_signature_header(body.decode(), OLD_SECRET, t)
    new = stripe.WebhookSignature._compute_signature(f"{t}.{body.decode()}", SECRET)
    async with httpx.AsyncClient(base_url=served.url) as client:
        response = await client.post(
            f"/webhooks/{SOURCE}", content=body, headers={"Stripe-Signature": f"{old},v1={new}"}
        )
    assert (response.status_code, response.content) == (200, b"")
    await settled(served, 1)
    stored = await served.runtime.store.get_payment(SOURCE, "pi_e2e_sdk")
    assert stored is not None and stored.state is PaymentState.PENDING


def refused_cases(body: bytes, provider: Provider) -> Sequence[tuple[str, bytes, dict[str, str]]]:
    now = utc_now()
    good = dict(provider.sign(body, now).headers)
    t = int(now.timestamp())
    stale = build_provider(stripe_source()).sign(body, now.replace(year=now.year - 1))
    wrong = build_provider(stripe_source("whsec_not_ours")).sign(body, now)
    return [
        ("bad_signature", body.replace(b"requires_payment_method", b"succeeded"), good),
        ("bad_signature", body, dict(wrong.headers)),
        ("stale_timestamp", body, dict(stale.headers)),
        ("malformed_header", body, {**good, "Stripe-Signature": f"t={t}x,v1=00"}),
        ("missing_header", body, {"Content-Type": "application/json"}),
        ("bad_signature", body, {**good, "Stripe-Signature": f"t={t},v0=00"}),
    ]


async def test_refused_deliveries_are_401_quarantined_and_leave_no_event(
    served: Served,
) -> None:
    payment = SamplePayment("pi_e2e_refused", "order-refused", 500)
    body = served.provider.sample_lifecycle(payment, utc_now(), random.Random(2))[0]
    cases = refused_cases(body, served.provider)
    async with httpx.AsyncClient(base_url=served.url) as client:
        for _, content, headers in cases:
            response = await client.post(f"/webhooks/{SOURCE}", content=content, headers=headers)
            assert response.status_code == 401
    store = served.runtime.store
    assert await matching_events(store, EventFilter(source=SOURCE)) == []
    quarantined = await store.list_quarantine(20)
    assert sorted(q.reason for q in quarantined) == sorted(reason for reason, _, _ in cases)
    assert {q.source for q in quarantined} == {SOURCE}


# -- thin v2 events through a real worker and a local fake Stripe API ------------------------

THIN_KEY = "sk_test_e2e_thin"
THIN_PI = "pi_3E2eThinPayment0001"


def thin_body(event_id: str, event_type: str, related: dict[str, str]) -> bytes:
    """A v2 event notification (stripe-python v2/core/_event.py EventNotification)."""
    return json.dumps(
        {"id": event_id, "object": "v2.core.event", "type": event_type, "livemode": False,
         "created": "2026-03-01T12:00:00.250Z", "context": "acct_1E2eConnected",
         "related_object": related}, indent=2,
    ).encode()  # fmt: skip


@dataclass
class ThinServed:
    url: str
    runtime: Runtime
    provider: Provider
    api: FakeStripe


@pytest.fixture
async def thin_served(store_url: str) -> AsyncIterator[ThinServed]:
    api = FakeStripe(api_key=THIN_KEY)
    async with live_server(api.app(), lifespan="off") as api_url:
        source = SourceConfig(
            name=SOURCE, provider="stripe", secrets=(SECRET,), api_key=THIN_KEY,
            api_base_url=api_url,
        )  # fmt: skip
        retry = RetryPolicy(base_delay_seconds=0.05, multiplier=1.0, jitter=0.0)
        config = Config(
            store_url=store_url,
            sources={SOURCE: source},
            worker=WorkerConfig(poll_interval_seconds=0.05, retry=retry),
        )
        runtime = Runtime.build(config)
        app = create_app(runtime, background=[Worker(runtime).run], migrate=True)
        async with live_server(app) as url:
            yield ThinServed(url, runtime, build_provider(source), api)


async def post_signed(served: ThinServed, body: bytes) -> None:
    signed = served.provider.sign(body, utc_now())
    async with httpx.AsyncClient(base_url=served.url) as client:
        response = await client.post(
            f"/webhooks/{SOURCE}", content=signed.body, headers=dict(signed.headers)
        )
    assert (response.status_code, response.content) == (200, b"")


async def first_event(served: ThinServed, status: EventStatus) -> StoredEvent:
    """The source's first event once it is `status`."""
    events = await stored_events_once(
        served.runtime.store,
        SOURCE,
        lambda events: bool(events) and events[0].status is status,
        f"the first event {status.value}",
    )
    return events[0]


async def test_thin_payment_event_is_fetched_after_an_outage_and_applied(
    thin_served: ThinServed,
) -> None:
    api = thin_served.api
    api.intents[THIN_PI] = {"id": THIN_PI, "object": "payment_intent", "amount": 7300,
                            "currency": "brl", "status": "succeeded",
                            "metadata": {"order_id": "order-thin"}}  # fmt: skip
    api.fail_with = 500
    related = {"id": THIN_PI, "type": "payment_intent", "url": f"/v1/payment_intents/{THIN_PI}"}
    await post_signed(thin_served, thin_body("evt_test_e2eThin0001", "v1.payment_intent.succeeded",
                                             related))  # fmt: skip
    failed = await first_event(thin_served, EventStatus.RETRYING)
    assert failed.last_error is not None and "500" in failed.last_error
    assert THIN_KEY not in failed.last_error
    api.fail_with = None
    done = await first_event(thin_served, EventStatus.DONE)
    assert (done.type, done.object_id, done.kind.value) == (
        "v1.payment_intent.succeeded", THIN_PI, "payment.paid"
    )  # fmt: skip
    stored = await thin_served.runtime.store.get_payment(SOURCE, THIN_PI)
    assert stored is not None
    assert (stored.state, stored.amount, stored.reference) == (
        PaymentState.PAID, 7300, "order-thin"
    )  # fmt: skip
    assert {h.get("stripe-context") for h in api.headers} == {"acct_1E2eConnected"}


async def test_thin_event_not_about_a_payment_is_ignored_without_an_api_call(
    thin_served: ThinServed,
) -> None:
    related = {"id": "mtr_test_e2e", "type": "billing.meter",
               "url": "/v1/billing/meters/mtr_test_e2e"}  # fmt: skip
    body = thin_body("evt_test_e2eThin0002", "v1.billing.meter.error_report_triggered", related)
    await post_signed(thin_served, body)
    ignored = await first_event(thin_served, EventStatus.IGNORED)
    assert (ignored.kind.value, ignored.object_id) == ("other", None)
    assert "not about a payment (billing.meter)" in ignored.data["ignored"]
    assert thin_served.api.requests == []
