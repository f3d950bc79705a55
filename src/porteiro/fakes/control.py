"""The fake's own HTTP surface: the /_fake control API (state, start, done, faults) and
the Starlette app that serves it beside a gateway's routes (`FakeGateway.routes`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route


def json_response(body: Mapping[str, Any] | list[Any], status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status)


def control_routes(
    state: Callable[[], dict[str, Any]],
    start: Callable[[], None],
    done: Callable[[], bool],
    faults: Callable[[Mapping[str, Any]], dict[str, Any]],
) -> list[BaseRoute]:
    """The /_fake control API (JSON, no auth)."""

    async def get_state(_: Request) -> Response:
        return json_response(state())

    async def post_start(_: Request) -> Response:
        start()
        return json_response({"started": True})

    async def get_done(_: Request) -> Response:
        return json_response({"done": done()})

    async def post_faults(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return json_response({"error": "body must be a JSON object"}, 400)
        try:
            return json_response(faults(body))
        except ValueError as exc:
            return json_response({"error": str(exc)}, 400)

    return [
        Route("/_fake/state", get_state, methods=["GET"]),
        Route("/_fake/start", post_start, methods=["POST"]),
        Route("/_fake/done", get_done, methods=["GET"]),
        Route("/_fake/faults", post_faults, methods=["POST"]),
    ]


def build_app(routes: Sequence[BaseRoute], lifespan: Any = None) -> Starlette:
    return Starlette(routes=list(routes), lifespan=lifespan)
