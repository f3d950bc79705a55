"""Pix (Efí, skip-mTLS mode) end to end: simulated callbacks (every delivery sent four
times, shuffled) over real HTTP into a real Porteiro (uvicorn, receiver, background worker,
SQLite and PostgreSQL) that confirms every Pix with a real local fake of the PSP's API.

Cobs end paid, refunds converge (partially then fully refunded), a second Pix for a paid
cob is flagged as an anomaly, and neither a Pix to someone else's key nor one the PSP
contradicts ever becomes paid.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from porteiro.config import Config, SourceConfig, WorkerConfig
from porteiro.fakes.simulate import build_plan, send
from porteiro.http.app import create_app
from porteiro.model import EventStatus, InboundRequest, Kind, PaymentState, StoredEvent, Verdict
from porteiro.providers.base import Provider
from porteiro.providers.pix.samples import body, devolucao, pix_item, sample_txid
from porteiro.replay import matching_events
from porteiro.runtime import Runtime, utc_now
from porteiro.store.base import EventFilter
from porteiro.worker import Worker
from tests.fakes.pix import FakePsp
from tests.support.servers import live_server
from tests.support.stored import stored_events_once

SOURCE = "efi"
CHAVE = "c0ffee00-5b2d-4e8f-9a7c-1d2e3f4a5b6c"
TOKEN = "e2e-hmac-Secret_123"
CLIENT_ID, CLIENT_SECRET = "Client_Id_e2e", "Client_Secret_e2e"
TERMINAL = {EventStatus.DONE, EventStatus.IGNORED, EventStatus.DEAD}


@dataclass
class Served:
    url: str
    runtime: Runtime
    provider: Provider
    psp: FakePsp


@pytest.fixture
async def served(store_url: str) -> AsyncIterator[Served]:
    psp = FakePsp(CLIENT_ID, CLIENT_SECRET)
    async with live_server(psp.app(), lifespan="off") as psp_url:
        options = {
            "keys": [CHAVE], "hmac_token": TOKEN, "allow_ips": ["127.0.0.1"],
            "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
        }  # fmt: skip
        source = SourceConfig(name=SOURCE, provider="pix", api_base_url=psp_url, options=options)
        config = Config(
            store_url=store_url,
            sources={SOURCE: source},
            worker=WorkerConfig(poll_interval_seconds=0.1),
        )
        runtime = Runtime.build(config)
        app = create_app(runtime, background=[Worker(runtime).run], migrate=True)
        async with live_server(app) as url:
            yield Served(url, runtime, runtime.providers[SOURCE], psp)


def dedup_keys(provider: Provider, bodies: Sequence[bytes]) -> set[str]:
    now = utc_now()
    return {
        event.dedup_key
        for raw in bodies
        for event in provider.parse(
            InboundRequest(SOURCE, "POST", "/", "", [], raw, "127.0.0.1", now)
        )
    }


async def settled(served: Served, distinct: int) -> list[StoredEvent]:
    """The `distinct` events once every one reached a terminal status."""
    return await stored_events_once(
        served.runtime.store,
        SOURCE,
        lambda events: len(events) == distinct and all(e.status in TERMINAL for e in events),
        f"{distinct} events settled",
        within=20,
    )


async def post(served: Served, raw: bytes, copies: int = 1) -> None:
    signed = served.provider.sign(raw, utc_now())
    async with httpx.AsyncClient(base_url=served.url) as client:
        for _ in range(copies):
            response = await client.post(
                f"/webhooks/{SOURCE}{signed.path_suffix}?{signed.query}",
                content=signed.body,
                headers=dict(signed.headers),
            )
            assert (response.status_code, response.content) == (200, b"")


async def test_simulated_cobs_are_confirmed_paid_and_refunds_converge(served: Served) -> None:
    provider = served.provider
    plan = build_plan(
        provider, count=8, duplicates=3.0, shuffle=True, refunds=0.5, now=utc_now(),
        rng=random.Random(20260301),
    )  # fmt: skip
    assert 0 < sum(p.refund for p in plan.payments) < len(plan.payments)
    originals = [d.body for d in plan.deliveries if not d.duplicate]
    for raw in originals:  # what the PSP recorded when the Pix happened
        served.psp.add_delivery(raw)
    report = await send(plan, provider, url=served.url, source=SOURCE, concurrency=8, clock=utc_now)
    assert report.statuses == {200: len(plan.deliveries)}

    events = await settled(served, len(dedup_keys(provider, originals)))
    assert all(e.status is not EventStatus.DEAD for e in events)
    assert all(e.duplicates >= 3 for e in events)  # re-sent Pix items count as duplicates too
    store = served.runtime.store
    for payment in plan.payments:
        txid = sample_txid(payment.object_id)
        stored = await store.get_payment(SOURCE, txid)
        assert stored is not None, payment
        expected = PaymentState.REFUNDED if payment.refund else PaymentState.PAID
        assert stored.state is expected, payment
        assert (stored.amount, stored.currency, stored.reference) == (payment.amount, "BRL", txid)
        assert stored.refunded_amount == (payment.amount if payment.refund else 0)
        assert stored.anomalies == 0
        history = await store.payment_history(SOURCE, txid)
        assert history[-1].to_state is expected
        assert all(t.verdict is not Verdict.ANOMALOUS for t in history)
    confirmations = [entry for entry in served.psp.log if entry[1].startswith("/v2/pix/")]
    assert len(confirmations) == len(plan.payments)  # paid Pix confirmed; refunds need not be
    assert served.psp.token_fetches == 1  # one OAuth token for all of them


async def test_two_cobs_in_one_delivery_a_partial_refund_and_a_pix_paid_twice(
    served: Served,
) -> None:
    rng, now = random.Random(5), utc_now()
    cob_a, cob_b = "cobA" + "0" * 24, "cobB" + "0" * 24
    pix_a = pix_item(txid=cob_a, amount=11_000, chave=CHAVE, at=now, rng=rng)
    pix_b = pix_item(txid=cob_b, amount=2_500, chave=CHAVE, at=now, rng=rng)
    again_b = pix_item(txid=cob_b, amount=2_500, chave=CHAVE, at=now, rng=rng)  # paid twice
    partial = {**pix_a, "devolucoes": [devolucao(1_000, now, rng, "DEVOLVIDO")]}
    deliveries = [body(pix_a, pix_b), body(partial), body(again_b)]
    for raw in deliveries:
        served.psp.add_delivery(raw)
    for raw in deliveries:
        await post(served, raw, copies=2)
    events = await settled(served, 4)  # three Pix and one refund
    assert {e.status for e in events} == {EventStatus.DONE}

    store = served.runtime.store
    a = await store.get_payment(SOURCE, cob_a)
    assert a is not None
    assert (a.state, a.amount, a.refunded_amount) == (
        PaymentState.PARTIALLY_REFUNDED,
        11_000,
        1_000,
    )
    b = await store.get_payment(SOURCE, cob_b)
    assert b is not None
    assert (b.state, b.amount, b.anomalies) == (PaymentState.PAID, 2_500, 1)
    history = await store.payment_history(SOURCE, cob_b)
    assert [t.verdict for t in history].count(Verdict.ANOMALOUS) == 1
    flagged = next(t for t in history if t.verdict is Verdict.ANOMALOUS)
    assert flagged.note is not None and "paid twice" in flagged.note


async def test_a_pix_to_a_foreign_chave_or_contradicted_by_the_psp_is_never_paid(
    served: Served,
) -> None:
    rng, now = random.Random(9), utc_now()
    foreign_cob, spoofed_cob = "foreign" + "0" * 21, "spoofed" + "0" * 21
    # Authentic delivery from the PSP, but the Pix went to another merchant's key.
    foreign = pix_item(txid=foreign_cob, amount=50_000, chave="outra@loja.example", at=now, rng=rng)
    # A webhook claiming our key while the PSP recorded a 1-centavo Pix.
    spoofed = pix_item(txid=spoofed_cob, amount=50_000, chave=CHAVE, at=now, rng=rng)
    served.psp.add_pix(foreign)
    served.psp.add_pix({**spoofed, "valor": "0.01"})
    for raw in (body(foreign), body(spoofed)):
        await post(served, raw, copies=2)
    events = {e.object_id: e for e in await settled(served, 2)}

    rejected = events[foreign_cob]
    assert (rejected.kind, rejected.status) == (Kind.OTHER, EventStatus.IGNORED)
    assert rejected.data["rejected"] == "chave not ours"
    dead = events[spoofed_cob]
    assert dead.status is EventStatus.DEAD and dead.attempts == 1
    assert dead.last_error is not None and "not confirmed by the PSP" in dead.last_error
    assert "valor 0.01 at the PSP, 500.00 in the webhook" in dead.last_error
    for cob in (foreign_cob, spoofed_cob):
        assert await served.runtime.store.get_payment(SOURCE, cob) is None


async def test_wrong_or_missing_hmac_is_refused_and_quarantined(served: Served) -> None:
    raw = body(pix_item(txid="x" * 26, amount=100, chave=CHAVE, at=utc_now(), rng=random.Random()))
    served.psp.add_delivery(raw)
    async with httpx.AsyncClient(base_url=served.url) as client:
        for query in ("hmac=wrong&ignorar=/pix", "ignorar=/pix"):
            response = await client.post(f"/webhooks/{SOURCE}?{query}", content=raw)
            assert response.status_code == 401
        assert await matching_events(served.runtime.store, EventFilter(source=SOURCE)) == []
        # Registered without &ignorar=: Efí's "/pix" lands inside the secret's value.
        ok = await client.post(f"/webhooks/{SOURCE}?hmac={TOKEN}/pix", content=raw)
    assert ok.status_code == 200
    quarantined = await served.runtime.store.list_quarantine(10)
    assert sorted(q.reason for q in quarantined) == ["forbidden_peer", "missing_header"]
    (event,) = await settled(served, 1)
    assert (event.status, event.amount) == (EventStatus.DONE, 100)


REC = {
    "idRec": "RR0908935620261201e2erec00001",
    "status": "APROVADA",
    "atualizacao": [{"status": "APROVADA", "data": "2026-12-01T12:43:53.337Z"}],
}
COBR = {
    "idRec": "RR0908935620261201e2erec00001",
    "txid": "e2eCobrTxid00000000000000000001",
    "status": "ATIVA",
    "atualizacao": [{"status": "ATIVA", "data": "2026-12-01T12:34:21.300Z"}],
}


@pytest.fixture
async def two_sources(store_url: str) -> AsyncIterator[Served]:
    """A Pix source that does not confirm, next to a Standard Webhooks one."""
    options = {"keys": [CHAVE], "hmac_token": TOKEN, "allow_ips": ["127.0.0.1"], "confirm": False}
    config = Config(
        store_url=store_url,
        sources={
            SOURCE: SourceConfig(name=SOURCE, provider="pix", options=options),
            "std": SourceConfig(name="std", provider="standard", secrets=("whsec_" + "A" * 32,)),
        },
        worker=WorkerConfig(poll_interval_seconds=0.1),
    )
    runtime = Runtime.build(config)
    app = create_app(runtime, background=[Worker(runtime).run], migrate=True)
    async with live_server(app) as url:
        yield Served(url, runtime, runtime.providers[SOURCE], FakePsp("", ""))


async def test_pix_automatico_routes_are_accepted_for_pix_sources_only(
    two_sources: Served,
) -> None:
    served = two_sources
    recs = json.dumps({"recs": [REC]}).encode()
    cobsr = json.dumps({"cobsr": [COBR]}).encode()
    async with httpx.AsyncClient(base_url=served.url) as client:
        for route in ("rec", "cobr"):
            lost = await client.post(f"/webhooks/std/{route}", content=recs)
            assert lost.status_code == 404, route  # not a Pix source: no such route
            refused = await client.post(f"/webhooks/{SOURCE}/{route}", content=recs)
            assert refused.status_code == 401, route  # the Pix source's authentication
        answers = [
            await client.post(f"/webhooks/{SOURCE}/rec?hmac={TOKEN}", content=recs),
            await client.post(f"/webhooks/{SOURCE}?hmac={TOKEN}/cobr", content=cobsr),
            await client.post(f"/webhooks/{SOURCE}?hmac={TOKEN}&ignorar=/rec", content=recs),
        ]
    assert [a.status_code for a in answers] == [200, 200, 200]
    events = await settled(served, 2)  # the third is a duplicate of the first
    assert sorted(e.type for e in events) == [
        "pix.automatico.cobr.ATIVA",
        "pix.automatico.rec.APROVADA",
    ]
    assert {(e.kind, e.status) for e in events} == {(Kind.OTHER, EventStatus.IGNORED)}
    assert sum(e.duplicates for e in events) == 1


async def test_a_pix_sent_is_stored_ignored_and_never_confirmed(served: Served) -> None:
    sent: dict[str, Any] = {
        "endToEndId": "E09089356202612012039e2esend0001",
        "chave": CHAVE,
        "tipo": "SOLICITACAO",
        "status": "REALIZADO",
        "valor": "0.01",
        "horario": "2026-12-01T20:39:47.000Z",
        "gnExtras": {"idEnvio": "E2EENVIO001"},
    }
    await post(served, body(sent), copies=2)
    (event,) = await settled(served, 1)
    assert (event.kind, event.status, event.type) == (
        Kind.OTHER,
        EventStatus.IGNORED,
        "pix.enviado.REALIZADO",
    )
    assert event.object_id is None and event.duplicates == 1
    assert not [entry for entry in served.psp.log if entry[1].startswith("/v2/pix")]
    assert await served.runtime.store.get_payment(SOURCE, sent["endToEndId"]) is None
