"""A small fake of the Mercado Pago API: `GET /v1/payments/{id}` and `GET /v1/orders/{id}`.

Backed by an in-memory dict the test fills (and changes as the "gateway" moves a payment
along); every request is logged with the status it got. The bearer token is checked, as
the real API does. Amounts are given as Decimal or str and sent as exact JSON numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


def payment(
    payment_id: str,
    *,
    status: str,
    amount: Decimal | str | int | float,
    status_detail: str = "",
    currency: str = "BRL",
    refunded: Decimal | str | int | float = 0,
    reference: str | None = None,
    date_approved: str | None = None,
    date_last_updated: str = "2024-01-10T14:33:30.000-04:00",
) -> dict[str, Any]:
    """A payment resource shaped like the API's answer (the fields Porteiro reads, and a few
    more for realism)."""
    return {
        "id": int(payment_id) if payment_id.isdigit() else payment_id,
        "date_created": "2024-01-10T14:30:00.000-04:00",
        "date_approved": date_approved,
        "date_last_updated": date_last_updated,
        "money_release_date": None,
        "operation_type": "regular_payment",
        "payment_method_id": "pix",
        "payment_type_id": "bank_transfer",
        "status": status,
        "status_detail": status_detail,
        "currency_id": currency,
        "description": "Porteiro test payment",
        "live_mode": False,
        "external_reference": reference,
        "transaction_amount": Decimal(str(amount)),
        "transaction_amount_refunded": Decimal(str(refunded)),
        "installments": 1,
        "captured": True,
    }


@dataclass
class FakeMercadoPago:
    token: str
    payments: dict[str, dict[str, Any]] = field(default_factory=dict)
    orders: dict[str, dict[str, Any]] = field(default_factory=dict)  # Orders API
    log: list[tuple[str, int]] = field(default_factory=list)  # (resource id, HTTP status)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/payments/{payment_id}", self._get, methods=["GET"]),
                Route("/v1/orders/{payment_id}", self._get, methods=["GET"]),
            ]
        )

    def requests_for(self, payment_id: str) -> list[int]:
        return [status for pid, status in self.log if pid == payment_id]

    async def _get(self, request: Request) -> Response:
        payment_id = request.path_params["payment_id"]
        if request.headers.get("authorization") != f"Bearer {self.token}":
            refused = {"message": "invalid access token", "error": "unauthorized", "status": 401}
            return self._answer(payment_id, 401, refused)
        table = self.orders if request.url.path.startswith("/v1/orders/") else self.payments
        found = table.get(payment_id)
        if found is None:
            cause = [{"code": 2000, "description": "Payment not found"}]
            body = {"message": "Payment not found", "error": "not_found", "status": 404}
            return self._answer(payment_id, 404, {**body, "cause": cause})
        return self._answer(payment_id, 200, found)

    def _answer(self, payment_id: str, status: int, body: dict[str, Any]) -> Response:
        self.log.append((payment_id, status))
        return Response(_dumps(body), status_code=status, media_type="application/json")


def _dumps(body: dict[str, Any]) -> bytes:
    # json cannot emit a Decimal as a number: write a placeholder, then splice the digits in.
    decimals: list[str] = []

    def number(value: object) -> str:
        if not isinstance(value, Decimal):
            raise TypeError(f"cannot serialise {type(value).__name__}")
        decimals.append(format(value, "f"))
        return f"\x00{len(decimals) - 1}\x00"

    text = json.dumps(body, default=number)
    for index, digits in enumerate(decimals):
        text = text.replace(f'"\\u0000{index}\\u0000"', digits)
    return text.encode()
