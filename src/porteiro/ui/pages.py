"""The console's read pages: each reads through the same store verbs as the admin API
(porteiro.http.admin*) and renders one template. Lists are paged by the store's cursor."""

from __future__ import annotations

from datetime import timedelta

from starlette.requests import Request
from starlette.responses import Response

from porteiro.http.params import (
    optional_text,
    page_at,
    parse_enum,
    parse_id,
    parse_limit,
    text,
)
from porteiro.model import EventStatus, Kind, PaymentState
from porteiro.reconcile.report import CSV_COLUMNS
from porteiro.runtime import Runtime
from porteiro.sinks import operations
from porteiro.store.audit import audit_store
from porteiro.store.base import EventFilter
from porteiro.store.outbox import OutboxStatus, outbox_store
from porteiro.store.reconcile import reconcile_store
from porteiro.ui import timeline
from porteiro.ui.chart import minute_chart
from porteiro.ui.figures import ingest_figures
from porteiro.ui.guard import Viewer
from porteiro.ui.params import dead_filter, events_filter, payment_filter
from porteiro.ui.render import Renderer
from porteiro.ui.views import pretty_body

CHART_MINUTES = 60
# The seeds' alert line: more than 5 % duplicates is worth a look (alerts.yml).
DUPLICATE_LINE = 0.05
TIMELINE_EVENTS = 200
PAGE_SIZE = 50


