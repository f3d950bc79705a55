"""Stripe: `POST /v1/payment_intents`, form-encoded, `Idempotency-Key`, Bearer secret key.

Stripe stores the first answer of a key once the endpoint started executing (500s
included) and replays it; the same key with other parameters is a 400
`idempotency_error`; a key still in flight is a 409. Keys may be pruned after 24 hours.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from porteiro.outgoing.request import ApiKeyCreate, CreateRequest, GatewayReply, merge
from porteiro.providers.stripe.api import DEFAULT_API_BASE_URL


class StripeCreate(ApiKeyCreate):
    """Stripe takes any currency it supports (it says so itself); a PaymentIntent has no
    expiry of its own: `expires_at` is the request's."""

    operation = "stripe.payment_intents.create"
    default_base_url = DEFAULT_API_BASE_URL
    path = "/v1/payment_intents"

    async def send(
        self, request: CreateRequest, key: str, http: httpx.AsyncClient, wait: float
    ) -> GatewayReply:
        base = {"amount": request.amount, "currency": request.currency.lower(),
                "metadata": {"order_id": request.reference}}  # fmt: skip
        headers = {"authorization": f"Bearer {self.api_key}", "idempotency-key": key}
        response = await http.post(
            self.url, data=dict(form_pairs(merge(base, request.extra))), headers=headers,
            timeout=wait,
        )  # fmt: skip
        return GatewayReply.of(response)


def form_pairs(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Stripe's form encoding of nested parameters: `metadata[k]=v`, `items[0][x]=v`."""
    if isinstance(value, Mapping):
        pairs: list[tuple[str, str]] = []
        for name, item in value.items():
            pairs += form_pairs(item, f"{prefix}[{name}]" if prefix else str(name))
        return pairs
    if isinstance(value, list):
        return [pair for index, item in enumerate(value)
                for pair in form_pairs(item, f"{prefix}[{index}]")]  # fmt: skip
    if isinstance(value, bool):
        return [(prefix, "true" if value else "false")]
    return [(prefix, "" if value is None else str(value))]
