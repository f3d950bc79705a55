"""The gateways' own bodies, end to end: every fixture of tests/fixtures/gateways, signed
with the source's scheme, POSTed to a real Porteiro (uvicorn, receiver, worker) on SQLite
and on PostgreSQL; the payment must end in the state, amount and refunded amount the
gateway's documentation implies.

Each gateway's folder has a `cases.toml` (the format is in tests/fixtures/gateways/README.md):
its `[sources.*]` tables are a Porteiro configuration's, with `${FAKE_API}` standing for a
fake of the gateway's API that answers each case's `api` routes from files (thin events,
confirmations); each `[[case]]` names its deliveries, where their shape comes from and what
the payment must become.
"""

from __future__ import annotations

import tomllib
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from porteiro import replay
from porteiro.config import WorkerConfig
from porteiro.config.load import parse_config
from porteiro.http.app import create_app
from porteiro.model import EventStatus, InboundRequest, Payment, StoredEvent
from porteiro.providers.base import Provider, SignedRequest
from porteiro.runtime import Runtime, utc_now
from porteiro.store.base import EventFilter
from porteiro.worker import Worker
from tests.support.servers import live_server
from tests.support.stored import stored_events_once

FIXTURES = Path(__file__).parent.parent / "fixtures" / "gateways"
OPEN = (EventStatus.PENDING, EventStatus.PROCESSING, EventStatus.RETRYING)


@dataclass(frozen=True)
class Delivery:
    file: str
    path: str = ""  # appended to /webhooks/{source}, e.g. "/pix"
    query: str = ""
    signed: bool = True  # False: sent as is (an unauthenticated IPN hint, say)


@dataclass(frozen=True)
class Case:
    gateway: str
    name: str
    shape: str
    source: str
    deliveries: tuple[Delivery, ...]
    object_id: str | None
    state: str | None  # None: no payment may exist for object_id
    amount: int | None
    refunded: int
    dead: int
    warnings: tuple[str, ...]
    kinds: tuple[str, ...]
    api: Mapping[str, Any]

    @property
    def folder(self) -> Path:
        return FIXTURES / self.gateway


def _delivery(entry: str | Mapping[str, Any]) -> Delivery:
    if isinstance(entry, str):
        return Delivery(entry)
    return Delivery(**entry)


def load_cases() -> list[Case]:
    cases = []
    for folder in sorted(p for p in FIXTURES.iterdir() if (p / "cases.toml").is_file()):
        spec = tomllib.loads((folder / "cases.toml").read_text())
        sources = sorted(spec["sources"])
        for raw in spec.get("case", []):
            cases.append(
                Case(
                    gateway=folder.name,
                    name=raw["name"],
                    shape=raw["shape"],
                    source=raw.get("source", sources[0]),
                    deliveries=tuple(_delivery(d) for d in raw["deliveries"]),
                    object_id=raw.get("object_id"),
                    state=raw.get("state"),
                    amount=raw.get("amount"),
                    refunded=raw.get("refunded", 0),
                    dead=raw.get("dead", 0),
                    warnings=tuple(raw.get("warnings", ())),
                    kinds=tuple(raw.get("kinds", ())),
                    api=raw.get("api", {}),
                )
            )
    return cases


CASES = load_cases()


def fake_api(case: Case) -> Starlette:
    """The gateway's API as far as this case needs it: `"METHOD /path" = "file.json"`
    answers that file with 200, `{ file = "...", status = 404 }` another status; any
    other request 404 (and is a failure the worker retries, so the case will not settle)."""
    routes: dict[tuple[str, str], tuple[int, bytes]] = {}
    for route, answer in case.api.items():
        method, path = route.split(" ", 1)
        spec = {"file": answer} if isinstance(answer, str) else dict(answer)
        body = (case.folder / spec["file"]).read_bytes() if "file" in spec else b"{}"
        routes[(method.upper(), path)] = (int(spec.get("status", 200)), body)

    async def respond(request: Request) -> Response:
        status, body = routes.get((request.method, request.url.path), (404, b"{}"))
        return Response(body, status_code=status, media_type="application/json")

    methods = ["GET", "POST", "PUT", "PATCH"]
    return Starlette(routes=[Route("/{path:path}", respond, methods=methods)])


@dataclass
class Served:
    url: str
    runtime: Runtime