class Pages:
    def __init__(self, runtime: Runtime, renderer: Renderer) -> None:
        self._runtime = runtime
        self._render = renderer

    def _page(self, request: Request, template: str, **context: object) -> Response:
        return self._render.page(request, template, context, now=self._runtime.clock())

    def _choices(self) -> dict[str, object]:
        config = self._runtime.config
        return {
            "sources": sorted(config.sources),
            "destinations": sorted(config.destinations),
            "states": [state.value for state in PaymentState],
            "statuses": [status.value for status in EventStatus],
            "kinds": [kind.value for kind in Kind],
        }

    # -- overview ------------------------------------------------------------------------

    async def overview(self, request: Request, viewer: Viewer) -> Response:
        return self._page(request, "overview.html", **await self._overview())

    async def overview_live(self, request: Request, viewer: Viewer) -> Response:
        return self._page(request, "overview_live.html", **await self._overview())

    async def _overview(self) -> dict[str, object]:
        runtime = self._runtime
        now = runtime.clock()
        readings = await runtime.store.metric_readings(now)
        rate = await runtime.store.delivery_rate(now - timedelta(minutes=CHART_MINUTES))
        views = await operations.overview(outbox_store(runtime.store), runtime.config.destinations)
        reports = await reconcile_store(runtime.store).latest_reports(None, 5)
        pending = list(readings.pending.values())
        oldest = min((b.oldest for b in pending if b.oldest is not None), default=None)
        return {
            "readings": readings,
            "backlog": sum(b.count for b in pending),
            "oldest_pending": oldest,
            "dead": sum(readings.dead.values()),
            "past_expiry": sum(readings.past_expiry.values()),
            "figures": ingest_figures(runtime.metrics.exposed()),
            "duplicate_line": DUPLICATE_LINE,
            "chart": minute_chart(rate, now, CHART_MINUTES, self._render.zone),
            "destinations": views,
            "reports": reports,
        }

    # -- payments --------------------------------------------------------------------------

    async def payments(self, request: Request, viewer: Viewer) -> Response:
        params = request.query_params
        filter = payment_filter(params, self._render.zone)
        store = self._runtime.store
        page = await page_at(
            lambda at: store.list_payments(filter, at, PAGE_SIZE), params.get("cursor")
        )
        return self._page(
            request, "payments.html", page=page, params=params, filter=filter, **self._choices()
        )

    async def payment(self, request: Request, viewer: Viewer) -> Response:
        runtime, store = self._runtime, self._runtime.store
        source = text(request.path_params["source"], "source")
        object_id = text(request.path_params["object_id"], "object_id")
        payment = await store.get_payment(source, object_id)
        events = (
            await store.list_events(
                EventFilter(source=source, object_id=object_id), None, TIMELINE_EVENTS
            )
        ).items
        if payment is None and not events:
            return self._render.problem(request, 404, "unknown payment")
        deliveries = await store.events_deliveries([event.id for event in events])
        entries = timeline.build(
            events,
            deliveries,
            await store.payment_history(source, object_id),
            await store.payment_forwards(source, object_id, sorted(runtime.config.destinations)),
            await reconcile_store(store).get_expectation(source, object_id),
            await store.reconcile_check(source, object_id),
        )
        return self._page(
            request,
            "payment.html",
            source=source,
            object_id=object_id,
            payment=payment,
            events=events,
            entries=entries,
            handlers=runtime.config.handlers.module is not None,
        )

    # -- events ----------------------------------------------------------------------------

    async def events(self, request: Request, viewer: Viewer) -> Response:
        params = request.query_params
        filter = events_filter(params, self._render.zone)
        store = self._runtime.store
        page = await page_at(
            lambda at: store.list_events(filter, at, PAGE_SIZE), params.get("cursor")
        )
        return self._page(request, "events.html", page=page, params=params, **self._choices())

    async def event(self, request: Request, viewer: Viewer) -> Response:
        store = self._runtime.store
        event_id = parse_id(request.path_params["id"])
        event = None if event_id is None else await store.get_event(event_id)
        if event_id is None or event is None:
            return self._render.problem(request, 404, "unknown event")
        deliveries = await store.event_deliveries(event_id)
        bodies = {delivery.id: pretty_body(delivery.body) for delivery in deliveries}
        return self._page(request, "event.html", event=event, deliveries=deliveries, bodies=bodies)

    # -- dead letters ----------------------------------------------------------------------

    async def dlq(self, request: Request, viewer: Viewer) -> Response:
        params = request.query_params
        dead = dead_filter(params, self._render.zone)
        store = self._runtime.store
        page = await page_at(
            lambda at: store.list_events(dead, at, PAGE_SIZE), params.get("cursor")
        )
        reasons = await self._runtime.store.dead_reasons()
        return self._page(
            request, "dlq.html", page=page, params=params, reasons=reasons, **self._choices()
        )

    # -- destinations ----------------------------------------------------------------------

    async def destinations(self, request: Request, viewer: Viewer) -> Response:
        runtime = self._runtime
        views = await operations.overview(outbox_store(runtime.store), runtime.config.destinations)
        return self._page(request, "destinations.html", views=views)

    async def destination(self, request: Request, viewer: Viewer) -> Response:
        runtime = self._runtime
        config = runtime.config.destinations.get(request.path_params["name"])
        if config is None:
            return self._render.problem(request, 404, "no such destination")
        params = request.query_params
        status = optional_text(params, "status")
        chosen = None if status is None else parse_enum(OutboxStatus, status, "status")
        store = outbox_store(runtime.store)
        page = await page_at(
            lambda at: store.list_outbox(config.name, chosen, at, PAGE_SIZE), params.get("cursor")
        )
        views = await operations.overview(store, {config.name: config})
        return self._page(
            request,
            "destination.html",
            view=views[0],
            page=page,
            params=params,
            statuses=[s.value for s in OutboxStatus],
        )

    # -- reconciliation, quarantine, audit -------------------------------------------------

    async def reconciliation(self, request: Request, viewer: Viewer) -> Response:
        source = optional_text(request.query_params, "source")
        limit = parse_limit(request.query_params.get("limit"))
        reports = await reconcile_store(self._runtime.store).latest_reports(source, limit)
        return self._page(request, "reconciliation.html", reports=reports, **self._choices())

    async def report(self, request: Request, viewer: Viewer) -> Response:
        report_id = parse_id(request.path_params["id"])
        store = reconcile_store(self._runtime.store)
        report = None if report_id is None else await store.get_report(report_id)
        if report is None:
            return self._render.problem(request, 404, "no such report")
        findings = report.body.get("findings", {})
        return self._page(
            request,
            "report.html",
            report=report,
            findings=findings if isinstance(findings, dict) else {},
            columns=CSV_COLUMNS,
        )

    async def quarantine(self, request: Request, viewer: Viewer) -> Response:
        store = self._runtime.store
        reasons = await self._runtime.store.quarantine_reasons()
        recent = await store.list_quarantine(PAGE_SIZE)
        return self._page(request, "quarantine.html", reasons=reasons, recent=recent)

    async def audit(self, request: Request, viewer: Viewer) -> Response:
        store = audit_store(self._runtime.store)
        page = await page_at(
            lambda at: store.list_audit(at, PAGE_SIZE), request.query_params.get("cursor")
        )
        return self._page(request, "audit.html", page=page)
