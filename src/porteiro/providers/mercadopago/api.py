"""Mercado Pago's API, read with the client the worker gives: every notification is thin
and enriched by `GET /v1/payments/{id}` (or `/v1/orders/{id}`), statuses are read for
reconciliation, and `GET /v1/payments/search` lists a window.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import GatewayError, NonRetryable
from porteiro.model import WARNINGS_KEY, ParsedEvent
from porteiro.providers import fields
from porteiro.providers.api_json import listed, with_status
from porteiro.providers.base import snapshot_key
from porteiro.providers.mercadopago.payload import TIME_RULE, order_event, payment_event

DEFAULT_API_BASE_URL = "https://api.mercadopago.com"
SEARCH_PAGE = 100
MAX_PAGES = 10_000


class ResourceNotFound(GatewayError):
    """The API answered 404 for the notified id."""


class MercadoPagoApi:
    """Mercado Pago's API: thin notifications fetched, status reads, payment search."""

    source: SourceConfig
    exponents: dict[str, int]

    async def enrich(self, event: ParsedEvent, http: httpx.AsyncClient) -> ParsedEvent:
        if not event.thin:
            return event
        if event.object_id is None:
            raise NonRetryable("thin notification without a resource id")
        if event.data.get("topic") == "order":
            resource = await self._get("orders", event.object_id, http)
            fetched = order_event(resource, event.object_id, event.dedup_key, self.exponents)
        else:
            try:
                resource = await self._get("payments", event.object_id, http)
            except ResourceNotFound as exc:
                if event.data.get("format") == "ipn":
                    # Nothing vouches for an unverified hint's id: one read, no retries,
                    # and no payment is ever made from it.
                    raise NonRetryable(f"{exc}; an unverified IPN hint is not retried") from None
                raise
            fetched = payment_event(resource, event.object_id, event.dedup_key, self.exponents)
        warnings = [*event.warnings, *fetched.warnings]
        merged = replace(fetched, type=event.type, data={**event.data, **fetched.data})
        if warnings:
            merged = replace(merged, data={**merged.data, WARNINGS_KEY: warnings})
        return merged

    async def fetch_status(self, object_id: str, http: httpx.AsyncClient) -> ParsedEvent | None:
        """The payment's (or Orders API order's) current state; None without an access
        token (`api_key`). Payment ids are numeric, order ids are not."""
        if not self.source.api_key:
            return None
        if object_id.isdigit():
            resource = await self._get("payments", object_id, http)
            return self._snapshot(payment_event(resource, object_id, "", self.exponents))
        resource = await self._get("orders", object_id, http)
        return self._snapshot(order_event(resource, object_id, "", self.exponents))

    async def list_window(
        self, since: datetime, until: datetime, http: httpx.AsyncClient
    ) -> AsyncIterator[ParsedEvent]:
        """One status snapshot per payment created in [since, until)
        (`GET /v1/payments/search`, `range=date_created`, oldest first)."""
        if not self.source.api_key:
            raise GatewayError(f"source {self.source.name!r}: no api_key to search payments")
        params: dict[str, str | int] = {
            "range": "date_created",
            "begin_date": since.astimezone(UTC).isoformat(timespec="milliseconds"),
            "end_date": until.astimezone(UTC).isoformat(timespec="milliseconds"),
            "criteria": "asc",
            "limit": SEARCH_PAGE,
        }
        what = "mercadopago payments search"
        for page in range(MAX_PAGES):
            body = await self._read(
                "/v1/payments/search", http, {**params, "offset": page * SEARCH_PAGE}
            )
            results = listed(body, "results", error=f"{what}: no results list")
            for item in results:
                resource = with_status(item, error=f"{what}: a payment without status")
                created = fields.lenient_time(
                    resource.get("date_created"), field="date_created", rule=TIME_RULE,
                    warnings=[], naive=UTC,
                )  # fmt: skip
                if created is not None and not since <= created < until:
                    continue  # the search's bounds are inclusive
                object_id = str(resource.get("id"))
                yield self._snapshot(payment_event(resource, object_id, "", self.exponents))
            paging = body.get("paging")
            total = paging.get("total") if isinstance(paging, dict) else None
            if not results or not isinstance(total, int) or (page + 1) * SEARCH_PAGE >= total:
                return
        raise GatewayError(f"{what}: more than {MAX_PAGES} pages")

    def _snapshot(self, event: ParsedEvent) -> ParsedEvent:
        status, detail = event.data.get("status"), event.data.get("status_detail")
        # A new refund total is a new fact: several partial refunds must not collide.
        refunded = event.refunded_total if event.refunded_total else None
        key = snapshot_key(
            event.object_id or "", status, detail or "", *((refunded,) if refunded else ())
        )
        return replace(event, dedup_key=key, data={**event.data, "origin": "reconcile"})

    async def _get(
        self, collection: str, object_id: str, http: httpx.AsyncClient
    ) -> dict[str, Any]:
        """`GET /v1/{payments|orders}/{id}`: the resource, which must carry a `status`."""
        if not self.source.api_key:
            raise GatewayError(f"source {self.source.name!r}: no api_key (access token) set")
        what = f"mercadopago GET /v1/{collection}/{object_id}"
        resource = await self._read(
            f"/v1/{collection}/{quote(object_id, safe='')}", http, what=what
        )
        if not isinstance(resource.get("status"), str):
            raise GatewayError(f"{what}: no status in the answer")
        return resource

    async def _read(
        self,
        path: str,
        http: httpx.AsyncClient,
        params: Mapping[str, str | int] | None = None,
        *,
        what: str | None = None,
    ) -> dict[str, Any]:
        """The JSON object `GET path` answers, amounts as Decimal (never a float's
        rounding); a 404 is ResourceNotFound, a refused token says so."""
        base = (self.source.api_base_url or DEFAULT_API_BASE_URL).rstrip("/")
        what = what or f"mercadopago GET {path}"
        headers = {"authorization": f"Bearer {self.source.api_key}", "accept": "application/json"}
        try:
            response = await http.get(base + path, params=params, headers=headers)
        except httpx.HTTPError as exc:
            raise GatewayError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
        if response.status_code == 404:
            raise ResourceNotFound(f"{what}: 404, not found (not visible yet?)")
        if response.status_code in (401, 403):
            raise GatewayError(
                f"{what}: HTTP {response.status_code}, the access token (api_key) was refused"
            )
        if response.status_code != 200:
            raise GatewayError(f"{what}: HTTP {response.status_code}")
        try:
            body = json.loads(response.content, parse_float=Decimal)
        except (ValueError, RecursionError) as exc:
            raise GatewayError(f"{what}: answer is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise GatewayError(f"{what}: expected a JSON object")
        return body
