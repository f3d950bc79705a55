"""End-to-end fixtures: a real store, the real app, real HTTP (in-process ASGI or uvicorn)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette

from porteiro.config import Config
from porteiro.http.app import create_app
from porteiro.runtime import Runtime
from tests.support.app import asgi_client, make_config
from tests.support.servers import live_server


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


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app) as http:
        yield http


@pytest.fixture
async def server_url(runtime: Runtime) -> AsyncIterator[str]:
    """The app served by a real uvicorn on a free port (its own lifespan)."""
    async with live_server(create_app(runtime, migrate=True)) as url:
        yield url
