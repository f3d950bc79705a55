"""Pagar.me's API and key set, read with the client the receiver or worker gives: the
JWKS an RS256 delivery names, an order's (or charge's) status, and `GET /charges` over
a window.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import GatewayError, MalformedHeader, ParseError
from porteiro.model import InboundRequest, Kind, ParsedEvent
from porteiro.providers import fields
from porteiro.providers.api_json import get_json_object, listed, with_status
from porteiro.providers.base import snapshot_key
from porteiro.providers.jwks import JwksCache
from porteiro.providers.pagarme.ancillary import ancillary_str, read_time
from porteiro.providers.pagarme.kinds import STATUS_KINDS
from porteiro.providers.pagarme.signature import ASYMMETRIC_HEADER, parse_asymmetric_header
from porteiro.providers.pagarme.webhook import _refunded

DEFAULT_API_BASE_URL = "https://api.pagar.me/core/v5"
CHARGES_PAGE = 100  # the API's largest `size`
MAX_PAGES = 10_000


class PagarmeApi:
    """Pagar.me's side: the JWKS load before verify, status reads, the charges list."""

    source: SourceConfig
    keys: JwksCache

    async def prepare(self, request: InboundRequest, http: httpx.AsyncClient) -> None:
        """Load the JWKS (rate-limited) if the delivery names a kid we do not know."""
        header = request.header(ASYMMETRIC_HEADER)
        if header is None:
            return
        try:
            kid, _ = parse_asymmetric_header(header)
        except MalformedHeader:
            return  # verify() reports it
        await self.keys.ensure(kid, http)

    async def refresh_keys(self, http: httpx.AsyncClient) -> None:
        """Reload the JWKS now (e.g. at start-up); raises GatewayError or ConfigError."""
        await self.keys.refresh(http)

    async def enrich(self, event: ParsedEvent, http: httpx.AsyncClient) -> ParsedEvent:
        return event

    async def fetch_status(self, object_id: str, http: httpx.AsyncClient) -> ParsedEvent | None:
        """The order's (or a `ch_` charge's) current status; None without an api_key."""
        if not self.source.api_key:
            return None
        collection = "charges" if object_id.startswith("ch_") else "orders"
        resource = await self._get(f"{collection}/{object_id}", {}, http)
        if not isinstance(resource.get("status"), str):
            raise GatewayError(f"pagarme {collection}/{object_id}: no status in the answer")
        return _status_event(object_id, collection, resource)

    async def list_window(
        self, since: datetime, until: datetime, http: httpx.AsyncClient
    ) -> AsyncIterator[ParsedEvent]:
        """One status snapshot per charge created in [since, until) (`GET /charges`),
        filed under its order like the webhooks."""
        if not self.source.api_key:
            raise GatewayError(f"source {self.source.name!r}: no api_key to list charges")
        params: dict[str, str | int] = {
            "created_since": since.astimezone(UTC).isoformat(),
            "created_until": until.astimezone(UTC).isoformat(),
            "size": CHARGES_PAGE,
        }
        what = "pagarme GET charges"
        for page in range(1, MAX_PAGES + 1):
            body = await self._get("charges", {**params, "page": page}, http)
            data = listed(body, "data", error=f"{what}: no data list in the answer")
            for item in data:
                charge = with_status(item, error=f"{what}: a charge without status")
                # Ancillary: a naive time is UTC, an unreadable one keeps the charge in.
                created = read_time(charge.get("created_at"), "created_at", [])
                if created is not None and not since <= created < until:
                    continue  # the API's bounds are inclusive
                order = charge.get("order")
                order_id = order.get("id") if isinstance(order, dict) else None
                object_id = order_id if isinstance(order_id, str) else str(charge.get("id"))
                yield _status_event(object_id, "charges", charge)
            paging = body.get("paging")
            if not data or not isinstance(paging, dict) or not paging.get("next"):
                return
        raise GatewayError(f"{what}: more than {MAX_PAGES} pages")

    async def _get(
        self, path: str, params: Mapping[str, str | int], http: httpx.AsyncClient
    ) -> Mapping[str, Any]:
        base = (self.source.api_base_url or DEFAULT_API_BASE_URL).rstrip("/")
        return await get_json_object(
            http,
            f"{base}/{path}",
            what=f"pagarme GET {path}",
            params=params,
            auth=(self.source.api_key or "", ""),
        )


def _status_event(object_id: str, collection: str, resource: Mapping[str, Any]) -> ParsedEvent:
    """A status snapshot of an order or a charge. Pagar.me calls a refund a cancellation:
    a paid charge with a `canceled_amount` is (partially) refunded, not canceled."""
    status = str(resource["status"])
    warnings: list[dict[str, str]] = []
    try:
        amount = fields.opt_int(resource, "amount")
        refunded = _refunded(resource, warnings)
    except ParseError as exc:
        raise GatewayError(f"pagarme {collection}/{object_id}: {exc}") from None
    currency = ancillary_str(resource, "currency", collection[:-1], warnings, digits=False)
    reference = ancillary_str(resource, "code", collection[:-1], warnings)
    occurred = read_time(resource.get("updated_at"), "updated_at", warnings)
    kind = STATUS_KINDS.get(status, Kind.OTHER)
    data: dict[str, Any] = {"origin": "reconcile", "status": status}
    refunded_total = None
    if refunded:
        full = amount is not None and refunded >= amount
        kind = Kind.PAYMENT_REFUNDED if full else Kind.PAYMENT_PARTIALLY_REFUNDED
        data["payment_amount"] = amount
        refunded_total, amount = refunded, None
    snapshot = ParsedEvent(
        # `:refunded:{total}` once money came back: each new refund total is a new fact.
        dedup_key=snapshot_key(object_id, status, *(("refunded", refunded) if refunded else ())),
        kind=kind,
        type=f"{collection[:-1]}.{status}",
        object_id=object_id,
        reference=reference,
        amount=amount,
        currency=currency.upper() if currency else None,
        occurred_at=occurred,
        refunded_total=refunded_total,
        data=data,
    )
    return fields.with_warnings(snapshot, warnings)
