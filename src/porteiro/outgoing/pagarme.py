"""Pagar.me v5: `POST /core/v5/orders`, JSON, `Idempotency-Key`, Basic auth (secret key:).

Pagar.me keeps the key and the first answer for 24 hours and replays it (keys are case
sensitive). Its behaviour on another payload or a concurrent request is not documented:
Porteiro refuses the first itself, and retries a 409 like every gateway's in-flight answer.
Orders are in BRL only. `extra` carries what a real order also needs (`customer`,
`payments`) and is merged over the defaults.
"""

from __future__ import annotations

import httpx

from porteiro.outgoing.request import (
    ApiKeyCreate,
    CreateRequest,
    GatewayReply,
    InvalidRequest,
    merge,
)
from porteiro.providers.pagarme.api import DEFAULT_API_BASE_URL


class PagarmeCreate(ApiKeyCreate):
    operation = "pagarme.orders.create"
    default_base_url = DEFAULT_API_BASE_URL
    path = "/orders"  # `id` of the answer: the order (or_...), what Porteiro's events are keyed by

    def check(self, request: CreateRequest) -> None:
        if request.currency != "BRL":
            raise InvalidRequest("Pagar.me orders are in BRL")

    async def send(
        self, request: CreateRequest, key: str, http: httpx.AsyncClient, wait: float
    ) -> GatewayReply:
        item = {"amount": request.amount, "description": request.reference, "quantity": 1,
                "code": request.reference}  # fmt: skip
        body = merge({"code": request.reference, "items": [item]}, request.extra)
        response = await http.post(
            self.url, json=body, auth=(self.api_key, ""), headers={"idempotency-key": key},
            timeout=wait,
        )  # fmt: skip
        return GatewayReply.of(response)
