"""Stripe's API, read with the client the worker gives: thin v2 notifications are
enriched by GET of their related object, a PaymentIntent's status is read for
reconciliation, and `GET /v1/events` lists a window.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import GatewayError, NonRetryable, ParseError
from porteiro.model import Kind, ParsedEvent
from porteiro.observability import logger
from porteiro.providers import fields
from porteiro.providers.api_json import get_json, get_json_object, listed
from porteiro.providers.stripe.kinds import STATUS_KINDS
from porteiro.providers.stripe.webhook import _event, _reference, _snapshot

DEFAULT_API_BASE_URL = "https://api.stripe.com"
EVENTS_PAGE = 100  # Stripe's maximum `limit`
MAX_PAGES = 10_000  # a bound on any window listing (a million events)
# Ids of objects that are not PaymentIntents (object-id fallbacks): no status read.
_NOT_INTENTS = ("ch_", "py_", "cs_")


class StripeApi:
    """Stripe's API: thin-event fetches, status reads and the events list."""

    source: SourceConfig
    reference_keys: tuple[str, ...]

    async def enrich(self, event: ParsedEvent, http: httpx.AsyncClient) -> ParsedEvent:
        """A thin v2 notification about a payment object: GET the related object (with
        the notification's `Stripe-Context`) and map it like the snapshot event of the same
        v1 type, keeping the notification's id and time. Snapshot events carry the
        object's state and come back as they are."""
        if not event.thin:
            return event
        path = event.data.get("related_path")
        snapshot_type = event.data.get("snapshot_type")
        if not isinstance(path, str) or not isinstance(snapshot_type, str):
            raise NonRetryable("thin Stripe event without a related object to fetch")
        if not self.source.api_key:
            raise GatewayError(
                f"source {self.source.name!r}: no api_key to fetch the thin event's {path}"
            )
        base = (self.source.api_base_url or DEFAULT_API_BASE_URL).rstrip("/")
        headers = {
            "authorization": f"Bearer {self.source.api_key}",
            "stripe-request-trigger": f"event={event.dedup_key}",
        }
        context = event.data.get("context")
        if isinstance(context, str) and context:
            headers["stripe-context"] = context
        obj = await get_json_object(http, base + path, what=f"stripe GET {path}", headers=headers)
        if obj.get("id") != event.object_id:
            raise GatewayError(f"stripe GET {path}: the answer is not {event.object_id}")
        snapshot = {"object": "event", "id": event.dedup_key, "type": snapshot_type,
                    "data": {"object": obj}}  # fmt: skip
        warnings: list[dict[str, str]] = []
        try:
            mapped = _snapshot(snapshot, self.reference_keys, warnings)
        except ParseError as exc:
            raise GatewayError(f"stripe GET {path}: {exc}") from None
        data = {**mapped.data, "notification": "thin", "related_path": path}
        enriched = replace(mapped, type=event.type, occurred_at=event.occurred_at, data=data)
        return fields.with_warnings(enriched, [*event.warnings, *warnings])

    async def list_window(
        self, since: datetime, until: datetime, http: httpx.AsyncClient
    ) -> AsyncIterator[ParsedEvent]:
        """Every event of `GET /v1/events` created in [since, until), newest first, as
        the snapshot events the webhooks would have carried (same `evt_` dedup keys).
        Stripe keeps events for 30 days."""
        if not self.source.api_key:
            raise GatewayError(f"source {self.source.name!r}: no api_key to list events")
        base = (self.source.api_base_url or DEFAULT_API_BASE_URL).rstrip("/")
        params: dict[str, str | int] = {
            "created[gte]": int(since.timestamp()),
            "created[lt]": -(-int(until.timestamp() * 1_000_000) // 1_000_000),  # ceil
            "limit": EVENTS_PAGE,
        }
        headers = {"authorization": f"Bearer {self.source.api_key}"}
        for _ in range(MAX_PAGES):
            page = await get_json_object(
                http, f"{base}/v1/events", what="stripe GET events", params=params, headers=headers
            )
            data = listed(page, "data", error="stripe GET events: no data list in the answer")
            for body in data:
                try:
                    yield _event(body, self.reference_keys)
                except (ParseError, AttributeError) as exc:
                    logger().warning(
                        "unusable event in the events list", action="reconcile.unusable_event",
                        source=self.source.name, error=str(exc),
                    )  # fmt: skip
            if not page.get("has_more") or not data:
                return
            last = data[-1].get("id") if isinstance(data[-1], dict) else None
            if not isinstance(last, str):
                raise GatewayError("stripe GET events: an event without id")
            params["starting_after"] = last
        raise GatewayError(f"stripe GET events: more than {MAX_PAGES} pages")

    async def fetch_status(self, object_id: str, http: httpx.AsyncClient) -> ParsedEvent | None:
        """The PaymentIntent's status (latest charge expanded for refunds); None without
        an api_key or for an object id that is not a PaymentIntent."""
        if not self.source.api_key or object_id.startswith(_NOT_INTENTS):
            return None
        base = (self.source.api_base_url or DEFAULT_API_BASE_URL).rstrip("/")
        where = f"payment_intents/{object_id}"
        response, intent = await get_json(
            http,
            f"{base}/v1/payment_intents/{quote(object_id, safe='')}",
            what=f"stripe GET {where}",
            params={"expand[]": "latest_charge"},
            headers={"authorization": f"Bearer {self.source.api_key}"},
        )
        if not isinstance(intent, dict) or not isinstance(intent.get("status"), str):
            raise GatewayError(f"stripe {where}: no status in the answer")
        try:
            return _status_event(
                object_id, intent, response.headers.get("date"), self.reference_keys
            )
        except ParseError as exc:
            raise GatewayError(f"stripe {where}: {exc}") from None


def _status_event(
    object_id: str, intent: Mapping[str, Any], date: str | None, reference_keys: Sequence[str]
) -> ParsedEvent:
    status = str(intent["status"])
    kind = STATUS_KINDS.get(status, Kind.OTHER)
    amount = fields.opt_int(intent, "amount")
    charge = intent.get("latest_charge")
    refunded = fields.opt_int(charge, "amount_refunded") if isinstance(charge, dict) else None
    dedup_key = f"reconcile:{object_id}:{status}"
    if _failed(intent):
        kind, dedup_key = Kind.PAYMENT_FAILED, f"{dedup_key}:failed"
    if refunded:  # an expanded latest charge with refunds: report the cumulative total
        full = amount is not None and refunded >= amount
        kind = Kind.PAYMENT_REFUNDED if full else Kind.PAYMENT_PARTIALLY_REFUNDED
        dedup_key, amount = f"{dedup_key}:refunded:{refunded}", None
    currency = fields.opt_str(intent, "currency")
    try:  # the state was true when Stripe answered
        read_at = parsedate_to_datetime(date) if date else None
    except (TypeError, ValueError):
        read_at = None
    return ParsedEvent(
        dedup_key=dedup_key,
        kind=kind,
        type="payment_intent.payment_failed"
        if kind is Kind.PAYMENT_FAILED
        else f"payment_intent.{status}",
        object_id=object_id,
        reference=_reference(intent, reference_keys),
        amount=amount,
        currency=currency.upper() if currency else None,
        occurred_at=read_at,
        refunded_total=refunded or None,
        data={"origin": "reconcile", "status": status},
    )


def _failed(intent: Mapping[str, Any]) -> bool:
    """A declined intent goes back to `requires_payment_method`, which alone reads as
    pending: its `last_payment_error` or failed latest charge says it failed."""
    if intent.get("status") != "requires_payment_method":
        return False
    charge = intent.get("latest_charge")
    charge_failed = isinstance(charge, dict) and charge.get("status") == "failed"
    return charge_failed or bool(intent.get("last_payment_error"))
