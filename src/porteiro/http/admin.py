"""The admin API under /api: events, DLQ, replay, payments, quarantine.

Every route but the OpenAPI document needs `Authorization: Bearer <token>` of one of
the admin tokens, and an operate route (replay, DLQ replay) an `operate` one; each
operate request is audited (porteiro.http.admin_auth). Without a configured token the
API answers 503: it is never open by default.
Replay goes through `porteiro.replay`, like the CLI: it makes events due again (the
ledger makes a second apply of an already applied event a no-op); `{"reparse": true}`
on /api/replay first re-parses the raw deliveries with the current adapter code, and
`{"dry_run": true}` only reports the transitions it would make. DLQ replay re-parses
dead unparseable deliveries and requeues the other dead events; it too refuses an empty
selection unless the caller asks for `{"all": true}`.

Every parameter is parsed in porteiro.http.params before a store is asked, so a bad one
is a JSON 400 (or 404 for an id no row can have), never a store error surfacing as 500;
`http_error` makes the router's own 404 and 405 JSON too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from importlib import metadata
from typing import Any

import orjson
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from porteiro import replay
from porteiro.http import jsonview
from porteiro.http.admin_auth import MAX_ADMIN_BODY as MAX_ADMIN_BODY
from porteiro.http.admin_auth import Guard, Operated
from porteiro.http.openapi import openapi_document
from porteiro.http.params import (
    BadRequest,
    optional_text,
    page_at,
    parse_datetime,
    parse_enum,
    parse_flag,
    parse_id,
    parse_ids,
    parse_limit,
    text,
)
from porteiro.http.receiver import json_error, read_capped
from porteiro.model import EventStatus, Kind
from porteiro.runtime import Runtime
from porteiro.store.base import EventFilter

_FILTER_KEYS = (
    "source",
    "kind",
    "status",
    "object_id",
    "dedup_key",
    "reference",
    "since",
    "until",
)


def _package_version() -> str:
    try:
        return metadata.version("porteiro")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def json_response(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


async def http_error(request: Request, exc: Exception) -> Response:
    """The app's handler for the router's errors (an unmatched path 404, a wrong method
    405 with `Allow`): JSON like every other error, not Starlette's plain text."""
    if not isinstance(exc, HTTPException):  # registered for HTTPException only
        return json_error(500, "internal error")
    # The detail is Starlette's phrase ("Not Found"): nothing of the caller's echoed.
    return json_error(exc.status_code, exc.detail.lower(), dict(exc.headers or {}))


