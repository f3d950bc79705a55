"""The ceiling (a): a bare ASGI app that reads the whole body of any request and answers 200.

Served by uvicorn with the same loop/HTTP implementations as `porteiro serve` (uvloop and
httptools when installed), so the difference to Porteiro is Porteiro's own work.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Message = MutableMapping[str, Any]
HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"11")]
BODY = b'{"ok":true}'


async def app(
    scope: MutableMapping[str, Any],
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:  # read the body, as a receiver must before it can verify anything
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
