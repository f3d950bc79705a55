"""The outgoing idempotent client (porteiro.outgoing.client, `porteiro charge`) against the fake
gateways over real HTTP (uvicorn), with real SQLite and PostgreSQL stores.

A `Recorder` between uvicorn and each fake logs every API request (path, idempotency key,
answer) and can answer the next creates with a 500 before the fake sees them, like a load
balancer whose upstream is down. The fake's own faults lose a committed create's response
(the connection is closed) or keep a create in flight (a second attempt gets 409).
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from porteiro.config import SourceConfig
from porteiro.fakes import FakeServer, Settings, scenario_from
from porteiro.fakes.idempotency import KeepRawSend
from porteiro.outgoing.client import (
    CreateRejected,
    CreateUnresolved,
    IdempotencyConflict,
    PaymentClient,
    pix_txid,
)
from porteiro.outgoing.request import InvalidRequest, fingerprint, new_request
from porteiro.retry import RetryPolicy
from porteiro.runtime import utc_now
from porteiro.store import open_store
from porteiro.store.base import Store
from porteiro.store.client import IdempotencyStore, KeyState
from porteiro.store.reconcile import ReconcileStore
from tests.support.processes import porteiro_argv, porteiro_env
from tests.support.servers import live_server
from tests.support.waiting import wait_until_async

FAST = RetryPolicy(max_attempts=5, base_delay_seconds=0.02, multiplier=2.0,
                   max_delay_seconds=0.3, jitter=0.25)  # fmt: skip
PIX_KEY = "9b2c4d6e-1f3a-4b5c-8d7e-0a1b2c3d4e5f"
CREATE_PATHS = re.compile(r"^/(v1/payment_intents|core/v5/orders|v1/payments|v71/payments"
                          r"|v2/cob/[A-Za-z0-9]+)$")  # fmt: skip


# -- a recording front for the fake ------------------------------------------------------


@dataclass
class Seen:
    method: str
    path: str
    key: str | None
    status: int | None = None  # None: no answer (lost, or still in flight)


@dataclass
class Recorder:
    app: ASGIApp
    log: list[Seen] = field(default_factory=list)
    fail_next: int = 0  # creates answered 500 here, never reaching the fake
    # Creates (1-based, in arrival order) refused 400 here, as by a PSP that never
    # replays a PUT on an existing txid.
    refuse: set[int] = field(default_factory=set)

    def creates(self) -> list[Seen]:
        return [seen for seen in self.log if seen.method in ("POST", "PUT")]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        is_create = scope["type"] == "http" and scope["method"] in ("POST", "PUT")
        if not is_create or not CREATE_PATHS.match(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = {name.decode().lower(): value.decode() for name, value in scope["headers"]}
        key = headers.get("idempotency-key") or headers.get("x-idempotency-key")
        seen = Seen(scope["method"], scope["path"], key)
        self.log.append(seen)
        if self.fail_next > 0:
            self.fail_next -= 1
            await _answer(send, seen, 500, b'{"error": "upstream down"}')
            return
        if len(self.creates()) in self.refuse:
            await _answer(send, seen, 400, b'{"title": "CobOperacaoInvalida", "status": 400}')
            return

        async def spy(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen.status = message["status"]
            await send(message)

        await self.app(scope, receive, spy)


async def _answer(send: Send, seen: Seen, status: int, body: bytes) -> None:
    seen.status = status
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass
class Fake:
    url: str
    server: FakeServer
    recorder: Recorder
    control: httpx.AsyncClient

    async def faults(self, **armed: int) -> None:
        answer = await self.control.post("/_fake/faults", json=armed)
        assert answer.status_code == 200, answer.text

    async def payments(self) -> list[dict[str, Any]]:
        state = (await self.control.get("/_fake/state")).json()
        return cast(list[dict[str, Any]], state["payments"])


@dataclass(frozen=True)
class Gateway:
    provider: str
    settings: Settings
    source: Callable[[str], SourceConfig]  # the Porteiro source for the fake's URL


def _source(name: str, provider: str, url: str, **extra: Any) -> SourceConfig:
    return SourceConfig(name=name, provider=provider, api_base_url=url, **extra)


GATEWAYS = {
    "stripe": Gateway(
        "stripe",
        Settings(webhook_url="http://127.0.0.1:9/x", secret="whsec_clientTest0123456789",
                 api_key="sk_test_client", hold=True),
        lambda url: _source("stripe", "stripe", url, api_key="sk_test_client"),
    ),
    "pagarme": Gateway(
        "pagarme",
        Settings(webhook_url="http://127.0.0.1:9/x", secret="pagarme-hub-secret",
                 api_key="sk_pagarme_client", hold=True),
        lambda url: _source("pagarme", "pagarme", f"{url}/core/v5", api_key="sk_pagarme_client"),
    ),
    "mercadopago": Gateway(
        "mercadopago",
        Settings(webhook_url="http://127.0.0.1:9/x", secret="mp-webhook-secret-0123",
                 api_key="APP_USR-client", hold=True),
        lambda url: _source("mp", "mercadopago", url, api_key="APP_USR-client"),
    ),
    "adyen": Gateway(
        "adyen",
        Settings(webhook_url="http://127.0.0.1:9/x",
                 secret="44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
                 api_key="adyen-api-key", hold=True),
        lambda url: _source("adyen", "adyen", url, api_key="adyen-api-key",
                            options={"merchant_account": "PorteiroECOM"}),
    ),
    "pix": Gateway(
        "pix",
        Settings(webhook_url="http://127.0.0.1:9/x", secret="pix-hmac-token", pix_key=PIX_KEY,
                 api_key="client-id:client-secret", hold=True),
        lambda url: _source("pix", "pix", url, options={
            "client_id": "client-id", "client_secret": "client-secret", "keys": [PIX_KEY]}),
    ),
}  # fmt: skip


@asynccontextmanager
async def fake(provider: str) -> AsyncIterator[Fake]:
    server = FakeServer(provider, scenario_from({}, {"payments": 0}), GATEWAYS[provider].settings)
    recorder = Recorder(server.starlette())
    # KeepRawSend stays outermost: a lost response closes uvicorn's own connection.
    async with (
        live_server(KeepRawSend(recorder)) as url,
        httpx.AsyncClient(base_url=url) as control,
    ):
        yield Fake(url, server, recorder, control)


@asynccontextmanager
async def client_for(
    store: Store, gateway: str, url: str, **options: Any
) -> AsyncIterator[PaymentClient]:
    source = GATEWAYS[gateway].source(url)
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=3.0)) as http:
        client = PaymentClient(
            cast(IdempotencyStore, store), source, http, clock=utc_now,
            **{"policy": FAST, **options},
        )  # fmt: skip
        try:
            yield client
        finally:
            await client.aclose()


def keys_of(store: Store) -> IdempotencyStore:
    assert isinstance(store, IdempotencyStore)
    return store


def expectations_of(store: Store) -> ReconcileStore:
    assert isinstance(store, ReconcileStore), "the reconciler's store verbs are missing"
    return store


# -- tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("gateway", list(GATEWAYS))
async def test_create_succeeds_is_expected_and_replays_without_a_request(
    store: Store, gateway: str
) -> None:
    async with fake(gateway) as gw, client_for(store, gateway, gw.url) as client:
        before = utc_now()
        result = await client.create_payment(1990, "BRL", "order-1", key=f"k-{gateway}",
                                              expires_in=600)  # fmt: skip
        assert (result.attempts, result.replayed, result.resumed) == (1, False, False)
        payments = await gw.payments()
        assert [p["object_id"] for p in payments] == [result.object_id]
        assert payments[0]["amount"] == 1990 and payments[0]["currency"] == "BRL"
        [create] = gw.recorder.creates()
        assert create.status in (200, 201)
        if gateway == "pix":
            assert create.path == f"/v2/cob/{pix_txid('k-pix')}" and create.key is None
            assert result.object_id == pix_txid("k-pix")
        else:
            assert create.key == f"k-{gateway}"

        stored = await keys_of(store).get_idempotency_key(client.source.name, f"k-{gateway}")
        assert stored is not None and stored.state is KeyState.SUCCEEDED
        assert stored.object_id == result.object_id and stored.expected_at is not None
        expected = await expectations_of(store).get_expectation(
            client.source.name, result.object_id
        )
        assert expected is not None and result.expected
        assert (expected.amount, expected.currency, expected.reference) == (1990, "BRL",
                                                                          "order-1")  # fmt: skip
        assert expected.expires_at is not None and result.expires_at == expected.expires_at
        lapse = expected.expires_at - before
        assert timedelta(seconds=595) <= lapse <= timedelta(seconds=605)

        again = await client.create_payment(1990, "BRL", "order-1", key=f"k-{gateway}",
                                            expires_in=600)  # fmt: skip
        assert again.replayed and again.object_id == result.object_id
        assert again.body == result.body and again.expires_at == result.expires_at
        assert len(gw.recorder.creates()) == 1  # answered from the store


@pytest.mark.parametrize("gateway", list(GATEWAYS))
async def test_a_lost_response_is_retried_with_the_same_key_and_creates_once(
    store: Store, gateway: str
) -> None:
    async with fake(gateway) as gw, client_for(store, gateway, gw.url) as client:
        await gw.faults(lose_create_responses=1)
        result = await client.create_payment(5000, "BRL", "order-lost", key="lost-1")
        creates = gw.recorder.creates()
        assert [seen.status for seen in creates] == [None, creates[1].status]
        assert creates[1].status in (200, 201)
        assert len({(seen.path, seen.key) for seen in creates}) == 1  # same key, same txid
        assert result.attempts == 2 and not result.replayed
        payments = await gw.payments()
        assert [p["object_id"] for p in payments] == [result.object_id]  # exactly one
        stored = await keys_of(store).get_idempotency_key(client.source.name, "lost-1")
        assert stored is not None and stored.attempts == 2 and stored.last_error is not None


async def test_500s_then_success(store: Store) -> None:
    async with fake("stripe") as gw, client_for(store, "stripe", gw.url) as client:
        gw.recorder.fail_next = 2
        result = await client.create_payment(700, "BRL", "order-500", key="k500")
        assert [s.status for s in gw.recorder.creates()] == [500, 500, 200]
        assert {s.key for s in gw.recorder.creates()} == {"k500"}
        assert result.attempts == 3 and len(await gw.payments()) == 1


async def test_a_409_in_flight_is_retried_until_the_first_request_finished(
    store: Store,
) -> None:
    # The first attempt times out while the gateway still works on it; the retry with the
    # same key gets 409 (in progress) until the first one is done, then its answer.
    async with fake("mercadopago") as gw, client_for(
        store, "mercadopago", gw.url, timeout_seconds=0.2,
        policy=RetryPolicy(max_attempts=8, base_delay_seconds=0.1, multiplier=1.5,
                           max_delay_seconds=0.3, jitter=0.1),
    ) as client:  # fmt: skip
        await gw.faults(create_delay_ms=700)
        result = await client.create_payment(1234, "BRL", "order-409", key="k409")
        statuses = [seen.status for seen in gw.recorder.creates()]
        assert 409 in statuses and statuses[-1] == 201
        assert {seen.key for seen in gw.recorder.creates()} == {"k409"}
        assert len(await gw.payments()) == 1 and result.attempts == len(statuses)


async def test_a_400_is_not_retried_and_the_key_is_failed(store: Store) -> None:
    async with fake("stripe") as gw, client_for(store, "stripe", gw.url) as client:
        with pytest.raises(CreateRejected) as refused:
            # `extra` overrides the amount with one Stripe refuses.
            await client.create_payment(100, "BRL", "order-400", key="k400",
                                        extra={"amount": 0})  # fmt: skip
        assert refused.value.status == 400 and not refused.value.replayed
        assert [s.status for s in gw.recorder.creates()] == [400]
        stored = await keys_of(store).get_idempotency_key("stripe", "k400")
        assert stored is not None and stored.state is KeyState.FAILED
        assert stored.attempts == 1 and stored.response_status == 400
        assert stored.response_body["error"]["code"] == "parameter_missing"

        with pytest.raises(CreateRejected) as again:
            await client.create_payment(100, "BRL", "order-400", key="k400",
                                        extra={"amount": 0})  # fmt: skip
        assert again.value.replayed and len(gw.recorder.creates()) == 1
        assert await gw.payments() == []


async def test_an_unauthorised_create_is_not_retried(store: Store) -> None:
    async with fake("adyen") as gw:
        source = GATEWAYS["adyen"].source(gw.url)
        wrong = SourceConfig(name="adyen", provider="adyen", api_base_url=gw.url,
                             api_key="wrong", options=dict(source.options))  # fmt: skip
        async with httpx.AsyncClient() as http:
            client = PaymentClient(keys_of(store), wrong, http, clock=utc_now, policy=FAST)
            with pytest.raises(CreateRejected) as refused:
                await client.create_payment(100, "EUR", "order-401", key="k401")
        assert refused.value.status == 401 and len(gw.recorder.creates()) == 1


async def test_the_same_key_with_another_payload_is_refused_before_sending(
    store: Store,
) -> None:
    async with fake("pagarme") as gw, client_for(store, "pagarme", gw.url) as client:
        first = await client.create_payment(1000, "BRL", "order-1", key="shared")
        changes: tuple[dict[str, Any], ...] = (
            {"amount": 1001, "currency": "BRL", "reference": "order-1"},
            {"amount": 1000, "currency": "BRL", "reference": "order-2"},
            {"amount": 1000, "currency": "BRL", "reference": "order-1", "expires_in": 60},
            {"amount": 1000, "currency": "BRL", "reference": "order-1",
             "extra": {"customer": {"name": "Ana"}}},
        )  # fmt: skip
        for changed in changes:
            with pytest.raises(IdempotencyConflict):
                await client.create_payment(key="shared", **changed)
        assert len(gw.recorder.creates()) == 1 and len(gw.recorder.log) == 1  # nothing sent
        assert [p["object_id"] for p in await gw.payments()] == [first.object_id]
        stored = await keys_of(store).get_idempotency_key("pagarme", "shared")
        assert stored is not None and stored.attempts == 1  # the conflicts touched nothing


async def test_a_crash_between_storing_the_key_and_the_first_attempt_resumes_it(
    store: Store,
) -> None:
    # What a process that died right after the commit leaves: a pending key, 0 attempts.
    keys = keys_of(store)
    request = new_request(4200, "BRL", "order-crash")
    await keys.begin_idempotency_key(
        "stripe", "crashed-key", operation="stripe.payment_intents.create",
        fingerprint=fingerprint("stripe.payment_intents.create", request),
        request=request.to_json(), now=utc_now() - timedelta(minutes=5),
    )  # fmt: skip
    async with fake("stripe") as gw, client_for(store, "stripe", gw.url) as restarted:
        outcomes = await restarted.resume_pending(older_than=timedelta(minutes=1))
        result = outcomes["crashed-key"]
        assert not isinstance(result, Exception)
        assert result.resumed and result.attempts == 1 and result.key == "crashed-key"
        assert [s.key for s in gw.recorder.creates()] == ["crashed-key"]
        [payment] = await gw.payments()
        assert payment["amount"] == 4200 and payment["reference"] == "order-crash"
        assert await restarted.resume_pending() == {}  # nothing pending any more


async def test_calling_again_with_the_key_of_an_interrupted_create_continues_it(
    store: Store,
) -> None:
    async with fake("stripe") as gw:
        async with client_for(store, "stripe", gw.url) as first:
            gw.recorder.fail_next = 10
            with pytest.raises(CreateUnresolved) as unresolved:
                await first.create_payment(900, "BRL", "order-9", key="k9")
            assert unresolved.value.attempts == FAST.max_attempts
        stored = await keys_of(store).get_idempotency_key("stripe", "k9")
        assert stored is not None and stored.state is KeyState.PENDING
        assert stored.last_error is not None and "500" in stored.last_error

        gw.recorder.fail_next = 1
        async with client_for(store, "stripe", gw.url) as second:  # a new process
            result = await second.create_payment(900, "BRL", "order-9", key="k9")
        assert result.resumed and result.attempts == FAST.max_attempts + 2
        assert {s.key for s in gw.recorder.creates()} == {"k9"}
        assert len(await gw.payments()) == 1


async def test_the_key_is_stored_before_the_first_attempt(store: Store) -> None:
    async with fake("stripe") as gw, client_for(store, "stripe", gw.url) as client:
        await gw.faults(create_delay_ms=800)
        task = asyncio.create_task(client.create_payment(300, "BRL", "order-slow", key="early"))
        await wait_until_async(lambda: gw.recorder.creates(), "the create", within=20, every=0.01)
        # The request reached the gateway: by then the key was committed, attempt counted.
        seen = await keys_of(store).get_idempotency_key("stripe", "early")
        assert seen is not None and seen.state is KeyState.PENDING and seen.attempts == 1
        assert await gw.payments() == []  # the gateway has not created anything yet
        result = await task
        assert result.attempts == 1 and len(await gw.payments()) == 1


async def test_pix_txid_is_derived_from_the_key_and_the_put_is_idempotent(
    store: Store, tmp_path: Path
) -> None:
    txid = pix_txid("order-77-attempt")
    assert txid == pix_txid("order-77-attempt") and re.fullmatch(r"[a-z0-9]{35}", txid)
    assert len({pix_txid(f"k{n}") for n in range(1000)}) == 1000
    async with fake("pix") as gw:
        async with client_for(store, "pix", gw.url) as client:
            result = await client.create_payment(1050, "BRL", "order-77", key="order-77-attempt",
                                                  expires_in=120)  # fmt: skip
        assert result.object_id == txid
        cob = result.body
        assert cob["txid"] == txid and cob["valor"]["original"] == "10.50"
        assert cob["calendario"]["expiracao"] == 120 and cob["chave"] == PIX_KEY
        criacao = datetime.fromisoformat(cob["calendario"]["criacao"].replace("Z", "+00:00"))
        assert result.expires_at == criacao + timedelta(seconds=120)

        # Even a client that lost its own store PUTs the same txid: the PSP answers the
        # same cob and creates nothing new.
        fresh = open_store(f"sqlite:///{tmp_path / 'elsewhere.db'}")
        await fresh.open()
        await fresh.upgrade()
        try:
            async with client_for(fresh, "pix", gw.url) as other:
                again = await other.create_payment(
                    1050, "BRL", "order-77", key="order-77-attempt", expires_in=120
                )
        finally:
            await fresh.close()
        assert again.object_id == txid and not again.replayed and again.body == cob
        assert [s.path for s in gw.recorder.creates()] == [f"/v2/cob/{txid}"] * 2
        assert [p["object_id"] for p in await gw.payments()] == [txid]


async def test_pix_a_psp_refusing_a_repeated_put_still_gives_the_cob_once(
    store: Store, tmp_path: Path
) -> None:
    async with fake("pix") as gw:
        async with client_for(store, "pix", gw.url) as client:
            await gw.faults(lose_create_responses=1)
            gw.recorder.refuse = {2}  # the retry meets a PSP that refuses a used txid
            result = await client.create_payment(800, "BRL", "order-8", key="k8")
        assert [s.status for s in gw.recorder.creates()] == [None, 400]
        assert result.object_id == pix_txid("k8") and result.status == 200
        assert result.body["valor"]["original"] == "8.00" and result.attempts == 2
        assert [p["object_id"] for p in await gw.payments()] == [pix_txid("k8")]

        # The same txid asked for another amount (a store lost, a key reused): the cob at
        # the PSP is someone else's, and the refusal stands.
        fresh = open_store(f"sqlite:///{tmp_path / 'other.db'}")
        await fresh.open()
        await fresh.upgrade()
        try:
            async with client_for(fresh, "pix", gw.url) as other:
                with pytest.raises(CreateRejected) as refused:
                    await other.create_payment(900, "BRL", "order-8", key="k8")
        finally:
            await fresh.close()
        assert refused.value.status == 400
        assert [p["amount"] for p in await gw.payments()] == [800]


async def test_requests_the_gateway_cannot_take_are_refused_before_storing(
    store: Store,
) -> None:
    async with fake("pix") as gw, client_for(store, "pix", gw.url) as client:
        for bad in ({"amount": 0}, {"currency": "USD"}, {"reference": " "}):
            args: dict[str, Any] = {"amount": 100, "currency": "BRL", "reference": "r", **bad}
            with pytest.raises(InvalidRequest):
                await client.create_payment(key="never", **args)
        with pytest.raises(InvalidRequest):
            await client.create_payment(100, "BRL", "r", key="has space")
        assert await keys_of(store).get_idempotency_key("pix", "never") is None
        assert gw.recorder.log == []


# -- the CLI, and a client process killed mid-request -------------------------------------


def _config(tmp_path: Path, fake_url: str) -> Path:
    path = tmp_path / "porteiro.toml"
    path.write_text(f"""
