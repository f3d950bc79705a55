"""Admin API for reconciliation reports (read routes: any admin token of
porteiro.http.admin_auth).

GET /api/reconciliation/reports?source=&limit=   newest first, summaries only
GET /api/reconciliation/reports/{id}              one report with its findings
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from porteiro.http.admin import json_response
from porteiro.http.admin_auth import Guard
from porteiro.http.params import optional_text, parse_id, parse_limit
from porteiro.http.receiver import json_error
from porteiro.runtime import Runtime
from porteiro.store.reconcile import StoredReport, reconcile_store


def reconcile_routes(runtime: Runtime, guard: Guard) -> list[Route]:

    async def list_reports(request: Request) -> Response:
        params = request.query_params
        limit = parse_limit(params.get("limit"))
        reports = await reconcile_store(runtime.store).latest_reports(
            optional_text(params, "source"), limit
        )
        return json_response({"items": [_report(r, full=False) for r in reports]})

    async def show_report(request: Request) -> Response:
        report_id = parse_id(request.path_params["id"])
        store = reconcile_store(runtime.store)
        report = None if report_id is None else await store.get_report(report_id)
        if report is None:
            return json_error(404, "no such report")
        return json_response(_report(report, full=True))

    return [
        Route("/api/reconciliation/reports", guard.read(list_reports), methods=["GET"]),
        # `{id}`, not `{id:int}`: the int convertor's int() of 5,000 digits is a 500.
        Route("/api/reconciliation/reports/{id}", guard.read(show_report), methods=["GET"]),
    ]


def _report(report: StoredReport, *, full: bool) -> dict[str, Any]:
    head = {
        "id": report.id,
        "source": report.source,
        "kind": report.kind,
        "created_at": report.created_at.isoformat(),
        "since": None if report.since is None else report.since.isoformat(),
        "until": None if report.until is None else report.until.isoformat(),
        "summary": dict(report.summary),
    }
    if full:
        head["report"] = dict(report.body)
    return head
