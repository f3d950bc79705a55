"""`porteiro fake-provider` against a REAL Porteiro (uvicorn, receiver, background worker,
SQLite): the fake's truth and Porteiro's payments agree; drops are listed exactly; a
failing receiver gets the gateway's (compressed) retries; creates are idempotent; list
endpoints paginate. Everything on loopback, every wait bounded."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from porteiro.config import Config, SourceConfig, WorkerConfig
from porteiro.fakes import FakeServer, Settings, scenario_from
from porteiro.http.app import create_app
from porteiro.model import EventStatus
from porteiro.replay import matching_events
from porteiro.runtime import Runtime
from porteiro.store.base import EventFilter
from porteiro.worker import Worker
from tests.support.servers import free_port, live_server

STRIPE_SECRET = "whsec_fakeProviderSecret0123456789abcd"
PIX_TOKEN = "pix-hmac-token-0123456789"
PIX_KEY = "9b2c4d6e-1f3a-4b5c-8d7e-0a1b2c3d4e5f"
PIX_CLIENT = "client-id:client-secret"
FINISHED = (EventStatus.DONE, EventStatus.IGNORED)


@dataclass
class Porteiro:
    url: str
    runtime: Runtime
    source: str

    async def events(self) -> list[Any]:
        return await matching_events(self.runtime.store, EventFilter(source=self.source))

    async def settled(self, within: float = 20.0) -> list[Any]:
        """Wait until every stored event is processed (and the count stopped moving)."""
        deadline, last = time.monotonic() + within, -1
        while time.monotonic() < deadline:
            events = await self.events()
            if events and len(events) == last and all(e.status in FINISHED for e in events):
                return events
            last = len(events)
            await asyncio.sleep(0.2)
        stuck = [(e.type, e.status.value, e.last_error) for e in events if e.status not in FINISHED]
        raise AssertionError(f"events did not settle: {stuck[:5]}")

    async def state_of(self, object_id: str) -> str | None:
        payment = await self.runtime.store.get_payment(self.source, object_id)
        return None if payment is None else payment.state.value


@asynccontextmanager
async def porteiro(tmp_path: Path, source: SourceConfig) -> AsyncIterator[Porteiro]:
    config = Config(
        store_url=f"sqlite:///{tmp_path / 'porteiro.db'}",
        sources={source.name: source},
        worker=WorkerConfig(poll_interval_seconds=0.05, concurrency=8),
    )
    runtime = Runtime.build(config)
    app = create_app(runtime, background=[Worker(runtime).run], migrate=True)
    async with live_server(app) as url:
        yield Porteiro(url, runtime, source.name)


@asynccontextmanager
async def fake(provider: str, settings: Settings, **scenario: Any) -> AsyncIterator[FakeCtl]:
    server = FakeServer(provider, scenario_from({}, scenario), settings)
    async with live_server(server.app()) as url, httpx.AsyncClient(base_url=url) as client:
        yield FakeCtl(url, server, client)


@dataclass
class FakeCtl:
    url: str
    server: FakeServer
    client: httpx.AsyncClient

    def point_at(self, webhook_url: str) -> None:
        """Set the receiver URL of a fake started with hold (Porteiro needs the fake's URL
        for its API, the fake Porteiro's URL for its webhooks)."""
        gateway = self.server.gateway
        gateway.settings = replace(gateway.settings, webhook_url=webhook_url)

    async def done(self, within: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if (await self.client.get("/_fake/done")).json()["done"]:
                state: dict[str, Any] = (await self.client.get("/_fake/state")).json()
                return state
            await asyncio.sleep(0.1)
        raise AssertionError("the fake gateway did not finish")


def stripe_source(**extra: Any) -> SourceConfig:
    return SourceConfig(name="stripe", provider="stripe", secrets=(STRIPE_SECRET,), **extra)


def stripe_settings(url: str, **extra: Any) -> Settings:
    return Settings(webhook_url=f"{url}/webhooks/stripe", secret=STRIPE_SECRET, **extra)


async def assert_truth_matches(porteiro_: Porteiro, state: Mapping[str, Any]) -> None:
    for payment in state["payments"]:
        stored = await porteiro_.runtime.store.get_payment(porteiro_.source, payment["object_id"])
        assert stored is not None, payment
        assert stored.state.value == payment["state"], (payment, stored)
        assert stored.refunded_amount == payment["refunded_amount"], payment
        if payment["state"] not in ("failed", "canceled"):  # a refusal may carry no amount
            assert stored.amount == payment["amount"], payment


# -- Stripe ------------------------------------------------------------------------------


async def test_stripe_every_payment_converges_with_duplicates_and_reordering(
    tmp_path: Path,
) -> None:
    async with porteiro(tmp_path, stripe_source()) as app:
        settings = stripe_settings(app.url)
        async with fake("stripe", settings, payments=40, seed=11, duplicate_rate=0.5,
                        reorder=True, delay_ms=(0, 30)) as ctl:  # fmt: skip
            state = await ctl.done()
        events = await app.settled()
        await assert_truth_matches(app, state)
    hooks = state["webhooks"]
    assert hooks["dropped"] == [] and hooks["pending"] == 0
    assert hooks["delivered"] == len(events)  # one stored event per distinct webhook
    assert hooks["duplicated"] > 5
    assert sum(event.duplicates for event in events) == hooks["duplicated"]
    assert hooks["sent"] == hooks["delivered"] + hooks["duplicated"]
    assert {p["state"] for p in state["payments"]} >= {"paid", "refunded", "failed"}


async def all_stripe_events(client: httpx.AsyncClient, since: int, until: int) -> list[str]:
    ids: list[str] = []
    params: dict[str, Any] = {"created[gte]": since, "created[lte]": until, "limit": 7}
    for _ in range(200):
        page = (await client.get("/v1/events", params=params)).json()
        ids.extend(event["id"] for event in page["data"])
        created = [event["created"] for event in page["data"]]
        assert created == sorted(created, reverse=True)  # newest first
        if not page["has_more"]:
            return ids
        params["starting_after"] = ids[-1]
    raise AssertionError("pagination did not end")


async def test_stripe_drops_are_exactly_the_events_porteiro_never_saw(tmp_path: Path) -> None:
    async with porteiro(tmp_path, stripe_source()) as app:
        async with fake("stripe", stripe_settings(app.url), payments=30, seed=5,
                        drop_rate=0.25, duplicate_rate=0.3) as ctl:  # fmt: skip
            state = await ctl.done()
            now = int(time.time())
            listed = await all_stripe_events(ctl.client, now - 4 * 3600, now + 60)
            window = await all_stripe_events(ctl.client, now - 1800, now - 900)
        events = await app.settled()
    stored = {event.dedup_key for event in events}
    dropped = {entry["event_id"] for entry in state["webhooks"]["dropped"]}
    assert len(listed) == len(set(listed))  # no page repeats an event
    assert dropped and set(listed) - stored == dropped
    assert stored <= set(listed)
    assert {e["reason"] for e in state["webhooks"]["dropped"]} == {"dropped"}
    assert 0 < len(window) < len(listed)  # the window filters by `created`


def failing_proxy(target: str, failures: int, log: list[tuple[float, str, int]]) -> Starlette:
    """Answers 503 to the first `failures` webhooks, then forwards to Porteiro."""
    client = httpx.AsyncClient(base_url=target)

    async def forward(request: Request) -> Response:
        body = await request.body()
        if len(log) < failures:
            log.append((time.monotonic(), body.decode()[:80], 503))
            return Response(b"try later", status_code=503)
        answer = await client.post(
            request.url.path, content=body, headers=dict(request.headers), params=request.url.query
        )
        log.append((time.monotonic(), body.decode()[:80], answer.status_code))
        return Response(answer.content, status_code=answer.status_code)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with client:
            yield

    routes = [Route("/webhooks/{source}", forward, methods=["POST"])]
    return Starlette(routes=routes, lifespan=lifespan)


async def test_a_failing_receiver_gets_compressed_retries_until_delivery(tmp_path: Path) -> None:
    log: list[tuple[float, str, int]] = []
    async with porteiro(tmp_path, stripe_source()) as app:
        # Stripe's first retries: 1 min, 2 min, 4 min; 1200x faster: 50, 100, 200 ms.
        one_paid = {"payments": 1, "seed": 2, "fail_rate": 0.0, "cancel_rate": 0.0,
                    "refund_rate": 0.0, "time_factor": 1200.0, "concurrency": 1}  # fmt: skip
        # done() gives up after 30 s, "the fake gateway did not finish": a hang guard that
        # also fails retries left uncompressed (Stripe's own would take 7 minutes).
        async with (
            live_server(failing_proxy(app.url, 6, log)) as proxy,
            fake("stripe", stripe_settings(proxy), **one_paid) as ctl,
        ):
            state = await ctl.done()
        events = await app.settled()
        await assert_truth_matches(app, state)
    hooks = state["webhooks"]
    assert [status for _, _, status in log].count(503) == 6
    assert hooks["delivered"] == len(events) == 3  # created, PI succeeded, charge succeeded
    assert hooks["retried"] == 6 and hooks["dropped"] == []
    # Each webhook was refused twice: its attempts were >= 50 ms, then >= 100 ms apart.
    attempts: dict[str, list[float]] = {}
    for at, head, _ in log:
        attempts.setdefault(head, []).append(at)
    assert sorted(len(times) for times in attempts.values()) == [3, 3, 3]
    for first, second, third in attempts.values():
        assert second - first >= 0.045 and third - second >= 0.095


async def test_a_receiver_that_never_recovers_gets_the_webhook_given_up(tmp_path: Path) -> None:
    log: list[tuple[float, str, int]] = []
    # 3 days of Stripe retries (13 attempts) compressed 10^6 times: well under 1 s.
    one_paid = {"payments": 1, "seed": 3, "fail_rate": 0.0, "cancel_rate": 0.0,
                "refund_rate": 0.0, "time_factor": 1e6}  # fmt: skip
    async with (
        porteiro(tmp_path, stripe_source()) as app,
        live_server(failing_proxy(app.url, 10_000, log)) as proxy,
        fake("stripe", stripe_settings(proxy), **one_paid) as ctl,
    ):
        state = await ctl.done()
    schedule = ctl.server.gateway.retry_schedule
    assert sum(schedule) >= 3 * 86400 and len(log) == 3 * (len(schedule) + 1)
    gave_up = state["webhooks"]["dropped"]
    assert len(gave_up) == 3 and {entry["reason"] for entry in gave_up} == {"gave_up"}


async def test_stripe_creates_honour_idempotency_keys(tmp_path: Path) -> None:
    settings = stripe_settings("http://127.0.0.1:9", api_key="sk_test_fake", hold=True)
    async with fake("stripe", settings, payments=0) as ctl:
        auth = {"authorization": "Bearer sk_test_fake"}
        params = {"amount": "1990", "currency": "brl", "metadata[order_id]": "order-1"}
        first = await ctl.client.post(
            "/v1/payment_intents", data=params, headers={**auth, "idempotency-key": "k1"}
        )
        again = await ctl.client.post(
            "/v1/payment_intents", data=params, headers={**auth, "idempotency-key": "k1"}
        )
        other = await ctl.client.post(
            "/v1/payment_intents", data={**params, "amount": "2000"},
            headers={**auth, "idempotency-key": "k1"},
        )  # fmt: skip
        assert first.status_code == again.status_code == 200
        assert first.json() == again.json() and again.headers["idempotent-replayed"] == "true"
        assert other.status_code == 400 and other.json()["error"]["type"] == "idempotency_error"
        unauthorized = await ctl.client.post("/v1/payment_intents", data=params)
        assert unauthorized.status_code == 401

        # A concurrent request with a key still in flight: 409, and nothing stored for it.
        await ctl.client.post("/_fake/faults", json={"create_delay_ms": 300})
        slow, racing = await asyncio.gather(
            ctl.client.post("/v1/payment_intents", data=params,
                            headers={**auth, "idempotency-key": "k2"}),
            _after(0.1, ctl.client.post("/v1/payment_intents", data=params,
                                        headers={**auth, "idempotency-key": "k2"})),
        )  # fmt: skip
        assert (slow.status_code, racing.status_code) == (200, 409)
        assert racing.json()["error"]["code"] == "idempotency_key_in_use"

        # The response is lost after the commit; the retry with the same key gets it.
        await ctl.client.post(
            "/_fake/faults", json={"create_delay_ms": 0, "lose_create_responses": 1}
        )
        with pytest.raises(httpx.RemoteProtocolError):
            await ctl.client.post(
                "/v1/payment_intents", data=params, headers={**auth, "idempotency-key": "k3"}
            )
        retried = await ctl.client.post(
            "/v1/payment_intents", data=params, headers={**auth, "idempotency-key": "k3"}
        )
        assert retried.status_code == 200
        state = (await ctl.client.get("/_fake/state")).json()
        ids = [p["object_id"] for p in state["payments"]]
        assert len(ids) == 3 and retried.json()["id"] in ids  # k1, k2, k3: one each
        read = await ctl.client.get(f"/v1/payment_intents/{retried.json()['id']}", headers=auth)
        assert read.json()["status"] == "requires_payment_method"


async def _after(seconds: float, work: Any) -> Any:
    await asyncio.sleep(seconds)
    return await work


# -- Pix ---------------------------------------------------------------------------------


def pix_source(api_url: str) -> SourceConfig:
    client_id, client_secret = PIX_CLIENT.split(":")
    options = {"hmac_token": PIX_TOKEN, "allow_ips": ["127.0.0.1/32"], "keys": [PIX_KEY],
               "confirm": True, "client_id": client_id, "client_secret": client_secret}  # fmt: skip
    return SourceConfig(name="pix", provider="pix", api_base_url=api_url, options=options)


def pix_settings(**extra: Any) -> Settings:
    return Settings(webhook_url="http://127.0.0.1:9/unset", secret=PIX_TOKEN, pix_key=PIX_KEY,
                    api_key=PIX_CLIENT, hold=True, **extra)  # fmt: skip


async def test_pix_paid_cobs_converge_and_unpaid_ones_expire(tmp_path: Path) -> None:
    scenario = {"payments": 30, "seed": 8, "expire_unpaid": 0.3, "duplicate_rate": 0.4,
                "reorder": True, "cob_expiration": 3, "window_seconds": 0}  # fmt: skip
    async with fake("pix", pix_settings(), **scenario) as ctl:  # noqa: SIM117 (needs ctl.url)
        async with porteiro(tmp_path, pix_source(ctl.url)) as app:
            ctl.point_at(f"{app.url}/webhooks/pix")
            await ctl.client.post("/_fake/start")
            state = await ctl.done()
            events = await app.settled()
            expires = max(datetime.fromisoformat(p["expires_at"]) for p in state["payments"])
            await asyncio.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.1)
            state = (await ctl.client.get("/_fake/state")).json()
            by_outcome: dict[str, list[Mapping[str, Any]]] = {}
            for payment in state["payments"]:
                by_outcome.setdefault(payment["outcome"], []).append(payment)
            assert set(by_outcome) >= {"expired", "paid"}
            for payment in by_outcome["expired"]:
                assert payment["state"] == "expired"
                assert await app.state_of(payment["object_id"]) is None  # no webhook, ever
            paid = [p for p in state["payments"] if p["outcome"] != "expired"]
            await assert_truth_matches(app, {"payments": paid})
    assert all(e.data.get("confirmed") for e in events if e.type == "pix")  # via the fake API
    assert state["webhooks"]["delivered"] == len(events) and state["webhooks"]["dropped"] == []


async def pix_token(client: httpx.AsyncClient) -> dict[str, str]:
    user, password = PIX_CLIENT.split(":")
    answer = await client.post(
        "/oauth/token", auth=(user, password), json={"grant_type": "client_credentials"}
    )
    assert answer.status_code == 200
    return {"authorization": f"Bearer {answer.json()['access_token']}"}


async def test_pix_put_cob_is_idempotent_by_txid_and_lists_paginate(tmp_path: Path) -> None:
    async with fake("pix", pix_settings(), payments=23, seed=4, expire_unpaid=0.0,
                    window_seconds=600, drop_rate=1.0) as ctl:  # fmt: skip
        await ctl.client.post("/_fake/start")
        await ctl.done()
        refused = await ctl.client.post("/oauth/token", auth=("x", "y"),
                                        json={"grant_type": "client_credentials"})  # fmt: skip
        assert refused.status_code == 401
        auth = await pix_token(ctl.client)
        txid = "porteiroFakeTxid0000000000001"
        cob = {"calendario": {"expiracao": 600}, "valor": {"original": "12.34"}, "chave": PIX_KEY}
        first = await ctl.client.put(f"/v2/cob/{txid}", json=cob, headers=auth)
        again = await ctl.client.put(f"/v2/cob/{txid}", json=cob, headers=auth)
        changed = {**cob, "valor": {"original": "99.00"}}
        other = await ctl.client.put(f"/v2/cob/{txid}", json=changed, headers=auth)
        assert first.status_code == again.status_code == 201
        assert first.json() == again.json() and first.json()["status"] == "ATIVA"
        assert other.status_code == 400 and other.json()["title"] == "CobOperacaoInvalida"
        read = await ctl.client.get(f"/v2/cob/{txid}", headers=auth)
        assert read.json()["calendario"]["expiracao"] == 600

        state = (await ctl.client.get("/_fake/state")).json()
        paid = {p["object_id"] for p in state["payments"] if p["state"] != "pending"}
        now = datetime.now(UTC)
        query: dict[str, str | int] = {"inicio": (now - timedelta(hours=1)).isoformat(),
                 "fim": now.isoformat(), "paginacao.itensPorPagina": 4}  # fmt: skip
        seen: list[str] = []
        for page in range(20):
            params = {**query, "paginacao.paginaAtual": page}
            answer = await ctl.client.get("/v2/pix", params=params, headers=auth)
            body = answer.json()
            seen.extend(item["txid"] for item in body["pix"])
            if page + 1 >= body["parametros"]["paginacao"]["quantidadeDePaginas"]:
                break
        assert body["parametros"]["paginacao"]["quantidadeTotalDeItens"] == len(paid) == 23
        assert len(seen) == len(set(seen)) and set(seen) == paid
        e2eid = (await ctl.client.get(f"/v2/cob/{seen[0]}", headers=auth)).json()["pix"][0]
        refund = {"valor": "0.01"}
        path = f"/v2/pix/{e2eid['endToEndId']}/devolucao/dev1"
        made = await ctl.client.put(path, json=refund, headers=auth)
        repeat = await ctl.client.put(path, json=refund, headers=auth)
        assert made.status_code == repeat.status_code == 201 and made.json() == repeat.json()
        assert (await ctl.client.get(path, headers=auth)).json()["status"] == "DEVOLVIDO"


# -- Mercado Pago, Pagar.me, Adyen ------------------------------------------------------

MP_SECRET = "mp-webhook-secret-0123456789"
MP_TOKEN = "APP_USR-fake-token"
PAGARME_SECRET = "pagarme-hub-secret"
ADYEN_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"


async def test_mercadopago_thin_notifications_converge_through_the_fake_api(
    tmp_path: Path,
) -> None:
    settings = Settings(webhook_url="http://127.0.0.1:9/unset", secret=MP_SECRET,
                        api_key=MP_TOKEN, hold=True)  # fmt: skip
    async with fake("mercadopago", settings, payments=30, seed=21, duplicate_rate=0.3,
                    drop_rate=0.1, reorder=True) as ctl:  # fmt: skip
        source = SourceConfig(name="mp", provider="mercadopago", secrets=(MP_SECRET,),
                              api_base_url=ctl.url, api_key=MP_TOKEN)  # fmt: skip
        async with porteiro(tmp_path, source) as app:
            ctl.point_at(f"{app.url}/webhooks/mp")
            await ctl.client.post("/_fake/start")
            state = await ctl.done()
            events = await app.settled()
            stored = {event.dedup_key for event in events}
            dropped = {entry["event_id"] for entry in state["webhooks"]["dropped"]}
            assert dropped and not dropped & stored
            assert state["webhooks"]["delivered"] == len(stored)
            # A payment whose every notification was dropped is unknown to Porteiro; the
            # others read the truth at processing time, so they all converged.
            heard = [p for p in state["payments"] if await app.state_of(p["object_id"])]
            assert len(heard) >= len(state["payments"]) - len(dropped)
            await assert_truth_matches(app, {"payments": heard})
        auth = {"authorization": f"Bearer {MP_TOKEN}"}
        since = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
        until = datetime.now(UTC).isoformat()
        seen: list[int] = []
        for offset in range(0, 60, 8):
            page = await ctl.client.get("/v1/payments/search", headers=auth, params={
                "begin_date": since, "end_date": until, "range": "date_created",
                "offset": offset, "limit": 8})  # fmt: skip
            seen.extend(item["id"] for item in page.json()["results"])
        assert page.json()["paging"]["total"] == 30
        assert sorted(map(str, seen)) == sorted(p["object_id"] for p in state["payments"])
        body = {"transaction_amount": 10.5, "payment_method_id": "pix",
                "external_reference": "order-x"}  # fmt: skip
        key = {**auth, "x-idempotency-key": "mp-key-1"}
        first = await ctl.client.post("/v1/payments", json=body, headers=key)
        again = await ctl.client.post("/v1/payments", json=body, headers=key)
        other = await ctl.client.post("/v1/payments", json={**body, "transaction_amount": 11},
                                      headers=key)  # fmt: skip
        assert first.status_code == again.status_code == 201 and first.json() == again.json()
        assert other.status_code == 400
        assert (await ctl.client.get("/v1/payments/1", headers={})).status_code == 401


def rsa_key_file(tmp_path: Path) -> Path:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = tmp_path / "pagarme.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))  # fmt: skip
    return path


@pytest.mark.parametrize("scheme", ["hmac", "rs256"])
async def test_pagarme_orders_converge_signed_either_way(tmp_path: Path, scheme: str) -> None:
    key_file = str(rsa_key_file(tmp_path)) if scheme == "rs256" else None
    settings = Settings(webhook_url="http://127.0.0.1:9/unset", secret=PAGARME_SECRET,
                        api_key="sk_fake", signing_key_file=key_file, hold=True)  # fmt: skip
    async with fake("pagarme", settings, payments=25, seed=31, duplicate_rate=0.4,
                    reorder=True) as ctl:  # fmt: skip
        options: dict[str, Any] = {}
        if key_file:
            options = {"jwks_url": f"{ctl.url}/.well-known/jwks.json", "require_asymmetric": True}
        source = SourceConfig(name="pagarme", provider="pagarme", secrets=(PAGARME_SECRET,),
                              options=options)  # fmt: skip
        async with porteiro(tmp_path, source) as app:
            ctl.point_at(f"{app.url}/webhooks/pagarme")
            await ctl.client.post("/_fake/start")
            state = await ctl.done()
            events = await app.settled()
            assert state["webhooks"]["delivered"] == len(events)
            await assert_truth_matches(app, state)
        auth = ("sk_fake", "")
        charges: list[str] = []
        url: str | None = "/core/v5/charges?size=6"
        while url:
            page = (await ctl.client.get(url, auth=auth)).json()
            charges.extend(charge["order"]["id"] for charge in page["data"])
            url = page["paging"].get("next")
        assert sorted(charges) == sorted(p["object_id"] for p in state["payments"])
        order = {"code": "order-x", "items": [{"amount": 1500, "description": "x", "quantity": 2}]}
        headers = {"idempotency-key": "pg-key-1"}
        first = await ctl.client.post("/core/v5/orders", json=order, headers=headers, auth=auth)
        again = await ctl.client.post("/core/v5/orders", json=order, headers=headers, auth=auth)
        other = await ctl.client.post("/core/v5/orders", json={**order, "code": "y"},
                                      headers=headers, auth=auth)  # fmt: skip
        assert first.status_code == again.status_code == 200 and first.json() == again.json()
        assert first.json()["amount"] == 3000 and other.status_code == 400
        read = await ctl.client.get(f"/core/v5/orders/{first.json()['id']}", auth=auth)
        assert read.json()["status"] == "pending"


async def test_adyen_notifications_converge(tmp_path: Path) -> None:
    source = SourceConfig(name="adyen", provider="adyen", secrets=(ADYEN_KEY,),
                          options={"basic_auth": "adyen:pass"})  # fmt: skip
    async with porteiro(tmp_path, source) as app:
        settings = Settings(webhook_url=f"{app.url}/webhooks/adyen", secret=ADYEN_KEY,
                            basic_auth="adyen:pass")  # fmt: skip
        async with fake("adyen", settings, payments=25, seed=41, duplicate_rate=0.5,
                        drop_rate=0.1, reorder=True) as ctl:  # fmt: skip
            state = await ctl.done()
        events = await app.settled()
        stored = {event.dedup_key for event in events}
        dropped = {entry["event_id"] for entry in state["webhooks"]["dropped"]}
        assert dropped and not dropped & stored
        assert len(stored) == state["webhooks"]["delivered"]
        lost = {entry["object_id"] for entry in state["webhooks"]["dropped"]}
        await assert_truth_matches(
            app, {"payments": [p for p in state["payments"] if p["object_id"] not in lost]}
        )


@pytest.mark.parametrize("provider", ["stripe", "pagarme", "mercadopago", "adyen", "pix"])
def test_the_same_seed_gives_the_same_truth_and_webhooks(provider: str) -> None:
    start = datetime(2026, 3, 1, 12, tzinfo=UTC)
    settings = Settings(webhook_url="http://127.0.0.1:9/x", secret=ADYEN_KEY)

    def run(seed: int) -> list[tuple[str, str, bytes]]:
        server = FakeServer(provider, scenario_from({}, {"payments": 15, "seed": seed}),
                            settings, start=start)  # fmt: skip
        steps = sorted(server.steps, key=lambda step: step.at)
        return [(h.event_id, h.object_id, h.body) for step in steps for h in step.apply()]

    first = run(1)
    assert first and first == run(1) and first != run(2)


# -- the command -------------------------------------------------------------------------


def test_the_command_runs_a_fake_until_done(tmp_path: Path) -> None:
    """`porteiro fake-provider ... --exit-when-done` against a dead receiver: every
    webhook is given up after the compressed schedule and the process exits by itself."""
    port = free_port()
    command = [
        sys.executable, "-m", "porteiro", "fake-provider",
        "--provider", "stripe", "--port", str(port),
        "--webhook-url", f"http://127.0.0.1:{free_port()}/webhooks/stripe",
        "--secret", STRIPE_SECRET, "--payments", "2", "--time-factor", "1e7",
        "--drop-rate", "0.5", "--seed", "9", "--exit-when-done",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, timeout=30, text=True, check=False)
    assert done.returncode == 0, done.stderr
    summary = _last_json(done.stdout)
    assert summary["done"] is True and summary["delivered"] == 0
    reasons = {entry["reason"] for entry in summary["dropped"]}
    assert reasons == {"dropped", "gave_up"}


def _last_json(text: str) -> dict[str, Any]:
    line = [line for line in text.splitlines() if line.startswith("{")][-1]
    parsed: dict[str, Any] = json.loads(line)
    return parsed
