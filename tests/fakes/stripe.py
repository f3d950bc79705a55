"""A tiny Stripe API: `GET /v1/payment_intents/{id}` with Bearer auth and
`expand[]=latest_charge`, and `GET /v1/{charges,refunds,disputes,checkout/sessions}/{id}`
(the related objects of thin v2 events), answering from in-memory objects the test
controls. `headers` keeps each request's headers, for `Stripe-Context`.

Errors use Stripe's shape (`{"error": {"type", "code", "message"}}`): 401 for a wrong key,
404 `resource_missing` for an unknown id. `fail_with` makes every answer that status, to
exercise retries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


@dataclass
class FakeStripe:
    api_key: str
    intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail_with: int | None = None
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # re_, du_, cs_...
    requests: list[str] = field(default_factory=list)  # paths with query, as received
    headers: list[dict[str, str]] = field(default_factory=list)

    def app(self) -> Starlette:
        routes = [Route("/v1/payment_intents/{id}", self._intent)]
        for prefix in ("charges", "refunds", "disputes", "checkout/sessions"):
            routes.append(Route(f"/v1/{prefix}/{{id}}", self._object))
        return Starlette(routes=routes)

    def _refused(self, request: Request) -> JSONResponse | None:
        self.requests.append(
            str(request.url.path) + ("?" + request.url.query if request.url.query else "")
        )
        self.headers.append(dict(request.headers))
        if self.fail_with is not None:
            return _error(self.fail_with, "api_error", None, "simulated outage")
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "invalid_request_error", None, "Invalid API Key provided")
        return None

    async def _object(self, request: Request) -> JSONResponse:
        refused = self._refused(request)
        if refused is not None:
            return refused
        object_id = request.path_params["id"]
        found = self.charges.get(object_id) or self.objects.get(object_id)
        if found is None:
            message = f"No such object: '{object_id}'"
            return _error(404, "invalid_request_error", "resource_missing", message)
        return JSONResponse(found)

    async def _intent(self, request: Request) -> JSONResponse:
        refused = self._refused(request)
        if refused is not None:
            return refused
        intent_id = request.path_params["id"]
        intent = self.intents.get(intent_id)
        if intent is None:
            message = f"No such payment_intent: '{intent_id}'"
            return _error(404, "invalid_request_error", "resource_missing", message)
        body = dict(intent)
        charge_id = body.get("latest_charge")
        if "latest_charge" in request.query_params.getlist("expand[]") and charge_id:
            body["latest_charge"] = self.charges.get(charge_id, charge_id)
        return JSONResponse(body)


def _error(status: int, kind: str, code: str | None, message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "code": code, "message": message}}, status)
