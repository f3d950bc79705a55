"""Mercado Pago: `POST /v1/payments`, JSON, `X-Idempotency-Key` (mandatory), Bearer token.

An existing payment for the key is returned instead of a new one. Retention and the
answer to another payload or a concurrent request are not documented: Porteiro refuses
the first itself and retries a 409. `transaction_amount` is in major units; with
`expires_in` the payment carries `date_of_expiration` (fixed when the key was stored, so
every attempt sends the same body). The default method is Pix; `extra` carries `payer`,
`payment_method_id`, ... and is merged over the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import httpx

from porteiro.outgoing.request import ApiKeyCreate, CreateRequest, GatewayReply, merge
from porteiro.providers.mercadopago.api import DEFAULT_API_BASE_URL


class MercadoPagoCreate(ApiKeyCreate):
    """Mercado Pago's currency is the account's; it refuses what it cannot take."""

    operation = "mercadopago.payments.create"
    default_base_url = DEFAULT_API_BASE_URL
    path = "/v1/payments"

    async def send(
        self, request: CreateRequest, key: str, http: httpx.AsyncClient, wait: float
    ) -> GatewayReply:
        base: dict[str, Any] = {
            "transaction_amount": float(Decimal(request.amount).scaleb(-2)),
            "description": request.reference, "external_reference": request.reference,
            "payment_method_id": "pix",
        }  # fmt: skip
        if request.expires_at is not None:
            base["date_of_expiration"] = request.expires_at.isoformat(timespec="milliseconds")
        headers = {"authorization": f"Bearer {self.api_key}", "x-idempotency-key": key}
        response = await http.post(
            self.url, json=merge(base, request.extra), headers=headers, timeout=wait
        )
        return GatewayReply.of(response)

    def object_id(self, body: Mapping[str, Any], key: str) -> str | None:
        found = body.get("id")  # a number in Mercado Pago's JSON
        if isinstance(found, bool) or not isinstance(found, int | str) or found == "":
            return None
        return str(found)
