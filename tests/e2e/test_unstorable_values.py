"""Signed bodies carrying values the store cannot hold (issue 22, findings 1-3).

An integer beyond signed 64 bits, a NUL character, a lone surrogate, NaN, a date-time
past year 9999 in UTC: before, each made the ack fail (SQLite OverflowError, PostgreSQL
bigint out of range or "unsupported Unicode escape sequence", UnicodeEncodeError) on
every retry of the same bytes. Now the event is a parse error of its own: the raw bytes
are stored byte for byte, the event is dead with the reason, the gateway gets its 2xx,
and the delivery's other events apply. On both stores, through the real app.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from starlette.applications import Starlette

from porteiro import replay
from porteiro.config import Config
from porteiro.config.load import parse_config
from porteiro.http.app import create_app
from porteiro.model import EventStatus, InboundRequest, Kind, ParsedEvent, StoredEvent
from porteiro.providers.standard import StandardProvider
from porteiro.reconcile.reconciler import Reconciler
from porteiro.replay import matching_events
from porteiro.runtime import Runtime
from porteiro.store.base import UNPARSEABLE_TYPE, EventFilter, Store
from porteiro.worker import Worker
from tests.support.app import (
    ADMIN_TOKEN,
    PEER,
    SOURCE,
    admin_headers,
    asgi_client,
    make_config,
    post_signed,
)
from tests.support.inbound import inbound
from tests.support.signing import standard_headers

PIX = "pix"
PIX_KEY = "7b2e1a90-4c3d-4f5e-8a6b-0c1d2e3f4a5b"
PIX_TOKEN = "unstorable-hmac-token"


def full_config(store_url: str) -> Config:
    """The e2e Standard Webhooks source plus a Pix source (Efí's ?hmac= mode)."""
    pix = parse_config(
        {
            "sources": {
                PIX: {
                    "provider": "pix",
                    "keys": [PIX_KEY],
                    "hmac_token": PIX_TOKEN,
                    "allow_ips": [f"{PEER}/32"],
                    "confirm": False,
                }
            }
        },
        {},
    )
    config = make_config(store_url)
    return replace(config, sources={**config.sources, **pix.sources}, admin_token=ADMIN_TOKEN)


@pytest.fixture
async def served(store_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    runtime = Runtime.build(full_config(store_url))
    application: Starlette = create_app(runtime, migrate=True)
    async with application.router.lifespan_context(application), asgi_client(application) as c:
        yield c, runtime


def standard(event_id: str, **fields: object) -> dict[str, object]:
    body: dict[str, object] = {
        "id": event_id,
        "type": "payment.paid",
        "object_id": "pay_1",
        "amount": 1000,
        "currency": "BRL",
    }
    body.update(fields)
    return body


async def events_of(store: Store, source: str) -> list[StoredEvent]:
    return await matching_events(store, EventFilter(source=source))


async def only_delivery_body(store: Store, event: StoredEvent) -> bytes:
    deliveries = await store.event_deliveries(event.id)
    assert len(deliveries) == 1
    return deliveries[0].body


def stored_request(raw: bytes, msg_id: str) -> InboundRequest:
    """A signed delivery as the receiver hands it to the store."""
    headers = standard_headers(raw, msg_id)
    return inbound(SOURCE, raw, headers, received_at=datetime.now(UTC), peer=PEER)


# Each body is raw JSON text (the escapes are what the gateway sends) with what it holds.
# An id that does not compress: PostgreSQL compresses a long index entry, and a btree entry
# past 2,704 bytes after that fails the insert (and the whole group-committed batch).
LONG_ID = "".join(hashlib.sha256(str(n).encode()).hexdigest() for n in range(100)).encode()

HOSTILE = {
    "object-id-past-the-index": (
        b'{"id":"evt_long","type":"payment.paid","object_id":"' + LONG_ID + b'","amount":1}',
        "object_id is 6400 bytes long, beyond the 1024 the store can index",
    ),
    "dedup-key-past-the-index": (
        b'{"id":"' + "é".encode() * 600 + b'","type":"payment.paid","object_id":"p","amount":1}',
        "dedup_key is 1200 bytes long, beyond the 1024 the store can index",
    ),
    "amount-2^63": (
        b'{"id":"evt_big","type":"payment.paid","object_id":"pay_1",'
        b'"amount":9223372036854775808,"currency":"BRL"}',
        "amount 9223372036854775808 is beyond what the store can hold",
    ),
    "refunded-total-huge": (
        b'{"id":"evt_ref","type":"payment.partially_refunded","object_id":"pay_1",'
        b'"amount":10,"refunded_total":100000000000000000000000000000,"currency":"BRL"}',
        "refunded_total 100000000000000000000000000000 is beyond what the store can hold",
    ),
    "nul-in-type": (
        b'{"id":"evt_t","type":"payment.paid\\u0000","object_id":"pay_1","amount":1}',
        "type holds a NUL character",
    ),
    "nul-in-id": (
        b'{"id":"evt\\u0000id","type":"payment.paid","object_id":"pay_1","amount":1}',
        "dedup_key holds a NUL character",
    ),
    "nul-in-object-id": (
        b'{"id":"evt_o","type":"payment.paid","object_id":"pay\\u0000","amount":1}',
        "object_id holds a NUL character",
    ),
    "nul-in-reference": (
        b'{"id":"evt_r","type":"payment.paid","object_id":"pay_1","reference":"o\\u0000"}',
        "reference holds a NUL character",
    ),
    "surrogate-in-object-id": (
        b'{"id":"evt_s","type":"payment.paid","object_id":"pay\\ud800","amount":1}',
        "object_id holds a lone surrogate",
    ),
    "surrogate-in-id": (
        b'{"id":"evt\\udfff","type":"payment.paid","object_id":"pay_1","amount":1}',
        "dedup_key holds a lone surrogate",
    ),
    "nul-in-data": (
        b'{"id":"evt_d","type":"payment.paid","object_id":"pay_1","data":{"note":"a\\u0000b"}}',
        "data.note holds a NUL character",
    ),
    "surrogate-key-in-data": (
        b'{"id":"evt_k","type":"payment.paid","object_id":"pay_1","data":{"\\ud83d":1}}',
        "data has a key that holds a lone surrogate",
    ),
    "nan-and-bigint-in-data": (
        b'{"id":"evt_n","type":"payment.paid","object_id":"pay_1",'
        b'"data":{"x":NaN,"y":123456789012345678901234567890}}',
        "data.x holds NaN or an infinity, which JSON cannot carry",
    ),
    "bigint-in-data": (
        b'{"id":"evt_b","type":"payment.paid","object_id":"pay_1","data":{"y":[1180591620717411303424]}}',
        "data.y holds the number 1180591620717411303424, beyond what the store can hold",
    ),
    "deep-data": (
        b'{"id":"evt_deep","type":"payment.paid","object_id":"pay_1","data":{"d":'
        + b"[" * 300
        + b"]" * 300
        + b"}}",
        "data.d is nested deeper than 128 levels",
    ),
    "occurred-after-9999-utc": (
        b'{"id":"evt_y","type":"payment.paid","object_id":"pay_1","amount":1,'
        b'"occurred_at":"9999-12-31T23:30:00-05:00"}',
        "occurred_at is beyond the years the store can hold",
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE))
async def test_a_value_the_store_cannot_hold_dead_letters_its_event_and_acks(
    served: tuple[httpx.AsyncClient, Runtime], name: str
) -> None:
    client, runtime = served
    store = runtime.store
    raw, reason = HOSTILE[name]
    response = await post_signed(client, raw, f"msg_{name}")
    assert response.status_code // 100 == 2, response.text
    [event] = await events_of(store, SOURCE)
    assert event.status is EventStatus.DEAD
    assert event.type == UNPARSEABLE_TYPE
    assert event.last_error is not None and reason in event.last_error
    assert await only_delivery_body(store, event) == raw
    # The gateway's retry of the same bytes: acknowledged again, the same dead event.
    again = await post_signed(client, raw, f"msg_{name}")
    assert again.status_code // 100 == 2, again.text
    [repeated] = await events_of(store, SOURCE)
    assert (repeated.id, repeated.duplicates) == (event.id, 1)


async def test_the_reason_and_the_event_never_show_the_refused_text(
    served: tuple[httpx.AsyncClient, Runtime],
) -> None:
    client, _ = served
    raw = json.dumps(
        standard("evt_mail", object_id="ana@example.com\u0000", data={"cpf": "123.456.789-09"})
    ).encode()
    assert (await post_signed(client, raw, "msg_mail")).status_code // 100 == 2
    page = await client.get("/api/events", headers=admin_headers())
    assert page.status_code == 200, page.text
    assert "ana@example.com" not in page.text
    assert "123.456.789-09" not in page.text
    [item] = page.json()["items"]
    assert item["status"] == "dead"
    assert "object_id holds a NUL character" in item["last_error"]


async def test_a_pix_with_an_unstorable_id_is_dead_alone_and_its_neighbour_applies(
    served: tuple[httpx.AsyncClient, Runtime],
) -> None:
    client, runtime = served
    store = runtime.store
    good = {
        "endToEndId": "E00360305202612011200ptrgood001x",
        "txid": "ptr0a1b2c3d4e5f6a7b8c9dfixt06",
        "chave": PIX_KEY,
        "valor": "15.00",
        "horario": "2026-12-01T12:00:00.358Z",
    }
    nul = {**good, "endToEndId": "E00360305202612011201ptrbad\u00000x", "txid": "t\u0000"}
    huge = {
        **good,
        "endToEndId": "E00360305202612011202ptrhuge01x",
        "valor": "99999999999999999999.00",
    }
    raw = json.dumps({"pix": [good, nul, huge]}).encode()
    response = await client.post(f"/webhooks/{PIX}/pix?hmac={PIX_TOKEN}&ignorar=", content=raw)
    assert response.status_code // 100 == 2, response.text
    events = await events_of(store, PIX)
    assert len(events) == 3
    dead = [e for e in events if e.status is EventStatus.DEAD]
    alive = [e for e in events if e.status is not EventStatus.DEAD]
    assert len(dead) == 2, [(e.type, e.last_error) for e in events]
    assert all(e.type == UNPARSEABLE_TYPE for e in dead)
    assert [e.object_id for e in alive] == ["ptr0a1b2c3d4e5f6a7b8c9dfixt06"]
    assert alive[0].amount == 1500
    for event in events:
        assert await only_delivery_body(store, event) == raw


async def test_a_query_with_an_encoded_nul_is_stored_as_sent(
    served: tuple[httpx.AsyncClient, Runtime],
) -> None:
    client, runtime = served
    store = runtime.store
    raw = json.dumps(standard("evt_q")).encode()
    response = await client.post(
        f"/webhooks/{SOURCE}?note=%00%ff&x=%ud800",
        content=raw,
        headers=standard_headers(raw, "msg_q"),
    )
    assert response.status_code // 100 == 2, response.text
    [event] = await events_of(store, SOURCE)
    [delivery] = await store.event_deliveries(event.id)
    assert delivery.query == "note=%00%ff&x=%ud800"
    assert delivery.body == raw


async def test_replay_of_a_stored_body_with_unstorable_values_keeps_it_dead(
    served: tuple[httpx.AsyncClient, Runtime],
) -> None:
    """A body an older Porteiro stored raw (dead placeholder) that the current adapter
    reads into values the store refuses: the re-parse dead-letters that event with the
    reason and the replay completes (before: the store's error ended the replay)."""
    _, runtime = served
    store = runtime.store
    raw = (
        b'{"id":"evt_old","type":"payment.paid","object_id":"pay\\u0000",'
        b'"amount":9223372036854775808}'
    )
    request = stored_request(raw, "msg_old")
    await store.record_delivery(request, [], parse_error="an older Porteiro refused it")
    report = await replay.reparse(
        runtime, EventFilter(source=SOURCE, status=EventStatus.DEAD), dry_run=False
    )
    assert report.failures == []
    events = await events_of(store, SOURCE)
    reparsed = [e for e in events if e.status is EventStatus.DEAD and e.type == UNPARSEABLE_TYPE]
    assert any(e.last_error and "object_id holds a NUL character" in e.last_error for e in reparsed)


# -- what a gateway's API answers is held to the same rule --------------------------------------

HUGE = 2**70


class _AnswersHuge(StandardProvider):
    """The gateway's API (enrich, status reads) answers an amount past 64 bits."""

    async def enrich(self, event: ParsedEvent, http: httpx.AsyncClient) -> ParsedEvent:
        return replace(event, amount=HUGE)

    async def fetch_status(self, object_id: str, http: httpx.AsyncClient) -> ParsedEvent | None:
        return ParsedEvent(
            dedup_key=f"status:{object_id}", kind=Kind.PAYMENT_PAID, type="payment.paid",
            object_id=object_id, amount=HUGE, currency="BRL",
        )  # fmt: skip


def _answering_huge(runtime: Runtime) -> Runtime:
    huge = _AnswersHuge(runtime.config.sources[SOURCE])
    return replace(runtime, providers={**runtime.providers, SOURCE: huge})


async def test_an_enriched_value_the_store_cannot_hold_dead_letters_at_once(
    served: tuple[httpx.AsyncClient, Runtime],
) -> None:
    _, runtime = served
    # A thin notification (as Stripe's v2 events): the worker reads the state from the API.
    thin = ParsedEvent(
        dedup_key="evt_enriched", kind=Kind.PAYMENT_PAID, type="payment.paid",
        object_id="pay_1", thin=True,
    )  # fmt: skip
    await runtime.store.record_delivery(stored_request(b"{}", "msg_enriched"), [thin])
    await Worker(_answering_huge(runtime)).run_once()
    (event,) = await events_of(runtime.store, SOURCE)
    # Dead with why on the first attempt (before: the store's error, retried to the end).
    assert event.status is EventStatus.DEAD and event.attempts == 1
    assert event.last_error is not None and "cannot be stored" in event.last_error
    assert str(HUGE) in event.last_error


async def test_a_status_read_the_store_cannot_hold_is_dead_alone(
    served: tuple[httpx.AsyncClient, Runtime],
) -> None:
    client, runtime = served
    raw = json.dumps(standard("evt_open", type="payment.created", object_id="pay_open")).encode()
    assert (await post_signed(client, raw, "msg_open")).status_code == 200
    await Worker(runtime).run_once()
    reconciler = Reconciler(_answering_huge(runtime))
    try:
        report = await reconciler.stale_cycle(datetime.now(UTC) + timedelta(days=400))
    finally:
        await reconciler.aclose()
    assert [cycle.found for cycle in report.sources] == [1]
    dead = [e for e in await events_of(runtime.store, SOURCE) if e.type == UNPARSEABLE_TYPE]
    assert [e.status for e in dead] == [EventStatus.DEAD]
    assert dead[0].last_error is not None and "amount" in dead[0].last_error
