"""End-to-end fixtures: a real store, the real app, real HTTP (in-process ASGI or uvicorn).

Signatures come from the official `standardwebhooks` library, not from Porteiro's own
adapter, so a shared mistake in both could not make the tests pass.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook
from starlette.applications import Starlette

from porteiro.config import Config, ServerConfig, SourceConfig
from porteiro.http.app import create_app
from porteiro.runtime import Runtime
from tests.live_server import live_server

SECRET = "whsec_" + base64.b64encode(b"porteiro-e2e-secret-0123456789ab").decode()
ADMIN_TOKEN = "e2e-admin-token"
SOURCE = "shop"
PEER = "203.0.113.7"
MAX_BODY = 64 * 1024


def make_config(store_url: str, **overrides: Any) -> Config:
    config = Config(
        store_url=store_url,
        admin_token=ADMIN_TOKEN,
        sources={SOURCE: SourceConfig(name=SOURCE, provider="standard", secrets=(SECRET,))},
        server=ServerConfig(max_body_bytes=MAX_BODY),
    )
    return replace(config, **overrides)


def standard_headers(
    body: bytes, msg_id: str, *, at: datetime | None = None, secret: str = SECRET
) -> dict[str, str]:
    """Standard Webhooks headers computed by the reference library."""
    moment = at or datetime.now(UTC)
    signature = Webhook(secret).sign(msg_id, moment, body.decode("utf-8"))
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": signature,
    }


def event_body(event_id: str, kind: str = "payment.paid", **fields: Any) -> bytes:
    body = {"id": event_id, "type": kind, "object_id": "pay_1", "amount": 1000, "currency": "BRL"}
    body.update(fields)
    return json.dumps(body).encode()


async def post_signed(
    client: httpx.AsyncClient, body: bytes, msg_id: str, *, path: str = f"/webhooks/{SOURCE}"
) -> httpx.Response:
    return await client.post(path, content=body, headers=standard_headers(body, msg_id))


def admin_headers(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.fixture
def config(store_url: str) -> Config:
    return make_config(store_url)


@pytest.fixture
def runtime(config: Config) -> Runtime:
    return Runtime.build(config)


@pytest.fixture
async def app(runtime: Runtime) -> AsyncIterator[Starlette]:
    """The app with its lifespan running (store opened and migrated)."""
    application = create_app(runtime, migrate=True)
    async with application.router.lifespan_context(application):
        yield application


def asgi_client(application: Starlette) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=application, client=(PEER, 40123))
    return httpx.AsyncClient(transport=transport, base_url="http://porteiro.test")


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app) as http:
        yield http


@pytest.fixture
async def server_url(runtime: Runtime) -> AsyncIterator[str]:
    """The app served by a real uvicorn on a free port (its own lifespan)."""
    async with live_server(create_app(runtime, migrate=True)) as url:
        yield url


def header_map(pairs: list[list[str]]) -> Mapping[str, str]:
    return {name: value for name, value in pairs}
