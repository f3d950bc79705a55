"""The admin API over real HTTP with real stores: auth, listing and paging, raw deliveries,
replay, DLQ, payments with history, quarantine, and the OpenAPI document's coverage."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from porteiro.config import Config, DestinationConfig
from porteiro.http.admin import MAX_ADMIN_BODY
from porteiro.http.app import create_app
from porteiro.http.jsonview import DATA_MAX_DEPTH, TRUNCATED, body_from_json
from porteiro.model import EventStatus, InboundRequest, Kind, ParsedEvent
from porteiro.runtime import Runtime
from porteiro.store.base import EventFilter
from porteiro.worker import Worker
from tests.support.app import PEER, SOURCE, admin_headers, asgi_client, post_signed
from tests.support.events import event_body
from tests.support.servers import live_server
from tests.support.signing import SECRET, raw_standard_headers
from tests.support.waiting import wait_until_async

sqlite_only = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
AUTH = admin_headers()


async def ingest(client: httpx.AsyncClient, event_id: str, **fields: Any) -> None:
    response = await post_signed(client, event_body(event_id, **fields), f"msg_{event_id}")
    assert response.status_code == 200


def header_map(pairs: list[list[str]]) -> dict[str, str]:
    return {name: value for name, value in pairs}


# -- auth -------------------------------------------------------------------------------------


@sqlite_only
async def test_admin_routes_need_the_bearer_token(client: httpx.AsyncClient) -> None:
    for method, path in [
        ("GET", "/api/events"),
        ("GET", "/api/events/1"),
        ("POST", "/api/events/1/replay"),
        ("GET", "/api/dlq"),
        ("POST", "/api/dlq/replay"),
        ("POST", "/api/replay"),
        ("GET", "/api/payments/shop/pay_1"),
        ("GET", "/api/quarantine"),
    ]:
        for headers in ({}, admin_headers("wrong"), {"authorization": "Basic abc"}):
            response = await client.request(method, path, headers=headers)
            assert response.status_code == 401, (method, path, headers)
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json() == {"error": "missing or invalid admin token"}
    assert (await client.get("/api/events", headers=AUTH)).status_code == 200
    # The document describes the surface only: readable without the token.
    assert (await client.get("/api/openapi.json")).status_code == 200


@sqlite_only
async def test_admin_api_is_closed_without_a_configured_token(config: Config) -> None:
    runtime = Runtime.build(replace(config, admin_token=None))
    application = create_app(runtime, migrate=True)
    async with application.router.lifespan_context(application), asgi_client(application) as http:
        for headers in ({}, admin_headers("anything")):
            response = await http.get("/api/events", headers=headers)
            assert response.status_code == 503
            assert response.json() == {"error": "admin API disabled: set [admin] token"}


# -- events -----------------------------------------------------------------------------------


async def test_list_filter_and_page_events(client: httpx.AsyncClient) -> None:
    for index in range(5):
        await ingest(
            client, f"evt_{index}", object_id=f"pay_{index % 2}", reference=f"order-{index % 3}"
        )
    await ingest(client, "evt_other", kind="customer.updated", object_id="cus_1")

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/api/events", params=params, headers=AUTH)).json()
        assert len(page["items"]) <= 2
        seen.extend(item["dedup_key"] for item in page["items"])
        pages += 1
        cursor = page["next"]
        if cursor is None:
            break
    assert sorted(seen) == sorted([f"evt_{i}" for i in range(5)] + ["evt_other"])
    assert pages == 3

    async def keys(**params: str) -> list[str]:
        response = await client.get("/api/events", params=params, headers=AUTH)
        assert response.status_code == 200, response.text
        return sorted(item["dedup_key"] for item in response.json()["items"])

    assert await keys(object_id="pay_1") == ["evt_1", "evt_3"]
    assert await keys(kind="other") == ["evt_other"]
    assert await keys(status="ignored") == ["evt_other"]
    assert await keys(dedup_key="evt_4") == ["evt_4"]
    assert await keys(reference="order-1") == ["evt_1", "evt_4"]
    assert await keys(reference="order-1", object_id="pay_1") == ["evt_1"]
    assert await keys(reference="order") == []
    assert await keys(reference="x" * 8000) == []  # no row has it: an empty page, not a 500
    assert await keys(source="elsewhere") == []
    assert len(await keys(since="2000-01-01T00:00:00Z", until="2999-01-01")) == 6
    assert await keys(until="2000-01-01T00:00:00+00:00") == []

    item = (await client.get("/api/events", params={"dedup_key": "evt_0"}, headers=AUTH)).json()
    [event] = item["items"]
    assert {"id", "source", "dedup_key", "kind", "type", "object_id", "status", "attempts"} <= set(
        event
    )
    assert (event["source"], event["kind"], event["status"], event["amount"]) == (
        SOURCE,
        "payment.paid",
        "pending",
        1000,
    )
    datetime.fromisoformat(event["received_at"])


@sqlite_only
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"status": "finished"}, "invalid status 'finished'"),
        ({"kind": "payment.maybe"}, "invalid kind 'payment.maybe'"),
        ({"since": "last tuesday"}, "invalid since 'last tuesday'"),
        ({"until": "2024-13-01"}, "invalid until"),
        ({"limit": "0"}, "invalid limit"),
        ({"limit": "501"}, "invalid limit"),
        ({"limit": "ten"}, "invalid limit"),
    ],
)
async def test_invalid_list_parameters_are_400(
    client: httpx.AsyncClient, params: dict[str, str], message: str
) -> None:
    response = await client.get("/api/events", params=params, headers=AUTH)
    assert response.status_code == 400
    assert message in response.json()["error"]


async def test_show_event_with_its_raw_deliveries(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    body = event_body("evt_show", data={"note": "ação"})
    for _ in range(2):
        response = await post_signed(client, body, "msg_show")
        assert response.status_code == 200
    [stored] = (await runtime.store.list_events(EventFilter(dedup_key="evt_show"), None, 1)).items
    shown = (await client.get(f"/api/events/{stored.id}", headers=AUTH)).json()
    assert shown["id"] == stored.id
    assert shown["duplicates"] == 1
    assert shown["data"] == {"note": "ação"}
    assert len(shown["deliveries"]) == 2
    delivery = shown["deliveries"][0]
    assert delivery["body_base64"] is False
    assert delivery["body"].encode("utf-8") == body
    assert header_map(delivery["headers"])["webhook-id"] == "msg_show"
    assert delivery["path"] == f"/webhooks/{SOURCE}"
    missing = await client.get("/api/events/999999", headers=AUTH)
    assert (missing.status_code, missing.json()) == (404, {"error": "unknown event"})


async def test_warnings_are_shown_on_the_event_and_counted(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    clean = event_body("evt_clean", occurred_at="2024-11-28T16:37:11Z")
    naive = event_body("evt_naive", occurred_at="2024-11-28T16:37:11")  # no offset
    for msg_id, body in (("msg_clean", clean), ("msg_naive", naive), ("msg_naive", naive)):
        assert (await post_signed(client, body, msg_id)).status_code == 200
    listed = (await client.get("/api/events", headers=AUTH)).json()["items"]
    warnings = {event["dedup_key"]: event["warnings"] for event in listed}
    assert warnings["evt_clean"] == []
    assert warnings["evt_naive"] == [
        {"rule": "standard.occurred_at", "detail": "occurred_at has no UTC offset: read as UTC"}
    ]
    [naive_event] = [e for e in listed if e["dedup_key"] == "evt_naive"]
    shown = (await client.get(f"/api/events/{naive_event['id']}", headers=AUTH)).json()
    assert shown["warnings"] == warnings["evt_naive"]
    assert shown["occurred_at"] == "2024-11-28T16:37:11+00:00"
    metrics = (await client.get("/metrics")).text
    line = f'porteiro_event_warnings_total{{rule="standard.occurred_at",source="{SOURCE}"}} 2.0'
    assert line in metrics


@sqlite_only
async def test_binary_body_is_shown_base64_and_round_trips(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    body = b"\xff\xfe\x00binary\x80"
    response = await client.post(
        f"/webhooks/{SOURCE}", content=body, headers=raw_standard_headers(body, "m")
    )
    assert response.status_code == 200
    dead = (await client.get("/api/dlq", headers=AUTH)).json()["items"]
    [event] = dead
    shown = (await client.get(f"/api/events/{event['id']}", headers=AUTH)).json()
    [delivery] = shown["deliveries"]
    assert delivery["body_base64"] is True
    assert body_from_json(delivery) == body
    assert delivery["parse_error"] == event["last_error"]


# -- replay and DLQ -----------------------------------------------------------------------------


async def test_replay_one_event(client: httpx.AsyncClient, runtime: Runtime) -> None:
    await ingest(client, "evt_ign", kind="customer.updated")
    [event] = (await runtime.store.list_events(EventFilter(), None, 1)).items
    assert event.status is EventStatus.IGNORED
    response = await client.post(f"/api/events/{event.id}/replay", headers=AUTH)
    assert response.json() == {"requeued": 1}
    again = await runtime.store.get_event(event.id)
    assert again is not None and again.status is EventStatus.PENDING
    missing = await client.post("/api/events/424242/replay", headers=AUTH)
    assert missing.status_code == 404


async def test_dlq_list_and_replay_of_a_still_broken_delivery(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    await ingest(client, "evt_fine")
    broken = b'{"id": "evt_late", "type": "payment.paid", "object_id": "pay_9", "amount": 5'
    assert (await post_signed(client, broken, "msg_broken")).status_code == 200

    dlq = (await client.get("/api/dlq", headers=AUTH)).json()
    [dead] = dlq["items"]
    assert dead["status"] == "dead" and dead["type"] == "porteiro.unparseable"
    assert (await client.get("/api/dlq", params={"source": "other"}, headers=AUTH)).json()[
        "items"
    ] == []

    # Still unparseable with the current code: reported as a failure, stays dead.
    report = (await client.post("/api/dlq/replay", json={"all": True}, headers=AUTH)).json()
    assert report["requeued"] == 0
    assert len(report["failures"]) == 1
    assert len((await client.get("/api/dlq", headers=AUTH)).json()["items"]) == 1

    bad = await client.post("/api/dlq/replay", json={"status": "done"}, headers=AUTH)
    assert bad.status_code == 400 and "unknown field(s) status" in bad.json()["error"]


async def test_dlq_replay_by_ids_requeues_only_dead_events(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    await ingest(client, "evt_a")
    await ingest(client, "evt_b")
    events = (await runtime.store.list_events(EventFilter(), None, 10)).items
    by_key = {event.dedup_key: event for event in events}
    # Make evt_a dead through the real claim/dead-letter path.
    claims = await runtime.store.claim("test-worker", 10, timedelta(seconds=60), runtime.clock())
    for claim in claims:
        if claim.event.dedup_key == "evt_a":
            assert await runtime.store.dead_letter(claim, "merchant down", runtime.clock())
    response = await client.post(
        "/api/dlq/replay", json={"ids": [by_key["evt_a"].id, by_key["evt_b"].id]}, headers=AUTH
    )
    report = response.json()
    assert report["requeued"] == 1
    assert report["event_ids"] == [by_key["evt_a"].id]
    assert report["skipped"] == [by_key["evt_b"].id]
    revived = await runtime.store.get_event(by_key["evt_a"].id)
    assert revived is not None and revived.status is EventStatus.PENDING


@sqlite_only
async def test_replay_by_filter_and_validation(client: httpx.AsyncClient, runtime: Runtime) -> None:
    await ingest(client, "evt_p1")
    await ingest(client, "evt_p2", object_id="pay_2", reference="order-2")
    await ingest(client, "evt_o", kind="customer.updated")
    response = await client.post("/api/replay", json={"kind": "payment.paid"}, headers=AUTH)
    assert response.status_code == 200
    assert response.json()["requeued"] == 2
    ignored = (await runtime.store.list_events(EventFilter(kind=None), None, 10)).items
    assert {e.dedup_key: e.status for e in ignored}["evt_o"] is EventStatus.IGNORED

    by_ids = await client.post("/api/replay", json={"ids": [ignored[0].id]}, headers=AUTH)
    assert by_ids.json()["requeued"] == 1

    dry = await client.post(
        "/api/replay", json={"object_id": "pay_2", "dry_run": True}, headers=AUTH
    )
    [planned] = dry.json()["planned"]
    assert (planned["dedup_key"], planned["to"]) == ("evt_p2", "paid")
    assert dry.json()["requeued"] == 0

    by_reference = await client.post(
        "/api/replay", json={"reference": "order-2", "dry_run": True}, headers=AUTH
    )
    assert [p["dedup_key"] for p in by_reference.json()["planned"]] == ["evt_p2"]

    reparsed = await client.post(
        "/api/replay", json={"dedup_key": "evt_p1", "reparse": True}, headers=AUTH
    )
    assert reparsed.status_code == 200
    assert reparsed.json()["deliveries"] == 1
    assert reparsed.json()["requeued"] == 1

    for body, message in [
        ({}, "give ids or at least one filter"),
        ({"sources": "shop"}, "unknown field(s) sources"),
        ({"ids": [1], "source": "shop"}, "ids cannot be combined"),
        ({"ids": ["1"]}, "ids must be a list of integers"),
        ({"status": "zombie"}, "invalid status"),
        ({"reparse": "yes", "source": "shop"}, "reparse must be true or false"),
    ]:
        refused = await client.post("/api/replay", json=body, headers=AUTH)
        assert refused.status_code == 400, body
        assert message in refused.json()["error"]
    not_json = await client.post("/api/replay", content=b"{nope", headers=AUTH)
    assert not_json.status_code == 400
    array = await client.post("/api/replay", json=[1, 2], headers=AUTH)
    assert array.json() == {"error": "the body must be a JSON object"}


@sqlite_only
async def test_a_body_over_the_limit_is_413_with_and_without_content_length(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    await ingest(client, "evt_cap")
    over = b"{" + b" " * MAX_ADMIN_BODY + b"}"
    declared = await client.post("/api/replay", content=over, headers=AUTH)
    assert declared.status_code == 413
    assert declared.json()["error"] == f"body over the limit of {MAX_ADMIN_BODY} bytes"

    async def pieces() -> AsyncIterator[bytes]:  # no Content-Length: counted while read
        yield b'{"dedup_key": "evt_cap"'
        for _ in range(MAX_ADMIN_BODY // 65_536):
            yield b" " * 65_536
        yield b"}"

    streamed = await client.post("/api/replay", content=pieces(), headers=AUTH)
    assert streamed.status_code == 413
    [event] = (await runtime.store.list_events(EventFilter(), None, 10)).items
    assert event.status is EventStatus.PENDING  # nothing was requeued
    exactly = b'{"dedup_key": "evt_cap"' + b" " * (MAX_ADMIN_BODY - 24) + b"}"
    assert len(exactly) == MAX_ADMIN_BODY
    accepted = await client.post("/api/replay", content=exactly, headers=AUTH)
    assert accepted.status_code == 200
    assert accepted.json()["requeued"] == 1


# -- payments and quarantine ----------------------------------------------------------------------


async def test_payment_with_history_after_the_worker_ran(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    missing = await client.get("/api/payments/shop/pay_1", headers=AUTH)
    assert (missing.status_code, missing.json()) == (404, {"error": "unknown payment"})
    await ingest(client, "evt_created", kind="payment.created", occurred_at="2024-05-01T10:00:00Z")
    await ingest(client, "evt_paid", kind="payment.paid", occurred_at="2024-05-01T10:01:00Z")
    assert await Worker(runtime).run_once() == 2
    response = await client.get("/api/payments/shop/pay_1", headers=AUTH)
    assert response.status_code == 200
    payment = response.json()
    assert (payment["source"], payment["object_id"], payment["state"]) == (SOURCE, "pay_1", "paid")
    assert (payment["amount"], payment["currency"], payment["refunded_amount"]) == (1000, "BRL", 0)
    assert [entry["to"] for entry in payment["history"]][-1] == "paid"
    assert len(payment["history"]) == 2
    assert {"from", "to", "event_id", "verdict", "note", "at"} <= set(payment["history"][0])
    assert "facts" not in payment


@sqlite_only
async def test_quarantine_lists_refused_requests(client: httpx.AsyncClient) -> None:
    body = event_body("evt_forged")
    headers = {**raw_standard_headers(body, "msg_forged"), "webhook-signature": "v1,AAAA"}
    refusal = await client.post(f"/webhooks/{SOURCE}", content=body, headers=headers)
    assert refusal.status_code == 401
    listed = (await client.get("/api/quarantine", params={"limit": "5"}, headers=AUTH)).json()
    [refused] = listed["items"]
    assert (refused["source"], refused["reason"]) == (SOURCE, "bad_signature")
    assert body_from_json(refused) == body
    assert header_map(refused["headers"])["webhook-id"] == "msg_forged"
    assert refused["peer"] == "203.0.113.7"


# -- background tasks in the lifespan --------------------------------------------------------------


@sqlite_only
async def test_background_worker_runs_inside_the_app_lifespan(runtime: Runtime) -> None:
    stop = asyncio.Event()
    application = create_app(runtime, background=[lambda: Worker(runtime).run(stop)], migrate=True)
    async with application.router.lifespan_context(application), asgi_client(application) as http:
        await ingest(http, "evt_bg")

        async def done() -> bool:
            [event] = (await runtime.store.list_events(EventFilter(), None, 1)).items
            return event.status is EventStatus.DONE

        await wait_until_async(done, "the background worker to apply the event", within=5)
    # Shutdown cancelled the worker task and closed the runtime without hanging.


# -- OpenAPI ---------------------------------------------------------------------------------------


def _openapi_path(path: str) -> str:
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


@sqlite_only
async def test_openapi_describes_every_registered_route(
    app: Starlette, client: httpx.AsyncClient
) -> None:
    document = (await client.get("/api/openapi.json")).json()
    assert document["openapi"] == "3.1.0"
    assert document["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": (
            "An admin token of the configuration: [admin] token (role operate, named admin)"
            " or one of [admin.tokens.NAME] (role read or operate)"
        ),
    }
    registered = [
        (_openapi_path(route.path), method.lower())
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD" and not route.path.startswith("/ui")  # HTML pages: docs/ui.md
    ]
    assert len(registered) >= 14
    for path, method in registered:
        assert method in document["paths"].get(path, {}), f"{method.upper()} {path} undocumented"
    described = {(path, method) for path, ops in document["paths"].items() for method in ops}
    assert described == set(registered)
    webhook = document["paths"]["/webhooks/{source}"]["post"]
    assert {"200", "401", "404", "413", "503"} <= set(webhook["responses"])
    assert "Retry-After" in webhook["responses"]["503"]["headers"]
    admin_ops = [ops for path, ops in document["paths"].items() if path.startswith("/api/events")]
    for ops in admin_ops:
        for operation in ops.values():
            assert "401" in operation["responses"]
            assert "security" not in operation  # inherits the global bearer requirement
    refs = re.findall(r'"#/components/schemas/(\w+)"', (await client.get("/api/openapi.json")).text)
    assert set(refs) <= set(document["components"]["schemas"])


# -- hostile input (issue 22): every bad request is a JSON 4xx ---------------------------------

BIG = "9" * 23  # past 64 bits: SQLite cannot bind it
HUGE = "9" * 5000  # past int()'s default max_str_digits (4300)
NUL = "a\x00b"  # PostgreSQL text cannot hold NUL

# (method, path, query, JSON body, expected status)
HOSTILE: list[tuple[str, str, dict[str, str] | None, Any, int]] = [
    ("GET", f"/api/events/{BIG}", None, None, 404),
    ("GET", f"/api/events/{HUGE}", None, None, 404),
    ("GET", "/api/events/9223372036854775808", None, None, 404),
    ("POST", f"/api/events/{BIG}/replay", None, None, 404),
    ("POST", f"/api/events/{HUGE}/replay", None, None, 404),
    ("GET", f"/api/reconciliation/reports/{BIG}", None, None, 404),
    ("GET", f"/api/reconciliation/reports/{HUGE}", None, None, 404),
    ("GET", "/api/events", {"cursor": BIG}, None, 400),
    ("GET", "/api/events", {"cursor": HUGE}, None, 400),
    ("GET", "/api/dlq", {"cursor": BIG}, None, 400),
    ("GET", "/api/events", {"limit": HUGE}, None, 400),
    ("GET", "/api/events", {"limit": "²"}, None, 400),  # str.isdigit() says yes, int() no
    ("GET", "/api/quarantine", {"limit": HUGE}, None, 400),
    ("GET", "/api/reconciliation/reports", {"limit": HUGE}, None, 400),
    ("GET", "/api/events", {"source": NUL}, None, 400),
    ("GET", "/api/events", {"object_id": NUL}, None, 400),
    ("GET", "/api/events", {"dedup_key": NUL}, None, 400),
    ("GET", "/api/events", {"reference": NUL}, None, 400),
    ("GET", "/api/events", {"since": "9999-12-31T23:59:59-23:59"}, None, 400),  # UTC overflows
    ("GET", "/api/dlq", {"source": NUL}, None, 400),
    ("GET", "/api/reconciliation/reports", {"source": NUL}, None, 400),
    ("GET", "/api/payments/a%00b/pay_1", None, None, 400),
    ("GET", f"/api/payments/{SOURCE}/pay%00", None, None, 400),
    ("POST", "/api/replay", None, {"source": NUL}, 400),
    ("POST", "/api/replay", None, {"object_id": NUL}, 400),
    ("POST", "/api/replay", None, {"reference": NUL}, 400),
    ("POST", "/api/replay", None, {"reference": 42}, 400),
    ("POST", "/api/replay", None, {"ids": [2**63]}, 400),
    ("POST", "/api/dlq/replay", None, {"ids": [2**63]}, 400),
    ("POST", "/api/dlq/replay", None, {"source": NUL}, 400),
]


async def test_hostile_ids_cursors_limits_and_nul_are_json_4xx(
    server_url: str, runtime: Runtime
) -> None:
    async with httpx.AsyncClient(base_url=server_url, headers=AUTH) as http:
        await ingest(http, "evt_hostile")
        wrong = []
        for method, path, query, body, expected in HOSTILE:
            response = await http.request(method, path, params=query, json=body)
            shape = (response.status_code, response.headers.get("content-type"))
            if shape != (expected, "application/json") or "error" not in response.json():
                wrong.append((method, path[:60], query and str(query)[:60], body, shape))
        assert wrong == []
        # Nothing was requeued or changed by any of them.
        [event] = (await runtime.store.list_events(EventFilter(), None, 10)).items
        assert (event.status, event.attempts) == (EventStatus.PENDING, 0)


async def test_hostile_outbox_cursors_limits_and_ids_are_json_400(config: Config) -> None:
    merchant = DestinationConfig(name="merchant", url="http://127.0.0.1:9/hooks", secret=SECRET)
    runtime = Runtime.build(replace(config, destinations={"merchant": merchant}))
    async with (
        live_server(create_app(runtime, migrate=True)) as url,
        httpx.AsyncClient(base_url=url, headers=AUTH) as http,
    ):
        outbox = "/api/destinations/merchant/outbox"
        assert (await http.get(outbox)).status_code == 200
        answers = [
            await http.get(outbox, params=query)
            for query in ({"cursor": BIG}, {"cursor": HUGE}, {"cursor": "²"}, {"limit": HUGE})
        ]
        for body in ({"ids": [2**63]}, {"ids": [-(2**63) - 1]}):
            answers.append(await http.post("/api/destinations/merchant/redrive", json=body))
        shapes = [(a.status_code, a.headers["content-type"]) for a in answers]
        assert shapes == [(400, "application/json")] * len(answers)


@sqlite_only
async def test_every_api_error_is_json_and_webhook_errors_stay_json(server_url: str) -> None:
    async with httpx.AsyncClient(base_url=server_url) as http:
        for method, path, status in [
            ("GET", "/api/nope", 404),
            ("GET", "/api/events/abc", 404),
            ("GET", "/api/events/-1", 404),
            ("GET", "/api/events/1/nope", 404),
            ("GET", "/api/destinations/nowhere/nothing", 404),
            ("DELETE", "/api/events", 405),
            ("POST", "/api/events", 405),
            ("GET", "/api/events/1/replay", 405),
            ("PUT", "/api/openapi.json", 405),
            ("GET", "/webhooks/shop", 405),
            ("POST", "/webhooks/nobody", 404),
            ("POST", "/webhooks/shop/rec", 404),
        ]:
            response = await http.request(method, path, headers=AUTH)
            assert response.status_code == status, (method, path)
            assert response.headers["content-type"] == "application/json", (method, path)
            assert isinstance(response.json()["error"], str), (method, path)
        not_allowed = await http.delete("/api/events", headers=AUTH)
        assert set(not_allowed.headers["allow"].split(", ")) == {"GET", "HEAD"}


async def test_an_event_nested_900_levels_deep_can_be_shown(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    nested = ("[" * 900 + "]" * 900).encode()
    body = event_body("evt_deep", data={}).replace(
        b'"data": {}', b'"data": {"deep": ' + nested + b"}"
    )
    assert (await post_signed(client, body, "msg_deep")).status_code == 200
    await Worker(runtime).run_once()
    [listed] = (await client.get("/api/events", headers=AUTH)).json()["items"]
    response = await client.get(f"/api/events/{listed['id']}", headers=AUTH)
    assert response.status_code == 200, response.text
    [delivery] = response.json()["deliveries"]
    assert delivery["body"].encode("utf-8") == body  # the raw body, always as stored


async def test_data_stored_deeper_than_json_encoders_go_is_shown_truncated(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    # As an earlier version stored it (the receiver now dead-letters data this deep):
    # orjson encodes 255 levels at most, so showing it whole was a 500.
    deep: list[Any] = []
    for _ in range(600):
        deep = [deep]
    raw = b'{"id": "evt_deep"}'
    request = InboundRequest(
        SOURCE, "POST", f"/webhooks/{SOURCE}", "", [], raw, PEER, runtime.clock()
    )
    event = ParsedEvent("evt_deep", Kind.PAYMENT_PAID, "payment.paid", "pay_1", data={"deep": deep})
    [event_id] = (await runtime.store.record_delivery(request, [event])).event_ids

    response = await client.get(f"/api/events/{event_id}", headers=AUTH)
    assert response.status_code == 200, response.text
    shown = response.json()
    assert shown["data_truncated"] is True
    cut, level = shown["data"]["deep"], 2  # `data` itself is level 1
    while isinstance(cut, list) and cut:
        cut, level = cut[0], level + 1
    assert cut == TRUNCATED  # the cut is marked, not silently dropped
    assert level == DATA_MAX_DEPTH + 1
    assert shown["deliveries"][0]["body"] == raw.decode()

    [flat_id] = (
        await runtime.store.record_delivery(
            replace(request, body=b"{}"),
            [replace(event, dedup_key="evt_flat", data={"note": "ok"})],
        )
    ).event_ids
    flat = (await client.get(f"/api/events/{flat_id}", headers=AUTH)).json()
    assert (flat["data"], flat["data_truncated"]) == ({"note": "ok"}, False)


async def test_dlq_replay_with_no_filter_needs_all_true(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    await ingest(client, "evt_dead")
    claims = await runtime.store.claim("test-worker", 10, timedelta(seconds=60), runtime.clock())
    [claim] = claims
    assert await runtime.store.dead_letter(claim, "merchant down", runtime.clock())

    for content in (b"", b"  ", b"{}"):
        refused = await client.post("/api/dlq/replay", content=content, headers=AUTH)
        assert refused.status_code == 400, content
        assert '{"all": true}' in refused.json()["error"]
    for body, message in [
        ({"all": False}, '{"all": true}'),
        ({"all": "yes"}, "all must be true or false"),
        ({"all": True, "source": SOURCE}, "all cannot be combined"),
        ({"all": True, "ids": [claim.event.id]}, "all cannot be combined"),
    ]:
        refused = await client.post("/api/dlq/replay", json=body, headers=AUTH)
        assert refused.status_code == 400, body
        assert message in refused.json()["error"], body
    dead = await runtime.store.get_event(claim.event.id)
    assert dead is not None and dead.status is EventStatus.DEAD  # nothing redriven so far

    redriven = await client.post("/api/dlq/replay", json={"all": True}, headers=AUTH)
    assert redriven.status_code == 200
    assert redriven.json()["event_ids"] == [claim.event.id]
    revived = await runtime.store.get_event(claim.event.id)
    assert revived is not None and revived.status is EventStatus.PENDING
