"""The helpers several modules share: each is checked once here, against real servers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError, GatewayError
from porteiro.jobs.lease import until_stopped
from porteiro.providers.api_json import get_json, get_json_object, listed, with_status
from porteiro.providers.base import signing_keys
from tests.support.servers import live_server


async def _echo(request: Request) -> Response:
    return JSONResponse(
        {"query": dict(request.query_params), "auth": request.headers.get("authorization")}
    )


def _api() -> Starlette:
    return Starlette(
        routes=[
            Route("/echo", _echo),
            Route("/list", lambda _: JSONResponse([1, 2])),
            Route("/text", lambda _: Response("<html>", media_type="text/html")),
            Route("/broken", lambda _: JSONResponse({"error": "x"}, status_code=503)),
        ]
    )


@pytest.fixture
async def api() -> AsyncIterator[str]:
    async with live_server(_api(), lifespan="off") as url:
        yield url


async def test_get_json_object_passes_the_request_options_through(api: str) -> None:
    async with httpx.AsyncClient() as http:
        body = await get_json_object(
            http, f"{api}/echo", what="test GET echo", params={"page": 2}, auth=("key", "")
        )
    assert body == {"query": {"page": "2"}, "auth": "Basic a2V5Og=="}


async def test_get_json_returns_the_response_with_any_json(api: str) -> None:
    async with httpx.AsyncClient() as http:
        response, body = await get_json(http, f"{api}/list", what="test GET list")
    assert response.status_code == 200
    assert body == [1, 2]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/list", "test GET x: expected a JSON object"),
        ("/text", "test GET x: not JSON: "),
        ("/broken", "test GET x failed: Server error '503 Service Unavailable'"),
        ("/missing", "test GET x failed: Client error '404 Not Found'"),
    ],
)
async def test_get_json_object_names_the_call_in_every_failure(
    api: str, path: str, message: str
) -> None:
    async with httpx.AsyncClient() as http:
        with pytest.raises(GatewayError) as raised:
            await get_json_object(http, api + path, what="test GET x")
    assert str(raised.value).startswith(message)


async def test_get_json_reports_an_unreachable_server_as_a_gateway_error() -> None:
    async with httpx.AsyncClient() as http:
        with pytest.raises(GatewayError, match=r"^test GET x failed: "):
            await get_json(http, "http://127.0.0.1:9/nothing", what="test GET x")


def _hex_key(secret: str) -> bytes:
    if len(secret) % 2:
        raise ConfigError("a key must be hex")
    return bytes.fromhex(secret)


def test_a_listing_page_must_hold_a_list_of_objects_with_a_status() -> None:
    page = {"data": [{"id": "ch_1", "status": "paid"}, {"id": "ch_2"}, "x"], "count": 3}
    assert listed(page, "data", error="no list") == page["data"]
    with pytest.raises(GatewayError, match=r"^no list$"):
        listed(page, "count", error="no list")
    assert with_status(page["data"][0], error="no status") == {"id": "ch_1", "status": "paid"}
    for item in page["data"][1:]:
        with pytest.raises(GatewayError, match=r"^no status$"):
            with_status(item, error="no status")


def test_signing_keys_are_the_secrets_as_utf8_unless_decoded_otherwise() -> None:
    source = SourceConfig(name="shop", provider="stripe", secrets=("whsec_a", "chave-ç"))
    assert signing_keys(source) == [b"whsec_a", "chave-ç".encode()]
    hexed = SourceConfig(name="shop", provider="adyen", secrets=("00ff",))
    assert signing_keys(hexed, _hex_key) == [b"\x00\xff"]


def test_signing_keys_name_the_source_when_there_are_none_or_one_is_refused() -> None:
    empty = SourceConfig(name="shop", provider="stripe")
    with pytest.raises(ConfigError, match=r"^source 'shop': provider stripe needs secrets \(x\)$"):
        signing_keys(empty, hint=" (x)")
    odd = SourceConfig(name="shop", provider="adyen", secrets=("abc",))
    with pytest.raises(ConfigError, match=r"^source 'shop': a key must be hex$"):
        signing_keys(odd, _hex_key)


async def test_until_stopped_returns_when_the_work_is_done() -> None:
    done: list[str] = []

    async def work() -> None:
        done.append("work")

    await until_stopped(work(), asyncio.Event())
    assert done == ["work"]


async def test_until_stopped_cancels_the_work_once_stop_is_set() -> None:
    stop, never = asyncio.Event(), asyncio.Event()
    waiting = asyncio.ensure_future(never.wait())
    stop.set()
    await until_stopped(waiting, stop)
    assert waiting.cancelled()


async def test_until_stopped_raises_what_the_work_raised() -> None:
    async def work() -> None:
        raise LookupError("broken")

    with pytest.raises(LookupError, match="broken"):
        await until_stopped(work(), asyncio.Event())
