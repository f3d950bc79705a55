"""Serve an ASGI app on a real uvicorn, on a free loopback port, inside a test."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import uvicorn

from tests.support.waiting import wait_until, wait_until_async

# uvicorn offers a flag, not an event, for "listening": it is polled this long.
START_SECONDS = 5.0


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _server(app: Any, options: dict[str, Any]) -> tuple[uvicorn.Server, str]:
    port = free_port()
    settings: dict[str, Any] = {"log_level": "warning", "access_log": False, **options}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **settings))
    scheme = "https" if options.get("ssl_certfile") else "http"
    return server, f"{scheme}://127.0.0.1:{port}"


@asynccontextmanager
async def live_server(app: Any, **options: Any) -> AsyncIterator[str]:
    """Yield the base URL (http://127.0.0.1:PORT) while uvicorn serves `app`.

    `options` go to uvicorn.Config (e.g. lifespan="off", or TLS settings).
    """
    server, url = _server(app, options)
    task = asyncio.create_task(server.serve())
    try:
        await wait_until_async(
            lambda: server.started or task.done(),
            f"uvicorn on {url}",
            within=START_SECONDS,
            every=0.01,
        )
    finally:
        if not server.started:
            task.cancel()
    if not server.started:
        raise RuntimeError(f"uvicorn did not start on {url}")
    try:
        yield url
    finally:
        server.should_exit = True
        await task


@contextmanager
def live_server_thread(app: Any, **options: Any) -> Iterator[str]:
    """`live_server` for synchronous tests: uvicorn runs `app` in a thread of its own."""
    server, url = _server(app, options)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(
        lambda: server.started or not thread.is_alive(),
        f"uvicorn on {url}",
        within=START_SECONDS,
        every=0.01,
    )
    if not server.started:
        raise RuntimeError(f"uvicorn did not start on {url}")
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
