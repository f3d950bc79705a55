"""Serve an ASGI app on a real uvicorn, on a free loopback port, inside a test."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def live_server(app: Any, **options: Any) -> AsyncIterator[str]:
    """Yield the base URL (http://127.0.0.1:PORT) while uvicorn serves `app`.

    `options` go to uvicorn.Config (e.g. lifespan="off", or TLS settings).
    """
    port = free_port()
    settings: dict[str, Any] = {"log_level": "warning", "access_log": False, **options}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **settings))
    task = asyncio.create_task(server.serve())
    # uvicorn offers a flag, not an event, for "listening".
    for _ in range(500):
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    if not server.started:
        task.cancel()
        raise RuntimeError("uvicorn did not start")
    scheme = "https" if options.get("ssl_certfile") else "http"
    try:
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@contextmanager
def live_server_thread(app: Any, **options: Any) -> Iterator[str]:
    """`live_server` for synchronous tests: uvicorn runs `app` in a thread of its own."""
    port = free_port()
    settings: dict[str, Any] = {"log_level": "warning", "access_log": False, **options}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **settings))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started or not thread.is_alive():
            break
        time.sleep(0.01)
    if not server.started:
        raise RuntimeError("uvicorn did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