@pytest.fixture
async def fake_gateway(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    case: Case = request.param
    async with live_server(fake_api(case)) as url:
        yield url


@asynccontextmanager
async def serve(case: Case, store_url: str, api_url: str) -> AsyncIterator[Served]:
    spec = tomllib.loads((case.folder / "cases.toml").read_text())
    config = parse_config({"sources": spec["sources"]}, {"FAKE_API": api_url})
    config = replace(
        config,
        store_url=store_url,
        sources={case.source: config.sources[case.source]},
        worker=WorkerConfig(poll_interval_seconds=0.05),
    )
    runtime = Runtime.build(config)
    app = create_app(runtime, background=[Worker(runtime).run], migrate=True)
    async with live_server(app) as url:
        yield Served(url, runtime)


async def settled(runtime: Runtime, source: str) -> list[StoredEvent]:
    """Every event of the source once none is waiting for the worker."""
    return await stored_events_once(
        runtime.store,
        source,
        lambda events: bool(events) and not any(e.status in OPEN for e in events),
        "every event settled",
    )


def signed_requests(provider: Provider, case: Case) -> list[tuple[Delivery, SignedRequest]]:
    """Each delivery of the case as the gateway sends it (signed unless `signed = false`)."""
    requests = []
    for delivery in case.deliveries:
        body = (case.folder / delivery.file).read_bytes()
        if delivery.signed:
            signed = provider.sign(body, utc_now())
            path, query = delivery.path or signed.path_suffix, delivery.query or signed.query
            signed = replace(signed, path_suffix=path, query=query)
        else:
            headers = {"content-type": "application/json"}
            signed = SignedRequest(body, headers, query=delivery.query, path_suffix=delivery.path)
        requests.append((delivery, signed))
    return requests


async def post_all(served: Served, case: Case) -> None:
    provider = served.runtime.providers[case.source]
    async with httpx.AsyncClient() as http:
        for delivery, signed in signed_requests(provider, case):
            query = f"?{signed.query}" if signed.query else ""
            url = f"{served.url}/webhooks/{case.source}{signed.path_suffix}{query}"
            response = await http.post(url, content=signed.body, headers=dict(signed.headers))
            assert response.status_code // 100 == 2, (delivery.file, response.text)


async def outcome(served: Served, case: Case) -> tuple[list[StoredEvent], Payment | None]:
    stored = await settled(served.runtime, case.source)
    if case.object_id is None:
        return stored, None
    return stored, await served.runtime.store.get_payment(case.source, case.object_id)


def check(case: Case, stored: Sequence[StoredEvent], payment: Payment | None) -> None:
    dead = [event for event in stored if event.status is EventStatus.DEAD]
    assert len(dead) == case.dead, [(e.type, e.last_error) for e in dead]
    rules = {w["rule"] for event in stored for w in event.warnings}
    assert set(case.warnings) <= rules, rules
    assert set(case.kinds) <= {event.kind.value for event in stored}
    if case.object_id is None:
        return
    if case.state is None:
        assert payment is None, payment
        return
    assert payment is not None, [(e.type, e.status.value, e.last_error) for e in stored]
    got = (payment.state.value, payment.amount, payment.refunded_amount)
    assert got == (case.state, case.amount, case.refunded)


IDS = [f"{c.gateway}-{c.name}" for c in CASES]


@pytest.mark.parametrize("fake_gateway", CASES, ids=IDS, indirect=True)
async def test_gateway_fixture(
    fake_gateway: str, store_url: str, request: pytest.FixtureRequest
) -> None:
    case: Case = request.node.callspec.params["fake_gateway"]
    async with serve(case, store_url, fake_gateway) as served:
        await post_all(served, case)
        stored, payment = await outcome(served, case)
    check(case, stored, payment)


# An older Porteiro that could read none of these bodies stored each one raw with a dead
# placeholder (what `record_delivery(..., parse_error=...)` keeps); after an upgrade,
# `replay --status dead --source S` re-parses them (replay.reparse is what it runs). Each
# case on one store, alternately, to keep the suite short: both stores are covered.
REPLAYABLE = [c for c in CASES if all(d.signed for d in c.deliveries)]
OLDER_RULE = "an older Porteiro could not parse this body"


@pytest.mark.parametrize(
    ("fake_gateway", "on"),
    [(case, ("sqlite", "postgres")[i % 2]) for i, case in enumerate(REPLAYABLE)],
    ids=[f"{c.gateway}-{c.name}" for c in REPLAYABLE],
    indirect=["fake_gateway"],
)
async def test_gateway_fixture_dead_lettered_by_an_older_version_replays_right(
    fake_gateway: str, on: str, request: pytest.FixtureRequest
) -> None:
    case: Case = request.node.callspec.params["fake_gateway"]
    store_url = request.getfixturevalue("sqlite_url" if on == "sqlite" else "pg_url")
    async with serve(case, store_url, fake_gateway) as served:
        store = served.runtime.store
        provider = served.runtime.providers[case.source]
        for _, signed in signed_requests(provider, case):
            await store.record_delivery(
                InboundRequest(
                    source=case.source,
                    method="POST",
                    path=f"/webhooks/{case.source}{signed.path_suffix}",
                    query=signed.query,
                    headers=[(name.lower(), value) for name, value in signed.headers.items()],
                    body=signed.body,
                    peer="127.0.0.1",
                    received_at=utc_now(),
                ),
                [],
                parse_error=OLDER_RULE,
            )
        dead = EventFilter(source=case.source, status=EventStatus.DEAD)
        report = await replay.reparse(served.runtime, dead, dry_run=False)
        assert report.failures == []
        assert report.deliveries == len(case.deliveries)
        stored, payment = await outcome(served, case)
    placeholders = [e for e in stored if e.last_error == OLDER_RULE]
    assert len(placeholders) == len(case.deliveries)
    assert all(e.status is EventStatus.IGNORED for e in placeholders)
    check(case, [e for e in stored if e not in placeholders], payment)


def test_every_gateway_has_eight_fixtures_that_name_their_origin() -> None:
    for gateway in ("adyen", "mercadopago", "pagarme", "pix", "stripe"):
        cases = [case for case in CASES if case.gateway == gateway]
        files = {d.file for case in cases for d in case.deliveries}
        assert len(files) >= 8, (gateway, sorted(files))
        assert all(case.shape.strip() for case in cases), gateway
