"""Admin API roles and the audit log, with real stores: a `read` token looks but cannot
act (403, nothing changes), an `operate` token acts, every mutating route writes exactly
one audit row (a new route without one fails here), /metrics behind its own token, and
no token value in the logs or the audit table."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
import structlog
from starlette.applications import Starlette
from starlette.routing import Route

from porteiro.config import AdminConfig, AdminToken, Config, DestinationConfig
from porteiro.http.admin_auth import audit_action
from porteiro.http.app import create_app
from porteiro.runtime import Runtime
from porteiro.store.audit import AuditRecord, audit_store
from porteiro.store.base import EventFilter
from porteiro.store.outbox import outbox_store
from tests.support.app import ADMIN_TOKEN, admin_headers, post_signed
from tests.support.events import event_body
from tests.support.signing import SECRET

READER_TOKEN = "reader-token-value-1234"
OPERATOR_TOKEN = "operator-token-value-5678"
METRICS_TOKEN = "metrics-token-value-9012"
READER, OPERATOR = admin_headers(READER_TOKEN), admin_headers(OPERATOR_TOKEN)
DESTINATION = "erp"
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})

# Every mutating admin route: (request path, JSON body, audit action, affected rows, with
# one stored pending event whose id is {id}). A route missing here fails the first test.
NAMED = f"/api/destinations/{DESTINATION}"
OPERATIONS: dict[str, tuple[str, dict[str, Any] | None, str, int]] = {
    "/api/events/{id}/replay": ("/api/events/{id}/replay", None, "event.replay", 1),
    "/api/dlq/replay": ("/api/dlq/replay", {"all": True}, "dlq.replay", 0),
    "/api/replay": ("/api/replay", {"ids": ["{id}"]}, "replay", 1),
    "/api/destinations/{name}/pause": (f"{NAMED}/pause", None, "destination.pause", 1),
    "/api/destinations/{name}/resume": (f"{NAMED}/resume", None, "destination.resume", 1),
    "/api/destinations/{name}/redrive": (f"{NAMED}/redrive", {}, "destination.redrive", 0),
}


@pytest.fixture
def config(config: Config) -> Config:
    tokens = {
        "alice": AdminToken("alice", READER_TOKEN, "read"),
        "bob": AdminToken("bob", OPERATOR_TOKEN, "operate"),
    }
    erp = DestinationConfig(name=DESTINATION, url="http://127.0.0.1:9/hooks", secret=SECRET)
    return replace(
        config,
        admin=AdminConfig(tokens=tokens, metrics_token=METRICS_TOKEN),
        destinations={DESTINATION: erp},
    )


@pytest.fixture
async def app(runtime: Runtime) -> AsyncIterator[Starlette]:
    application = create_app(runtime, migrate=True)
    async with application.router.lifespan_context(application):
        yield application


def mutating_routes(app: Starlette) -> dict[str, Route]:
    return {
        route.path: route
        for route in app.routes
        if isinstance(route, Route)
        and route.path.startswith("/api/")
        and MUTATING & set(route.methods or ())
    }


async def stored_event(client: httpx.AsyncClient, runtime: Runtime) -> int:
    assert (await post_signed(client, event_body("evt_roles"), "msg_roles")).status_code == 200
    page = await runtime.store.list_events(EventFilter(), None, 10)
    return page.items[0].id


async def audit_rows(runtime: Runtime) -> list[AuditRecord]:
    return list((await audit_store(runtime.store).list_audit(None, 500)).items)


def request_of(path: str, body: dict[str, Any] | None, event_id: int) -> tuple[str, Any]:
    url = path.replace("{id}", str(event_id))
    if body is not None and body.get("ids") == ["{id}"]:
        body = {"ids": [event_id]}
    return url, body


async def test_every_mutating_route_writes_exactly_one_audit_row(
    app: Starlette, client: httpx.AsyncClient, runtime: Runtime
) -> None:
    routes = mutating_routes(app)
    assert set(routes) == set(OPERATIONS), "a mutating route without an audit case here"
    for path, route in routes.items():
        assert audit_action(route.endpoint) == OPERATIONS[path][2], path
    event_id = await stored_event(client, runtime)
    for path, body, action, affected in OPERATIONS.values():
        before = len(await audit_rows(runtime))
        url, given = request_of(path, body, event_id)
        response = await client.post(url, json=given, headers=OPERATOR)
        assert response.status_code == 200, (url, response.text)
        rows = await audit_rows(runtime)
        assert len(rows) == before + 1, url
        entry = rows[0].entry
        assert (entry.token_name, entry.action, entry.affected, entry.outcome) == (
            "bob",
            action,
            affected,
            "ok",
        ), url
    by_action = {row.entry.action: row.entry.parameters for row in await audit_rows(runtime)}
    assert by_action["replay"] == {"ids": [event_id]}
    assert by_action["dlq.replay"] == {"all": True}
    assert by_action["destination.pause"] == {"name": DESTINATION}


async def test_a_read_token_looks_but_cannot_act(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    event_id = await stored_event(client, runtime)
    assert (await client.get("/api/events", headers=READER)).status_code == 200
    assert (await client.get("/api/audit", headers=READER)).status_code == 200
    before = await runtime.store.get_event(event_id)
    for path, body, action, _ in OPERATIONS.values():
        url, given = request_of(path, body, event_id)
        response = await client.post(url, json=given, headers=READER)
        assert response.status_code == 403, url
        assert response.json() == {"error": "this token's role is read; this route needs operate"}
        row = (await audit_rows(runtime))[0].entry
        assert (row.token_name, row.action, row.affected, row.outcome) == (
            "alice",
            action,
            0,
            "forbidden",
        )
    assert await runtime.store.get_event(event_id) == before  # not even its timestamps
    states = await outbox_store(runtime.store).destination_states()
    assert DESTINATION not in states or not states[DESTINATION].paused
    # The [admin] token still works, as an operate token named `admin`.
    replayed = await client.post(f"/api/events/{event_id}/replay", headers=admin_headers())
    assert replayed.status_code == 200
    assert (await audit_rows(runtime))[0].entry.token_name == "admin"


async def test_the_audit_list_pages_newest_first(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    for _ in range(3):
        response = await client.post(f"/api/destinations/{DESTINATION}/pause", headers=OPERATOR)
        assert response.status_code == 200
    first = (await client.get("/api/audit?limit=2", headers=READER)).json()
    assert [item["action"] for item in first["items"]] == ["destination.pause"] * 2
    assert first["items"][0]["id"] > first["items"][1]["id"]
    rest = (await client.get(f"/api/audit?limit=2&cursor={first['next']}", headers=READER)).json()
    assert len(rest["items"]) == 1 and rest["next"] is None
    assert (await client.get("/api/audit?cursor=x", headers=READER)).status_code == 400
    assert (await client.get("/api/audit")).status_code == 401


async def test_metrics_need_the_metrics_token_when_one_is_set(client: httpx.AsyncClient) -> None:
    assert (await client.get("/metrics")).status_code == 401
    assert (await client.get("/metrics", headers=OPERATOR)).status_code == 401
    response = await client.get("/metrics", headers=admin_headers(METRICS_TOKEN))
    assert response.status_code == 200
    assert "porteiro_" in response.text


async def test_no_token_value_reaches_the_logs_or_the_audit_table(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    event_id = await stored_event(client, runtime)
    with structlog.testing.capture_logs() as logs:
        await client.post(f"/api/events/{event_id}/replay", headers=OPERATOR)
        await client.post(f"/api/events/{event_id}/replay", headers=READER)
        await client.post("/api/replay", json={"ids": [event_id]}, headers=admin_headers())
    audited = [line for line in logs if str(line.get("action", "")).startswith("audit.")]
    assert [line["token_name"] for line in audited] == ["bob", "alice", "admin"]
    text = repr(logs) + repr(await audit_rows(runtime))
    for token in (READER_TOKEN, OPERATOR_TOKEN, METRICS_TOKEN, ADMIN_TOKEN):
        assert token not in text
