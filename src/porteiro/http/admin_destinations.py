"""Admin API for merchant delivery (behind the admin tokens of porteiro.http.admin_auth;
pause, resume and redrive need an `operate` one and are audited).

GET  /api/destinations                       each destination: state and backlog
POST /api/destinations/{name}/pause          stop sending; events accumulate
POST /api/destinations/{name}/resume         send again (re-enables after a 410)
GET  /api/destinations/{name}/outbox         rows, newest first (?status=&cursor=&limit=)
POST /api/destinations/{name}/redrive        dead rows pending again ({"ids": [...]} or all)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from porteiro.config import DestinationConfig
from porteiro.http.admin import json_response
from porteiro.http.admin import read_json_object as read_body
from porteiro.http.admin_auth import Guard, Operated
from porteiro.http.params import BadRequest, page_at, parse_enum, parse_ids, parse_limit
from porteiro.http.receiver import json_error
from porteiro.runtime import Runtime
from porteiro.sinks import operations
from porteiro.store.outbox import OutboxStatus, outbox_store

Handler = Callable[[Request, DestinationConfig], Awaitable[Response]]
OperateHandler = Callable[[Request, DestinationConfig], Awaitable[Operated]]


def destination_routes(runtime: Runtime, guard: Guard) -> list[Route]:
    destinations = runtime.config.destinations
    unknown = "no such destination in the configuration"

    def named(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            destination = destinations.get(request.path_params["name"])
            if destination is None:
                return json_error(404, unknown)
            return await handler(request, destination)

        endpoint.__name__ = handler.__name__
        return guard.read(endpoint)

    def operate(action: str, handler: OperateHandler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Operated:
            destination = destinations.get(request.path_params["name"])
            if destination is None:
                return Operated(json_error(404, unknown), 0, dict(request.path_params))
            return await handler(request, destination)

        endpoint.__name__ = handler.__name__
        return guard.operate(action, endpoint)

    async def list_destinations(request: Request) -> Response:
        views = await operations.overview(outbox_store(runtime.store), destinations)
        return json_response({"items": [operations.view_to_json(view) for view in views]})

    async def pause(request: Request, destination: DestinationConfig) -> Operated:
        store = outbox_store(runtime.store)
        await operations.pause(store, destination.name, runtime.clock())
        return Operated(await _view(runtime, destination), 1, {"name": destination.name})

    async def resume(request: Request, destination: DestinationConfig) -> Operated:
        store = outbox_store(runtime.store)
        await operations.resume(store, destination.name, runtime.clock())
        return Operated(await _view(runtime, destination), 1, {"name": destination.name})

    async def list_outbox(request: Request, destination: DestinationConfig) -> Response:
        params = request.query_params
        status = params.get("status") or None
        chosen = None if status is None else parse_enum(OutboxStatus, status, "status")
        limit = parse_limit(params.get("limit"))
        store = outbox_store(runtime.store)
        page = await page_at(
            lambda at: store.list_outbox(destination.name, chosen, at, limit),
            params.get("cursor"),
        )
        items = [operations.row_to_json(row) for row in page.items]
        return json_response({"items": items, "next": page.next})

    async def redrive(request: Request, destination: DestinationConfig) -> Operated:
        body = await read_body(request)
        unknown = sorted(set(body) - {"ids"})
        if unknown:
            raise BadRequest(f"unknown field(s) {', '.join(unknown)}; allowed: ids")
        ids = None if body.get("ids") is None else parse_ids(body["ids"])
        store = outbox_store(runtime.store)
        moved = await operations.redrive(store, destination.name, runtime.clock(), ids=ids)
        given = {"name": destination.name, "ids": ids}
        return Operated(json_response({"redriven": moved}), moved, given)

    base = "/api/destinations/{name}"
    return [
        Route("/api/destinations", guard.read(list_destinations), methods=["GET"]),
        Route(f"{base}/pause", operate("destination.pause", pause), methods=["POST"]),
        Route(f"{base}/resume", operate("destination.resume", resume), methods=["POST"]),
        Route(f"{base}/outbox", named(list_outbox), methods=["GET"]),
        Route(f"{base}/redrive", operate("destination.redrive", redrive), methods=["POST"]),
    ]


async def _view(runtime: Runtime, destination: DestinationConfig) -> Response:
    views = await operations.overview(outbox_store(runtime.store), {destination.name: destination})
    return json_response(operations.view_to_json(views[0]))
