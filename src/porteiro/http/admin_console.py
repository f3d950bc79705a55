"""Admin API reads that the console (/ui) shows too, over the same store verbs
(store/console_verbs.py), so a script sees what the operator sees (read routes: any
admin token of porteiro.http.admin_auth).

GET /api/payments?source=&state=&reference=&object_id=&amount=&since=&until=&anomalous=
                  &cursor=&limit=          payments, newest first by when first heard of
GET /api/dlq/reasons                       dead events grouped by (source, reason)
GET /api/quarantine/reasons                refused requests grouped by (source, reason)
GET /api/deliveries/rate?minutes=          deliveries per source per minute (at most 24 h)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from porteiro.http.admin import json_response
from porteiro.http.admin_auth import Guard
from porteiro.http.jsonview import iso, payment_to_json
from porteiro.http.params import (
    MAX_ID,
    BadRequest,
    optional_text,
    page_at,
    parse_datetime,
    parse_enum,
    parse_limit,
)
from porteiro.model import PaymentState
from porteiro.runtime import Runtime
from porteiro.store.console_verbs import ListedPayment, PaymentFilter, ReasonCount

MAX_RATE_MINUTES = 24 * 60


def payment_filter(params: Any) -> PaymentFilter:
    """A PaymentFilter from query parameters; 400 on invalid values. `amount` is in minor
    units, `since`/`until` ISO 8601 instants, `anomalous` true or false."""
    state, amount = optional_text(params, "state"), optional_text(params, "amount")
    since, until = optional_text(params, "since"), optional_text(params, "until")
    anomalous = optional_text(params, "anomalous")
    if anomalous not in (None, "true", "false"):
        raise BadRequest("anomalous must be true or false")
    if amount is not None and not (amount.isascii() and amount.lstrip("-").isdigit()):
        raise BadRequest(f"invalid amount {amount[:40]!r}: minor units, an integer")
    if amount is not None and abs(int(amount)) > MAX_ID:
        raise BadRequest("amount out of range (64-bit)")
    return PaymentFilter(
        source=optional_text(params, "source"),
        state=None if state is None else parse_enum(PaymentState, state, "state"),
        reference=optional_text(params, "reference"),
        object_id=optional_text(params, "object_id"),
        amount=None if amount is None else int(amount),
        since=None if since is None else parse_datetime(since, "since"),
        until=None if until is None else parse_datetime(until, "until"),
        anomalous=anomalous == "true",
    )


def listed_to_json(listed: ListedPayment) -> dict[str, Any]:
    view = payment_to_json(listed.payment, ())
    del view["history"]  # GET /api/payments/{source}/{object_id} has it
    return {**view, "created_at": iso(listed.created_at), "updated_at": iso(listed.updated_at)}


def reasons_to_json(reasons: Sequence[ReasonCount]) -> dict[str, Any]:
    items = [
        {"source": r.source, "reason": r.reason, "count": r.count, "newest": iso(r.newest)}
        for r in reasons
    ]
    return {"items": items}


def console_routes(runtime: Runtime, guard: Guard) -> list[Route]:
    store = runtime.store

    async def list_payments(request: Request) -> Response:
        params = request.query_params
        limit, filter = parse_limit(params.get("limit")), payment_filter(params)
        page = await page_at(
            lambda at: store.list_payments(filter, at, limit), params.get("cursor")
        )
        return json_response({"items": [listed_to_json(p) for p in page.items], "next": page.next})

    async def dead_reasons(request: Request) -> Response:
        return json_response(reasons_to_json(await store.dead_reasons()))

    async def quarantine_reasons(request: Request) -> Response:
        return json_response(reasons_to_json(await store.quarantine_reasons()))

    async def delivery_rate(request: Request) -> Response:
        given = request.query_params.get("minutes") or "60"
        if not (given.isascii() and given.isdigit()) or not 1 <= int(given) <= MAX_RATE_MINUTES:
            raise BadRequest(f"minutes must be 1 to {MAX_RATE_MINUTES}")
        since = runtime.clock() - timedelta(minutes=int(given))
        counts = await store.delivery_rate(since)
        items = [{"source": c.source, "minute": iso(c.minute), "count": c.count} for c in counts]
        return json_response({"items": items})

    read = guard.read
    return [
        Route("/api/payments", read(list_payments), methods=["GET"]),
        Route("/api/dlq/reasons", read(dead_reasons), methods=["GET"]),
        Route("/api/quarantine/reasons", read(quarantine_reasons), methods=["GET"]),
        Route("/api/deliveries/rate", read(delivery_rate), methods=["GET"]),
    ]
