"""Adyen Checkout: `POST /v71/payments`, JSON, `Idempotency-Key` (up to 64 characters,
echoed back), `X-API-Key`.

A retry with the key returns the first attempt's answer; keys are scoped to the company
account and kept at least 31 days. `merchant_account` (source option) is required; `extra`
carries `paymentMethod`, `returnUrl`, ... `api_base_url` is the Checkout base (e.g.
`https://checkout-test.adyen.com`), without the version. A refusal (`resultCode`
`Refused`) is still a created payment: its webhook reports the failure.
"""

from __future__ import annotations

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError
from porteiro.outgoing.request import (
    ApiKeyCreate,
    CreateRequest,
    GatewayReply,
    merge,
    required_api_key,
)


class AdyenCreate(ApiKeyCreate):
    """Adyen answers unsupported currencies itself."""

    operation = "adyen.payments.create"
    id_field = "pspReference"

    def __init__(self, source: SourceConfig) -> None:
        # Adyen has no one API base (test, live and each live prefix): it must be given.
        if not source.api_base_url:
            raise ConfigError(f"source {source.name!r}: Adyen creates need api_base_url")
        merchant = source.option_str("merchant_account")
        if not merchant:
            raise ConfigError(f"source {source.name!r}: Adyen creates need merchant_account")
        self.url = source.api_base_url.rstrip("/") + "/v71/payments"
        self.api_key = required_api_key(source)
        self.merchant_account = merchant

    async def send(
        self, request: CreateRequest, key: str, http: httpx.AsyncClient, wait: float
    ) -> GatewayReply:
        base = {
            "amount": {"currency": request.currency, "value": request.amount},
            "reference": request.reference,
            "merchantAccount": self.merchant_account,
        }
        headers = {"x-api-key": self.api_key, "idempotency-key": key}
        response = await http.post(
            self.url, json=merge(base, request.extra), headers=headers, timeout=wait
        )
        return GatewayReply.of(response)
