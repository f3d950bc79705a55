"""Admin API for merchant delivery (behind the admin token of porteiro.http.admin).

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
from porteiro.http.admin import AdminApi, json_response
from porteiro.http.admin import read_json_object as read_body
from porteiro.http.params import BadRequest, parse_enum, parse_ids, parse_limit
from porteiro.http.receiver import json_error
from porteiro.runtime import Runtime
from porteiro.sinks import operations
from porteiro.store.outbox import OutboxStatus, outbox_store

Handler = Callable[[Request, DestinationConfig], Awaitable[Response]]


def destination_routes(runtime: Runtime) -> list[Route]:
    guard = AdminApi(runtime)._guard  # the admin token check, shared with /api
    destinations = runtime.config.destinations

    def named(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            destination = destinations.get(request.path_params["name"])
            if destination is None:
                return json_error(404, "no such destination in the configuration")
            return await handler(request, destination)

        endpoint.__name__ = handler.__name__
        return guard(endpoint)

    async def list_destinations(request: Request) -> Response:
        views = await operations.overview(outbox_store(runtime.store), destinations)
        return json_response({"items": [operations.view_to_json(view) for view in views]})

    async def pause(request: Request, destination: DestinationConfig) -> Response:
        store = outbox_store(runtime.store)
        await operations.pause(store, destination.name, runtime.clock())
        return await _view(runtime, destination)

    async def resume(request: Request, destination: DestinationConfig) -> Response:
        store = outbox_store(runtime.store)
        await operations.resume(store, destination.name, runtime.clock())
        return await _view(runtime, destination)

    async def list_outbox(request: Request, destination: DestinationConfig) -> Response:
        params = request.query_params
        status = params.get("status") or None
        chosen = None if status is None else parse_enum(OutboxStatus, status, "status")
        limit = parse_limit(params.get("limit"))
        try:
            page = await outbox_store(runtime.store).list_outbox(
                destination.name, chosen, params.get("cursor") or None, limit
            )
        except ValueError as exc:
            raise BadRequest(f"invalid cursor: {exc}") from exc
        items = [operations.row_to_json(row) for row in page.items]
        return json_response({"items": items, "next": page.next})

    async def redrive(request: Request, destination: DestinationConfig) -> Response:
        body = await read_body(request)
        unknown = sorted(set(body) - {"ids"})
        if unknown:
            raise BadRequest(f"unknown field(s) {', '.join(unknown)}; allowed: ids")
        ids = None if body.get("ids") is None else parse_ids(body["ids"])
        store = outbox_store(runtime.store)
        moved = await operations.redrive(store, destination.name, runtime.clock(), ids=ids)
        return json_response({"redriven": moved})

    base = "/api/destinations/{name}"
    return [
        Route("/api/destinations", guard(list_destinations), methods=["GET"]),
        Route(f"{base}/pause", named(pause), methods=["POST"]),
        Route(f"{base}/resume", named(resume), methods=["POST"]),
        Route(f"{base}/outbox", named(list_outbox), methods=["GET"]),
        Route(f"{base}/redrive", named(redrive), methods=["POST"]),
    ]


async def _view(runtime: Runtime, destination: DestinationConfig) -> Response:
    views = await operations.overview(outbox_store(runtime.store), {destination.name: destination})
    return json_response(operations.view_to_json(views[0]))