class AdminApi:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._openapi = orjson.dumps(openapi_document(_package_version()))

    def routes(self, guard: Guard) -> list[Route]:
        read, operate = guard.read, guard.operate
        return [
            Route("/api/openapi.json", self.openapi, methods=["GET"]),
            Route("/api/events", read(self.list_events), methods=["GET"]),
            # `{id}`, not `{id:int}`: Starlette's int convertor runs int() on any run of
            # digits while routing (5,000 digits: ValueError, a 500); parse_id bounds it.
            Route("/api/events/{id}", read(self.show_event), methods=["GET"]),
            Route(
                "/api/events/{id}/replay",
                operate("event.replay", self.replay_event),
                methods=["POST"],
            ),
            Route("/api/dlq", read(self.list_dlq), methods=["GET"]),
            Route("/api/dlq/replay", operate("dlq.replay", self.replay_dlq), methods=["POST"]),
            Route("/api/replay", operate("replay", self.replay), methods=["POST"]),
            Route(
                "/api/payments/{source}/{object_id:path}",
                read(self.show_payment),
                methods=["GET"],
            ),
            Route("/api/quarantine", read(self.list_quarantine), methods=["GET"]),
        ]

    async def openapi(self, request: Request) -> Response:
        return Response(self._openapi, media_type="application/json")

    async def list_events(self, request: Request) -> Response:
        params = request.query_params
        return await self._page(params, event_filter(params))

    async def list_dlq(self, request: Request) -> Response:
        params = request.query_params
        dead = EventFilter(source=optional_text(params, "source"), status=EventStatus.DEAD)
        return await self._page(params, dead)

    async def _page(self, params: QueryParams, filter: EventFilter) -> Response:
        limit = parse_limit(params.get("limit"))
        store = self._runtime.store
        page = await page_at(lambda at: store.list_events(filter, at, limit), params.get("cursor"))
        items = [jsonview.event_to_json(event) for event in page.items]
        return json_response({"items": items, "next": page.next})

    async def show_event(self, request: Request) -> Response:
        store = self._runtime.store
        event_id = parse_id(request.path_params["id"])
        event = None if event_id is None else await store.get_event(event_id)
        if event_id is None or event is None:
            return json_error(404, "unknown event")
        deliveries = await store.event_deliveries(event_id)
        return json_response(jsonview.event_detail_to_json(event, deliveries))

    async def replay_event(self, request: Request) -> Operated:
        event_id = parse_id(request.path_params["id"])
        given = {"id": request.path_params["id"]}
        if (
            event_id is None
            or await self._runtime.store.requeue([event_id], self._runtime.clock()) == 0
        ):
            return Operated(json_error(404, "unknown event"), 0, given)
        return Operated(json_response({"requeued": 1}), 1, given)

    async def replay_dlq(self, request: Request) -> Operated:
        body = await read_json_object(request)
        given = dict(body)  # what was asked, before the flags are taken out
        every = parse_flag(body.pop("all", False), "all")
        ids, filter = replay_selection(body, ("source", "kind", "since", "until"))
        selected = ids is not None or filter != EventFilter()
        if every and selected:
            raise BadRequest("all cannot be combined with ids or a filter")
        if not every and not selected:
            # An empty body once redrove the whole DLQ: a redrive of everything is said.
            raise BadRequest('give ids or a filter (source, kind, since, until), or {"all": true}')
        dead = replace(filter, status=EventStatus.DEAD)
        report = await replay.redrive(self._runtime, dead, ids=ids)
        return _report(report, given)

    async def replay(self, request: Request) -> Operated:
        body = await read_json_object(request)
        given = dict(body)
        reparse, dry_run = _flag(body, "reparse"), _flag(body, "dry_run")
        ids, filter = replay_selection(body, _FILTER_KEYS)
        if ids is None and filter == EventFilter():
            raise BadRequest("give ids or at least one filter (source, kind, status, ...)")
        action = replay.reparse if reparse else replay.requeue
        target: replay.Target = filter if ids is None else ids
        return _report(await action(self._runtime, target, dry_run=dry_run), given)

    async def show_payment(self, request: Request) -> Response:
        store = self._runtime.store
        source = text(request.path_params["source"], "source")
        object_id = text(request.path_params["object_id"], "object_id")
        payment = await store.get_payment(source, object_id)
        if payment is None:
            return json_error(404, "unknown payment")
        history = await store.payment_history(source, object_id)
        return json_response(jsonview.payment_to_json(payment, history))

    async def list_quarantine(self, request: Request) -> Response:
        limit = parse_limit(request.query_params.get("limit"))
        refused = await self._runtime.store.list_quarantine(limit)
        return json_response({"items": [jsonview.quarantine_to_json(item) for item in refused]})


def _report(report: replay.ReplayReport, given: dict[str, Any]) -> Operated:
    """The answer of a replay, and its audit: the events it requeued (or, dry run, would)."""
    requeued = len(report.event_ids)
    answer = json_response({"requeued": requeued, **replay.report_to_json(report)})
    return Operated(answer, requeued, given)


def _flag(body: dict[str, Any], key: str) -> bool:
    return parse_flag(body.pop(key, False), key)


def event_filter(params: Mapping[str, Any]) -> EventFilter:
    """An EventFilter from query parameters or a JSON object; 400 on invalid values."""

    def text(key: str) -> str | None:
        return optional_text(params, key)

    status, kind = text("status"), text("kind")
    since, until = text("since"), text("until")
    return EventFilter(
        source=text("source"),
        status=None if status is None else parse_enum(EventStatus, status, "status"),
        kind=None if kind is None else parse_enum(Kind, kind, "kind"),
        object_id=text("object_id"),
        dedup_key=text("dedup_key"),
        reference=text("reference"),
        since=None if since is None else parse_datetime(since, "since"),
        until=None if until is None else parse_datetime(until, "until"),
    )


async def read_json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object (an empty body is `{}`); BodyTooLarge (413 from
    the guard) past MAX_ADMIN_BODY."""
    raw = await read_capped(request, request.headers.get("content-length"), MAX_ADMIN_BODY)
    if not raw.strip():
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def replay_selection(
    body: Mapping[str, Any], allowed: Sequence[str]
) -> tuple[list[int] | None, EventFilter]:
    """(explicit ids or None, filter). Unknown keys are refused: a typo must not widen a
    replay to every event."""
    unknown = sorted(set(body) - {"ids", *allowed})
    if unknown:
        raise BadRequest(
            f"unknown field(s) {', '.join(unknown)}; allowed: ids, {', '.join(allowed)}"
        )
    filter = event_filter(body)
    if body.get("ids") is None:
        return None, filter
    ids = parse_ids(body["ids"])
    if filter != EventFilter():
        raise BadRequest("ids cannot be combined with a filter")
    return ids, filter
