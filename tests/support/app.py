"""The in-process app the end-to-end tests drive: its configuration and an HTTP client."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx
from starlette.applications import Starlette

from porteiro.config import Config, ServerConfig, SourceConfig
from tests.support.signing import SECRET, standard_headers

ADMIN_TOKEN = "e2e-admin-token"
SOURCE = "shop"
PEER = "203.0.113.7"
MAX_BODY = 64 * 1024


def make_config(store_url: str, **overrides: Any) -> Config:
    """One Standard Webhooks source, SOURCE, signed with SECRET; `overrides` replace fields."""
    config = Config(
        store_url=store_url,
        admin_token=ADMIN_TOKEN,
        sources={SOURCE: SourceConfig(name=SOURCE, provider="standard", secrets=(SECRET,))},
        server=ServerConfig(max_body_bytes=MAX_BODY),
    )
    return replace(config, **overrides)


def admin_headers(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def asgi_client(application: Starlette) -> httpx.AsyncClient:
    """A client of `application` in process, its requests coming from PEER."""
    transport = httpx.ASGITransport(app=application, client=(PEER, 40123))
    return httpx.AsyncClient(transport=transport, base_url="http://porteiro.test")


async def post_signed(
    client: httpx.AsyncClient, body: bytes, msg_id: str, *, path: str = f"/webhooks/{SOURCE}"
) -> httpx.Response:
    return await client.post(path, content=body, headers=standard_headers(body, msg_id))
