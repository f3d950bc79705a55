"""`[admin] listen`: the admin listener, a second uvicorn server in `serve`'s process, on
the same event loop and runtime as the webhook server (porteiro.http.app.admin_app).

It starts once the webhook server has started (whose lifespan opened the runtime), and is
told to stop as soon as that one begins to shut down, before the runtime closes. Signals
are the webhook server's: the admin one captures none. One process binds the admin port,
so `serve --receivers N` (N > 1) refuses `[admin] listen` (docs/deployment.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn
from uvicorn._compat import asyncio_run

from porteiro.observability import logger


class AdminServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the webhook server's handlers stop both

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            url = f"http://{host}:{port}"
            logger().info(f"admin API listening on {url}", action="admin.listening", url=url)


def admin_server(app: Any, host: str, port: int, options: dict[str, Any]) -> AdminServer:
    """The admin server with `serve`'s uvicorn `options` (loop, protocol, limits) but its
    own address, plain HTTP (a loopback or private address: TLS is the webhook door's),
    and no lifespan (the webhook app's runs the runtime)."""
    plain = {key: value for key, value in options.items() if not key.startswith("ssl_")}
    config = uvicorn.Config(app, **{**plain, "host": host, "port": port, "lifespan": "off"})
    return AdminServer(config)


def run_both(public: uvicorn.Server, admin: AdminServer) -> None:
    """Serve until the webhook server stops (a signal), then stop the admin one."""

    async def both() -> None:
        serving = asyncio.create_task(public.serve())
        # uvicorn offers `started` and `should_exit` as plain flags, no event to await.
        while not public.started and not serving.done():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        if not public.started:
            await serving  # it failed to start: its error, and no admin listener
            return
        beside = asyncio.create_task(admin.serve())
        follow = asyncio.create_task(_stop_with(public, admin))
        try:
            await serving
        finally:
            admin.should_exit = True
            follow.cancel()
            await beside

    asyncio_run(both(), loop_factory=public.config.get_loop_factory())


async def _stop_with(public: uvicorn.Server, admin: uvicorn.Server) -> None:
    """Stop the admin server when the webhook one begins to shut down (before its
    lifespan closes the runtime the admin routes read)."""
    while not public.should_exit:  # noqa: ASYNC110 (a flag: see run_both)
        await asyncio.sleep(0.05)
    admin.should_exit = True
