"""Reading a request body under a size cap, and the small JSON answers the HTTP layer
shares (`json_error`; 413 `body_too_large`).

The cap is enforced as the body streams in: refused early by Content-Length when it
announces too much, else counted chunk by chunk, so no oversized body is ever held whole.
"""

from __future__ import annotations

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive

from porteiro.errors import PorteiroError


def json_error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps({"error": message}),
        status_code=status,
        headers=headers,
        media_type="application/json",
    )


class BodyTooLarge(PorteiroError):
    """The request body exceeds the configured cap."""


def declared_over(declared: str | None, cap: int) -> bool:
    """Whether a Content-Length value announces a body over `cap` (refused before reading)."""
    return declared is not None and declared.isdigit() and int(declared) > cap


def body_too_large(cap: int) -> Response:
    return json_error(413, f"body over the limit of {cap} bytes")


async def read_capped(request: Request, declared: str | None, cap: int) -> bytes:
    """The body as a stream, refusing early: by Content-Length, or while counting chunks
    (BodyTooLarge; ClientDisconnect if the client went away mid-body)."""
    if declared_over(declared, cap):
        raise BodyTooLarge
    return await receive_rest(request.receive, b"", cap)


async def receive_rest(receive: Receive, first: bytes, cap: int) -> bytes:
    """The rest of a body whose first chunk was `first`, read from the ASGI receive
    channel while counting (no Request on the hot path); BodyTooLarge past `cap`."""
    if len(first) > cap:
        raise BodyTooLarge
    chunks = [first]
    size = len(first)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
