"""A fake gateway's API routes, declared on its handlers: `@api(method, path)` marks a
handler, `marked_routes` serves a gateway's marked handlers behind its credential check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

Handler = Callable[[Request], Awaitable[Response]]
Refusal = Callable[[Request], Response | None]
H = TypeVar("H", bound=Callable[..., Awaitable[Response]])
_MARK = "_fake_api_route"


def api(method: str, path: str, *, public: bool = False) -> Callable[[H], H]:
    """Serve the decorated handler at `method path`; `public`: without the credential
    check (a token or key endpoint checks its own, or needs none)."""

    def mark(handler: H) -> H:
        setattr(handler, _MARK, (method, path, public))
        return handler

    return mark


def marked_routes(gateway: Any, refusal: Refusal) -> list[BaseRoute]:
    """The routes of `gateway`'s marked handlers, in the order its class defines them
    (Starlette tries them in order: a literal path goes before a `{param}` one it would
    match); each not public answers `refusal(request)` when that is not None."""
    table: list[BaseRoute] = []
    for name, member in vars(type(gateway)).items():
        marked: tuple[str, str, bool] | None = getattr(member, _MARK, None)
        if marked is not None:
            method, path, public = marked
            handler = getattr(gateway, name)
            endpoint = handler if public else partial(_guarded, refusal, handler)
            table.append(Route(path, endpoint, methods=[method]))
    return table


async def _guarded(refusal: Refusal, handler: Handler, request: Request) -> Response:
    refused = refusal(request)
    return refused if refused is not None else await handler(request)
