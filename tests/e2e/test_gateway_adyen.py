"""Adyen end to end: simulated lifecycles (batches, duplicates, shuffled) over real HTTP to
a real Porteiro (uvicorn, receiver, background worker, SQLite); every item's HMAC checked,
"[accepted]" answered, and every payment converges to the state its history implies."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest

from porteiro.config import Config, SourceConfig, WorkerConfig
from porteiro.fakes.simulate import Plan, PlannedDelivery, build_plan, send
from porteiro.http.app import create_app
from porteiro.model import EventStatus, PaymentState
from porteiro.providers.base import Provider
from porteiro.replay import matching_events
from porteiro.runtime import Runtime, utc_now
from porteiro.store.base import EventFilter
from porteiro.worker import Worker
from tests.support.servers import live_server
from tests.support.stored import stored_events_once

KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
OLD_KEY = "74F490DD33F7327BAECC88B2947C011FC02D014A473AAA33A8EC93E4DC069174"
BASIC = "ws_porteiro@Company.Shop:p4ss"
SOURCES = {
    "adyen": SourceConfig(
        name="adyen", provider="adyen", secrets=(KEY, OLD_KEY), options={"basic_auth": BASIC}
    ),
    "adyen-manual": SourceConfig(
        name="adyen-manual", provider="adyen", secrets=(KEY,), options={"capture": "manual"}
    ),
}


@dataclass
class Served:
    url: str
    runtime: Runtime


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    config = Config(
        store_url=f"sqlite:///{tmp_path / 'porteiro.db'}",
        sources=SOURCES,
        worker=WorkerConfig(poll_interval_seconds=0.1),
    )
    runtime = Runtime.build(config)
    app = create_app(runtime, background=[Worker(runtime).run], migrate=True)
    async with live_server(app) as url:
        yield Served(url, runtime)


def items_of(body: bytes) -> list[dict[str, object]]:
    return [w["NotificationRequestItem"] for w in json.loads(body)["notificationItems"]]


def without_last_refund(plan: Plan, payment: int) -> Plan:
    """The plan without `payment`'s final REFUND item (so it stays partially refunded)."""
    refunds = [
        item
        for delivery in plan.deliveries
        if delivery.payment == payment
        for item in items_of(delivery.body)
        if item["eventCode"] == "REFUND"
    ]
    last = max(refunds, key=lambda item: str(item["eventDate"]))["pspReference"]
    deliveries: list[PlannedDelivery] = []
    for delivery in plan.deliveries:
        kept = [item for item in items_of(delivery.body) if item["pspReference"] != last]
        if kept:
            wrapped = [{"NotificationRequestItem": item} for item in kept]
            body = json.dumps({"live": "false", "notificationItems": wrapped}).encode()
            deliveries.append(replace(delivery, body=body))
    return replace(plan, deliveries=deliveries)


def dedup_keys(plan: Plan) -> set[str]:
    return {
        f"{item['pspReference']}:{item['eventCode']}:{item['success']}"
        for delivery in plan.deliveries
        for item in items_of(delivery.body)
    }


async def settle(runtime: Runtime, source: str, distinct: int) -> None:
    """Wait until the in-process worker has applied every distinct event."""
    await stored_events_once(
        runtime.store,
        source,
        lambda events: (
            len(events) == distinct and all(e.status is EventStatus.DONE for e in events)
        ),
        f"{distinct} events done",
        within=10,
    )


@pytest.mark.parametrize("source", sorted(SOURCES))
async def test_simulated_lifecycles_converge(served: Served, source: str) -> None:
    provider: Provider = served.runtime.providers[source]
    plan = build_plan(
        provider, count=8, duplicates=1.0, shuffle=True, refunds=0.75, now=utc_now(),
        rng=random.Random(31),
    )  # fmt: skip
    refunded = [index for index, payment in enumerate(plan.payments) if payment.refund]
    partial = refunded[0]
    plan = without_last_refund(plan, partial)
    assert any(len(items_of(d.body)) == 2 for d in plan.deliveries)  # batches went too

    report = await send(plan, provider, url=served.url, source=source, concurrency=6, clock=utc_now)
    assert report.statuses == {200: len(plan.deliveries)}

    keys = dedup_keys(plan)
    await settle(served.runtime, source, len(keys))
    stored = await matching_events(served.runtime.store, EventFilter(source=source))
    assert {event.dedup_key for event in stored} == keys
    resent_items = sum(len(items_of(d.body)) for d in plan.deliveries if d.duplicate)
    assert sum(event.duplicates for event in stored) == resent_items > 0

    store = served.runtime.store
    for index, sample in enumerate(plan.payments):
        payment = await store.get_payment(source, sample.object_id)
        assert payment is not None, sample.object_id
        part = sample.amount // 3
        if index == partial:
            expected = (PaymentState.PARTIALLY_REFUNDED, part)
        elif sample.refund:
            expected = (PaymentState.REFUNDED, sample.amount)
        else:
            expected = (PaymentState.PAID, 0)
        assert (payment.state, payment.refunded_amount) == expected, sample.object_id
        assert (payment.amount, payment.reference) == (sample.amount, sample.reference)
        history = await store.payment_history(source, sample.object_id)
        own = [e for e in stored if e.object_id == sample.object_id]
        assert sorted(t.event_id for t in history) == sorted(e.id for e in own)
        assert history[-1].to_state is payment.state


async def test_ack_is_accepted_and_a_tampered_batch_is_refused(served: Served) -> None:
    provider = served.runtime.providers["adyen"]
    plan = build_plan(
        provider, count=3, duplicates=0.0, shuffle=False, refunds=1.0, now=utc_now(),
        rng=random.Random(5),
    )  # fmt: skip
    bodies = [provider.sign(d.body, utc_now()) for d in plan.deliveries]
    batch = json.loads(bodies[0].body)
    for signed in bodies[1:3]:
        batch["notificationItems"] += json.loads(signed.body)["notificationItems"]
    assert len(batch["notificationItems"]) >= 3
    tampered = json.loads(json.dumps(batch))
    tampered["notificationItems"][-1]["NotificationRequestItem"]["amount"]["value"] += 1
    url = f"{served.url}/webhooks/adyen"
    headers = dict(bodies[0].headers)
    wrong_basic = {**headers, "authorization": "Basic " + base64.b64encode(b"ws:nope").decode()}
    async with httpx.AsyncClient() as http:
        refused = await http.post(url, content=json.dumps(tampered), headers=headers)
        no_basic = await http.post(
            url, content=json.dumps(batch), headers={"content-type": "application/json"}
        )
        bad_basic = await http.post(url, content=json.dumps(batch), headers=wrong_basic)
        not_json = await http.post(url, content=b"<xml/>", headers=headers)
        assert [r.status_code for r in (refused, no_basic, bad_basic, not_json)] == [401] * 4
        assert await matching_events(served.runtime.store, EventFilter(source="adyen")) == []

        accepted = await http.post(url, content=json.dumps(batch), headers=headers)
        again = await http.post(url, content=json.dumps(batch), headers=headers)
    for response in (accepted, again):
        assert (response.status_code, response.text) == (200, "[accepted]")
        assert response.headers["content-type"].startswith("text/plain")
    stored = await matching_events(served.runtime.store, EventFilter(source="adyen"))
    assert len(stored) == len(batch["notificationItems"])
    assert all(event.duplicates == 1 for event in stored)
    quarantined = await served.runtime.store.list_quarantine(10)
    reasons = sorted(q.reason for q in quarantined)
    assert reasons == ["bad_signature", "bad_signature", "malformed_header", "missing_header"]
