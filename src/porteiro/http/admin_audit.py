"""Admin API for the audit log (a read route: any admin token of porteiro.http.admin_auth).

GET /api/audit?cursor=&limit=   operator actions, newest first (porteiro.audit)
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from porteiro.audit import record_to_json
from porteiro.http.admin import json_response
from porteiro.http.admin_auth import Guard
from porteiro.http.params import page_at, parse_limit
from porteiro.runtime import Runtime
from porteiro.store.audit import audit_store


def audit_routes(runtime: Runtime, guard: Guard) -> list[Route]:
    async def list_audit(request: Request) -> Response:
        params = request.query_params
        limit = parse_limit(params.get("limit"))
        store = audit_store(runtime.store)
        page = await page_at(lambda at: store.list_audit(at, limit), params.get("cursor"))
        return json_response({"items": [record_to_json(r) for r in page.items], "next": page.next})

    return [Route("/api/audit", guard.read(list_audit), methods=["GET"])]