[store]
url = "sqlite:///{tmp_path / "client.db"}"

[sources.stripe]
provider = "stripe"
secrets = ["whsec_clientTest0123456789"]
api_base_url = "{fake_url}"
api_key = "sk_test_client"
""")
    return path


async def _porteiro(config: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *porteiro_argv(config, *args), env=porteiro_env({"PORTEIRO_LOG_LEVEL": "WARNING"}),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _finish(process: asyncio.subprocess.Process) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


CREATE = ("charge", "create", "--source", "stripe", "--amount", "1000", "--currency", "BRL",
          "--reference", "order-1", "--json")  # fmt: skip


@pytest.mark.slow
async def test_cli_creates_once_and_replays(tmp_path: Path) -> None:
    async with fake("stripe") as gw:
        config = _config(tmp_path, gw.url)
        code, out, err = await _finish(await _porteiro(config, *CREATE, "--key", "cli-1"))
        assert code == 0, err
        first = json.loads(out)
        assert first["key"] == "cli-1" and first["attempts"] == 1 and not first["replayed"]
        assert first["object_id"].startswith("pi_") and first["expected"]
        code, out, err = await _finish(await _porteiro(config, *CREATE, "--key", "cli-1"))
        assert code == 0, err
        again = json.loads(out)
        assert again["replayed"] and again["object_id"] == first["object_id"]

        code, out, _ = await _finish(await _porteiro(config, *CREATE[:-1]))  # a new key
        assert code == 0 and "key=" in out and "1 attempt(s)" in out
        assert len(await gw.payments()) == 2 and len(gw.recorder.creates()) == 2

        code, _, err = await _finish(await _porteiro(config, *CREATE, "--key", "cli-1",
                                                     "--expires-in", "5"))  # fmt: skip
        assert code == 2 and "another request" in err


@pytest.mark.slow
async def test_a_client_process_killed_mid_request_resumes_with_the_same_key(
    tmp_path: Path,
) -> None:
    async with fake("stripe") as gw:
        config = _config(tmp_path, gw.url)
        await gw.faults(create_delay_ms=1500)  # the gateway is still working when we die
        doomed = await _porteiro(config, *CREATE, "--key", "killed-1")
        await wait_until_async(
            lambda: gw.recorder.creates(), "the first attempt", within=20, every=0.01
        )
        doomed.send_signal(signal.SIGKILL)
        await doomed.wait()

        store = open_store(f"sqlite:///{tmp_path / 'client.db'}")
        await store.open()
        try:
            left = await keys_of(store).get_idempotency_key("stripe", "killed-1")
        finally:
            await store.close()
        assert left is not None and left.state is KeyState.PENDING and left.attempts == 1

        # The restart reaches the gateway while the dead process's request may still run
        # there (409, retried) or after it committed (its stored answer): one charge.
        await gw.faults(create_delay_ms=0)
        code, out, err = await _finish(
            await _porteiro(config, "charge", "resume", "--source", "stripe", "--json")
        )
        assert code == 0, err
        result = json.loads(out)
        assert result["key"] == "killed-1" and result["resumed"] and result["attempts"] >= 2
        assert {seen.key for seen in gw.recorder.creates()} == {"killed-1"}
        assert [p["object_id"] for p in await gw.payments()] == [result["object_id"]]
