"""The console's actions: each does what its admin API route does, through the same
operation (porteiro.replay, porteiro.sinks.operations, porteiro.reconcile), and answers
an HTML fragment that htmx swaps into the page (a plain form post gets it as a page).
The guard (porteiro.ui.guard) has checked the session, the CSRF token and the role, and
audits each one under the same action names as the API."""

from __future__ import annotations

from typing import Any

import httpx
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from porteiro import replay
from porteiro.errors import PorteiroError
from porteiro.http.admin_auth import Operated
from porteiro.http.params import BadRequest, parse_id
from porteiro.reconcile.reconciler import audit_window
from porteiro.runtime import Runtime
from porteiro.sinks import operations
from porteiro.store.base import EventFilter
from porteiro.store.outbox import outbox_store
from porteiro.store.reconcile import reconcile_store
from porteiro.ui.guard import Action, Viewer
from porteiro.ui.params import DLQ_FILTER_KEYS, dead_filter
from porteiro.ui.render import Renderer

# Dead events a dry run plans (each plan reads the store); the count covers them all.
PREVIEW_MAX = 500


def dead_selection(
    params: FormData | Any, renderer: Renderer
) -> tuple[list[int] | None, EventFilter, bool]:
    """(ids or None, the dead-letter filter, everything?) from a form or query string:
    `id` fields (one per ticked row), or the filter keys, or `all=1`. An empty selection
    is refused: a redrive of the whole DLQ is asked for by name."""
    raw_ids = [value for value in params.getlist("id") if value]
    ids = []
    for value in raw_ids:
        parsed = parse_id(str(value))
        if parsed is None:
            raise BadRequest(f"invalid event id {str(value)[:20]!r}")
        ids.append(parsed)
    filters = [key for key in DLQ_FILTER_KEYS if params.get(key)]
    dead = dead_filter(params, renderer.zone)
    every = params.get("all") == "1"
    if ids and filters:
        raise BadRequest("choose rows or a filter, not both")
    if not ids and not filters and not every:
        raise BadRequest("choose rows or a filter (source, kind, dates), or all")
    return (ids or None), dead, every and not ids and not filters


def selection_audit(ids: list[int] | None, dead: EventFilter, every: bool) -> dict[str, Any]:
    if ids is not None:
        return {"ids": ids}
    if every:
        return {"all": True}
    given = {
        "source": dead.source,
        "kind": None if dead.kind is None else dead.kind.value,
        "since": None if dead.since is None else dead.since.isoformat(),
        "until": None if dead.until is None else dead.until.isoformat(),
    }
    return {key: value for key, value in given.items() if value is not None}


class Actions:
    def __init__(self, runtime: Runtime, renderer: Renderer) -> None:
        self._runtime = runtime
        self._render = renderer

    def _fragment(self, request: Request, template: str, **context: object) -> Response:
        return self._render.page(request, template, context, now=self._runtime.clock())

    def _refused(
        self, request: Request, status: int, given: dict[str, Any], message: str, **extra: object
    ) -> Operated:
        """An action that changed nothing, with why (audited as `rejected`)."""
        answer = self._fragment(request, "result.html", ok=False, message=message, **extra)
        answer.status_code = status
        return Operated(answer, 0, given)

    async def replay_event(self, request: Request, viewer: Viewer, form: FormData) -> Operated:
        given = {"id": request.path_params["id"]}
        event_id = parse_id(request.path_params["id"])
        requeued = 0
        if event_id is not None:
            requeued = await self._runtime.store.requeue([event_id], self._runtime.clock())
        if requeued == 0:
            return self._refused(request, 404, given, "unknown event")
        answer = self._fragment(request, "result.html", ok=True, message="requeued", count=1)
        return Operated(answer, 1, given)

    async def preview_dlq(self, request: Request, viewer: Viewer) -> Response:
        """GET: the dry run. It changes nothing, so it is a read; its confirm button
        posts the same selection to `replay_dlq`."""
        ids, dead, _ = dead_selection(request.query_params, self._render)
        report = await replay.preview_redrive(self._runtime, dead, ids=ids, limit=PREVIEW_MAX)
        selection = [(key, value) for key, value in request.query_params.multi_items()]
        return self._fragment(
            request,
            "dlq_preview.html",
            report=report,
            planned=report.planned,
            total=report.selected,
            selection=selection,
        )

    async def replay_dlq(self, request: Request, viewer: Viewer, form: FormData) -> Operated:
        ids, dead, every = dead_selection(form, self._render)
        report = await replay.redrive(self._runtime, dead, ids=ids)
        count = len(report.event_ids)
        answer = self._fragment(
            request, "result.html", ok=True, message="requeued", count=count,
            failures=report.failures, skipped=report.skipped,
        )  # fmt: skip
        return Operated(answer, count, selection_audit(ids, dead, every))

    def destination(self, verb: str) -> Action:
        """pause, resume or redrive (every dead row) of the destination in the path."""

        async def act(request: Request, viewer: Viewer, form: FormData) -> Operated:
            name = request.path_params["name"]
            config = self._runtime.config.destinations.get(name)
            given: dict[str, Any] = {"name": name}
            if config is None:
                return self._refused(request, 404, given, "no such destination")
            store, now = outbox_store(self._runtime.store), self._runtime.clock()
            if verb == "pause":
                await operations.pause(store, name, now)
                affected = 1
            elif verb == "resume":
                await operations.resume(store, name, now)
                affected = 1
            else:
                affected = await operations.redrive(store, name, now, ids=None)
            views = await operations.overview(store, {name: config})
            answer = self._fragment(request, "destination_row.html", view=views[0], done=verb)
            return Operated(answer, affected, given)

        act.__name__ = f"destination_{verb}"
        return act

    async def ingest_missing(self, request: Request, viewer: Viewer, form: FormData) -> Operated:
        """Audit the report's window again, storing what the gateway has and Porteiro
        missed (`porteiro reconcile` with --ingest): a new report says what was found."""
        report_id = parse_id(request.path_params["id"])
        given = {"id": request.path_params["id"]}
        store = reconcile_store(self._runtime.store)
        report = None if report_id is None else await store.get_report(report_id)
        if report is None or report.since is None or report.until is None:
            return self._refused(request, 404, given, "not an audit report with a window")
        try:
            done = await audit_window(
                self._runtime, report.source, report.since, report.until, ingest=True
            )
        except (PorteiroError, httpx.HTTPError) as exc:
            # The gateway's API failed or cannot list: nothing was stored; say why.
            failed = {**given, "source": report.source}
            return self._refused(
                request, 502, failed, "gateway read failed", detail=type(exc).__name__
            )
        answer = self._fragment(
            request, "result.html", ok=True, message="ingested", count=done.ingested,
            report_id=done.id,
        )  # fmt: skip
        return Operated(answer, done.ingested, {**given, "source": report.source})
